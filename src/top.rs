//! `herald top`: a live terminal view over the HTTP API (`/api/v1/top`), refreshed every second and
//! laid out for an 80×24 terminal over SSH (seeds/000's realstat plus seeds/003's "top guide"):
//! delivery rate in 15-second windows with delivered/failed/deferred bars, each active post's
//! progress and time to 95 %, the queue by lane and the stage channels, the slowest and the down
//! hosts, the server process's CPU and memory, and where time is lost inside Herald (waits in
//! stage channels, time under shared locks).
//!
//! Rendering is a pure function of a [`TopModel`] so it is tested in a fixed-size ratatui test
//! backend; the loop around it only fetches, draws and reads keys (q, Esc or Ctrl-C quit).

use crate::client::Api;
use anyhow::Result;
use clap::Args;
use herald_api_types::{LockView, RatePoint, Top};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
use ratatui::Frame;
use serde::Deserialize;
use std::time::Duration;

#[derive(Args)]
pub struct TopArgs {
    /// Refresh interval in milliseconds.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
}

/// What the view draws: the `/api/v1/top` answer (the shared [`Top`] view, decoded with missing
/// fields defaulted) and the CPU share the client computes between two samples.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TopModel {
    #[serde(flatten)]
    pub top: Top,
    /// CPU use since the previous sample (computed by the client).
    #[serde(skip)]
    pub cpu_pct: Option<f64>,
}

pub async fn run(api: Api, args: TopArgs) -> Result<()> {
    // Fail before touching the terminal when no server answers.
    let mut model = TopModel {
        top: api.get::<Top>("/api/v1/top").await?,
        cpu_pct: None,
    };
    let mut terminal = ratatui::init();
    let result = async {
        loop {
            terminal.draw(|f| render(f, &model))?;
            let wait = Duration::from_millis(args.interval_ms.clamp(100, 60_000));
            if quit_requested(wait).await? {
                return Ok(());
            }
            let prev = (model.top.process.cpu_secs, model.top.now_ms);
            // A missed refresh keeps the last picture (the server may be busy or restarting).
            if let Ok(top) = api.get::<Top>("/api/v1/top").await {
                let now = (top.process.cpu_secs, top.now_ms);
                model = TopModel {
                    top,
                    cpu_pct: cpu_pct(prev, now),
                };
            }
        }
    }
    .await;
    ratatui::restore();
    result
}

fn cpu_pct(prev: (Option<f64>, u64), now: (Option<f64>, u64)) -> Option<f64> {
    let (a, b) = (prev.0?, now.0?);
    let dt = now.1.checked_sub(prev.1).filter(|d| *d > 0)? as f64 / 1000.0;
    Some((b - a) / dt * 100.0)
}

/// Waits up to `wait` for a key; true when it asks to quit.
async fn quit_requested(wait: Duration) -> Result<bool> {
    tokio::task::spawn_blocking(move || -> Result<bool> {
        if !event::poll(wait)? {
            return Ok(false);
        }
        Ok(match event::read()? {
            Event::Key(k) => {
                matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                    || (k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL))
            }
            _ => false,
        })
    })
    .await?
}

/// Draws the whole view into `f`'s area (designed for 80×24; larger terminals get more rows).
pub fn render(f: &mut Frame, m: &TopModel) {
    let [head, row1, row2, row3, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Min(7),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(Paragraph::new(header(m)), head);
    let halves = |r: Rect| -> [Rect; 2] {
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(r)
    };
    let [rate, posts] = halves(row1);
    f.render_widget(
        panel("rate · 15 s windows", rate_lines(m, rate.width)),
        rate,
    );
    f.render_widget(panel("posts", post_lines(m, posts.width)), posts);
    let [queue, hosts] = halves(row2);
    f.render_widget(panel("queue", queue_lines(m)), queue);
    f.render_widget(panel("slowest · down hosts", host_lines(m)), hosts);
    f.render_widget(panel("where time is lost", internal_lines(m)), row3);
    let help = Line::from(vec![
        Span::styled(" q", Style::default().add_modifier(Modifier::BOLD)),
        Span::raw(" quit   * delivered  - failed  ~ deferred"),
    ]);
    f.render_widget(Paragraph::new(help), foot);
}

fn panel<'a>(title: &'a str, lines: Vec<Line<'a>>) -> Paragraph<'a> {
    Paragraph::new(lines).block(Block::bordered().title(title))
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1}G", b as f64 / (1u64 << 30) as f64),
        b => format!("{}M", b >> 20),
    }
}

fn human_secs(s: u64) -> String {
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s => format!("{}h{:02}m", s / 3600, (s / 60) % 60),
    }
}

fn header(m: &TopModel) -> Line<'static> {
    let p = &m.top.process;
    let cpu = m.cpu_pct.map_or("-".into(), |c| format!("{c:.0}%"));
    let rss = p.rss_bytes.map_or("-".into(), human_bytes);
    let opt = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
    Line::from(vec![
        Span::styled("herald top", Style::default().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            "  up {}  cpu {cpu}  rss {rss}  thr {}  fds {}  conns {}",
            human_secs(m.top.uptime_secs),
            opt(p.threads),
            opt(p.open_fds),
            m.top.connections
        )),
    ])
}

/// realstat: one line per 15-second window, newest last: time, hourly rate, count, bars.
fn rate_lines(m: &TopModel, width: u16) -> Vec<Line<'static>> {
    let windows: Vec<RatePoint> = m
        .top
        .rates
        .chunks(15)
        .map(|c| RatePoint {
            sec: c.last().map_or(0, |r| r.sec + 1),
            delivered: c.iter().map(|r| r.delivered).sum(),
            deferred: c.iter().map(|r| r.deferred).sum(),
            failed: c.iter().map(|r| r.failed).sum(),
        })
        .collect();
    let shown = &windows[windows.len().saturating_sub(6)..];
    let max = shown
        .iter()
        .map(|w| w.delivered + w.failed + w.deferred)
        .max()
        .unwrap_or(0)
        .max(1);
    let bar_room = usize::from(width.saturating_sub(2 + 24)).max(4);
    let scale = |n: u64| (n as f64 / max as f64 * bar_room as f64).ceil() as usize;
    shown
        .iter()
        .map(|w| {
            let t = herald_telemetry::time::rfc3339_ms(w.sec * 1000);
            let per_hour = (w.delivered + w.failed) * 240;
            Line::from(vec![
                Span::raw(format!(
                    "{} {:>8}/h {:>6} ",
                    &t[11..19],
                    per_hour,
                    w.delivered
                )),
                Span::styled(
                    "*".repeat(scale(w.delivered)),
                    Style::default().fg(Color::Green),
                ),
                Span::styled("-".repeat(scale(w.failed)), Style::default().fg(Color::Red)),
                Span::styled(
                    "~".repeat(scale(w.deferred)),
                    Style::default().fg(Color::Yellow),
                ),
            ])
        })
        .collect()
}

/// Width of the posts panel's t95 column ("t95 ~1h05m", "t95 123.4s", "expanding"): "done"
/// follows it after a space instead of running into it.
const POST_T95_COLUMN: usize = 11;

/// Each post: id and list, then a bar with the share done and the time to 95 % (or an estimate).
fn post_lines(m: &TopModel, width: u16) -> Vec<Line<'static>> {
    let rate15: u64 = m.top.rates.iter().rev().take(15).map(|r| r.delivered).sum();
    let mut lines = Vec::new();
    for p in m.top.posts.iter().take(3) {
        let total = p.recipients.map_or(0, |r| r.saturating_sub(p.already_done));
        let done = p.delivered + p.failed;
        let frac = if total == 0 {
            0.0
        } else {
            done as f64 / total as f64
        };
        let t95 = match (p.t95_ms, total) {
            (Some(ms), _) => format!("t95 {:.1}s", ms as f64 / 1000.0),
            (None, 0) => "expanding".into(),
            (None, t) => {
                let need = ((t as f64 * 0.95).ceil() as u64).saturating_sub(p.delivered);
                match rate15 {
                    0 => "t95 ?".into(),
                    r => format!("t95 ~{}", human_secs(need * 15 / r)),
                }
            }
        };
        let mut list = p.list.clone();
        list.truncate(usize::from(width.saturating_sub(20)));
        lines.push(Line::from(format!("{} {list}", p.post)));
        // Columns after the bar: " 100% " (6), the t95 column (POST_T95_COLUMN), " done" (5).
        let room = usize::from(width.saturating_sub(2 + 6 + POST_T95_COLUMN as u16 + 5)).max(4);
        let filled = ((frac * room as f64) as usize).min(room);
        let mark = if p.complete { " done" } else { "" };
        lines.push(Line::from(vec![
            Span::styled("#".repeat(filled), Style::default().fg(Color::Green)),
            Span::raw(".".repeat(room - filled)),
            Span::raw(format!(
                " {:>3.0}% {t95:<w$}{mark}",
                frac * 100.0,
                w = POST_T95_COLUMN
            )),
        ]));
    }
    if lines.is_empty() {
        lines.push(Line::from("no posts yet"));
    }
    lines
}

fn queue_lines(m: &TopModel) -> Vec<Line<'static>> {
    let mut lines = vec![Line::from(format!(
        "queued {}  resolving {}  conns {}",
        m.top.queued, m.top.resolving, m.top.connections
    ))];
    for l in m.top.lanes.iter().take(2) {
        lines.push(Line::from(format!(
            "lane {:<6} ready {} wait {} conn {}",
            l.lane, l.ready, l.waiting, l.connections
        )));
    }
    for c in &m.top.internals.channels {
        lines.push(Line::from(format!(
            "chan {:<8} {:>6} / {}",
            c.channel, c.depth, c.capacity
        )));
    }
    lines
}

fn host_lines(m: &TopModel) -> Vec<Line<'static>> {
    let mut lines: Vec<Line> = m
        .top
        .slowest
        .iter()
        .take(3)
        .map(|c| {
            Line::from(format!(
                "{:<22} {:>7.1} ms {:>6}",
                c.class, c.mean_ms, c.transactions
            ))
        })
        .collect();
    for d in m.top.down.iter().take(5 - lines.len().min(3)) {
        let mut name = d.destination.clone();
        name.truncate(24);
        lines.push(Line::styled(
            format!(
                "DOWN {name:<24} {}",
                human_secs(d.down_for_secs.unwrap_or(0))
            ),
            Style::default().fg(Color::Red),
        ));
    }
    if lines.is_empty() {
        lines.push(Line::from("no SMTP traffic yet"));
    }
    lines
}

fn micros(us: u64) -> String {
    match us {
        u if u < 1000 => format!("{u}us"),
        u if u < 1_000_000 => format!("{:.1}ms", u as f64 / 1000.0),
        u => format!("{:.1}s", u as f64 / 1e6),
    }
}

/// Stage waits (mean and max per message) beside lock totals (wait and hold).
fn internal_lines(m: &TopModel) -> Vec<Line<'static>> {
    let stages = m.top.internals.stages.iter().map(|s| {
        format!(
            "{:<12} mean {:>6} max {:>6}",
            s.stage,
            micros(s.mean_us),
            micros(s.max_us)
        )
    });
    let mut locks: Vec<&LockView> = m.top.internals.locks.iter().collect();
    locks.sort_by_key(|l| std::cmp::Reverse(l.wait_us + l.hold_us));
    let locks = locks.into_iter().map(|l| {
        format!(
            "{:<14} w {:>6} h {:>6} c{}",
            l.lock,
            micros(l.wait_us),
            micros(l.hold_us),
            l.contended
        )
    });
    let mut left: Vec<String> = stages.collect();
    let mut right: Vec<String> = locks.collect();
    let n = left.len().max(right.len());
    left.resize(n, String::new());
    right.resize(n, String::new());
    left.into_iter()
        .zip(right)
        .map(|(l, r)| Line::from(format!("{l:<36} {r}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn model() -> TopModel {
        let json = serde_json::json!({
            "now_ms": 1_795_142_417_000u64, "uptime_secs": 3700,
            "rates": (0..30).map(|i| serde_json::json!({
                "sec": 1_795_142_387u64 + i, "delivered": 10, "deferred": 1, "failed": i % 2
            })).collect::<Vec<_>>(),
            "posts": [{"post": "0000018F3A2B0001", "list": "news@lists.test", "accepted_at_ms": 0,
                       "recipients": 1000, "already_done": 0, "delivered": 640, "failed": 10,
                       "complete": false, "t95_ms": null}],
            "queued": 350, "resolving": 2, "connections": 12,
            "lanes": [{"lane": "fast", "queued": 300, "ready": 300, "waiting": 0, "connections": 10}, {"lane": "slow", "queued": 50, "ready": 0, "waiting": 50, "connections": 2}],
            "down": [{"destination": "mx.dead.test", "down_for_secs": 42, "last_error": "refused"}],
            "slowest": [{"class": "slow.test", "transactions": 99, "mean_ms": 812.5}],
            "process": {"cpu_secs": 12.5, "rss_bytes": 50u64 << 20, "threads": 9, "open_fds": 77},
            "internals": {
                "stages": [{"stage": "report_queue", "count": 5, "mean_us": 120, "max_us": 4000}],
                "locks": [{"lock": "stats_pending", "acquisitions": 9, "contended": 3,
                           "wait_us": 1500, "hold_us": 900}],
                "channels": [{"channel": "jobs", "depth": 3, "capacity": 64}]
            }
        });
        let mut m: TopModel = serde_json::from_value(json).expect("model");
        m.cpu_pct = Some(37.0);
        m
    }

    fn screen(w: u16, h: u16, m: &TopModel) -> String {
        let mut t = Terminal::new(TestBackend::new(w, h)).expect("terminal");
        t.draw(|f| render(f, m)).expect("draw");
        let buf = t.backend().buffer().clone();
        (0..h)
            .map(|y| {
                (0..w)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn renders_every_panel_in_80_by_24() {
        let s = screen(80, 24, &model());
        for want in [
            "herald top",
            "up 61m",
            "cpu 37%",
            "rss 50M",
            "thr 9",
            "fds 77",
            "conns 12",
            "rate · 15 s windows",
            "0000018F3A2B0001",
            "65%",
            "t95 ~",
            "queued 350",
            "lane fast",
            "lane slow",
            "chan jobs",
            "3 / 64",
            "slow.test",
            "812.5 ms",
            "DOWN mx.dead.test",
            "42s",
            "where time is lost",
            "report_queue",
            "mean  120us",
            "stats_pending",
            "w  1.5ms h  900us c3",
            "q quit",
        ] {
            assert!(s.contains(want), "{want:?} missing in\n{s}");
        }
        // Two full 15 s windows: 150 delivered each, 3600/h per copy/s.
        assert!(s.contains("/h    150 *"), "{s}");
        assert_eq!(s.lines().count(), 24);
    }

    #[test]
    fn a_finished_posts_t95_and_done_are_apart() {
        let mut m = model();
        if let Some(p) = m.top.posts.first_mut() {
            p.delivered = 990;
            p.complete = true;
            p.t95_ms = Some(1234);
        }
        let s = screen(80, 24, &m);
        assert!(s.contains("t95 1.2s"), "{s}");
        assert!(!s.contains("1.2sdone"), "t95 and done run together:\n{s}");
        assert!(s.contains(" done"), "{s}");
    }

    #[test]
    fn empty_model_renders_placeholders() {
        let s = screen(80, 24, &TopModel::default());
        assert!(
            s.contains("no posts yet") && s.contains("no SMTP traffic yet"),
            "{s}"
        );
    }
}
