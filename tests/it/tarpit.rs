//! Tarpits and hung hosts on the simulated world, through the real server: tarpits (every reply
//! written one byte at a time) are recognised by the first pass and delivered from the slow lane
//! with a few patient connections — every member exactly once, the tarpit hosts never marked
//! down, the normal domains not delayed, and the tarpits' copies within 2× what one pipelined
//! session per connection allows; a hung primary MX is passed over for its working secondary;
//! an MX name with several addresses of which some are dead delivers through the live one.
//!
//! Margins: times are measured on the world's own clock (its recorder's), from just before the
//! post is injected to each copy's acceptance, so a loaded machine slows the sender, not the
//! yardstick. Worlds are small (CI has 2 cores): each test runs well under a minute.

use crate::support;

use herald_sim::config::{DomainConfig, ExtraMx};
use herald_sim::{Profile, World, WorldConfig};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;
use support::*;

const LIST: &str = "tarpit@lists.test";
/// The tarpits' delay before each byte of a reply.
const BYTE_DELAY: Duration = Duration::from_millis(20);
/// Sessions a tarpit host serves at once (Herald's `tarpit_connections` is 4 by default).
const TARPIT_SESSIONS: u32 = 4;

fn config(world: &World, dir: PathBuf) -> herald_server::Config {
    let mut c = server_config(world, dir);
    // A tarpit's EHLO reply takes 2.1 s here: longer than a first-pass command may take, so a
    // reader with one deadline per reply would time out and count the host down.
    c.delivery.command_timeout = Duration::from_secs(2);
    c.delivery.data_timeout = Duration::from_secs(3);
    // The first pass gives up on a reply still trickling 1 s after its first byte.
    c.delivery.tarpit_after = Duration::from_secs(1);
    c.delivery.reply_idle_timeout = Duration::from_secs(5);
    c
}

/// Every member got exactly one copy.
fn assert_each_once(world: &World, members: usize) {
    let snap = world.recorder().snapshot();
    assert_eq!(snap.duplicates, 0, "no copy twice");
    assert_eq!(snap.unique_recipients as usize, members);
    assert_eq!(snap.copies.len(), members);
}

async fn hosts_down(api: &str) -> f64 {
    let (_, text) = http("GET", &format!("{api}/metrics"), None).await;
    text.as_str()
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("herald_hosts_down "))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1.0)
}

/// Octets a tarpit writes before the first transaction (banner and EHLO reply), and for each
/// copy (MAIL, RCPT, DATA and end-of-data replies), as the simulated receivers word them.
fn tarpit_octets(host: &str) -> (u64, u64) {
    let banner = format!("220 {host} ESMTP herald-sim\r\n").len();
    let ehlo = format!(
        "250-{host}\r\n250-PIPELINING\r\n250-8BITMIME\r\n250-SIZE {}\r\n250-SMTPUTF8\r\n250 ENHANCEDSTATUSCODES\r\n",
        herald_sim::config::ReceiverSettings::default().max_message_bytes
    )
    .len();
    let copy = "250 2.1.0 Sender ok\r\n250 2.1.5 Recipient ok\r\n354 End data with <CR><LF>.<CR><LF>\r\n250 2.0.0 Ok: queued\r\n".len();
    ((banner + ehlo) as u64, copy as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tarpits_are_served_by_the_slow_lane_within_twice_the_pipelined_ideal() {
    const PER_TARPIT: usize = 16;
    const PER_NORMAL: usize = 20;
    let tarpit = Profile::Tarpit {
        byte_delay: BYTE_DELAY,
        max_sessions: Some(TARPIT_SESSIONS),
    };
    let profiles = [
        tarpit.clone(),
        tarpit,
        Profile::Normal,
        Profile::Normal,
        Profile::Normal,
        Profile::Normal,
    ];
    let world = World::start(world_config(&profiles, false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = TestServer::start(config(&world, dir.path().to_path_buf())).await;
    let (tarpits, normal) = (
        ["d0.test", "d1.test"],
        ["d2.test", "d3.test", "d4.test", "d5.test"],
    );
    let mut list = spread_csv(PER_TARPIT * tarpits.len(), &tarpits);
    list.push_str(
        spread_csv(PER_NORMAL * normal.len(), &normal).trim_start_matches("email,name\n"),
    );
    setup_personalized_list(&server.api, LIST, list).await;
    let members = 2 * PER_TARPIT + 4 * PER_NORMAL;
    let t0 = world.recorder().elapsed_ms();
    let id = inject_post(&server.api, LIST, "tarpits").await;
    let p = wait_complete(&server.api, &id, Duration::from_secs(60)).await;
    assert_eq!(p.delivered as usize, members, "{p:?}");
    assert_each_once(&world, members);
    assert_eq!(hosts_down(&server.api).await, 0.0, "a tarpit is never down");

    let snap = world.recorder().snapshot();
    let done_at = |domain: &str| -> Vec<u64> {
        let mut at: Vec<u64> = snap
            .copies
            .iter()
            .filter(|c| c.recipient.ends_with(&format!("@{domain}")))
            .map(|c| c.at_ms.saturating_sub(t0))
            .collect();
        at.sort_unstable();
        at
    };
    // The normal domains are not held up: their t95 is what a normal host takes.
    let mut normal_at: Vec<u64> = normal.iter().flat_map(|d| done_at(d)).collect();
    normal_at.sort_unstable();
    let t95 = normal_at[normal_at.len() * 95 / 100];
    assert!(t95 <= 5_000, "normal domains' t95 {t95} ms");
    // The tarpits: within 2× one pipelined session per connection (set-up, then an even share
    // of the copies per connection, every reply octet a byte delay apart).
    for d in tarpits {
        let host = format!("mx.{d}");
        let (setup, per_copy) = tarpit_octets(&host);
        let share = PER_TARPIT.div_ceil(TARPIT_SESSIONS as usize) as u64;
        let ideal_ms = (setup + share * per_copy) * BYTE_DELAY.as_millis() as u64;
        let at = done_at(d);
        let t100 = *at.last().expect("copies");
        eprintln!(
            "{d}: t100 {t100} ms, ideal {ideal_ms} ms ({:.2}×)",
            t100 as f64 / ideal_ms as f64
        );
        assert!(
            t100 <= 2 * ideal_ms,
            "{d}: last copy after {t100} ms, ideal {ideal_ms} ms"
        );
        let counters = &snap.hosts[&host];
        // The first-pass session that gave up may still hold one of the host's sessions for
        // a byte or two (the host learns of the close only when it next writes): at most one
        // patient connection is turned away then, and shaping takes that as the host's limit.
        assert!(
            counters.busy <= 1,
            "over the session limit {} times",
            counters.busy
        );
        assert!(
            counters.connections <= 1 + u64::from(TARPIT_SESSIONS),
            "one first-pass attempt, then a few kept connections: {}",
            counters.connections
        );
    }
    server.stop().await;
    let log = std::fs::read_to_string(dir.path().join("log/delivery.log")).expect("log");
    assert!(
        !log.lines()
            .any(|l| l.contains("@d0.test") && l.contains("status=deferred")),
        "a tarpit's copies are not deferred for it"
    );
    world.shutdown().await;
}

/// One domain whose MX hosts are `hosts` (name, address, behaviour), in preference order.
fn domain(name: &str, hosts: &[(&str, Ipv4Addr, u16, Profile)]) -> DomainConfig {
    let (first, rest) = hosts.split_first().expect("a host");
    DomainConfig {
        name: name.into(),
        weight: 1.0,
        mx_host: first.0.into(),
        mx_addr: first.1,
        mx_preference: first.2,
        extra_mx: rest
            .iter()
            .map(|(host, addr, preference, profile)| ExtraMx {
                host: (*host).into(),
                addr: *addr,
                preference: *preference,
                profile: Some(profile.clone()),
            })
            .collect(),
        profile: first.3.clone(),
        starttls: false,
        dane: Default::default(),
        extensions: Default::default(),
    }
}

async fn deliver_all(cfg: WorldConfig, domains: &[&str], per_domain: usize) -> (World, u64) {
    let world = World::start(cfg).await.expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = TestServer::start(config(&world, dir.path().to_path_buf())).await;
    setup_personalized_list(
        &server.api,
        LIST,
        spread_csv(per_domain * domains.len(), domains),
    )
    .await;
    let t0 = world.recorder().elapsed_ms();
    let id = inject_post(&server.api, LIST, "hosts").await;
    let p = wait_complete(&server.api, &id, Duration::from_secs(45)).await;
    let members = per_domain * domains.len();
    assert_eq!(p.delivered as usize, members, "{p:?}");
    assert_each_once(&world, members);
    let t100 = world
        .recorder()
        .snapshot()
        .copies
        .iter()
        .map(|c| c.at_ms.saturating_sub(t0))
        .max()
        .unwrap_or(0);
    server.stop().await;
    (world, t100)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_primary_mx_is_passed_over_for_its_working_secondary() {
    let mut cfg = world_config(&[Profile::Normal], false);
    cfg.domains.push(domain(
        "hp.test",
        &[
            (
                "mx.hp.test",
                Ipv4Addr::new(127, 1, 30, 1),
                10,
                Profile::Hung,
            ),
            (
                "mx2.hp.test",
                Ipv4Addr::new(127, 1, 30, 2),
                20,
                Profile::Normal,
            ),
        ],
    ));
    let (world, t100) = deliver_all(cfg, &["d0.test", "hp.test"], 30).await;
    let snap = world.recorder().snapshot();
    assert_eq!(
        snap.hosts["mx2.hp.test"].accepted, 30,
        "all through the secondary"
    );
    // The hung primary costs a banner timeout (2 s) or two, not one per copy.
    assert!(t100 <= 10_000, "t100 {t100} ms");
    assert!(
        snap.hosts["mx.hp.test"].connections <= 3,
        "the hung primary was tried {} times",
        snap.hosts["mx.hp.test"].connections
    );
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mx_name_with_dead_addresses_delivers_through_the_live_one() {
    let mut cfg = world_config(&[Profile::Normal], false);
    // One MX name, three A records: refused, hung, working (in that order).
    cfg.domains.push(domain(
        "da.test",
        &[
            (
                "mx.da.test",
                Ipv4Addr::new(127, 1, 31, 1),
                10,
                Profile::Refused,
            ),
            (
                "mx.da.test",
                Ipv4Addr::new(127, 1, 31, 2),
                10,
                Profile::Hung,
            ),
            (
                "mx.da.test",
                Ipv4Addr::new(127, 1, 31, 3),
                10,
                Profile::Normal,
            ),
        ],
    ));
    let (world, t100) = deliver_all(cfg, &["d0.test", "da.test"], 30).await;
    let snap = world.recorder().snapshot();
    let live: usize = snap
        .copies
        .iter()
        .filter(|c| c.recipient.ends_with("@da.test"))
        .count();
    assert_eq!(live, 30);
    assert!(t100 <= 10_000, "t100 {t100} ms");
    world.shutdown().await;
}
