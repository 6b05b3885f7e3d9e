//! The server process's own CPU time, memory and threads, read from `/proc/self` (Linux). Shown
//! by `herald top` and the status API so an operator sees whether Herald or the network is the
//! bottleneck.
//!
//! Limits: Linux only; elsewhere every field is `None`. CPU ticks are converted assuming
//! `CLK_TCK = 100`, which holds on every mainstream Linux architecture (reading sysconf would
//! need libc and `unsafe`, which the workspace denies).

use serde::Serialize;

/// A snapshot of the process's resources.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct ProcessStats {
    /// User + system CPU time since the process started.
    pub cpu_secs: Option<f64>,
    /// Resident memory.
    pub rss_bytes: Option<u64>,
    pub threads: Option<u64>,
    /// Open file descriptors (sockets included).
    pub open_fds: Option<u64>,
}

const CLK_TCK: f64 = 100.0;

/// Reads the current process's numbers; missing files give `None` fields, never an error.
pub fn read_self() -> ProcessStats {
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    let status = std::fs::read_to_string("/proc/self/status").ok();
    let open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.take(1_000_000).count() as u64);
    ProcessStats {
        cpu_secs: stat.as_deref().and_then(cpu_secs),
        rss_bytes: status
            .as_deref()
            .and_then(|s| status_field(s, "VmRSS:"))
            .map(|kb| kb * 1024),
        threads: status.as_deref().and_then(|s| status_field(s, "Threads:")),
        open_fds,
    }
}

/// utime + stime from `/proc/self/stat` (fields 14 and 15, counted after the `(comm)` field,
/// which may itself contain spaces and parentheses).
fn cpu_secs(stat: &str) -> Option<f64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    // After the comm: state is field 3, so utime (14) is the 12th field here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / CLK_TCK)
}

fn status_field(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_formats() {
        let stat = "1234 (herald (x) y) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 9 0";
        assert_eq!(cpu_secs(stat), Some(3.0));
        let status = "Name:\therald\nVmRSS:\t  2048 kB\nThreads:\t9\n";
        assert_eq!(status_field(status, "VmRSS:"), Some(2048));
        assert_eq!(status_field(status, "Threads:"), Some(9));
        if cfg!(target_os = "linux") {
            let me = read_self();
            assert!(
                me.rss_bytes.unwrap_or(0) > 0 && me.threads.unwrap_or(0) >= 1,
                "{me:?}"
            );
        }
    }
}
