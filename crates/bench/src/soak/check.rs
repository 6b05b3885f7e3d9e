//! `herald-bench soak-check`: after a soak has drained, checks the copies the simulated world
//! received (events.jsonl) against the posts Herald accepted (posts.jsonl) and the membership
//! changes (churn.jsonl): every member who should have had a post had exactly one copy of it,
//! nobody had one twice, and no removed member had a post accepted after the removal.
//!
//! Who should have a post P (accepted from `start` to `end`) of list L: each address of L's
//! members and pool whose domain the world makes deliverable, that is not a bounce target (the
//! soak's DSNs may disable them), and whose membership at P is certain — no change of it from
//! 1 s before P's start to `--grace-secs` after P's end (Herald expands a post after accepting
//! it, so a change in that window may or may not apply), and no failed change before P. Then it
//! is a member iff it was initially or its last change before P was a successful add.
//!
//! Limits: holds a count per (post, address) with a copy — about 16 bytes a copy.
//! SECURITY: reads local files written by the soak and the world.

use super::ListSpec;
use anyhow::{Context, Result};
use clap::Args;
use herald_sim::export::{read_events, Event};
use herald_sim::{Expectation, WorldConfig};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct SoakCheckArgs {
    /// The soak's results directory (lists.json, posts.jsonl, churn.jsonl).
    #[arg(long)]
    dir: PathBuf,
    /// The world's run directory (world.toml, events.jsonl).
    #[arg(long)]
    world_dir: PathBuf,
    /// A membership change this long after a post's acceptance may still apply to it.
    #[arg(long, default_value_t = 300)]
    grace_secs: u64,
}

#[derive(Deserialize)]
struct PostLine {
    id: String,
    list: usize,
    via: String,
    start_ms: u64,
    end_ms: u64,
    code: u16,
    latency_us: Option<u32>,
}

#[derive(Deserialize)]
struct ChurnLine {
    op: String,
    list: usize,
    addr: String,
    start_ms: u64,
    end_ms: u64,
    status: u16,
}

/// One membership change of an address.
struct Change {
    start: u64,
    end: u64,
    ok: bool,
    present_after: bool,
}

/// One address of one list.
struct Slot {
    initially: bool,
    bouncer: bool,
    changes: Vec<Change>,
}

fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    // A torn last line (a killed run) is skipped, not an error.
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// Per list: address (lower case) → its slot.
fn slots(lists: &[ListSpec], churn: &[ChurnLine]) -> Vec<HashMap<String, Slot>> {
    let mut out: Vec<HashMap<String, Slot>> = lists
        .iter()
        .map(|l| {
            let mut m = HashMap::new();
            let groups = [(&l.members, true, false), (&l.pool, false, false)];
            for (addrs, initially, bouncer) in groups.into_iter().chain([(&l.bouncers, true, true)])
            {
                for a in addrs {
                    m.insert(
                        a.to_ascii_lowercase(),
                        Slot {
                            initially,
                            bouncer,
                            changes: Vec::new(),
                        },
                    );
                }
            }
            m
        })
        .collect();
    for c in churn {
        if let Some(slot) = out
            .get_mut(c.list)
            .and_then(|m| m.get_mut(&c.addr.to_ascii_lowercase()))
        {
            slot.changes.push(Change {
                start: c.start_ms,
                end: c.end_ms,
                ok: (200..300).contains(&c.status),
                present_after: c.op == "add",
            });
        }
    }
    out
}

/// Whether the address must (Some(true)) or must not (Some(false)) have the post; None when
/// uncertain.
fn expected(slot: &Slot, start: u64, end: u64, grace_ms: u64) -> Option<bool> {
    let mut present = slot.initially;
    for c in &slot.changes {
        if c.end + 1000 >= start && c.start <= end + grace_ms {
            return None;
        }
        if c.end < start {
            if !c.ok {
                return None;
            }
            present = c.present_after;
        }
    }
    Some(present)
}

/// Counts of copies by (post index, address), and the copies of other mail.
struct Copies {
    by_pair: HashMap<(u32, String), u32>,
    of_posts: u64,
    other: u64,
}

fn copies(world_dir: &Path, posts: &HashMap<&str, u32>) -> Result<Copies> {
    let mut c = Copies {
        by_pair: HashMap::new(),
        of_posts: 0,
        other: 0,
    };
    read_events(&world_dir.join("events.jsonl"), |e| {
        if let Event::Copy { rcpt, msgid, .. } = e {
            match msgid.as_deref().and_then(|id| posts.get(id)) {
                Some(&p) => {
                    c.of_posts += 1;
                    *c.by_pair.entry((p, rcpt.to_ascii_lowercase())).or_insert(0) += 1;
                }
                None => c.other += 1,
            }
        }
    })
    .context("reading the world's events")?;
    Ok(c)
}

#[derive(Default)]
struct Tally {
    checked: u64,
    delivered: u64,
    missing: BTreeMap<String, u64>,
    wrong: u64,
    duplicates: u64,
    uncertain: u64,
    excluded: u64,
    examples: Vec<String>,
}

pub fn run(args: SoakCheckArgs) -> Result<()> {
    let lists: Vec<ListSpec> = serde_json::from_str(
        &std::fs::read_to_string(args.dir.join("lists.json")).context("reading lists.json")?,
    )?;
    let posts: Vec<PostLine> = read_lines::<PostLine>(&args.dir.join("posts.jsonl"))?
        .into_iter()
        .filter(|p| p.code == 250 && p.latency_us.is_some())
        .collect();
    let churn: Vec<ChurnLine> = read_lines(&args.dir.join("churn.jsonl"))?;
    let world = WorldConfig::from_file(&args.world_dir.join("world.toml"))?;
    let domains: HashMap<&str, &herald_sim::DomainConfig> =
        world.domains.iter().map(|d| (d.name.as_str(), d)).collect();
    let slots = slots(&lists, &churn);
    let index: HashMap<&str, u32> = posts
        .iter()
        .enumerate()
        .map(|(i, p)| (p.id.as_str(), i as u32))
        .collect();
    let copies = copies(&args.world_dir, &index)?;
    let mut t = Tally::default();
    let grace_ms = args.grace_secs * 1000;
    for (i, p) in posts.iter().enumerate() {
        let Some(list) = slots.get(p.list) else {
            continue;
        };
        for (addr, slot) in list {
            let domain = addr.rsplit_once('@').and_then(|(_, d)| domains.get(d));
            let Some(domain) = domain else { continue };
            let got = copies
                .by_pair
                .get(&(i as u32, addr.clone()))
                .copied()
                .unwrap_or(0);
            t.duplicates += u64::from(got.saturating_sub(1));
            if slot.bouncer || domain.expectation(addr) != Expectation::Deliverable {
                t.excluded += 1;
                continue;
            }
            match expected(slot, p.start_ms, p.end_ms, grace_ms) {
                None => t.uncertain += 1,
                Some(true) => {
                    t.checked += 1;
                    if got > 0 {
                        t.delivered += 1;
                    } else {
                        *t.missing
                            .entry(domain.profile.kind().to_string())
                            .or_insert(0) += 1;
                        if t.examples.len() < 10 {
                            t.examples.push(format!("missing: {} to {addr}", p.id));
                        }
                    }
                }
                Some(false) => {
                    t.checked += 1;
                    if got > 0 {
                        t.wrong += 1;
                        if t.examples.len() < 10 {
                            t.examples.push(format!("not a member: {} to {addr}", p.id));
                        }
                    }
                }
            }
        }
    }
    let text = summary(&posts, &churn, &copies, &t, args.grace_secs);
    std::fs::write(args.dir.join("check.txt"), &text)?;
    print!("{text}");
    Ok(())
}

fn summary(
    posts: &[PostLine],
    churn: &[ChurnLine],
    copies: &Copies,
    t: &Tally,
    grace: u64,
) -> String {
    let lmtp = posts.iter().filter(|p| p.via == "lmtp").count();
    let ok_changes = churn
        .iter()
        .filter(|c| (200..300).contains(&c.status))
        .count();
    let missing: u64 = t.missing.values().sum();
    let mut s = format!(
        "Check (soak-check): {} accepted posts ({} over LMTP), {} copies of them in the world \
         ({} copies of other mail: notices and the like), {} membership changes ({} succeeded).\n\
         - (post, member) pairs checked: {} — delivered {}, missing {}{}, copies to \
         non-members {}.\n\
         - duplicate copies (same post, same address, any address): {}.\n\
         - pairs not checked: {} whose membership was changing within 1 s before to {grace} s \
         after the post, {} on hosts the world never delivers to (hung, refusing, unknown user) \
         or reserved as bounce targets.\n",
        posts.len(),
        lmtp,
        copies.of_posts,
        copies.other,
        churn.len(),
        ok_changes,
        t.checked,
        t.delivered,
        missing,
        if t.missing.is_empty() {
            String::new()
        } else {
            format!(" (by host kind: {:?})", t.missing)
        },
        t.wrong,
        t.duplicates,
        t.uncertain,
        t.excluded,
    );
    for e in &t.examples {
        let _ = writeln!(s, "  - {e}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(initially: bool, changes: Vec<Change>) -> Slot {
        Slot {
            initially,
            bouncer: false,
            changes,
        }
    }

    #[test]
    fn membership_at_a_post() {
        let add = |start, ok| Change {
            start,
            end: start + 10,
            ok,
            present_after: true,
        };
        assert_eq!(expected(&slot(true, vec![]), 5000, 5100, 0), Some(true));
        assert_eq!(
            expected(&slot(false, vec![add(1000, true)]), 5000, 5100, 0),
            Some(true)
        );
        // A change just before, or within the grace after, the post: uncertain.
        assert_eq!(
            expected(&slot(false, vec![add(4500, true)]), 5000, 5100, 0),
            None
        );
        assert_eq!(
            expected(&slot(false, vec![add(5200, true)]), 5000, 5100, 500),
            None
        );
        // A change well after the post does not apply to it.
        assert_eq!(
            expected(&slot(false, vec![add(9000, true)]), 5000, 5100, 500),
            Some(false)
        );
        // A failed change leaves the state unknown.
        assert_eq!(
            expected(&slot(false, vec![add(1000, false)]), 5000, 5100, 0),
            None
        );
    }
}
