//! A directed graph of named nodes whose edges remember where they were first used, its circles
//! (strongly connected components of more than one node) and cycles that walk through them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use petgraph::algo::tarjan_scc;
use petgraph::graph::{DiGraph, NodeIndex};

/// Where an edge is first used.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Site {
    /// The file holding the use (as displayed).
    pub file: String,
    /// Its line.
    pub line: usize,
}

/// A graph of labelled nodes; an edge keeps its first use.
#[derive(Debug, Default)]
pub struct Graph {
    /// Node labels, in index order.
    pub labels: Vec<String>,
    /// Edges `(from, to)` with the first use of each.
    pub edges: BTreeMap<(usize, usize), Site>,
}

impl Graph {
    /// The node labelled `label`, added when new.
    pub fn node(&mut self, label: &str) -> usize {
        if let Some(index) = self.labels.iter().position(|known| known == label) {
            return index;
        }
        self.labels.push(label.to_owned());
        self.labels.len() - 1
    }

    /// Adds the edge `from -> to` used at `site` (self-edges are ignored; the earliest site of an
    /// edge used several times is kept).
    pub fn add(&mut self, from: usize, to: usize, site: Site) {
        if from == to {
            return;
        }
        self.edges
            .entry((from, to))
            .and_modify(|known| {
                if site < *known {
                    *known = site.clone();
                }
            })
            .or_insert(site);
    }

    /// The strongly connected components of more than one node, each sorted by label, ordered by
    /// their first label.
    pub fn circles(&self) -> Vec<Vec<usize>> {
        let mut graph = DiGraph::<(), ()>::new();
        let nodes: Vec<NodeIndex> = self.labels.iter().map(|_| graph.add_node(())).collect();
        for &(from, to) in self.edges.keys() {
            graph.add_edge(nodes[from], nodes[to], ());
        }
        let mut circles: Vec<Vec<usize>> = tarjan_scc(&graph)
            .into_iter()
            .filter(|component| component.len() > 1)
            .map(|component| {
                let mut members: Vec<usize> = component.iter().map(|node| node.index()).collect();
                members.sort_by(|a, b| self.labels[*a].cmp(&self.labels[*b]));
                members
            })
            .collect();
        circles.sort_by(|a, b| self.labels[a[0]].cmp(&self.labels[b[0]]));
        circles
    }

    /// Cycles inside `circle` that together visit all of its nodes: the shortest cycle through
    /// each node no earlier cycle went through. Each cycle lists its nodes in order (the last
    /// one leads back to the first).
    pub fn cycles_through(&self, circle: &[usize]) -> Vec<Vec<usize>> {
        let inside: BTreeSet<usize> = circle.iter().copied().collect();
        let mut covered = BTreeSet::new();
        let mut cycles = Vec::new();
        for &start in circle {
            if covered.contains(&start) {
                continue;
            }
            if let Some(cycle) = self.shortest_cycle(start, &inside) {
                covered.extend(cycle.iter().copied());
                cycles.push(cycle);
            }
        }
        cycles
    }

    fn shortest_cycle(&self, start: usize, inside: &BTreeSet<usize>) -> Option<Vec<usize>> {
        let mut previous: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(node) = queue.pop_front() {
            for &(_, next) in self
                .edges
                .range((node, 0)..=(node, usize::MAX))
                .map(|(k, _)| k)
            {
                if !inside.contains(&next) {
                    continue;
                }
                if next == start {
                    let mut cycle = vec![node];
                    let mut at = node;
                    while at != start {
                        at = previous[&at];
                        cycle.push(at);
                    }
                    cycle.reverse();
                    return Some(cycle);
                }
                if next != start && !previous.contains_key(&next) {
                    previous.insert(next, node);
                    queue.push_back(next);
                }
            }
        }
        None
    }

    /// The edges leaving each node, as `label -> label, label` lines (nodes without edges too).
    pub fn map_lines(&self) -> Vec<String> {
        let mut order: Vec<usize> = (0..self.labels.len()).collect();
        order.sort_by(|a, b| self.labels[*a].cmp(&self.labels[*b]));
        order
            .into_iter()
            .map(|node| {
                let mut targets: Vec<&str> = self
                    .edges
                    .keys()
                    .filter(|(from, _)| *from == node)
                    .map(|(_, to)| self.labels[*to].as_str())
                    .collect();
                targets.sort_unstable();
                if targets.is_empty() {
                    format!("{} -> (nothing)", self.labels[node])
                } else {
                    format!("{} -> {}", self.labels[node], targets.join(", "))
                }
            })
            .collect()
    }

    /// The edges between members of `circle`, as `a -> b  (file:line)` lines.
    pub fn edges_within(&self, circle: &[usize]) -> Vec<String> {
        self.edges
            .iter()
            .filter(|((from, to), _)| circle.contains(from) && circle.contains(to))
            .map(|((from, to), site)| {
                format!(
                    "{} -> {}  ({}:{})",
                    self.labels[*from], self.labels[*to], site.file, site.line
                )
            })
            .collect()
    }

    /// A cycle as readable lines: `a -> b  (file:line)` per edge.
    pub fn describe_cycle(&self, cycle: &[usize]) -> Vec<String> {
        let width = cycle
            .iter()
            .map(|node| self.labels[*node].len())
            .max()
            .unwrap_or(0);
        (0..cycle.len())
            .map(|index| {
                let from = cycle[index];
                let to = cycle[(index + 1) % cycle.len()];
                let site = &self.edges[&(from, to)];
                format!(
                    "{:width$} -> {:width$}  ({}:{})",
                    self.labels[from], self.labels[to], site.file, site.line
                )
            })
            .collect()
    }
}
