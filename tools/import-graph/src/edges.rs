//! Resolves the paths of a crate (in `use` trees and in code) to the file module that defines
//! them, and collects the import edges between file modules.
//!
//! A path is resolved as far as the crate's module tree allows: `crate::a::b::f` reaches `f` in
//! module `a::b`; a name bound by `use` (a re-export such as `pub use codes::Code` in `lib.rs`)
//! is followed to where it is defined, so `crate::Code` counts as an import of `codes.rs`, and the
//! re-exporting `use` is itself an import of its module. A path whose first segment names nothing
//! of the crate (an external crate, `std`, a generic, `Self`) is not an edge; single-segment
//! paths in code are names already brought in by a `use` (counted there) or local ones.

use std::collections::HashSet;

use syn::visit::Visit;

use crate::tree::{Binding, ModId, ModuleTree, use_leaves};

/// One use of another file module: the using and the used file module and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    /// The file module whose code uses the path.
    pub from: ModId,
    /// The file module defining what the path names.
    pub to: ModId,
    /// Line of the use in `from`'s file.
    pub line: usize,
}

/// Every use of one file module by another, in source order per module.
pub fn collect(tree: &ModuleTree) -> Vec<Edge> {
    let mut edges = Vec::new();
    for id in 0..tree.modules.len() {
        let mut visitor = PathVisitor {
            tree,
            module: id,
            edges: &mut edges,
        };
        for item in &tree.modules[id].items {
            visitor.visit_item(item);
        }
    }
    edges
}

struct PathVisitor<'a> {
    tree: &'a ModuleTree,
    module: ModId,
    edges: &'a mut Vec<Edge>,
}

impl PathVisitor<'_> {
    fn record(&mut self, segments: &[String], line: usize) {
        if let Some(target) = resolve(self.tree, self.module, segments) {
            let from = self.tree.file_of(self.module);
            let to = self.tree.file_of(target);
            if from != to {
                self.edges.push(Edge { from, to, line });
            }
        }
    }
}

impl<'ast> Visit<'ast> for PathVisitor<'_> {
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // Modules declared inside function bodies are not part of the tree; top-level nested
        // modules are visited as modules of their own.
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {
        // Derive and attribute macro paths name external crates.
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if item.leading_colon.is_some() {
            return;
        }
        for leaf in use_leaves(&item.tree) {
            self.record(&leaf.path, leaf.line);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            let segments: Vec<String> = path
                .segments
                .iter()
                .map(|segment| segment.ident.to_string())
                .collect();
            let line = path
                .segments
                .first()
                .map_or(0, |segment| segment.ident.span().start().line);
            self.record(&segments, line);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // Most macros of the code base take expressions (`assert_eq!`, `vec!`, `format!`): parse
        // them as such so paths inside count; anything else is skipped.
        let parser = syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated;
        if let Ok(exprs) = mac.parse_body_with(parser) {
            for expr in &exprs {
                self.visit_expr(expr);
            }
        }
        syn::visit::visit_macro(self, mac);
    }
}

/// Resolves `segments` as written in module `from` to the module defining its target (the
/// module itself when the path names a module). `None`: not a path into this crate.
pub fn resolve(tree: &ModuleTree, from: ModId, segments: &[String]) -> Option<ModId> {
    resolve_guarded(tree, from, segments, &mut HashSet::new())
}

fn resolve_guarded(
    tree: &ModuleTree,
    from: ModId,
    segments: &[String],
    guard: &mut HashSet<(ModId, String)>,
) -> Option<ModId> {
    let mut current = from;
    let mut rest = segments;
    let mut anchored = false;
    while let Some((first, tail)) = rest.split_first() {
        match first.as_str() {
            "crate" if !anchored && rest.len() == segments.len() => current = 0,
            "self" if !anchored && rest.len() == segments.len() => {}
            "super" if rest.len() == segments.len() || anchored => {
                current = tree.modules[current].parent?;
            }
            _ => break,
        }
        anchored = true;
        rest = tail;
    }
    for (index, segment) in rest.iter().enumerate() {
        match lookup(tree, current, segment, guard) {
            Some(Found::Module(module)) => current = module,
            Some(Found::Item(module)) => return Some(module),
            // An unknown first name is another crate's; an unknown later one is generated (by
            // a macro) or an associated item: the path reached `current`.
            None if index == 0 && !anchored => return None,
            None => return Some(current),
        }
    }
    Some(current)
}

enum Found {
    /// The name is a module.
    Module(ModId),
    /// The name is an item defined in this module.
    Item(ModId),
}

fn lookup(
    tree: &ModuleTree,
    module: ModId,
    name: &str,
    guard: &mut HashSet<(ModId, String)>,
) -> Option<Found> {
    if !guard.insert((module, name.to_owned())) {
        return None;
    }
    let bindings = &tree.modules[module].bindings;
    let named = || bindings.iter().filter(move |(bound, _)| bound == name);
    let found = named()
        .find_map(|(_, binding)| match binding {
            Binding::Module(child) => Some(Found::Module(*child)),
            _ => None,
        })
        .or_else(|| {
            named().find_map(|(_, binding)| match binding {
                Binding::Item => Some(Found::Item(module)),
                _ => None,
            })
        })
        .or_else(|| {
            named().find_map(|(_, binding)| match binding {
                Binding::Use(path) => {
                    let target = resolve_guarded(tree, module, path, guard)?;
                    // A `use` of a module binds the module; of an item, the item's module.
                    Some(if is_module_path(tree, target, path) {
                        Found::Module(target)
                    } else {
                        Found::Item(target)
                    })
                }
                _ => None,
            })
        })
        .or_else(|| {
            tree.modules[module].globs.iter().find_map(|glob| {
                let source = resolve_guarded(tree, module, glob, guard)?;
                if source == module {
                    return None;
                }
                lookup(tree, source, name, guard)
            })
        });
    guard.remove(&(module, name.to_owned()));
    found
}

/// Whether `path`, resolved to `target`, names the module `target` itself.
fn is_module_path(tree: &ModuleTree, target: ModId, path: &[String]) -> bool {
    match path.last().map(String::as_str) {
        Some("crate") => target == 0,
        Some("self" | "super") => true,
        Some(last) => tree.modules[target]
            .path
            .last()
            .is_some_and(|name| name == last),
        None => true,
    }
}
