//! `herald doctor` against the simulated world's DNS, run as an operator
//! runs it: the real binary, the server's config, a running server behind the MX. One domain
//! is published right (no error), one wrong in every way the doctor knows, each error with
//! the record that fixes it; a sending address without reverse DNS is caught too.

use crate::support;

use herald_sim::{Profile, World};
use std::net::Ipv4Addr;
use support::binary::{herald_with_config, BinaryServer};
use support::*;

/// The sending address under test (127.0.0.1 would be answered by the resolver's own
/// localhost rules, RFC 6761, never by the zone).
const EGRESS: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 5);

/// `herald --config <cfg> doctor <args>`: (success, stdout + stderr).
fn doctor(config: &std::path::Path, args: &[&str]) -> (bool, String) {
    let mut all = vec!["doctor"];
    all.extend_from_slice(args);
    herald_with_config(config, &all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_passes_a_good_domain_and_names_the_fix_for_a_bad_one() {
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let good_key = herald_auth::dkim::generate(herald_auth::DkimAlgorithm::Ed25519).expect("key");
    let bad_key = herald_auth::dkim::generate(herald_auth::DkimAlgorithm::Ed25519).expect("key");
    let other_key = herald_auth::dkim::generate(herald_auth::DkimAlgorithm::Ed25519).expect("key");
    let good_pem = dir.path().join("good.pem");
    let bad_pem = dir.path().join("bad.pem");
    std::fs::write(&good_pem, &good_key.private_pem).expect("write");
    std::fs::write(&bad_pem, &bad_key.private_pem).expect("write");
    let cert = rcgen::generate_simple_self_signed(vec!["herald.test".to_string()]).expect("cert");
    std::fs::write(dir.path().join("cert.pem"), cert.cert.pem()).expect("write");
    std::fs::write(dir.path().join("key.pem"), cert.key_pair.serialize_pem()).expect("write");
    let extra = format!(
        "[tls]\ncert_file = \"{d}/cert.pem\"\nkey_file = \"{d}/key.pem\"\n\
         [dkim.\"good.test\"]\nselector = \"s1\"\nkey_file = \"{good}\"\nalgorithm = \"ed25519\"\n\
         [dkim.\"bad.test\"]\nselector = \"s1\"\nkey_file = \"{bad}\"\nalgorithm = \"ed25519\"\n",
        d = dir.path().display(),
        good = good_pem.display(),
        bad = bad_pem.display(),
    );
    let mut server = BinaryServer::configure(dir.path(), &dir.path().join("data"), &world, &extra);
    server.start().await;
    let port = server.smtp.port().to_string();

    world
        .dns()
        .update_zone(|z| {
            z.add_mx("good.test", 10, "mx.good.test")
                .add_a("mx.good.test", Ipv4Addr::LOCALHOST)
                .add_txt("good.test", "v=spf1 ip4:127.0.0.5 -all")
                .add_txt("s1._domainkey.good.test", &good_key.dns_txt)
                .add_txt("_dmarc.good.test", "v=DMARC1; p=quarantine")
                .add_txt("_mta-sts.good.test", "v=STSv1; id=20261125")
                .add_txt(
                    "_smtp._tls.good.test",
                    "v=TLSRPTv1; rua=mailto:tls@good.test",
                )
                .add_ptr(EGRESS, "herald.test")
                .add_a("herald.test", EGRESS)
                // bad.test: an MX host where nothing listens, SPF for someone else, a key that
                // is not ours, no MTA-STS, and a TLS-RPT record whose only destination is
                // unusable.
                .add_txt(
                    "_smtp._tls.bad.test",
                    "v=TLSRPTv1; rua=ftp://reports.bad.test/",
                )
                .add_mx("bad.test", 10, "mx.bad.test")
                .add_a("mx.bad.test", Ipv4Addr::new(127, 0, 0, 9))
                .add_txt("bad.test", "v=spf1 ip4:192.0.2.1 -all")
                .add_txt("s1._domainkey.bad.test", &other_key.dns_txt);
        })
        .expect("zone");

    let (ok, good) = doctor(
        &server.config,
        &["good.test", "--ip", "127.0.0.5", "--port", &port],
    );
    assert!(ok, "a well-published domain must pass:\n{good}");
    for expected in [
        "matches the configured key",
        "forward-confirmed",
        "answers: 220",
        "policy p=quarantine",
        "HELO herald.test matches",
        "names herald.test",
        "0 errors",
    ] {
        assert!(good.contains(expected), "missing {expected:?} in:\n{good}");
    }

    let (ok, bad) = doctor(
        &server.config,
        &["bad.test", "--ip", "127.0.0.5", "--port", &port],
    );
    assert!(!ok, "a broken domain must fail:\n{bad}");
    for expected in [
        "publish: bad.test. IN TXT \"v=spf1 ip4:127.0.0.5 -all\"",
        "the published key is not the configured key",
        &format!(
            "publish: s1._domainkey.bad.test. IN TXT \"{}\"",
            bad_key.dns_txt
        ),
        "publish: _dmarc.bad.test. IN TXT \"v=DMARC1; p=none; rua=mailto:postmaster@bad.test\"",
        "publish: _smtp._tls.bad.test. IN TXT",
        "record has no usable rua destination",
        "mx.bad.test 127.0.0.9",
    ] {
        assert!(bad.contains(expected), "missing {expected:?} in:\n{bad}");
    }
    assert!(
        bad.lines().any(|l| l.starts_with("ERROR port25")),
        "nothing listens at mx.bad.test:\n{bad}"
    );
    eprintln!("{bad}");

    // A sending address without reverse DNS (and not in the SPF record).
    let (ok, unnamed) = doctor(
        &server.config,
        &["good.test", "--ip", "127.0.0.2", "--port", &port, "--json"],
    );
    assert!(!ok, "{unnamed}");
    let json_end = unnamed.rfind(']').expect("json array") + 1;
    let findings: serde_json::Value =
        serde_json::from_str(&unnamed[..json_end]).expect("doctor --json is JSON");
    let rdns = findings
        .as_array()
        .expect("array")
        .iter()
        .find(|f| f["check"] == "rdns")
        .expect("an rdns finding");
    assert_eq!(rdns["severity"], "error", "{rdns}");
    assert_eq!(
        rdns["publish"], "2.0.0.127.in-addr.arpa. IN PTR herald.test.",
        "{rdns}"
    );
    server.stop().await;
    world.shutdown().await;
}

/// `herald doctor` records the data directory's size on each run and warns when the disk fills
/// within a week at the rate it grows. The rate's input is the samples file: the test moves the
/// first run's sample two minutes back (as if the runs were that far apart) and grows the data
/// directory by as much as fills the disk's free space in about three days at that pace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_warns_when_the_data_disk_fills_within_a_week() {
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    // Not started: the disk check reads the data directory, not the server.
    let server = BinaryServer::configure(dir.path(), &data, &world, "");
    let args = ["d0.test", "--ip", "127.0.0.5", "--port", "1"];
    let disk_line = |out: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(1) == Some("disk"))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no disk finding in:\n{out}"))
    };

    let (_, first) = doctor(&server.config, &args);
    let line = disk_line(&first);
    assert!(line.starts_with("ok    disk"), "{line}");
    assert!(line.contains("no growth rate yet"), "{line}");
    let samples = data.join("disk-usage.log");
    let recorded = std::fs::read_to_string(&samples).expect("a sample recorded");
    let (at, used) = recorded.trim().split_once(' ').expect("<secs> <bytes>");
    let at: u64 = at.parse().expect("secs");

    let st = nix::sys::statvfs::statvfs(&data).expect("statvfs");
    let free = st.blocks_available() as u64 * st.fragment_size() as u64;
    // Two minutes for `grown` bytes is `free` in about three days.
    let span = 120u64;
    let grown = free / (3 * 86_400 / span) + (1 << 20);
    let chunk = vec![7u8; 1 << 20];
    let mut filler = std::fs::File::create(data.join("filler")).expect("filler");
    for _ in 0..grown.div_ceil(1 << 20) {
        std::io::Write::write_all(&mut filler, &chunk).expect("write");
    }
    filler.sync_all().expect("sync");
    std::fs::write(&samples, format!("{} {used}\n", at - span)).expect("move the sample back");

    let (_, second) = doctor(&server.config, &args);
    let line = disk_line(&second);
    assert!(line.starts_with("WARN  disk"), "{line}");
    assert!(line.contains("/day: full in"), "{line}");
    world.shutdown().await;
}
