//! A small filesystem for fault tests: a tmpfs of a chosen size mounted on a fresh temporary
//! directory, unmounted when dropped. Tests fill it to make a data disk run out of space the way
//! an operator's disk does (ENOSPC from `write`), then free it again, without touching the
//! machine's real disks.
//!
//! Mounting needs root (CI runs as root). Where it is refused, [`SmallDisk::mount`] fails the
//! test under `CI` and otherwise returns `None` with a loud note, so a developer without root
//! still runs the rest of the suite.
//!
//! Invariants: the mount point is a fresh directory under the system temp dir; drop unmounts it
//! lazily (`umount -l`, so a file still open by a stopped server cannot keep it busy) and
//! removes the directory.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted tmpfs of a fixed size.
#[derive(Debug)]
pub struct SmallDisk {
    dir: PathBuf,
}

impl SmallDisk {
    /// Mounts a tmpfs of `bytes` bytes. `None` (with a note on stderr) when not allowed here
    /// and not in CI; panics in CI, where these tests must run.
    pub fn mount(bytes: u64) -> Option<SmallDisk> {
        let dir = std::env::temp_dir().join(format!(
            "herald-small-disk-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return refused(&format!("cannot create {}: {e}", dir.display()));
        }
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={bytes},mode=0700"))
            .arg("herald-small-disk")
            .arg(&dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(SmallDisk { dir }),
            Ok(o) => {
                let _ = std::fs::remove_dir(&dir);
                refused(&String::from_utf8_lossy(&o.stderr))
            }
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                refused(&format!("cannot run mount: {e}"))
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Bytes still free on the filesystem.
    pub fn free_bytes(&self) -> u64 {
        let out = Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(&self.dir)
            .output();
        out.ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .nth(1)
                    .and_then(|l| l.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// Writes `name` until the filesystem is full; returns the bytes written. Removing the
    /// file frees the space again.
    pub fn fill(&self, name: &str) -> std::io::Result<u64> {
        use std::io::Write;
        let mut f = std::fs::File::create(self.dir.join(name))?;
        let chunk = vec![0xA5u8; 64 << 10];
        let mut written = 0u64;
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                Err(e) => return Err(e),
            }
        }
        // The last partial page: write byte by byte until nothing fits.
        while let Ok(1) = f.write(&chunk[..1]) {
            written += 1;
        }
        Ok(written)
    }
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn refused(why: &str) -> Option<SmallDisk> {
    let msg = format!("cannot mount a small tmpfs for a disk-full test (needs root): {why}");
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIPPED (not in CI): {msg}");
    None
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}
