//! SIGHUP: logrotate's signal, and an operator's "pick up what changed". The delivery log is
//! reopened (no `copytruncate`, which loses the lines written between its copy and its
//! truncation), certificates are re-read from their files (handshakes from then on present the
//! renewed one; open connections are not dropped), and DKIM keys from the config file (every
//! post whose copies are built from then on is signed with them), and the scheduler's shaping
//! rules (`[[scheduler.shaping]]`: destinations move to the budgets the new rules give them,
//! from their next connection). Whatever else changed in the config file applies only at a
//! restart, and the log says which sections those are. A file
//! that does not load, or a key or certificate that does not, changes nothing: the running
//! ones stay, with an error line naming why.

use crate::Config;
use herald_auth::DkimKeys;
use herald_inbound::ServedCert;
use herald_telemetry::Telemetry;
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;

/// Sections SIGHUP applies; a change anywhere else waits for a restart.
const LIVE_SECTIONS: &[&str] = &["dkim"];

/// What a SIGHUP can reach.
pub struct Reloadable {
    pub telemetry: Telemetry,
    /// The config file the server started from (`None`: built-in defaults or built in code).
    pub source: Option<PathBuf>,
    /// Its tables as they were at start: what the running server is made of.
    pub running: Option<toml::Table>,
    /// Certificates presented by listeners, with a name for the log.
    pub certs: Vec<(&'static str, ServedCert)>,
    pub dkim: DkimKeys,
    /// Takes new shaping rules.
    pub scheduler: herald_scheduler::Scheduler,
}

/// Serves SIGHUPs until shutdown.
pub async fn on_hangup(r: Reloadable, shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP: logs are not reopened nor the configuration reloaded on it");
            return;
        }
    };
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            got = hangups.recv() => match got {
                Some(()) => r.reload().await,
                None => return,
            },
        }
    }
}

impl Reloadable {
    async fn reload(&self) {
        match self.telemetry.reopen_log() {
            Ok(()) => tracing::info!("SIGHUP: delivery log reopened"),
            Err(e) => {
                tracing::error!(error = %e, "SIGHUP: cannot reopen the delivery log; writing on to the old file")
            }
        }
        for (what, cert) in &self.certs {
            match cert.reload() {
                Ok(()) => {
                    tracing::info!(what, file = %cert.cert_file().display(), "SIGHUP: certificate reloaded")
                }
                Err(e) => {
                    tracing::error!(what, error = %e, "SIGHUP: certificate not reloaded; presenting the previous one")
                }
            }
        }
        let Some(path) = &self.source else {
            return;
        };
        let (config, table) = match read(path) {
            Ok(loaded) => loaded,
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "SIGHUP: configuration not reloaded; running on as before");
                return;
            }
        };
        match config.dkim_keys() {
            Ok(keys) => {
                self.dkim.replace_with(&keys);
                tracing::info!(domains = config.dkim.len(), "SIGHUP: DKIM keys reloaded");
            }
            Err(e) => {
                tracing::error!(error = %e, "SIGHUP: DKIM keys not reloaded; signing with the previous ones")
            }
        }
        let rules = config.scheduler.shaping.len();
        match self.scheduler.reshape(config.scheduler.shaping).await {
            Ok(()) => tracing::info!(rules, "SIGHUP: shaping rules reloaded"),
            Err(e) => {
                tracing::error!(error = %e, "SIGHUP: shaping rules not reloaded; running on the previous ones")
            }
        }
        let pending = changed_sections(self.running.as_ref(), &table);
        if !pending.is_empty() {
            tracing::warn!(
                sections = %pending.join(", "),
                "SIGHUP: changed in the configuration file but applied only at the next restart"
            );
        }
    }
}

/// The file as the server reads it, and as tables to compare.
pub fn read(path: &Path) -> Result<(Config, toml::Table), String> {
    let config = Config::load(path).map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let table = text.parse::<toml::Table>().map_err(|e| e.to_string())?;
    Ok((config, table))
}

/// Top-level keys whose value differs between what runs and the file now, SIGHUP's own
/// sections left out.
fn changed_sections(running: Option<&toml::Table>, now: &toml::Table) -> Vec<String> {
    let empty = toml::Table::new();
    let running = running.unwrap_or(&empty);
    let mut keys: Vec<&String> = running.keys().chain(now.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| !LIVE_SECTIONS.contains(&k.as_str()))
        .filter(|k| restart_part(running.get(*k), k) != restart_part(now.get(*k), k))
        .cloned()
        .collect()
}

/// What of a section only a restart applies: all of it, except `[scheduler]`'s `shaping` rules.
fn restart_part(section: Option<&toml::Value>, key: &str) -> Option<toml::Value> {
    let mut section = section.cloned()?;
    if key == "scheduler" {
        if let Some(t) = section.as_table_mut() {
            t.remove("shaping");
        }
    }
    Some(section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sections_that_differ_and_need_a_restart_are_named() {
        let a: toml::Table = "x = 1\n[scheduler]\ntick_ms = 50\n[dkim.\"a\"]\nselector = \"s\"\n"
            .parse()
            .expect("toml");
        let b: toml::Table =
            "x = 1\n[scheduler]\ntick_ms = 60\n[dkim.\"a\"]\nselector = \"t\"\n[lists]\n"
                .parse()
                .expect("toml");
        assert_eq!(changed_sections(Some(&a), &b), ["lists", "scheduler"]);
        assert!(changed_sections(Some(&a), &a).is_empty());
        // Shaping rules are live: a change there alone needs no restart.
        let c: toml::Table = "x = 1\n[scheduler]\ntick_ms = 50\n[[scheduler.shaping]]\nname = \"g\"\nmx_suffixes = [\"g.test\"]\n[dkim.\"a\"]\nselector = \"s\"\n"
            .parse()
            .expect("toml");
        assert!(changed_sections(Some(&a), &c).is_empty());
    }
}
