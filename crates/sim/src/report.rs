//! The report on a finished (or running) run: delivered, missing, duplicates, permanently
//! failed, the time to the first / 50 % / 95 % / 100 % of deliverable recipients, and the
//! cumulative delivery curve ([`crate::chart`] draws it).
//!
//! Definitions (all from the receivers' side, so any sender can be measured the same way):
//! - *deliverable*: a member whose [`Expectation`] is `Deliverable` (the world's design: greylisted,
//!   throttled or slow hosts still count; unknown users, hung and refused hosts do not);
//! - *delivered*: a deliverable member with at least one accepted copy;
//! - *missing*: a deliverable member with none;
//! - *duplicate*: a copy whose recipient (case-insensitively) and Message-ID (or digest, without
//!   one) an earlier copy had — recomputed here from the events, not trusted from the file;
//! - *permanently failed*: distinct recipients given a 5xx reply;
//! - *deferrals*: 4xx replies (each one counts);
//! - *rate refusals*: 4xx replies with status 4.7.28 (refused for rate or per-connection cap);
//! - times count from the origin: the run's `t0` (Unix ms, written by whoever started the
//!   work) when known, else the first event.
//!
//! Without a member list, every recipient that got a copy is taken as deliverable and
//! "missing" is unknown.
//!
//! Limits: memory is O(distinct recipients) (~100 bytes each).
//!
//! SECURITY: the events and member list are files that may have been edited; nothing here
//! panics on odd contents, and recipient strings are only compared, never interpreted.

use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;

use crate::config::{DomainConfig, Expectation, WorldConfig};
use crate::export::{self, Endpoint, Event, ExportError};

/// How many points the curve has at most.
const CURVE_POINTS: u64 = 400;

/// The report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    /// Members on the list, when known.
    pub members: Option<u64>,
    /// Members the world will accept mail for.
    pub deliverable: u64,
    /// Members the world rejects by design (550 5.1.1).
    pub expected_unknown_users: u64,
    /// Members whose domain never accepts mail (hung, refused) or does not exist.
    pub expected_unreachable: u64,
    /// Deliverable members with at least one copy.
    pub delivered: u64,
    /// Deliverable members with no copy (None without a member list).
    pub missing: Option<u64>,
    /// Copies accepted, duplicates included.
    pub copies: u64,
    /// Duplicate copies.
    pub duplicates: u64,
    /// Copies to recipients not on the member list.
    pub strays: u64,
    /// Distinct recipients given a 5xx reply.
    pub permanently_failed: u64,
    /// 4xx replies given.
    pub deferrals: u64,
    /// Of those, commands refused for rate (`4.7.28`: a provider's rate limit or its
    /// per-connection cap) — what a real provider counts against a sender's reputation.
    pub rate_refusals: u64,
    /// Copies found malformed by the receivers' checks.
    pub malformed: u64,
    /// Where times count from: "t0" or "first event".
    pub origin: &'static str,
    /// Time to the first delivered deliverable recipient, and to 50 / 95 / 100 % of them.
    pub t_first_ms: Option<u64>,
    pub t50_ms: Option<u64>,
    pub t95_ms: Option<u64>,
    pub t100_ms: Option<u64>,
    /// Cumulative counts over time.
    pub curve: Vec<CurvePoint>,
}

/// One point of the cumulative curve.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CurvePoint {
    /// Milliseconds since the origin.
    pub at_ms: u64,
    /// Deliverable recipients delivered by then.
    pub delivered: u64,
    /// Recipients permanently failed by then.
    pub failed: u64,
    /// Deferrals given by then.
    pub deferred: u64,
}

/// Errors building a report from a run directory.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Files(#[from] ExportError),
    #[error("{path}: {message}")]
    World { path: String, message: String },
}

/// Accumulates events; [`ReportBuilder::finish`] computes the report.
pub struct ReportBuilder {
    /// Lower-cased member → its expectation.
    members: Option<HashMap<String, Expectation>>,
    /// Origin in world ms; None: the first event.
    origin_ms: Option<u64>,
    first_event_ms: Option<u64>,
    /// Lower-cased recipient → first copy (world ms).
    first_copy: HashMap<String, u64>,
    dup_keys: HashSet<[u8; 16]>,
    /// Lower-cased recipient → first 5xx (world ms).
    first_failure: HashMap<String, u64>,
    deferral_times: Vec<u64>,
    rate_refusals: u64,
    copies: u64,
    duplicates: u64,
    malformed: u64,
}

impl ReportBuilder {
    /// A builder for `world`'s events. `members`: the list, if known; `origin_ms`: the origin
    /// in world milliseconds (None: the first event).
    pub fn new(
        world: &WorldConfig,
        members: Option<&[String]>,
        origin_ms: Option<u64>,
    ) -> ReportBuilder {
        let domains: HashMap<&str, &DomainConfig> =
            world.domains.iter().map(|d| (d.name.as_str(), d)).collect();
        let members = members.map(|ms| {
            ms.iter()
                .map(|m| {
                    let m = m.to_ascii_lowercase();
                    let exp = expectation(&domains, &m);
                    (m, exp)
                })
                .collect()
        });
        ReportBuilder {
            members,
            origin_ms,
            first_event_ms: None,
            first_copy: HashMap::new(),
            dup_keys: HashSet::new(),
            first_failure: HashMap::new(),
            deferral_times: Vec::new(),
            rate_refusals: 0,
            copies: 0,
            duplicates: 0,
            malformed: 0,
        }
    }

    /// Takes one event.
    pub fn add(&mut self, event: Event) {
        let ms = event.ms();
        self.first_event_ms = Some(self.first_event_ms.map_or(ms, |f| f.min(ms)));
        match event {
            Event::Copy {
                rcpt,
                msgid,
                digest,
                mime,
                ..
            } => {
                self.copies += 1;
                self.malformed += u64::from(mime.starts_with("bad"));
                let rcpt = rcpt.to_ascii_lowercase();
                let mut h = Sha256::new_with_prefix(rcpt.as_bytes());
                h.update(b"\0");
                h.update(msgid.or(digest).unwrap_or_default().as_bytes());
                let mut key = [0u8; 16];
                key.copy_from_slice(&h.finalize()[..16]);
                if !self.dup_keys.insert(key) {
                    self.duplicates += 1;
                }
                let first = self.first_copy.entry(rcpt).or_insert(ms);
                *first = (*first).min(ms);
            }
            Event::Reject {
                code, rcpt, status, ..
            } => match code {
                400..=499 => {
                    self.deferral_times.push(ms);
                    self.rate_refusals += u64::from(status == "4.7.28");
                }
                500..=599 => {
                    if let Some(r) = rcpt {
                        let first = self
                            .first_failure
                            .entry(r.to_ascii_lowercase())
                            .or_insert(ms);
                        *first = (*first).min(ms);
                    }
                }
                _ => {}
            },
        }
    }

    /// Computes the report.
    pub fn finish(self) -> Report {
        let origin = self.origin_ms.or(self.first_event_ms).unwrap_or(0);
        let rel = |ms: u64| ms.saturating_sub(origin);
        let mut r = Report {
            copies: self.copies,
            duplicates: self.duplicates,
            malformed: self.malformed,
            permanently_failed: self.first_failure.len() as u64,
            deferrals: self.deferral_times.len() as u64,
            rate_refusals: self.rate_refusals,
            origin: if self.origin_ms.is_some() {
                "t0"
            } else {
                "first event"
            },
            ..Report::default()
        };
        // First-copy times of deliverable recipients.
        let mut times: Vec<u64> = match &self.members {
            Some(members) => {
                r.members = Some(members.len() as u64);
                for exp in members.values() {
                    match exp {
                        Expectation::Deliverable => r.deliverable += 1,
                        Expectation::UnknownUser => r.expected_unknown_users += 1,
                        _ => r.expected_unreachable += 1,
                    }
                }
                r.strays = (self.first_copy.keys())
                    .filter(|k| !members.contains_key(*k))
                    .count() as u64;
                (members.iter())
                    .filter(|(_, e)| **e == Expectation::Deliverable)
                    .filter_map(|(m, _)| self.first_copy.get(m).copied())
                    .map(rel)
                    .collect()
            }
            None => {
                r.deliverable = self.first_copy.len() as u64;
                self.first_copy.values().copied().map(rel).collect()
            }
        };
        times.sort_unstable();
        r.delivered = times.len() as u64;
        r.missing = r.members.map(|_| r.deliverable - r.delivered);
        r.t_first_ms = times.first().copied();
        r.t50_ms = percentile(&times, r.deliverable, 50);
        r.t95_ms = percentile(&times, r.deliverable, 95);
        r.t100_ms = percentile(&times, r.deliverable, 100);
        let mut failures: Vec<u64> = self.first_failure.values().copied().map(rel).collect();
        failures.sort_unstable();
        let mut deferrals: Vec<u64> = self.deferral_times.iter().copied().map(rel).collect();
        deferrals.sort_unstable();
        r.curve = curve(&times, &failures, &deferrals);
        r
    }
}

/// What delivery to `address` (lower case) should end as.
fn expectation(domains: &HashMap<&str, &DomainConfig>, address: &str) -> Expectation {
    let domain = address.rsplit_once('@').map_or("", |(_, d)| d);
    match domains.get(domain) {
        Some(d) => d.expectation(address),
        None => Expectation::NoSuchDomain,
    }
}

/// The time at which `pct` % of `population` had been reached, if it was. `sorted` holds the
/// times of those reached.
fn percentile(sorted: &[u64], population: u64, pct: u64) -> Option<u64> {
    if population == 0 {
        return None;
    }
    let need = (population * pct).div_ceil(100).max(1);
    sorted.get(usize::try_from(need - 1).ok()?).copied()
}

/// Cumulative counts at up to [`CURVE_POINTS`] evenly spaced times (plus the origin).
fn curve(delivered: &[u64], failed: &[u64], deferred: &[u64]) -> Vec<CurvePoint> {
    let end = [delivered, failed, deferred]
        .iter()
        .filter_map(|v| v.last().copied())
        .max()
        .unwrap_or(0);
    let step = (end / CURVE_POINTS).max(1);
    let count_le = |v: &[u64], t: u64| v.partition_point(|&x| x <= t) as u64;
    let mut out = Vec::new();
    let mut t = 0;
    loop {
        out.push(CurvePoint {
            at_ms: t,
            delivered: count_le(delivered, t),
            failed: count_le(failed, t),
            deferred: count_le(deferred, t),
        });
        if t >= end {
            return out;
        }
        t = (t + step).min(end);
    }
}

impl Report {
    /// Reads a run directory (see [`crate::export`]). `members` overrides its `members.csv`.
    pub fn from_run_dir(dir: &Path, members: Option<&Path>) -> Result<Report, ReportError> {
        Report::from_run_dir_for(dir, members, None)
    }

    /// [`Report::from_run_dir`] for the members whose domain's (primary MX) profile is of kind
    /// `only` (e.g. `"tarpit"`), when given: how one kind of host fared. Needs a member list.
    pub fn from_run_dir_for(
        dir: &Path,
        members: Option<&Path>,
        only: Option<&str>,
    ) -> Result<Report, ReportError> {
        let world_path = dir.join(export::WORLD_FILE);
        let world = WorldConfig::from_file(&world_path).map_err(|e| ReportError::World {
            path: world_path.display().to_string(),
            message: e.to_string(),
        })?;
        let endpoint_path = dir.join(export::ENDPOINT_FILE);
        let text =
            std::fs::read_to_string(&endpoint_path).map_err(ExportError::io(&endpoint_path))?;
        let endpoint: Endpoint = serde_json::from_str(&text).map_err(|e| ExportError::BadFile {
            path: endpoint_path.clone(),
            message: e.to_string(),
        })?;
        let default_members = dir.join(export::MEMBERS_FILE);
        let members_path = members.or(default_members.exists().then_some(&*default_members));
        let mut members = members_path.map(export::read_members).transpose()?;
        if let Some(kind) = only {
            let Some(list) = members.as_mut() else {
                return Err(ReportError::World {
                    path: dir.display().to_string(),
                    message: format!("a report for {kind} hosts needs a member list"),
                });
            };
            list.retain(|m| world.domain_of(m).is_some_and(|d| d.profile.kind() == kind));
        }
        let origin = export::read_t0(dir)?.map(|t0| t0.saturating_sub(endpoint.started_unix_ms));
        let mut b = ReportBuilder::new(&world, members.as_deref(), origin);
        export::read_events(&dir.join(export::EVENTS_FILE), |e| b.add(e))?;
        Ok(b.finish())
    }
}

fn ms_text(ms: Option<u64>) -> String {
    ms.map_or_else(
        || "not reached".into(),
        |ms| format!("{:.3} s", ms as f64 / 1000.0),
    )
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let opt = |v: Option<u64>| v.map_or_else(|| "unknown".into(), |v| v.to_string());
        writeln!(f, "members              {}", opt(self.members))?;
        writeln!(f, "  deliverable        {}", self.deliverable)?;
        writeln!(f, "  unknown users      {}", self.expected_unknown_users)?;
        writeln!(f, "  unreachable        {}", self.expected_unreachable)?;
        writeln!(f, "delivered            {}", self.delivered)?;
        writeln!(f, "missing              {}", opt(self.missing))?;
        writeln!(f, "duplicates           {}", self.duplicates)?;
        writeln!(f, "permanently failed   {}", self.permanently_failed)?;
        writeln!(f, "deferrals (4xx)      {}", self.deferrals)?;
        writeln!(f, "refused for rate     {}", self.rate_refusals)?;
        writeln!(f, "copies accepted      {}", self.copies)?;
        writeln!(f, "copies to strangers  {}", self.strays)?;
        writeln!(f, "malformed copies     {}", self.malformed)?;
        writeln!(f, "times from {}:", self.origin)?;
        writeln!(f, "  first              {}", ms_text(self.t_first_ms))?;
        writeln!(f, "  50 %               {}", ms_text(self.t50_ms))?;
        writeln!(f, "  95 %               {}", ms_text(self.t95_ms))?;
        write!(f, "  100 %              {}", ms_text(self.t100_ms))
    }
}
