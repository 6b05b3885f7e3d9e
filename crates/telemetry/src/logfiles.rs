//! The delivery log's files on disk: the live file (`delivery.log`), the files the writer has
//! rotated away (`delivery.log-20261127T173000.123Z`, named by the UTC instant of their
//! rotation) and their gzip-compressed form (`….gz`); the background sweep that compresses and
//! prunes them; and the reader that sees all of them as one log.
//!
//! Place in the flow: the writer thread (`log`) renames the live file when it is due
//! ([`RotationPolicy`]) and wakes the sweeper thread here, so compression never holds up a line;
//! readers (the person export of the API, tests, an operator's `zgrep`) read newest first.
//!
//! Invariants: a rotated file is compressed to `<name>.gz.tmp`, synced, renamed to `<name>.gz`,
//! and only then is the plain file removed, so a crash at any point leaves the lines in a
//! plain file or a whole `.gz` (a stale `.tmp` is removed and redone by the next sweep). The
//! sweep only touches names of the form above: files an external logrotate made
//! (`delivery.log.1`, …) are left to it.
//!
//! Limits: at most `keep_files` rotated files remain, none rotated more than `keep_days` ago;
//! with the live file capped at `max_bytes` the log takes at most
//! `max_bytes × (1 + keep_files × compressed share)` of disk.
//!
//! SECURITY: the sweep removes and rewrites only files next to the live log whose names it
//! parses as its own rotations (a fixed prefix and a UTC instant); the lines read back are
//! Herald's own output, cleaned of control characters when written.

use crate::time::rfc3339_ms;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// When the writer rotates the live file and what the sweep keeps (`[log] delivery_log_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotationPolicy {
    /// Rotate once the live file holds this many bytes (0: never by size).
    pub max_bytes: u64,
    /// Rotate once the live file is this old and not empty (0: never by age).
    pub max_age_secs: u64,
    /// Rotated files kept at most (the oldest go first).
    pub keep_files: u32,
    /// Rotated files older than this many days are removed (0: no age limit).
    pub keep_days: u32,
    /// Gzip rotated files in the background.
    pub compress: bool,
}

impl RotationPolicy {
    /// Whether the writer rotates at all (off: an external logrotate and SIGHUP do it).
    pub fn rotates(&self) -> bool {
        self.max_bytes > 0 || self.max_age_secs > 0
    }
}

/// The name's instant: `2026-11-27T17:30:00.123Z` without its `-` and `:`.
fn stamp(unix_ms: u64) -> String {
    rfc3339_ms(unix_ms).replace(['-', ':'], "")
}

/// The rotation instant a stamp names, in Unix milliseconds.
fn stamp_ms(stamp: &str) -> Option<u64> {
    let b = stamp.as_bytes();
    if b.len() != 20 || b[8] != b'T' || b[15] != b'.' || b[19] != b'Z' {
        return None;
    }
    let text = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &stamp[0..4],
        &stamp[4..6],
        &stamp[6..8],
        &stamp[9..11],
        &stamp[11..13],
        &stamp[13..19]
    );
    let ts: jiff::Timestamp = text.parse().ok()?;
    u64::try_from(ts.as_millisecond()).ok()
}

/// One rotated file found next to the live log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotatedFile {
    pub path: PathBuf,
    /// When it was rotated (Unix ms), from its name.
    pub rotated_ms: u64,
    pub compressed: bool,
}

/// The rotated files of the log at `live`, newest first. Partial compressions (`.gz.tmp`) are
/// not listed. A missing directory lists nothing.
pub fn rotated_files(live: &Path) -> Vec<RotatedFile> {
    let (Some(dir), Some(base)) = (live.parent(), live.file_name().and_then(|n| n.to_str())) else {
        return Vec::new();
    };
    let prefix = format!("{base}-");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<RotatedFile> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let rest = name.strip_prefix(&prefix)?;
            let (stamp, compressed) = match rest.strip_suffix(".gz") {
                Some(s) => (s, true),
                None => (rest, false),
            };
            Some(RotatedFile {
                path: e.path(),
                rotated_ms: stamp_ms(stamp)?,
                compressed,
            })
        })
        .collect();
    // A plain file and its `.gz` both exist only for the instant between the compressed
    // file's rename and the plain file's removal: list the plain one only.
    found.sort_by(|a, b| {
        b.rotated_ms
            .cmp(&a.rotated_ms)
            .then(a.compressed.cmp(&b.compressed))
    });
    found.dedup_by_key(|f| f.rotated_ms);
    found
}

/// The name for a file rotated now: later than `after_ms` (the previous rotation) and not in
/// use, so names stay unique and in rotation order even for several rotations in one
/// millisecond. Returns the path and the instant it names.
pub(crate) fn rotated_name(live: &Path, now_ms: u64, after_ms: u64) -> (PathBuf, u64) {
    let mut ms = now_ms.max(after_ms.saturating_add(1));
    loop {
        let mut name = live.as_os_str().to_owned();
        name.push(format!("-{}", stamp(ms)));
        let plain = PathBuf::from(name);
        let mut gz = plain.as_os_str().to_owned();
        gz.push(".gz");
        if !plain.exists() && !Path::new(&gz).exists() {
            return (plain, ms);
        }
        ms += 1;
    }
}

/// The sweeper: a thread that compresses rotated files and removes those past the policy,
/// woken by [`Sweeper::wake`]. Wakes coalesce: one pending wake is enough, since each sweep
/// looks at the whole directory.
pub(crate) struct Sweeper {
    tx: SyncSender<()>,
}

impl Sweeper {
    /// Starts the thread and sweeps once (leftovers of a crash, files past `keep_days`).
    pub(crate) fn start(live: PathBuf, policy: RotationPolicy) -> std::io::Result<Sweeper> {
        let (tx, rx) = sync_channel(1);
        std::thread::Builder::new()
            .name("delivery-log-sweep".into())
            .spawn(move || sweep_loop(rx, &live, policy))?;
        let sweeper = Sweeper { tx };
        sweeper.wake();
        Ok(sweeper)
    }

    /// Asks for a sweep without waiting for it.
    pub(crate) fn wake(&self) {
        // Full: a sweep is already pending and will see the new file too.
        let _ = self.tx.try_send(());
    }
}

fn sweep_loop(rx: Receiver<()>, live: &Path, policy: RotationPolicy) {
    while rx.recv().is_ok() {
        sweep(live, policy, herald_types::unix_ms_now());
    }
}

/// Compresses what is due and removes what the policy no longer keeps. Errors are reported
/// and leave the files as they were (a plain rotated file is still a readable log).
pub fn sweep(live: &Path, policy: RotationPolicy, now_ms: u64) {
    remove_partial(live);
    let files = rotated_files(live);
    let keep_ms = u64::from(policy.keep_days).saturating_mul(24 * 3600 * 1000);
    for (i, f) in files.iter().enumerate() {
        let too_many = i >= policy.keep_files as usize;
        let too_old = keep_ms > 0 && now_ms.saturating_sub(f.rotated_ms) > keep_ms;
        if too_many || too_old {
            if let Err(e) = std::fs::remove_file(&f.path) {
                tracing::warn!(path = %f.path.display(), error = %e, "cannot remove an old delivery log file");
            }
        } else if policy.compress && !f.compressed {
            if let Err(e) = compress(&f.path) {
                tracing::warn!(path = %f.path.display(), error = %e, "cannot compress a rotated delivery log file; it stays plain");
            }
        }
    }
}

/// Removes `.gz.tmp` files a crash left behind (their plain file is still there).
fn remove_partial(live: &Path) {
    let (Some(dir), Some(base)) = (live.parent(), live.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    let prefix = format!("{base}-");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(&prefix) && name.ends_with(".gz.tmp") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// `<plain>` → `<plain>.gz` (through `.gz.tmp`, synced), then the plain file is removed.
fn compress(plain: &Path) -> std::io::Result<()> {
    let mut gz = plain.as_os_str().to_owned();
    gz.push(".gz");
    let gz = PathBuf::from(gz);
    let mut tmp = gz.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut input = std::fs::File::open(plain)?;
    let out = std::fs::File::create(&tmp)?;
    let mut enc = flate2::write::GzEncoder::new(
        std::io::BufWriter::with_capacity(1 << 16, out),
        flate2::Compression::default(),
    );
    std::io::copy(&mut input, &mut enc)?;
    let out = enc.finish()?.into_inner().map_err(|e| e.into_error())?;
    out.sync_all()?;
    std::fs::rename(&tmp, &gz)?;
    std::fs::remove_file(plain)
}

/// Opens one log file for reading, decompressing a `.gz`.
pub fn open_log_file(path: &Path) -> std::io::Result<Box<dyn Read + Send>> {
    let file = std::fs::File::open(path)?;
    if path.extension().is_some_and(|e| e == "gz") {
        Ok(Box::new(flate2::read::GzDecoder::new(BufReader::new(file))))
    } else {
        Ok(Box::new(file))
    }
}

/// The lines of the log at `live` (its rotated files, compressed or not, then the live file)
/// for which `keep` holds, oldest first, at most `max_lines` (the newest). Files are read newest
/// first until about `budget_bytes` have been read: the live file's tail, then whole rotated
/// files. A file that cannot be read is skipped: the reader answers with what it has.
///
/// SECURITY: the log is Herald's own output, but lines may be cut where a tail starts; the
/// first line of a tail is dropped and invalid UTF-8 is replaced.
pub fn matching_lines(
    live: &Path,
    budget_bytes: u64,
    max_lines: usize,
    keep: impl Fn(&str) -> bool,
) -> Vec<String> {
    // Newest first, each file's own lines in order.
    let mut chunks: Vec<Vec<String>> = Vec::new();
    let mut found = 0;
    let mut read = tail_lines(live, budget_bytes, &keep, &mut chunks);
    found += chunks.last().map_or(0, Vec::len);
    for f in rotated_files(live) {
        if read >= budget_bytes || found >= max_lines {
            break;
        }
        let mut lines = Vec::new();
        if let Ok(r) = open_log_file(&f.path) {
            for line in BufReader::new(r).split(b'\n').map_while(Result::ok) {
                read += line.len() as u64 + 1;
                let line = String::from_utf8_lossy(&line);
                if keep(&line) {
                    lines.push(line.into_owned());
                }
            }
        }
        found += lines.len();
        chunks.push(lines);
    }
    let mut out: Vec<String> = chunks.into_iter().rev().flatten().collect();
    if out.len() > max_lines {
        out.drain(..out.len() - max_lines);
    }
    out
}

/// The live file's last `budget` bytes, filtered, as one chunk; returns the bytes read.
fn tail_lines(
    live: &Path,
    budget: u64,
    keep: &impl Fn(&str) -> bool,
    chunks: &mut Vec<Vec<String>>,
) -> u64 {
    use std::io::{Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(live) else {
        return 0;
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(budget);
    if file.seek(SeekFrom::Start(start)).is_err() {
        return 0;
    }
    let mut bytes = Vec::new();
    if file.take(budget).read_to_end(&mut bytes).is_err() {
        return 0;
    }
    let text = String::from_utf8_lossy(&bytes);
    chunks.push(
        text.lines()
            .skip(usize::from(start > 0)) // the first line of a tail may be cut
            .filter(|l| keep(l))
            .map(str::to_string)
            .collect(),
    );
    bytes.len() as u64
}

/// Writes `lines` gzip-compressed to `path` (tests and tools that build a rotated file).
pub fn write_gz(path: &Path, text: &[u8]) -> std::io::Result<()> {
    let mut enc =
        flate2::write::GzEncoder::new(std::fs::File::create(path)?, flate2::Compression::default());
    enc.write_all(text)?;
    enc.finish()?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(keep_files: u32, keep_days: u32) -> RotationPolicy {
        RotationPolicy {
            max_bytes: 4096,
            max_age_secs: 0,
            keep_files,
            keep_days,
            compress: true,
        }
    }

    #[test]
    fn names_carry_their_instant_and_sort_in_rotation_order() {
        assert_eq!(stamp(1_000), "19700101T000001.000Z");
        let ms = 1_795_800_000_123;
        assert_eq!(stamp_ms(&stamp(ms)), Some(ms));
        assert_eq!(stamp_ms("20261127T173000Z"), None);
        let dir = tempfile::tempdir().expect("tempdir");
        let live = dir.path().join("delivery.log");
        let (a, a_ms) = rotated_name(&live, ms, 0);
        std::fs::write(&a, "a\n").expect("write");
        // The same millisecond again: the next free instant, still after the first.
        let (b, b_ms) = rotated_name(&live, ms, 0);
        assert_eq!((a_ms, b_ms), (ms, ms + 1));
        std::fs::write(&b, "b\n").expect("write");
        let (_, c_ms) = rotated_name(&live, ms - 5, b_ms);
        assert_eq!(c_ms, ms + 2, "never before the previous rotation");
        let listed: Vec<_> = rotated_files(&live).into_iter().map(|f| f.path).collect();
        assert_eq!(listed, vec![b, a]);
    }

    #[test]
    fn sweep_compresses_keeps_the_newest_and_drops_the_old() {
        let dir = tempfile::tempdir().expect("tempdir");
        let live = dir.path().join("delivery.log");
        std::fs::write(&live, "live\n").expect("write");
        let day = 24 * 3600 * 1000;
        let now = 1_795_800_000_000;
        for (i, age) in [0, 1, 2, 3, 40].iter().enumerate() {
            let (p, _) = rotated_name(&live, now - age * day - i as u64, 0);
            std::fs::write(&p, format!("line {i}\n")).expect("write");
        }
        // Leftover of a compression a crash interrupted.
        std::fs::write(dir.path().join("delivery.log-x.gz.tmp"), "junk").expect("write");
        sweep(&live, policy(3, 30), now);
        let files = rotated_files(&live);
        assert_eq!(files.len(), 3, "{files:?}");
        assert!(files.iter().all(|f| f.compressed), "{files:?}");
        assert!(!dir.path().join("delivery.log-x.gz.tmp").exists());
        // Only rotated names are touched: the live file and an external rotation stay.
        assert_eq!(std::fs::read_to_string(&live).expect("live"), "live\n");
        let lines = matching_lines(&live, 1 << 20, 100, |_| true);
        assert_eq!(lines, vec!["line 2", "line 1", "line 0", "live"]);
        // keep_days removes what is older whatever the count.
        sweep(&live, policy(10, 1), now + day / 2);
        assert_eq!(rotated_files(&live).len(), 1);
    }

    #[test]
    fn matching_lines_filters_bounds_and_reads_plain_and_compressed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let live = dir.path().join("delivery.log");
        let now = 1_795_800_000_000;
        let (old, _) = rotated_name(&live, now - 2000, 0);
        let mut gz = old.into_os_string();
        gz.push(".gz");
        write_gz(Path::new(&gz), b"1 <bob@x>\n2 <carol@x>\n").expect("gz");
        let (newer, _) = rotated_name(&live, now - 1000, 0);
        std::fs::write(&newer, "3 <bob@x>\n").expect("write");
        std::fs::write(&live, "4 <bob@x>\n5 <carol@x>\n").expect("write");
        let bob = |l: &str| l.contains("<bob@x>");
        let all = matching_lines(&live, 1 << 20, 100, bob);
        assert_eq!(all, vec!["1 <bob@x>", "3 <bob@x>", "4 <bob@x>"]);
        assert_eq!(
            matching_lines(&live, 1 << 20, 2, bob),
            vec!["3 <bob@x>", "4 <bob@x>"]
        );
        // A budget the live file alone fills: rotated files are not opened.
        assert_eq!(matching_lines(&live, 8, 100, bob), Vec::<String>::new());
    }
}
