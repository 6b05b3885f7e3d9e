//! A global pause of new outbound connections while this machine is short of a resource (out
//! of descriptors, memory, socket buffers or local ports). Such a failure says nothing about the
//! receiver, and the next connect to any host would meet it too: the copies stay ready, no host
//! is charged, and no connection is opened for a while — 1 s, doubling on each shortage met
//! again up to 30 s, cleared by the first connection that opens. Logged at most once a minute
//! (each occurrence is counted in `herald_local_shortages_total`).

use herald_types::LocalResource;
use std::time::Duration;
use tokio::time::Instant;

/// The first pause.
const FIRST: Duration = Duration::from_secs(1);
/// The longest pause.
const MAX: Duration = Duration::from_secs(30);
/// At most one warning per this long.
const LOG_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
pub(crate) struct ShortagePause {
    until: Option<Instant>,
    pause: Duration,
    logged: Option<Instant>,
}

impl ShortagePause {
    /// A connection failed for want of `resource`: pause (longer than the last time) and warn,
    /// unless a warning went out less than a minute ago.
    pub(crate) fn record(&mut self, resource: LocalResource, now: Instant) {
        self.pause = (self.pause * 2).clamp(FIRST, MAX);
        self.until = Some(now + self.pause);
        if self
            .logged
            .is_none_or(|t| now.duration_since(t) >= LOG_EVERY)
        {
            self.logged = Some(now);
            tracing::warn!(
                resource = resource.word(),
                pause_ms = self.pause.as_millis() as u64,
                "outbound connections pause: this server is short of a local resource (no receiving host is blamed; see herald_local_shortages_total)"
            );
        }
    }

    /// True while new connections wait.
    pub(crate) fn active(&self, now: Instant) -> bool {
        self.until.is_some_and(|t| now < t)
    }

    /// A connection opened: the shortage is over, the next one starts from the first pause.
    pub(crate) fn clear(&mut self) {
        self.until = None;
        self.pause = Duration::ZERO;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pauses_double_to_a_cap_and_clear_on_success() {
        let mut p = ShortagePause::default();
        let t0 = Instant::now();
        assert!(!p.active(t0));
        p.record(LocalResource::ProcessFiles, t0);
        assert!(p.active(t0 + Duration::from_millis(999)));
        assert!(!p.active(t0 + FIRST));
        p.record(LocalResource::ProcessFiles, t0);
        assert!(p.active(t0 + Duration::from_millis(1999)));
        for _ in 0..10 {
            p.record(LocalResource::ProcessFiles, t0);
        }
        assert!(!p.active(t0 + MAX));
        p.clear();
        assert!(!p.active(t0));
        p.record(LocalResource::ProcessFiles, t0);
        assert!(!p.active(t0 + FIRST), "starts again from the first pause");
    }
}
