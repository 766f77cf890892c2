//! The `process_*` metrics Prometheus client libraries export by convention, read from `/proc`
//! at each scrape (Linux; elsewhere only the start time is reported).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second of `/proc/<pid>/stat` times: `USER_HZ`, fixed at 100 in Linux's ABI.
const USER_HZ: f64 = 100.0;

/// Collects `process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// `process_virtual_memory_bytes`, `process_open_fds` and `process_start_time_seconds`.
#[derive(Debug, Clone)]
pub struct ProcessCollector {
    start_time_seconds: f64,
}

impl ProcessCollector {
    /// A collector reporting `started` as the process start time (take it early in `main`).
    pub fn new(started: jiff::Timestamp) -> Self {
        Self { start_time_seconds: started.as_millisecond() as f64 / 1000.0 }
    }
}

/// What `/proc/self` says about the process.
#[derive(Debug, Default, Clone, PartialEq)]
struct ProcStat {
    cpu_seconds: f64,
    virtual_bytes: u64,
    resident_bytes: u64,
}

/// Parses `/proc/self/stat` (CPU ticks, virtual size) and the `VmRSS` line of `/proc/self/status`.
fn parse_proc(stat: &str, status: &str) -> Option<ProcStat> {
    // Fields after the parenthesised command name, which may itself contain spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // Field numbers in proc(5) are 1-based and count pid and comm: utime is 14, stime 15, vsize 23.
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let resident_kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())?;
    Some(ProcStat {
        cpu_seconds: (field(14)? + field(15)?) as f64 / USER_HZ,
        virtual_bytes: field(23)?,
        resident_bytes: resident_kib * 1024,
    })
}

fn read_proc() -> Option<(ProcStat, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some((parse_proc(&stat, &status)?, fds))
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let start = ConstGauge::new(self.start_time_seconds);
        start.encode(encoder.encode_descriptor(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            None,
            start.metric_type(),
        )?)?;
        let Some((proc, open_fds)) = read_proc() else { return Ok(()) };
        let cpu = ConstCounter::new(proc.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        for (name, help, value) in [
            ("process_resident_memory_bytes", "Resident memory size in bytes", proc.resident_bytes),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes", proc.virtual_bytes),
            ("process_open_fds", "Number of open file descriptors", open_fds),
        ] {
            let gauge = ConstGauge::new(value as i64);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_memory_from_proc_files_even_with_spaces_in_the_command_name() {
        let stat =
            "42 (dbcluster op) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 1000 123456789 2000";
        let status = "Name:\tdbcluster\nVmRSS:\t   2048 kB\nThreads:\t8\n";
        let parsed = parse_proc(stat, status).unwrap();
        assert_eq!(
            parsed,
            ProcStat { cpu_seconds: 3.0, virtual_bytes: 123_456_789, resident_bytes: 2048 * 1024 }
        );
        assert_eq!(parse_proc("garbage", status), None);
    }
}
