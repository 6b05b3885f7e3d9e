//! The data disk's reserve: a file of `[server] disk_reserve_mib` zero bytes kept in the data
//! directory, so that a full disk never blocks a stop or a start.
//!
//! A completely full disk leaves Herald nothing to work with: SQLite cannot even map the
//! shared-memory index of a WAL database it opens, so a start fails; and a stop cannot journal
//! the outcomes of copies already delivered, so they would be sent again. The reserve is space
//! set aside while there is plenty, and given back to Herald's own stores when there is none
//! (the ballast operators keep by hand, kept by the server):
//!
//! - **At start**, when less than the reserve's size is free, the file is removed before the
//!   stores are opened; the server then comes up with new posts refused (`452 4.3.1`) and
//!   outcomes still journaled, and takes posts again by itself once the disk has room for the
//!   reserve twice over (the reserve is written back first).
//! - **At the stop**, when the spool's journal cannot be written, the file is removed and the
//!   journal repaired at once, so the outcomes of delivered copies are made durable and
//!   nothing is sent twice at the next start.
//!
//! While the journal merely runs out of space during service the reserve is kept: fan-out
//! pauses and intake refuses posts until space returns (see the spool's writer), and the
//! reserve is still there for the stop.
//!
//! Invariants: the file is written in full and fsync'd before it counts as kept; a partial
//! file (a disk that filled while writing it) is removed. Nothing here ever fails the server:
//! a reserve that cannot be kept is logged and the server runs as it would without one.

use herald_spool::Spool;
use nix::sys::statvfs::statvfs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The file's name in the data directory.
pub const FILE_NAME: &str = "disk-reserve";
/// Largest reserve accepted by the configuration check.
pub use herald_config::MAX_DISK_RESERVE_MIB as MAX_MIB;

/// The reserve file and whether it is given back now.
#[derive(Debug)]
pub struct DiskReserve {
    path: PathBuf,
    dir: PathBuf,
    bytes: u64,
    /// The file was removed to make room (start or stop on a full disk) and is not back yet.
    released: AtomicBool,
}

/// What [`DiskReserve::at_start`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtStart {
    /// The reserve is in place (or was written now).
    Kept,
    /// The disk is short: the reserve was removed to let the stores open; posts are to be
    /// held off until [`DiskReserve::restore`] succeeds.
    Released,
    /// There is no reserve and no room to write one: the server runs without it.
    Missing,
}

impl DiskReserve {
    /// The reserve of `mib` MiB in `data_dir`; `None` when the configuration turns it off (0).
    pub fn new(data_dir: &Path, mib: u64) -> Option<DiskReserve> {
        (mib > 0).then(|| DiskReserve {
            path: data_dir.join(FILE_NAME),
            dir: data_dir.to_path_buf(),
            bytes: mib << 20,
            released: AtomicBool::new(false),
        })
    }

    /// Bytes an unprivileged writer may still use on the data directory's file system.
    pub fn free_bytes(&self) -> Option<u64> {
        let s = statvfs(&self.dir).ok()?;
        Some(s.blocks_available().saturating_mul(s.fragment_size()))
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// True while the reserve is given back to the stores (and posts are held off).
    pub fn is_released(&self) -> bool {
        self.released.load(Relaxed)
    }

    /// Before the stores open: removes the reserve when less than its size is free (the
    /// stores need room to open at all), writes it when it is missing and there is room. A
    /// disk too small to ever hold it (under four times its size) runs without one.
    pub fn at_start(&self) -> AtStart {
        let free = self.free_bytes().unwrap_or(u64::MAX);
        if self.file_len() == Some(self.bytes) {
            if free >= self.bytes {
                return AtStart::Kept;
            }
            self.release("the data disk is full at start");
            return AtStart::Released;
        }
        if !self.fits() {
            tracing::warn!(
                reserve = self.bytes, dir = %self.dir.display(),
                "the data disk is too small for its reserve ([server] disk_reserve_mib): a full \
                 disk may then block a start or resend copies after a stop"
            );
            return AtStart::Missing;
        }
        if free >= self.bytes.saturating_mul(2) && self.write() {
            return AtStart::Kept;
        }
        // Full, and the reserve is not there to give back (a stop already used it): the
        // server still starts, with posts held off until there is room to write it again.
        tracing::warn!(
            free,
            reserve = self.bytes,
            "the data disk is full at start and its reserve is gone: new posts are refused \
             (452 4.3.1) until there is room for it again"
        );
        self.released.store(true, Relaxed);
        AtStart::Released
    }

    /// The file system can hold the reserve four times over.
    fn fits(&self) -> bool {
        statvfs(&self.dir).ok().is_none_or(|s| {
            s.blocks().saturating_mul(s.fragment_size()) >= self.bytes.saturating_mul(4)
        })
    }

    /// Removes the reserve so Herald's stores can use its space; `why` is logged. True when
    /// there was one to remove.
    pub fn release(&self, why: &str) -> bool {
        match std::fs::remove_file(&self.path) {
            Ok(()) => {
                self.released.store(true, Relaxed);
                tracing::warn!(
                    bytes = self.bytes, file = %self.path.display(),
                    "{why}: released the data disk's reserve; new posts are refused (452 4.3.1) \
                     until the disk has room for it again"
                );
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                tracing::error!(error = %e, file = %self.path.display(), "cannot release the data disk's reserve");
                false
            }
        }
    }

    /// After a release: writes the reserve back once the disk has room for it twice over (so
    /// that taking posts again does not at once run it short). True when it is back.
    pub fn restore(&self) -> bool {
        if !self.is_released() {
            return true;
        }
        let free = self.free_bytes().unwrap_or(0);
        if free < self.bytes.saturating_mul(2) || !self.write() {
            return false;
        }
        self.released.store(false, Relaxed);
        tracing::warn!(
            free,
            "the data disk has room again: its reserve is back and new posts are taken"
        );
        true
    }

    fn file_len(&self) -> Option<u64> {
        std::fs::metadata(&self.path).ok().map(|m| m.len())
    }

    /// Allocates the file in full and makes it durable; removes a partial one. Blocks are
    /// allocated with `posix_fallocate` (no data written, so a start does not write 16 MiB),
    /// or written as zeros where the file system cannot allocate without writing.
    fn write(&self) -> bool {
        let written = (|| -> std::io::Result<()> {
            let mut f = std::fs::File::create(&self.path)?;
            if !allocate(&f, self.bytes) {
                let chunk = vec![0u8; 64 << 10];
                let mut left = self.bytes;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    f.write_all(&chunk[..n])?;
                    left -= n as u64;
                }
            }
            f.sync_all()
        })();
        match written {
            Ok(()) => true,
            Err(e) => {
                let _ = std::fs::remove_file(&self.path);
                tracing::debug!(error = %e, "cannot write the data disk's reserve");
                false
            }
        }
    }
}

/// `posix_fallocate` of `len` bytes; false when the file system cannot (then write instead).
fn allocate(f: &std::fs::File, len: u64) -> bool {
    let Ok(len) = libc::off_t::try_from(len) else {
        return false;
    };
    nix::fcntl::posix_fallocate(f, 0, len).is_ok()
}

/// Why posts are refused while the reserve is given back.
const HELD: &str = "the data disk is full: its reserve is in use for the mail already accepted";

/// How often a released reserve checks for room to come back.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// After a start on a full disk: posts are held off until the reserve is back.
pub fn hold_if_released(reserve: &DiskReserve, spool: &Spool) {
    if reserve.is_released() {
        spool.hold_posts(HELD);
    }
}

/// While the server runs: a released reserve is written back as soon as there is room, and
/// then posts are taken again.
pub async fn watch(reserve: Arc<DiskReserve>, spool: Spool, stop: CancellationToken) {
    let mut tick = tokio::time::interval(WATCH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !reserve.is_released() {
            continue;
        }
        let r = reserve.clone();
        if let Ok(true) = tokio::task::spawn_blocking(move || r.restore()).await {
            spool.release_posts();
        }
    }
}

/// At the stop: when the journal cannot be written, the reserve is given to it and the repair
/// tried at once, so the outcomes of copies already delivered become durable and nothing is
/// sent twice at the next start.
pub fn on_stop(reserve: &DiskReserve, spool: &Spool) {
    if spool.journal_outage().is_none() {
        return;
    }
    if reserve.release("stopping while the spool's journal cannot be written") {
        spool.hold_posts(HELD);
        spool.retry_repair_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_at_start_and_released_and_restored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = DiskReserve::new(dir.path(), 1).expect("on");
        assert_eq!(r.at_start(), AtStart::Kept);
        assert_eq!(r.file_len(), Some(1 << 20));
        assert!(r.release("test"));
        assert!(r.is_released());
        assert!(!dir.path().join(FILE_NAME).exists());
        assert!(r.restore(), "a temp dir has room for 2 MiB");
        assert!(!r.is_released());
        assert_eq!(r.file_len(), Some(1 << 20));
    }

    #[test]
    fn zero_turns_it_off() {
        assert!(DiskReserve::new(Path::new("/nonexistent"), 0).is_none());
    }
}
