//! client_golang's process collector for Linux (`process_cpu_seconds_total`,
//! `process_open_fds`, `process_max_fds`, `process_virtual_memory_bytes`,
//! `process_resident_memory_bytes`, `process_start_time_seconds`), read from `/proc` at every
//! scrape. Gardener's dashboards and ServiceMonitor keep `process_open_fds` and
//! `process_max_fds`. prometheus-client has no such collector; the parsing is pure and tested,
//! the reads are best effort (a family whose source cannot be read is left out).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Linux's `USER_HZ`: the unit of the CPU times in `/proc/<pid>/stat` (100 on every mainstream
/// architecture; client_golang's procfs assumes the same).
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// What `/proc/self/stat` tells.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stat {
    /// User plus system CPU time in seconds.
    pub cpu_seconds: f64,
    /// Seconds after boot the process started.
    pub start_after_boot_seconds: f64,
    /// Virtual memory size in bytes.
    pub virtual_memory_bytes: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) may hold spaces and parentheses, so
/// fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let after_name = &text[text.rfind(')')? + 1..];
    // After the name: field 3 (state) is index 0.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |number: usize| fields.get(number - 3).copied();
    let utime: f64 = field(14)?.parse().ok()?;
    let stime: f64 = field(15)?.parse().ok()?;
    let start: f64 = field(22)?.parse().ok()?;
    let vsize: u64 = field(23)?.parse().ok()?;
    Some(Stat {
        cpu_seconds: (utime + stime) / CLOCK_TICKS_PER_SECOND,
        start_after_boot_seconds: start / CLOCK_TICKS_PER_SECOND,
        virtual_memory_bytes: vsize,
    })
}

/// The soft limit of open files from `/proc/<pid>/limits` (`None` when unlimited or absent).
pub fn parse_max_open_files(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Resident set size in bytes from `/proc/<pid>/status` (`VmRSS:  1234 kB`).
pub fn parse_resident_bytes(text: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kilobytes: u64 = line["VmRSS:".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kilobytes * 1024)
}

/// Boot time in seconds since the epoch from `/proc/stat` (`btime 1700000000`).
pub fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The collector; registered on both metrics ports.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessCollector;

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: f64,
) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(value);
    let metric_encoder = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
    metric.encode(metric_encoder)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stat = read("/proc/self/stat").as_deref().and_then(parse_stat);
        if let Some(stat) = stat {
            let counter = ConstCounter::new(stat.cpu_seconds);
            let metric_encoder = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                counter.metric_type(),
            )?;
            counter.encode(metric_encoder)?;
        }
        if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
            #[allow(clippy::cast_precision_loss)]
            let open = entries.count() as f64;
            gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors.",
                open,
            )?;
        }
        if let Some(max) = read("/proc/self/limits")
            .as_deref()
            .and_then(parse_max_open_files)
        {
            #[allow(clippy::cast_precision_loss)]
            let max = max as f64;
            gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors.",
                max,
            )?;
        }
        if let Some(stat) = stat {
            #[allow(clippy::cast_precision_loss)]
            let bytes = stat.virtual_memory_bytes as f64;
            gauge(
                &mut encoder,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                bytes,
            )?;
        }
        if let Some(rss) = read("/proc/self/status")
            .as_deref()
            .and_then(parse_resident_bytes)
        {
            #[allow(clippy::cast_precision_loss)]
            let rss = rss as f64;
            gauge(
                &mut encoder,
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                rss,
            )?;
        }
        if let (Some(stat), Some(boot)) = (
            stat,
            read("/proc/stat").as_deref().and_then(parse_boot_time),
        ) {
            #[allow(clippy::cast_precision_loss)]
            let start = boot as f64 + stat.start_after_boot_seconds;
            gauge(
                &mut encoder,
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                start,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // The command name holds a space and a parenthesis.
        let text = "4242 (mcm (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 8 0 12345 104857600 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        let stat = parse_stat(text).unwrap();
        assert!((stat.cpu_seconds - 3.0).abs() < 1e-9);
        assert!((stat.start_after_boot_seconds - 123.45).abs() < 1e-9);
        assert_eq!(stat.virtual_memory_bytes, 104_857_600);
        assert_eq!(parse_stat("4242 (truncated) S 1 2"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn limits_status_and_boot_time_parse() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax cpu time              unlimited            unlimited            seconds   \nMax open files            1048576              1048576              files     \n";
        assert_eq!(parse_max_open_files(limits), Some(1_048_576));
        assert_eq!(
            parse_max_open_files(
                "Max open files            unlimited            unlimited            files\n"
            ),
            None
        );
        assert_eq!(
            parse_resident_bytes("Name:\tmcm\nVmRSS:\t   2048 kB\n"),
            Some(2_097_152)
        );
        assert_eq!(parse_resident_bytes("Name:\tmcm\n"), None);
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn this_process_is_described_on_linux() {
        let Some(text) = read("/proc/self/stat") else {
            println!("SKIPPED: no /proc on this system");
            return;
        };
        let stat = parse_stat(&text).unwrap();
        assert!(stat.virtual_memory_bytes > 0);
        assert!(
            read("/proc/self/limits")
                .as_deref()
                .and_then(parse_max_open_files)
                .is_some()
        );
        assert!(
            read("/proc/self/status")
                .as_deref()
                .and_then(parse_resident_bytes)
                .unwrap()
                > 0
        );
    }
}
