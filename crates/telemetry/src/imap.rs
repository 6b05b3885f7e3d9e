//! The IMAP archive server's series on `/metrics`: sessions open now and
//! commands by name. Kept here, beside the other series, because `/metrics` is encoded from
//! telemetry's registry; `herald-imap` only counts.

use crate::exposition::{self, Counter, Gauge, Registry};
use prometheus_client::metrics::family::Family;

/// `herald_imap_sessions`, `herald_imap_commands_total{command}`.
#[derive(Clone)]
pub struct ImapMetrics {
    sessions: Gauge,
    /// Label values are the IMAP command names imap-codec knows (a fixed set), so the family
    /// stays small whatever clients send; a line that is no command is counted as `invalid`.
    commands: Family<[(&'static str, &'static str); 1], Counter>,
}

impl ImapMetrics {
    pub(crate) fn new(registry: &mut Registry) -> ImapMetrics {
        let sessions = Gauge::default();
        exposition::register(
            registry,
            "herald_imap_sessions",
            "IMAP sessions open now (the archive over IMAP).",
            sessions.clone(),
        );
        let commands = Family::<[(&'static str, &'static str); 1], Counter>::default();
        exposition::register(
            registry,
            "herald_imap_commands_total",
            "IMAP commands received, by command name (invalid: a line that is no command).",
            commands.clone(),
        );
        ImapMetrics { sessions, commands }
    }

    pub fn session_opened(&self) {
        self.sessions.inc();
    }

    pub fn session_closed(&self) {
        self.sessions.dec();
    }

    pub fn sessions(&self) -> i64 {
        self.sessions.get()
    }

    /// Counts one command (`name` from imap-codec's `Command::name`, or `invalid`).
    pub fn count_command(&self, name: &'static str) {
        self.commands.get_or_create(&[("command", name)]).inc();
    }

    pub fn commands(&self, name: &'static str) -> u64 {
        self.commands.get_or_create(&[("command", name)]).get()
    }
}
