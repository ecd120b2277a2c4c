//! The text exposition: its content type, which port a series is served on, and how the two
//! ports' expositions merge into one.

/// Content type of the text exposition written by `Metrics::encode`.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Which exposition a series belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsPort {
    /// Upstream machine-controller-manager's series, on `--port`.
    ControllerManager,
    /// Upstream machine-controller's series, on `--machine-metrics-port` (Gardener's
    /// `providermetrics` port).
    MachineController,
    /// Both in one exposition.
    Both,
}

/// The families of an exposition (without `# EOF`) as (name, block), each block starting at its
/// `# HELP` line.
fn families(text: &str) -> Vec<(&str, &str)> {
    let mut blocks: Vec<(&str, &str)> = Vec::new();
    let mut start: Option<(&str, usize)> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            if let Some((name, begin)) = start {
                blocks.push((name, &text[begin..offset]));
            }
            let name = rest.split_whitespace().next().unwrap_or_default();
            start = Some((name, offset));
        }
        offset += line.len();
    }
    if let Some((name, begin)) = start {
        blocks.push((name, &text[begin..]));
    }
    blocks
}

/// Two expositions (without `# EOF`) as one: a family present in both keeps its first header
/// and gets the second's samples it lacks; the process families, identical in both, appear once.
pub(super) fn merge_expositions(first: &str, second: &str) -> String {
    let mut merged: Vec<(&str, String)> = families(first)
        .into_iter()
        .map(|(name, block)| (name, block.to_owned()))
        .collect();
    for (name, block) in families(second) {
        match merged.iter_mut().find(|(known, _)| *known == name) {
            Some(_) if name.starts_with("process_") => {}
            Some((_, existing)) => {
                // Families registered on both ports (scrape failures) hold the same series.
                let samples: Vec<&str> = block
                    .split_inclusive('\n')
                    .filter(|line| {
                        !line.starts_with('#')
                            && !existing.split_inclusive('\n').any(|known| known == *line)
                    })
                    .collect();
                existing.extend(samples);
            }
            None => merged.push((name, block.to_owned())),
        }
    }
    merged.into_iter().map(|(_, block)| block).collect()
}
