//! The delivery log: one line per attempt outcome, in the spirit of the classic MTA log so that
//! `grep`, `awk` and an operator's habits work on it:
//!
//! ```text
//! 2026-11-21T02:40:17.123Z 000000001234ABCD: to=<bob@example.com>, relay=mx.example.com[127.1.0.5]:25,
//!     delay=1.204, xdelay=0.004, tries=1, dsn=2.0.0, status=sent (250 2.0.0 Ok)
//! ```
//! (one line in the file). Post-level events get their own lines (`accepted`, `expanded`,
//! `completed`).
//!
//! Writing happens on a dedicated thread behind a bounded channel; the file is flushed when the
//! channel runs dry, so a quiet server's log is always current. Once it has drained the channel
//! the thread lingers [`LINGER`] before it waits again: a busy server's lines then pile up
//! meanwhile and are written together, and an emitter sends without waking the thread (a futex
//! wake and a thread switch per line was ~6 % of the CPU of an intake burst). [`DeliveryLog::reopen`] (SIGHUP)
//! flushes and opens the path again, so logrotate can rename the file without `copytruncate`
//! (which loses the lines written between its copy and its truncation).
//!
//! Without logrotate the writer rotates the file itself ([`RotationPolicy`], `[log]
//! delivery_log_*`): once the live file reaches its size or age it is renamed to
//! `delivery.log-<UTC instant>` between two lines and a fresh file is opened; the sweeper thread
//! (`logfiles`) gzips and prunes the rotated files, so the writer never waits on compression.
//! A SIGHUP reopen starts the size and age count again, so an external logrotate keeps working.
//!
//! SECURITY: recipient addresses and reply texts come from members and remote servers; CR, LF and
//! other control characters are replaced before writing so one line stays one line.

use crate::event::Event;
use crate::logfiles::{rotated_name, RotationPolicy, Sweeper};
use crate::time::rfc3339_ms;
use crate::TelemetryError;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Mutex;

/// Lines buffered between the emitters and the writer thread.
const LOG_QUEUE_LINES: usize = 65_536;

/// How long the writer sleeps after a drain before it looks again (see the module docs): a line
/// reaches the file at most this much later. 65,536 lines of room is three seconds of the
/// fastest fan-out measured, far more than one linger.
const LINGER: std::time::Duration = std::time::Duration::from_millis(20);

/// An idle writer wakes this often to rotate a file that has grown old (a quiet server's log
/// still rotates by age).
const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(30);

enum LogMsg {
    Line(String),
    Flush(SyncSender<()>),
    /// Flush, then write to a fresh open of the path (the old file was renamed by logrotate).
    Reopen(SyncSender<std::io::Result<()>>),
}

pub(crate) struct DeliveryLog {
    // Mutex only to make the handle Sync for older toolchains' SyncSender; no await under it.
    tx: Mutex<SyncSender<LogMsg>>,
}

impl DeliveryLog {
    pub(crate) fn open(
        path: &Path,
        rotation: Option<RotationPolicy>,
    ) -> Result<DeliveryLog, TelemetryError> {
        let err = |source| TelemetryError::OpenLog {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let rotation = rotation.filter(RotationPolicy::rotates);
        let sweeper = match rotation {
            Some(policy) => Some(Sweeper::start(path.to_path_buf(), policy).map_err(err)?),
            None => None,
        };
        let live = LiveFile::open(path.to_path_buf(), rotation, sweeper).map_err(err)?;
        let (tx, rx) = sync_channel(LOG_QUEUE_LINES);
        std::thread::Builder::new()
            .name("delivery-log".into())
            .spawn(move || write_loop(rx, live))
            .map_err(err)?;
        Ok(DeliveryLog { tx: Mutex::new(tx) })
    }

    pub(crate) fn write(&self, line: String) {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner()).clone();
        // A send error means the writer thread died (disk error already reported); nothing to do.
        let _ = tx.send(LogMsg::Line(line));
    }

    /// Flushes and reopens the file at its path; returns when the writer has done it.
    pub(crate) fn reopen(&self) -> std::io::Result<()> {
        let (done_tx, done_rx) = sync_channel(1);
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let gone = || std::io::Error::other("the delivery log writer has stopped");
        tx.send(LogMsg::Reopen(done_tx)).map_err(|_| gone())?;
        done_rx.recv().map_err(|_| gone())?
    }

    pub(crate) fn flush(&self) {
        let (done_tx, done_rx) = sync_channel(1);
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if tx.send(LogMsg::Flush(done_tx)).is_ok() {
            let _ = done_rx.recv();
        }
    }
}

fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

fn writer(file: std::fs::File) -> std::io::BufWriter<std::fs::File> {
    std::io::BufWriter::with_capacity(1 << 16, file)
}

/// The file the writer appends to, and what it knows to rotate it: its size (bytes handed to
/// the buffer, so a file ends at most one line past `max_bytes`) and when it was started.
struct LiveFile {
    path: std::path::PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    written: u64,
    started: std::time::SystemTime,
    rotation: Option<RotationPolicy>,
    sweeper: Option<Sweeper>,
    /// The instant the last rotated file is named by (names only move forward).
    last_rotated_ms: u64,
}

impl LiveFile {
    fn open(
        path: std::path::PathBuf,
        rotation: Option<RotationPolicy>,
        sweeper: Option<Sweeper>,
    ) -> std::io::Result<LiveFile> {
        let file = open_append(&path)?;
        let meta = file.metadata()?;
        // A file left by the previous run keeps its age: a server restarted every hour still
        // rotates daily. Without a birth time its last change is the best guess.
        let now = std::time::SystemTime::now();
        let started = match meta.len() {
            0 => now,
            _ => meta.created().or_else(|_| meta.modified()).unwrap_or(now),
        };
        Ok(LiveFile {
            path,
            out: writer(file),
            written: meta.len(),
            started,
            rotation,
            sweeper,
            last_rotated_ms: 0,
        })
    }

    fn write_line(&mut self, line: &str, outage: &mut LogOutage) {
        outage.note(self.out.write_all(line.as_bytes()));
        self.written += line.len() as u64;
        if let Some(p) = self.rotation {
            if p.max_bytes > 0 && self.written >= p.max_bytes {
                self.rotate();
            }
        }
    }

    /// SIGHUP: flush, then a fresh open of the path (logrotate renamed the file).
    fn reopen(&mut self) -> std::io::Result<()> {
        let _ = self.out.flush();
        let file = open_append(&self.path)?;
        self.written = file.metadata().map(|m| m.len()).unwrap_or(0);
        self.started = std::time::SystemTime::now();
        self.out = writer(file);
        Ok(())
    }

    /// Rotates a non-empty file older than the policy allows.
    fn rotate_if_old(&mut self) {
        let Some(p) = self.rotation else { return };
        let age = self.started.elapsed().unwrap_or_default();
        if p.max_age_secs > 0 && self.written > 0 && age.as_secs() >= p.max_age_secs {
            self.rotate();
        }
    }

    /// Renames the live file to its rotated name and starts a fresh one. On failure the
    /// writer goes on with the file it has (no line is lost) and tries again after another
    /// `max_bytes` or at the next age check.
    fn rotate(&mut self) {
        let _ = self.out.flush();
        let now_ms = herald_types::unix_ms_now();
        let (to, named_ms) = rotated_name(&self.path, now_ms, self.last_rotated_ms);
        let renamed = std::fs::rename(&self.path, &to).and_then(|()| open_append(&self.path));
        self.started = std::time::SystemTime::now();
        match renamed {
            Ok(file) => {
                self.out = writer(file);
                self.written = 0;
                self.last_rotated_ms = named_ms;
                if let Some(s) = &self.sweeper {
                    s.wake();
                }
            }
            Err(e) => {
                self.written = 0;
                tracing::error!(path = %self.path.display(), error = %e, "cannot rotate the delivery log; writing on to the same file");
            }
        }
    }
}

fn write_loop(rx: Receiver<LogMsg>, mut live: LiveFile) {
    use std::sync::mpsc::RecvTimeoutError;
    let mut outage = LogOutage::default();
    loop {
        let msg = match rx.recv_timeout(IDLE_CHECK) {
            Ok(msg) => msg,
            Err(RecvTimeoutError::Timeout) => {
                live.rotate_if_old();
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let mut pending = Some(msg);
        while let Some(msg) = pending.take() {
            match msg {
                LogMsg::Line(line) => live.write_line(&line, &mut outage),
                LogMsg::Flush(done) => {
                    let _ = live.out.flush();
                    let _ = done.send(());
                }
                LogMsg::Reopen(done) => {
                    // On failure the old file stays in use: no line is lost, it only goes on
                    // into the renamed file.
                    let _ = done.send(live.reopen());
                }
            }
            pending = rx.try_recv().ok();
            if pending.is_none() {
                // Drained: write out what is buffered, then give the emitters a moment to queue
                // more before blocking (the blocking wait is what makes each send wake us).
                let flushed = live.out.flush();
                outage.note_flush(flushed);
                live.rotate_if_old();
                std::thread::sleep(LINGER);
                pending = rx.try_recv().ok();
            }
        }
    }
}

/// A disk that cannot take the log (full, failing) must not flood the server's own log with an
/// error per delivery: the first failure is reported once, lines that could not be buffered are
/// counted, and the count is reported when writes succeed again. The log is telemetry; the
/// journal, not the log, is what must not lose a record.
#[derive(Default)]
struct LogOutage {
    failing: bool,
    dropped: u64,
}

impl LogOutage {
    /// A line handed to the buffer: success only means it was buffered, so recovery is
    /// judged by flushes alone.
    fn note(&mut self, written: std::io::Result<()>) {
        if let Err(e) = written {
            self.dropped += 1;
            self.failed(&e);
        }
    }

    fn note_flush(&mut self, flushed: std::io::Result<()>) {
        match flushed {
            Ok(()) => self.recovered(),
            Err(e) => self.failed(&e),
        }
    }

    fn failed(&mut self, e: &std::io::Error) {
        if !self.failing {
            self.failing = true;
            tracing::error!(
                "delivery log write failed: {e}; lines are dropped until it can be written again"
            );
        }
    }

    fn recovered(&mut self) {
        if self.failing {
            self.failing = false;
            tracing::warn!(dropped_lines = self.dropped, "delivery log writable again");
            self.dropped = 0;
        }
    }
}

/// Replaces control characters so untrusted text cannot start a new log line.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Seconds with millisecond precision, as the classic log prints delays.
fn secs(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// The log line for an event (with its trailing newline), or `None` for events not logged.
pub fn format_line(event: &Event) -> Option<String> {
    let now = herald_types::unix_ms_now();
    let mut line = rfc3339_ms(now);
    line.push(' ');
    match event {
        Event::PostAccepted {
            post,
            list,
            size,
            recovered,
            ..
        } => {
            let what = if *recovered { "recovered" } else { "accepted" };
            let _ = write!(line, "{post}: {what} list=<{list}>, size={size}");
        }
        Event::PostExpanded {
            post,
            recipients,
            already_done,
        } => {
            let _ = write!(
                line,
                "{post}: expanded recipients={recipients}, already_done={already_done}"
            );
        }
        Event::PostCompleted { post } => {
            let _ = write!(line, "{post}: completed");
        }
        Event::Scheduler(e) => crate::scheduling::format(e, &mut line),
        Event::Postmaster(p) => {
            let from = p.from.as_ref().map(ToString::to_string).unwrap_or_default();
            // Addresses are validated (no control characters); nothing here needs `clean`.
            let _ = write!(
                line,
                "{}: postmaster to=<{}>, from=<{from}>, size={}, forward={}",
                p.post,
                p.rcpt,
                p.size,
                p.forward.word()
            );
            if let crate::event::PostmasterForward::Forwarded { copy } = p.forward {
                let _ = write!(line, ", copy={copy}");
            }
        }
        Event::Attempt(a) => {
            let reply = a.outcome.reply();
            let dsn = reply
                .enhanced
                .map(|e| e.to_string())
                .unwrap_or_else(|| format!("{}.0.0", reply.code / 100));
            let _ = write!(
                line,
                "{}: to=<{}>, relay={}, delay={}, xdelay={}, tries={}, dsn={}, status={} ({})",
                a.post,
                clean(&a.rcpt),
                clean(&a.relay),
                secs(now.saturating_sub(a.accepted_at_ms)),
                secs(a.xdelay_ms),
                a.tries,
                dsn,
                a.outcome.status_word(),
                clean(&reply.to_string()),
            );
            if let Some(tls) = &a.tls {
                let _ = write!(line, ", tls={}", clean(tls));
            }
            if let Some(note) = a.mta_sts {
                let _ = write!(line, ", mta-sts={}", note.word());
            }
            if let Some(note) = a.dane {
                let _ = write!(line, ", dane={}", note.word());
            }
            if let Some(src) = a.source {
                let _ = write!(line, ", src={src}");
            }
        }
    }
    line.push('\n');
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Attempt;
    use herald_types::{EnhancedStatus, MemberId, PostId, RcptOutcome, Reply};

    #[test]
    fn attempt_line_is_one_greppable_line_even_with_hostile_text() {
        let a = Attempt {
            post: PostId(0xABC),
            member: MemberId(7),
            rcpt: "bob@example.com".into(),
            relay: "mx.example.com[127.1.0.5]:25".into(),
            accepted_at_ms: herald_types::unix_ms_now(),
            xdelay_ms: 4,
            tries: 1,
            tls: None,
            mta_sts: None,
            dane: None,
            source: None,
            outcome: RcptOutcome::Failed(Reply::new(
                550,
                Some(EnhancedStatus::new(5, 1, 1)),
                "no such user\r\nInjected: line",
            )),
        };
        let line = format_line(&Event::Attempt(Box::new(a))).expect("logged");
        assert_eq!(line.matches('\n').count(), 1, "{line}");
        assert!(line.ends_with('\n'));
        for field in [
            "0000000000000ABC: to=<bob@example.com>",
            "relay=mx.example.com[127.1.0.5]:25",
            "xdelay=0.004",
            "tries=1",
            "dsn=5.1.1",
            "status=bounced (550 5.1.1 no such user",
        ] {
            assert!(line.contains(field), "{field} missing in {line}");
        }
        assert!(!line.contains('\r'));
        assert!(
            !line.contains("tls="),
            "no connection, no tls field: {line}"
        );
    }

    #[test]
    fn attempt_line_records_tls() {
        let a = Attempt {
            post: PostId(1),
            member: MemberId(1),
            rcpt: "a@example.com".into(),
            relay: "mx.example.com[127.1.0.5]:25".into(),
            accepted_at_ms: herald_types::unix_ms_now(),
            xdelay_ms: 1,
            tries: 1,
            tls: Some("TLSv1.3/unverified".into()),
            mta_sts: None,
            dane: None,
            source: None,
            outcome: RcptOutcome::Delivered(Reply::new(250, None, "ok")),
        };
        let line = format_line(&Event::Attempt(Box::new(a.clone()))).expect("logged");
        assert!(
            line.trim_end().ends_with(", tls=TLSv1.3/unverified"),
            "{line}"
        );
        let sts = Attempt {
            mta_sts: Some(herald_types::MtaStsNote::TestingFailed),
            ..a
        };
        let line = format_line(&Event::Attempt(Box::new(sts.clone()))).expect("logged");
        assert!(
            line.trim_end()
                .ends_with(", tls=TLSv1.3/unverified, mta-sts=testing-failed"),
            "{line}"
        );
        let dane = Attempt {
            mta_sts: None,
            dane: Some(herald_types::DaneNote::Verified),
            ..sts
        };
        let line = format_line(&Event::Attempt(Box::new(dane.clone()))).expect("logged");
        assert!(
            line.trim_end()
                .ends_with(", tls=TLSv1.3/unverified, dane=verified"),
            "{line}"
        );
        // The egress source address closes the line.
        let from = Attempt {
            source: Some("127.0.0.5".parse().expect("ip")),
            ..dane
        };
        let line = format_line(&Event::Attempt(Box::new(from))).expect("logged");
        assert!(
            line.trim_end().ends_with(", dane=verified, src=127.0.0.5"),
            "{line}"
        );
    }

    #[test]
    fn postmaster_line_names_the_message_and_its_forward() {
        use crate::event::{PostmasterForward, PostmasterMail};
        let mail = |forward| {
            Event::Postmaster(Box::new(PostmasterMail {
                post: PostId(0xA),
                rcpt: herald_types::Address::parse("postmaster@herald.test").expect("address"),
                from: None,
                size: 321,
                forward,
            }))
        };
        let line =
            format_line(&mail(PostmasterForward::Forwarded { copy: PostId(0xB) })).expect("logged");
        assert!(
            line.ends_with("000000000000000A: postmaster to=<postmaster@herald.test>, from=<>, size=321, forward=forwarded, copy=000000000000000B\n"),
            "{line}"
        );
        let line = format_line(&mail(PostmasterForward::AutoSubmitted)).expect("logged");
        assert!(
            line.trim_end().ends_with("forward=auto_submitted"),
            "{line}"
        );
    }

    #[test]
    fn writer_thread_appends_and_flushes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log/delivery.log");
        let log = DeliveryLog::open(&path, None).expect("open");
        log.write("one\n".into());
        log.write("two\n".into());
        log.flush();
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "one\ntwo\n");
    }

    #[test]
    fn reopen_writes_to_a_new_file_after_a_rename_and_loses_no_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("delivery.log");
        let log = DeliveryLog::open(&path, None).expect("open");
        log.write("before\n".into());
        // logrotate without copytruncate: rename, then signal.
        let rotated = dir.path().join("delivery.log.1");
        std::fs::rename(&path, &rotated).expect("rename");
        log.write("between\n".into());
        log.reopen().expect("reopen");
        log.write("after\n".into());
        log.flush();
        assert_eq!(
            std::fs::read_to_string(&rotated).expect("rotated"),
            "before\nbetween\n"
        );
        assert_eq!(std::fs::read_to_string(&path).expect("new"), "after\n");
        // A path that cannot be opened is an error and the writer goes on with the file it
        // has; once the path is usable again, the next reopen takes it.
        std::fs::rename(&path, dir.path().join("delivery.log.2")).expect("rename");
        std::fs::create_dir(&path).expect("a directory where the log was");
        assert!(log.reopen().is_err());
        log.write("still\n".into());
        log.flush();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("delivery.log.2")).expect("kept"),
            "after\nstill\n"
        );
        std::fs::remove_dir(&path).expect("rmdir");
        log.reopen().expect("reopen again");
        log.write("again\n".into());
        log.flush();
        assert_eq!(std::fs::read_to_string(&path).expect("new"), "again\n");
    }
}

#[cfg(test)]
mod rotation_tests {
    use super::*;
    use crate::logfiles::{matching_lines, rotated_files};

    #[test]
    fn the_writer_rotates_by_size_and_the_sweeper_compresses_and_prunes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("delivery.log");
        let policy = RotationPolicy {
            max_bytes: 1000,
            max_age_secs: 0,
            keep_files: 3,
            keep_days: 0,
            compress: true,
        };
        let log = DeliveryLog::open(&path, Some(policy)).expect("open");
        for i in 0..100 {
            log.write(format!("{i:04} {}\n", "x".repeat(95)));
        }
        log.flush();
        // 100 lines of 101 bytes: a rotation after every 10th line (the last one leaves the
        // live file empty), 3 rotated files kept.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let files = rotated_files(&path);
            if files.len() == 3 && files.iter().all(|f| f.compressed) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{files:?}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let lines = matching_lines(&path, u64::MAX, usize::MAX, |_| true);
        let first: Vec<_> = lines.iter().map(|l| &l[..4]).collect();
        let want: Vec<String> = (70..100).map(|i| format!("{i:04}")).collect();
        assert_eq!(first, want, "the newest 3 rotated files, in order");
        assert!(std::fs::metadata(&path).expect("live").len() < 1000);
    }

    #[test]
    fn a_reopen_after_an_external_rename_still_works_with_rotation_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("delivery.log");
        let policy = RotationPolicy {
            max_bytes: 1 << 20,
            max_age_secs: 86_400,
            keep_files: 3,
            keep_days: 30,
            compress: true,
        };
        let log = DeliveryLog::open(&path, Some(policy)).expect("open");
        log.write("before\n".into());
        std::fs::rename(&path, dir.path().join("delivery.log.1")).expect("rename");
        log.reopen().expect("reopen");
        log.write("after\n".into());
        log.flush();
        assert_eq!(std::fs::read_to_string(&path).expect("new"), "after\n");
        assert!(
            dir.path().join("delivery.log.1").exists(),
            "not ours to prune"
        );
    }
}
