//! Import/export tests against real files in the real formats.

use super::*;
use std::io::Write;

/// The importer's clock: messages dated after it are not trusted.
const NOW: i64 = 1_795_000_000_000;

fn hostile_mbox() -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(b"From ann@example.org Mon Jan  1 00:00:00 2024\n");
    f.extend_from_slice(b"From: ann@example.org\nSubject: first\nMessage-ID: <one@x>\nDate: Mon, 1 Jan 2024 00:00:00 +0000\n\n");
    f.extend_from_slice(b"a line\n>From the body, escaped\nend\n\n");
    f.extend_from_slice(b"From bob@example.org Mon Jan  1 01:00:00 2024\n");
    f.extend_from_slice(b"From: bob@example.org\nSubject: Re: first\nIn-Reply-To: <one@x>\nDate: Mon, 1 Jan 2024 01:00:00 +0000\n\nno message-id here\n\n");
    f.extend_from_slice(
        b"From big@example.org Mon Jan  1 02:00:00 2024\nFrom: big@example.org\nX-Huge: ",
    );
    f.extend(std::iter::repeat_n(b'h', 10 * 1024 * 1024));
    f.extend_from_slice(b"\n\nbody\n\n");
    f.extend_from_slice(b"From c@example.org Mon Jan  1 03:00:00 2024\nFrom: c@example.org\nMessage-ID: <mime@x>\nContent-Type: multipart/mixed; boundary=\"q\"\n\n--q\nbroken part without end\n\n");
    f
}

fn open(dir: &Path) -> Archive {
    Archive::open(&dir.join("archive.db")).unwrap()
}

#[test]
fn mbox_import_is_idempotent_and_reports_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("list.mbox");
    std::fs::write(&file, hostile_mbox()).unwrap();
    let mut a = open(dir.path());
    let mut seen = 0;
    let r = import(&mut a, "l@x", &file, 32 << 20, NOW, |b| seen = b).unwrap();
    assert_eq!(r.added, 3, "{r:?}");
    assert_eq!(r.refused.len(), 1, "{r:?}");
    assert!(r.refused[0].0.contains("message 3"), "{r:?}");
    assert!(r.refused[0].1.contains("header section"), "{r:?}");
    assert_eq!(seen, std::fs::metadata(&file).unwrap().len());
    // The From line in the body came back unescaped.
    let one = a.message("l@x", "one@x").unwrap().unwrap();
    assert!(one.raw.windows(11).any(|w| w == b"\r\nFrom the "));
    // The reply without Message-ID got a generated one and joined the thread.
    let t = a.thread("l@x", one.summary.thread_id, 10, 0).unwrap();
    assert_eq!(t.len(), 2);
    assert!(t[1].message_id.ends_with("@generated.archive.invalid"));
    let again = import(&mut a, "l@x", &file, 32 << 20, NOW, |_| {}).unwrap();
    assert_eq!((again.added, again.duplicates), (0, 3));
}

#[test]
fn export_then_reimport_round_trips_and_a_removed_message_stays_out() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.mbox");
    std::fs::write(&file, hostile_mbox()).unwrap();
    let mut a = open(dir.path());
    import(&mut a, "l@x", &file, 32 << 20, NOW, |_| {}).unwrap();
    let mut out = Vec::new();
    assert_eq!(export(&a, "l@x", 0, i64::MAX, &mut out).unwrap(), 3);
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("\n>From the body, escaped\n"), "{text}");
    let exported = dir.path().join("out.mbox");
    std::fs::write(&exported, &out).unwrap();

    let dir2 = tempfile::tempdir().unwrap();
    let mut b = open(dir2.path());
    let r = import(&mut b, "l@x", &exported, 32 << 20, NOW, |_| {}).unwrap();
    assert_eq!(r.added, 3);
    for mid in ["one@x", "mime@x"] {
        assert_eq!(
            a.message("l@x", mid).unwrap().unwrap().raw,
            b.message("l@x", mid).unwrap().unwrap().raw,
            "{mid}"
        );
    }
    // Date window from 2025 on: only the message without a Date (dated at its import).
    let mut late = Vec::new();
    assert_eq!(
        export(&a, "l@x", 1_735_689_600_000, i64::MAX, &mut late).unwrap(),
        1
    );

    assert!(b.remove("l@x", "one@x", 5).unwrap());
    let r = import(&mut b, "l@x", &exported, 32 << 20, NOW, |_| {}).unwrap();
    assert_eq!(r.added, 0);
    assert!(
        r.refused.iter().any(|(_, why)| why.contains("tombstone")),
        "{r:?}"
    );
    assert!(b.message("l@x", "one@x").unwrap().is_none());
}

#[test]
fn maildir_and_pipermail_gz() {
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("Maildir");
    for sub in ["cur", "new", "tmp"] {
        std::fs::create_dir_all(md.join(sub)).unwrap();
    }
    std::fs::write(
        md.join("cur/1.host:2,S"),
        b"From: a@x\r\nMessage-ID: <m1@x>\r\nSubject: s\r\n\r\nb\r\n",
    )
    .unwrap();
    std::fs::write(
        md.join("new/2.host"),
        b"From: a@x\r\nMessage-ID: <m2@x>\r\nSubject: s\r\n\r\nb\r\n",
    )
    .unwrap();
    std::fs::write(md.join("new/3.host"), b"").unwrap();
    let mut a = open(dir.path());
    let r = import(&mut a, "l@x", &md, 32 << 20, NOW, |_| {}).unwrap();
    assert_eq!(r.added, 2, "{r:?}");
    assert_eq!(r.refused.len(), 1, "the empty file: {r:?}");

    // Pipermail: 2024-January.txt.gz, gzip'd mbox with "user at domain" separators.
    let gz = dir.path().join("2024-January.txt.gz");
    let mut enc =
        flate2::write::GzEncoder::new(File::create(&gz).unwrap(), flate2::Compression::fast());
    enc.write_all(b"From ann at example.org  Mon Jan  1 00:00:00 2024\nFrom: ann at example.org (Ann)\nDate: Mon, 1 Jan 2024 00:00:00 +0000\nSubject: [l] hello\nMessage-ID: <p1@x>\n\nhi\n\n").unwrap();
    enc.finish().unwrap();
    let r = import(&mut a, "l@x", &gz, 32 << 20, NOW, |_| {}).unwrap();
    assert_eq!(r.added, 1, "{r:?}");
    assert!(a
        .months("l@x")
        .unwrap()
        .iter()
        .any(|m| m.year == 2024 && m.month == 1));
}

#[test]
fn missing_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = open(dir.path());
    let e = import(&mut a, "l", &dir.path().join("nope"), 1 << 20, NOW, |_| {}).unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
}
