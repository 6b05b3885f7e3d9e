//! What an operator and the Internet do to a list server besides posting: membership changes
//! through the HTTP API, bounces (DSNs) to members' VERP addresses, and the monitoring polls
//! of `/api/v1/status` and `/metrics`.
//!
//! Membership changes: each list has its members (removable) and a pool of outsiders (addable);
//! an address being changed is in neither, so two changes never race on one address. A change
//! that fails puts the address back where it was; soak-check treats an address with a failed
//! change as unknown from then on. Each change is one line of churn.jsonl with its start and end
//! times, which soak-check uses to decide which posts the address must (not) have received.
//!
//! SECURITY: talks only to the local Herald given.

use super::load::{connect, reply};
use super::{http, now_ms, Rng, Shared};
use anyhow::{bail, Result};
use herald_types::{verp::verp_return_path, Address};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Membership changes in flight at once.
const CHURN_CONCURRENCY: usize = 8;

/// One list's addresses as the churn sees them.
struct Roster {
    present: Vec<String>,
    absent: Vec<String>,
}

pub fn spawn(shared: &Arc<Shared>, set: &mut JoinSet<()>, ends: Instant) {
    if shared.args.churn_rate > 0.0 {
        set.spawn(churn(shared.clone(), ends));
    }
    if shared.args.bounce_rate > 0.0 && shared.lists.iter().any(|l| !l.bouncers.is_empty()) {
        set.spawn(bounces(shared.clone(), ends));
    }
}

/// The next arrival of a Poisson process of `rate` a second after `at`.
fn after(at: Instant, rate: f64, rng: &mut Rng) -> Instant {
    let gap = -(1.0 - rng.unit()).ln() / rate.max(0.001);
    at + Duration::from_secs_f64(gap.min(3600.0))
}

async fn churn(shared: Arc<Shared>, ends: Instant) {
    let mut rng = Rng::new(shared.args.seed ^ 0xC4);
    let rosters: Arc<Vec<Mutex<Roster>>> = Arc::new(
        shared
            .lists
            .iter()
            .map(|l| {
                Mutex::new(Roster {
                    present: l.members.clone(),
                    absent: l.pool.clone(),
                })
            })
            .collect(),
    );
    let sizes: Vec<usize> = shared
        .lists
        .iter()
        .map(|l| l.members.len() + l.pool.len())
        .collect();
    let total = sizes.iter().sum::<usize>().max(1);
    let permits = Arc::new(Semaphore::new(CHURN_CONCURRENCY));
    let mut tasks = JoinSet::new();
    let mut next = Instant::now();
    while next < ends {
        tokio::time::sleep_until(next).await;
        next = after(next, shared.args.churn_rate, &mut rng);
        let mut pick = rng.below(total);
        let list = sizes
            .iter()
            .position(|&s| {
                let hit = pick < s;
                pick = pick.saturating_sub(s);
                hit
            })
            .unwrap_or(0);
        let add = rng.unit() < 0.5;
        let Some(addr) = take(&rosters[list], add, &mut rng) else {
            continue;
        };
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let (s, r) = (shared.clone(), rosters.clone());
        tasks.spawn(async move {
            let ok = change(&s, list, &addr, add).await;
            if let Ok(mut roster) = r[list].lock() {
                // Success moves the address across; failure puts it back.
                match add == ok {
                    true => roster.present.push(addr),
                    false => roster.absent.push(addr),
                }
            }
            drop(permit);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

/// Takes a random address out of the roster: an outsider to add or a member to remove.
fn take(roster: &Mutex<Roster>, add: bool, rng: &mut Rng) -> Option<String> {
    let mut r = roster.lock().ok()?;
    let from = if add { &mut r.absent } else { &mut r.present };
    if from.is_empty() {
        return None;
    }
    let i = rng.below(from.len());
    Some(from.swap_remove(i))
}

/// One add or removal through the API; true when the server did it.
async fn change(shared: &Shared, list: usize, addr: &str, add: bool) -> bool {
    let l = http::segment(&shared.lists[list].address);
    let start_ms = now_ms();
    let res = if add {
        let body = serde_json::json!({ "address": addr }).to_string();
        let path = format!("/api/v1/lists/{l}/members");
        http::request(&shared.args.http, "POST", &path, Some(&body)).await
    } else {
        let path = format!("/api/v1/lists/{l}/members/{}", http::segment(addr));
        http::request(&shared.args.http, "DELETE", &path, None).await
    };
    let status = res.as_ref().map_or(0, |(s, _)| *s);
    let ok = (200..300).contains(&status);
    shared.churn.write(&serde_json::json!({
        "op": if add { "add" } else { "remove" }, "list": list, "addr": addr,
        "start_ms": start_ms, "end_ms": now_ms(), "status": status,
    }));
    if let Ok(mut iv) = shared.interval.lock() {
        match ok {
            true => iv.churn_ok += 1,
            false => iv.churn_failed += 1,
        }
    }
    ok
}

async fn bounces(shared: Arc<Shared>, ends: Instant) {
    let mut rng = Rng::new(shared.args.seed ^ 0xB0);
    let targets: Vec<(usize, &String)> = shared
        .lists
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.bouncers.iter().map(move |b| (i, b)))
        .collect();
    let mut conn = None;
    let mut next = Instant::now();
    let mut n = 0u64;
    while next < ends {
        tokio::time::sleep_until(next).await;
        next = after(next, shared.args.bounce_rate, &mut rng);
        let (list, member) = targets[rng.below(targets.len())];
        n += 1;
        if conn.is_none() {
            conn = connect(shared.args.smtp, false).await.ok();
        }
        let code = match conn.as_mut() {
            Some((rd, wr)) => dsn(&shared, rd, wr, list, member, n).await,
            None => Err(anyhow::anyhow!("cannot connect")),
        };
        let code = code.unwrap_or_else(|_| {
            conn = None;
            0
        });
        shared.bounces.write(&serde_json::json!({
            "list": list, "addr": member, "ms": now_ms(), "code": code,
        }));
        if let Ok(mut iv) = shared.interval.lock() {
            match code {
                250 => iv.bounces_ok += 1,
                _ => iv.bounces_failed += 1,
            }
        }
    }
}

/// Sends one DSN (550 5.1.1 for `member`) to the member's VERP address; returns the final code.
async fn dsn(
    shared: &Shared,
    rd: &mut super::load::Reader,
    wr: &mut super::load::Writer,
    list: usize,
    member: &str,
    n: u64,
) -> Result<u16> {
    let (Ok(l), Ok(m)) = (
        Address::parse(&shared.lists[list].address),
        Address::parse(member),
    ) else {
        bail!("bad address {member}");
    };
    let to = verp_return_path(&l, &m);
    wr.write_all(format!("MAIL FROM:<>\r\nRCPT TO:<{to}>\r\nDATA\r\n").as_bytes())
        .await?;
    let mut line = String::new();
    let mut codes = [0u16; 3];
    for c in &mut codes {
        *c = reply(rd, &mut line).await?;
    }
    if codes[2] != 354 {
        wr.write_all(b"RSET\r\n").await?;
        reply(rd, &mut line).await?;
        return Ok(codes[1].max(codes[2]));
    }
    let b = "=_soak_dsn";
    let msg = format!(
        "From: Mail Delivery System <MAILER-DAEMON@mx.bounce.herald-bench.test>\r\n\
         To: <{to}>\r\nSubject: Undelivered Mail Returned to Sender\r\n\
         Message-ID: <dsn-{}-{n}@bounce.herald-bench.test>\r\n\
         Date: Fri, 27 Nov 2026 12:00:00 +0000\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/report; report-type=delivery-status; boundary=\"{b}\"\r\n\r\n\
         --{b}\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n\
         --{b}\r\nContent-Type: message/delivery-status\r\n\r\n\
         Reporting-MTA: dns; mx.bounce.herald-bench.test\r\n\r\n\
         Final-Recipient: rfc822; {member}\r\nAction: failed\r\nStatus: 5.1.1\r\n\
         Diagnostic-Code: smtp; 550 5.1.1 User unknown\r\n\r\n--{b}--\r\n.\r\n",
        shared.args.seed
    );
    wr.write_all(msg.as_bytes()).await?;
    reply(rd, &mut line).await
}

/// Polls the status API and /metrics every `--poll-secs` (until aborted); keeps the latest
/// metrics for the sampler.
pub async fn poll_loop(shared: Arc<Shared>) {
    let every = Duration::from_secs(shared.args.poll_secs.max(1));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for path in ["/api/v1/status", "/metrics"] {
            let t = std::time::Instant::now();
            let res = http::request(&shared.args.http, "GET", path, None).await;
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            let ok = matches!(&res, Ok((200, _)));
            if let (Ok((200, body)), "/metrics") = (&res, path) {
                let parsed = parse_metrics(&String::from_utf8_lossy(body));
                if let Ok(mut m) = shared.metrics.lock() {
                    *m = parsed;
                }
            }
            if let Ok(mut iv) = shared.interval.lock() {
                match ok {
                    true => iv.polls_ok += 1,
                    false => iv.polls_failed += 1,
                }
                iv.poll_max_ms = iv.poll_max_ms.max(ms);
            }
        }
    }
}

/// Prometheus text: every sample's value by metric name (label sets summed).
pub fn parse_metrics(text: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name_labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = name_labels.split('{').next().unwrap_or("").trim();
        if let (false, Ok(v)) = (name.is_empty(), value.trim().parse::<f64>()) {
            *out.entry(name.to_string()).or_insert(0.0) += v;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_by_name_with_labels_summed() {
        let m = parse_metrics(
            "# HELP x y\nherald_unfinished_copies 12\nherald_c{kind=\"a\"} 1\nherald_c{kind=\"b\"} 2\n",
        );
        assert_eq!(m.get("herald_unfinished_copies"), Some(&12.0));
        assert_eq!(m.get("herald_c"), Some(&3.0));
    }
}
