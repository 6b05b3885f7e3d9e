//! Giving freed heap back to the system.
//!
//! The `herald` binary allocates with mimalloc (its `#[global_allocator]`), which returns freed
//! pages itself; the C code linked in — SQLite above all, whose page caches and statements
//! the directory's bulk work churns — allocates from glibc's malloc, and that is what this
//! trims. (Before mimalloc, all of Herald's heap was glibc's, and the numbers below are from then.)
//!
//! glibc's allocator keeps memory freed by bulk work in its arenas (one
//! per thread that allocates, up to 8 per core: every blocking thread that runs a directory
//! call can have its own): importing ten million members left ~33 bytes per member resident
//! after the import had finished, and the fan-out that followed started from there. glibc
//! returns free pages only at the top of an arena's heap, unless asked: `malloc_trim(0)` gives
//! back every free page of every arena (`madvise(MADV_DONTNEED)`), without moving anything.
//! So the server asks every [`TRIM_EVERY`], on a blocking thread; a trim walks the free lists
//! of the arenas (milliseconds for hundreds of megabytes) and changes nothing when little is free.
//!
//! Other allocators (musl, a target without glibc) return memory themselves or differently:
//! there the task does nothing.

use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often free heap is returned to the system.
pub const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Returns free heap to the system now; true if any memory was released (always false where
/// the allocator is not glibc's).
// The one `unsafe` in Herald's code (the workspace denies it): glibc's entry point has no safe
// wrapper in a well-kept crate, and the call has no invariant for the caller to keep.
#[allow(unsafe_code)]
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes no pointers and only reorganises the allocator's free
        // lists under its own locks; it is safe to call from any thread at any time.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Trims every [`TRIM_EVERY`] until `stop`.
pub async fn run(stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(TRIM_EVERY) => {}
        }
        if let Err(e) = tokio::task::spawn_blocking(trim).await {
            tracing::debug!(error = %e, "heap trim task failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Freed blocks go back to the system: a trim after freeing many small allocations made
    /// on another thread (another arena) lowers the process's resident memory.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_trim_returns_memory_freed_by_bulk_work() {
        fn rss_kib() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").expect("status");
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .expect("VmRSS")
        }
        // 200 MB in 16 KiB blocks (below glibc's mmap threshold: in the heap), every other one
        // kept until the rest are freed: the freed half sits between live blocks, where glibc
        // does not return it by itself.
        std::thread::spawn(|| {
            let blocks: Vec<Vec<u8>> = (0..12_800).map(|i| vec![i as u8; 16 * 1024]).collect();
            let (keep, free): (Vec<_>, Vec<_>) = blocks
                .into_iter()
                .enumerate()
                .partition(|(i, _)| i % 2 == 0);
            drop(free);
            let before = rss_kib();
            trim();
            let after = rss_kib();
            drop(keep);
            assert!(
                after + 50_000 < before,
                "a trim released less than 50 MB of 100 MB freed: {before} KiB -> {after} KiB"
            );
        })
        .join()
        .expect("thread");
    }
}
