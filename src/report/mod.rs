//! `herald report`: the classic reports from the server's statistics store (never from the
//! delivery log): `hourly` (seeds/000's mailstat table), `day` (the batchstat picture, PNG/SVG)
//! and `post` (one post's curve, t50/t95/t100, failures by reason, slowest destinations). The
//! server aggregates; this side fetches JSON, prints and draws, with a progress bar per step.

pub mod chart;

use crate::client::Api;
use anyhow::{bail, Context, Result};
use clap::Subcommand;
use herald_api_types::{DayReport, HourRow, PostReport};
use herald_telemetry::time::{parse_date_ms, rfc3339_ms};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Subcommand)]
pub enum ReportCommand {
    /// Per hour: copies delivered and failed, by recipients and by hosts (mailstat).
    Hourly {
        /// Start: `YYYY-MM-DD` (UTC) or a number of hours back such as `48h` (default 24h).
        #[arg(long)]
        since: Option<String>,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// One day's delivery picture (batchstat): rate spikes, post arrivals, cumulative line.
    Day {
        /// `YYYY-MM-DD` (UTC); default today.
        #[arg(long)]
        date: Option<String>,
        /// Output file: .png or .svg.
        #[arg(long)]
        out: PathBuf,
    },
    /// One post: curve, t50/t95/t100, failures by reason, slowest destinations.
    Post {
        id: String,
        /// Also draw the post's curve to this .png or .svg.
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

fn steps(n: u64) -> ProgressBar {
    let bar = ProgressBar::new(n);
    bar.set_style(
        ProgressStyle::with_template("{spinner} report [{bar:20}] {pos}/{len} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// `--since` → ms since the epoch.
pub fn parse_since(since: Option<&str>, now_ms: u64) -> Result<u64> {
    let Some(s) = since else {
        return Ok(now_ms.saturating_sub(86_400_000));
    };
    if let Some(h) = s.strip_suffix('h') {
        let h: u64 = h
            .parse()
            .with_context(|| format!("--since {s:?}: not a number of hours"))?;
        return Ok(now_ms.saturating_sub(h.saturating_mul(3_600_000)));
    }
    parse_date_ms(s).with_context(|| format!("--since {s:?}: expected YYYY-MM-DD or e.g. 48h"))
}

pub async fn run(api: &Api, cmd: ReportCommand) -> Result<()> {
    match cmd {
        ReportCommand::Hourly { since, json } => {
            let since = parse_since(since.as_deref(), herald_types::unix_ms_now())?;
            let bar = steps(1);
            bar.set_message("fetching hourly statistics");
            let rows: Vec<HourRow> = api
                .get(&format!("/api/v1/reports/hourly?since_ms={since}"))
                .await?;
            bar.finish_and_clear();
            if json {
                outln!("{}", crate::client::pretty(&rows)?);
                return Ok(());
            }
            out!("{}", hourly_table(&rows, herald_types::unix_ms_now()));
        }
        ReportCommand::Day { date, out } => {
            let bar = steps(2);
            bar.set_message("fetching the day's statistics");
            let q = date
                .as_ref()
                .map_or(String::new(), |d| format!("?date={d}"));
            let rep: DayReport = api.get(&format!("/api/v1/reports/day{q}")).await?;
            bar.inc(1);
            bar.set_message(format!("drawing {}", out.display()));
            let title = format!(
                "Herald delivery · {} · {} delivered, {} failed, {} posts",
                &rfc3339_ms(rep.day_start_ms)[..10],
                rep.delivered,
                rep.failed,
                rep.arrivals.len()
            );
            let (rep2, out2) = (rep.clone(), out.clone());
            tokio::task::spawn_blocking(move || chart::day(&rep2, &title, &out2)).await??;
            bar.finish_and_clear();
            outln!(
                "{}: {} delivered, {} failed, {} deferred attempts, {} posts, busiest minute {}",
                out.display(),
                rep.delivered,
                rep.failed,
                rep.deferred,
                rep.arrivals.len(),
                rep.minutes.iter().map(|m| m.delivered).max().unwrap_or(0)
            );
        }
        ReportCommand::Post { id, out, json } => post(api, &id, out, json).await?,
    }
    Ok(())
}

async fn post(api: &Api, id: &str, out: Option<PathBuf>, json: bool) -> Result<()> {
    if id.is_empty() || id.len() > 16 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("{id:?} is not a post id (16 hex digits)");
    }
    let bar = steps(1 + u64::from(out.is_some()));
    bar.set_message("fetching the post's statistics");
    let rep: PostReport = api.get(&format!("/api/v1/reports/post/{id}")).await?;
    bar.inc(1);
    if json {
        bar.finish_and_clear();
        outln!("{}", crate::client::pretty(&rep)?);
        return Ok(());
    }
    if let Some(out) = &out {
        bar.set_message(format!("drawing {}", out.display()));
        let (r, o) = (rep.clone(), out.clone());
        tokio::task::spawn_blocking(move || chart::post(&r, &o)).await??;
    }
    bar.finish_and_clear();
    out!("{}", post_text(&rep));
    if let Some(out) = out {
        outln!("curve drawn to {}", out.display());
    }
    Ok(())
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// The mailstat table.
pub fn hourly_table(rows: &[HourRow], now_ms: u64) -> String {
    use std::fmt::Write as _;
    let mut s = format!("mailstat: {}\n", rfc3339_ms(now_ms));
    s.push_str("                 failed              deliveries          deferred\n");
    s.push_str("MMM DD HH    hosts/recipients      hosts/recipients      attempts\n");
    s.push_str("=== == ==   ======  ==========   ======  ==========   ==========\n");
    let (mut fh, mut fr, mut dh, mut dr, mut de) = (0, 0, 0, 0, 0);
    for r in rows {
        let t = rfc3339_ms(r.hour_ms);
        let month = t[5..7].parse::<usize>().unwrap_or(1).clamp(1, 12);
        let _ = writeln!(
            s,
            "{} {} {}   {:>6}/ {:>10}   {:>6}/ {:>10}   {:>10}",
            MONTHS[month - 1],
            &t[8..10],
            &t[11..13],
            r.failed_hosts,
            r.failed,
            r.delivered_hosts,
            r.delivered,
            r.deferred
        );
        (fh, fr, dh, dr, de) = (
            fh + r.failed_hosts,
            fr + r.failed,
            dh + r.delivered_hosts,
            dr + r.delivered,
            de + r.deferred,
        );
    }
    let _ = writeln!(
        s,
        "Totals      {fh:>6}/ {fr:>10}   {dh:>6}/ {dr:>10}   {de:>10}"
    );
    s
}

fn secs(v: Option<u64>) -> String {
    v.map_or("-".into(), |s| format!("{s} s"))
}

/// One post's report as text.
pub fn post_text(r: &PostReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "post {} to {}", r.post, r.list.as_deref().unwrap_or("?"));
    if let Some(a) = r.accepted_at_ms {
        let _ = writeln!(s, "  accepted          {}", rfc3339_ms(a));
    }
    let recipients = r.recipients.map_or("-".into(), |n| n.to_string());
    let _ = writeln!(s, "  recipients        {recipients}");
    let _ = writeln!(s, "  delivered         {}", r.delivered);
    let _ = writeln!(s, "  failed            {}", r.failed);
    let _ = writeln!(s, "  deferred attempts {}", r.deferred);
    let _ = writeln!(s, "  50 % delivered by {}", secs(r.t50_secs));
    let _ = writeln!(s, "  95 % delivered by {}", secs(r.t95_secs));
    let _ = writeln!(s, "  100 % delivered by {}", secs(r.t100_secs));
    if !r.failures.is_empty() {
        let _ = writeln!(s, "failures by reason:");
        for f in &r.failures {
            let _ = writeln!(s, "  {:>8}  {}", f.copies, f.reason);
        }
    }
    if !r.deferrals.is_empty() {
        let _ = writeln!(s, "deferrals by reason:");
        for f in &r.deferrals {
            let _ = writeln!(s, "  {:>8}  {}", f.copies, f.reason);
        }
    }
    let _ = writeln!(s, "slowest destinations (mean SMTP time):");
    for d in &r.slowest {
        let _ = writeln!(
            s,
            "  {:<32} {:>7} copies  mean {:>8.1} ms  max {:>6} ms  last at +{:.1} s",
            d.domain,
            d.copies,
            d.mean_ms,
            d.max_ms,
            d.last_after_ms as f64 / 1000.0
        );
    }
    s
}
