//! The process's file descriptors: the open-file limit raised at start, and a budget that
//! proves the configuration fits under it before anything is opened.
//!
//! Every listener and the outbound pool hold at most a configured number of sockets; together
//! with a reserve for the stores, files and DNS they must stay below `RLIMIT_NOFILE`, or a
//! crowd on one listener (1,100 idle HTTP connections at the common soft limit of 1,024) takes
//! the descriptors SMTP, LMTP and the scheduler need. Start raises the soft limit to the hard
//! one (what an unprivileged process may do), logs it, and refuses to start, naming the keys,
//! when the configuration cannot fit.

use herald_config::{Config, ConfigError};
use std::fmt::Write as _;

/// Descriptors kept for everything that is not a counted connection: the listening sockets,
/// the runtime's epoll and wake-up descriptors, SQLite files with their WAL and shared memory,
/// the spool and its journal, the delivery log, the archive, certificates read at reload, and
/// connections refused at a cap (open for a moment).
pub const RESERVE: u64 = 128;

/// One counted share of the budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// The configuration keys it comes from, as an operator writes them.
    pub keys: String,
    pub descriptors: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the soft limit in force
/// (`u64::MAX`: unlimited). A refusal (a hard limit the kernel will not grant as a soft one)
/// leaves the limit as it was, with a warning.
pub fn raise_open_files_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let before = getrlimit(Resource::Nofile);
    if before.current != before.maximum {
        let mut raised = before;
        raised.current = before.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(error = %e, soft = ?before.current, hard = ?before.maximum,
                "cannot raise the open-file limit (RLIMIT_NOFILE) to its hard limit");
        }
    }
    let now = getrlimit(Resource::Nofile);
    let soft = now.current.unwrap_or(u64::MAX);
    tracing::info!(
        open_files = soft,
        was = before.current.unwrap_or(u64::MAX),
        hard = now.maximum.unwrap_or(u64::MAX),
        "open-file limit (RLIMIT_NOFILE)"
    );
    soft
}

/// What the configuration may hold open at once, share by share.
pub fn shares(config: &Config) -> Vec<Share> {
    let listeners = 2 + u64::from(config.listen.submissions.is_some());
    let mut out = vec![
        Share {
            keys: format!("smtp_in.max_sessions x {listeners} listeners"),
            descriptors: count(config.smtp_in.max_sessions).saturating_mul(listeners),
        },
        Share {
            keys: "http.max_connections".into(),
            descriptors: count(config.http.max_connections),
        },
        Share {
            keys: "scheduler.max_connections".into(),
            descriptors: count(config.scheduler.max_connections),
        },
    ];
    if config.imap.enabled() {
        out.push(Share {
            keys: "imap.max_connections".into(),
            descriptors: count(config.imap.max_connections),
        });
    }
    if config.store.url.is_some() {
        out.push(Share {
            keys: "store.max_connections".into(),
            descriptors: count(config.store.max_connections),
        });
    }
    out.push(Share {
        keys: "scheduler.resolve_concurrency (DNS)".into(),
        descriptors: count(config.scheduler.resolve_concurrency),
    });
    out.push(Share {
        keys: "stores, files and listening sockets".into(),
        descriptors: RESERVE,
    });
    out
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Checks that [`shares`] stay below `limit`; the error lists each share with its key, so the
/// operator knows what to lower (or that the limit must be raised).
pub fn check(config: &Config, limit: u64) -> Result<u64, ConfigError> {
    let shares = shares(config);
    let needed = shares
        .iter()
        .fold(0u64, |sum, s| sum.saturating_add(s.descriptors));
    if needed < limit {
        return Ok(needed);
    }
    let mut parts = String::new();
    for s in &shares {
        let _ = write!(parts, "{} {} + ", s.keys, s.descriptors);
    }
    let parts = parts.trim_end_matches(" + ");
    Err(ConfigError::Unusable {
        key: "smtp_in.max_sessions, http.max_connections, scheduler.max_connections".into(),
        message: format!(
            "the configuration may hold {needed} descriptors open ({parts}), not below this \
             process's open-file limit of {limit} (RLIMIT_NOFILE, raised to the hard limit \
             already): lower these keys, or raise the limit (systemd: LimitNOFILE=; a shell: \
             ulimit -Hn)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_fit_a_common_hard_limit_and_not_1024() {
        let c = Config::default();
        let needed = check(&c, 4096).expect("fits 4,096");
        // 500 x 2 + 512 + 1000 + 64 + 128.
        assert_eq!(needed, 2704);
        let e = check(&c, 1024).expect_err("cannot fit 1,024").to_string();
        for key in [
            "smtp_in.max_sessions",
            "http.max_connections",
            "scheduler.max_connections",
            "1024",
            "2704",
        ] {
            assert!(e.contains(key), "{key}: {e}");
        }
    }

    #[test]
    fn a_small_configuration_fits_1024() {
        let mut c = Config::default();
        c.smtp_in.max_sessions = 100;
        c.scheduler.max_connections = 100;
        c.scheduler.slow_lane_max_connections = 20;
        assert!(check(&c, 1024).is_ok());
    }
}
