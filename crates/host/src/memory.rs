//! Giving freed heap back to the system.
//!
//! Two allocators hold Herald's heap, and neither returns everything freed by itself while the
//! server is idle; so the server asks both every [`TRIM_EVERY`], on a blocking thread.
//!
//! mimalloc, the `herald` binary's `#[global_allocator]`, returns a page freed in its arenas
//! after a delay (`purge_delay`, 1 s: a page freed under load is often wanted again at once, and
//! returning it would cost a fault and a zeroing each time). But the delayed purge is carried out
//! only when mimalloc next looks for it, which it does when it allocates a fresh page; a server
//! that has drained a backlog and gone idle allocates almost nothing, so everything the drain
//! freed stayed resident (after a 600-post backlog to 2,000 members, 1.8 times the RSS of a
//! fresh process holding the same state). `mi_collect(false)` carries out the purges whose delay
//! has passed, and only those: under load it returns nothing a worker would want back within a
//! second, and costs one clock read and a flag test when nothing is due. It reaches the
//! process's arenas and the heap of the thread that calls it; the runtime's worker threads
//! collect their own heaps as they go idle ([`on_worker_park`]).
//!
//! The C code linked in — SQLite above all, whose page caches and statements the directory's
//! bulk work churns — allocates from glibc's malloc, which keeps memory freed by bulk work in
//! its arenas (one per thread that allocates, up to 8 per core: every blocking thread that runs
//! a directory call can have its own): importing ten million members left ~33 bytes per member
//! resident after the import had finished (measured before mimalloc, when all of Herald's heap
//! was glibc's). glibc returns free pages only at the top of an arena's heap, unless asked:
//! `malloc_trim(0)` gives back every free page of every arena (`madvise(MADV_DONTNEED)`), without
//! moving anything. A trim walks the free lists of the arenas (milliseconds for hundreds of
//! megabytes) and changes nothing when little is free.
//!
//! Both calls are safe whichever allocator is the global one (`--features system-alloc` builds
//! use glibc's for everything, and mimalloc then holds nothing to purge). Other C libraries
//! (musl, a target without glibc) return memory themselves or differently: there only
//! mimalloc is asked.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often free heap is returned to the system.
pub const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Returns free heap to the system now: mimalloc's pages whose purge delay has passed, and
/// glibc's free pages. True if glibc released any memory (mimalloc does not say).
pub fn trim() -> bool {
    collect_mimalloc();
    trim_glibc()
}

// Herald's code has no other `unsafe` (the workspace denies it): these are the allocators' own
// entry points, without a safe wrapper in a well-kept crate (libmimalloc-sys declares
// `mi_collect` only with a feature that pulls in one more crate), and neither call has an
// invariant for the caller to keep.
#[allow(unsafe_code)]
fn collect_mimalloc() {
    // Links libmimalloc-sys's static library, which defines `mi_collect`.
    use libmimalloc_sys as _;
    extern "C" {
        fn mi_collect(force: bool);
    }
    // SAFETY: mi_collect takes no pointers; it frees this thread's empty pages and purges the
    // process's arenas under mimalloc's own locks, and is documented as callable from any
    // thread at any time.
    unsafe { mi_collect(false) }
}

#[allow(unsafe_code)]
fn trim_glibc() -> bool {
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

/// Bumped every [`TRIM_EVERY`]: a runtime worker that parks with an older one seen collects
/// its own mimalloc heap (see [`on_worker_park`]).
static TRIM_ROUND: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last [`TRIM_ROUND`] this thread collected in.
    static COLLECTED_ROUND: Cell<u64> = const { Cell::new(0) };
}

/// For the async runtime's `on_thread_park`: a worker thread going idle collects its own
/// mimalloc heap, once per [`TRIM_EVERY`] at most (an atomic load and a thread-local compare
/// otherwise, as workers park many times a second under load).
///
/// Why the workers themselves: `mi_collect` frees the empty pages of the calling thread's heap
/// only; pages a worker owns — blocks it allocated (a post's bytes, received on that worker)
/// that other threads freed — are folded back by the owner alone, when it next allocates in
/// that size class or collects. A worker idle after a drain does neither. Measured with
/// bench/memory/after-drain.sh (BENCHMARKS.md): idle RSS 207 MB without this, 139-149 MB with
/// it, a fresh process on the same data 123-134 MB.
pub fn on_worker_park() {
    let round = TRIM_ROUND.load(Ordering::Relaxed);
    if COLLECTED_ROUND.with(|c| c.replace(round)) != round {
        collect_mimalloc();
    }
}

/// Trims every [`TRIM_EVERY`] until `stop`.
pub async fn run(stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(TRIM_EVERY) => {}
        }
        TRIM_ROUND.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = tokio::task::spawn_blocking(trim).await {
            tracing::debug!(error = %e, "heap trim task failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Instant;

    /// The tests read the process's RSS: one at a time.
    static RSS: Mutex<()> = Mutex::new(());

    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .expect("VmRSS")
    }

    /// Pages mimalloc freed go back to the system once their purge delay has passed, though
    /// nothing allocates after them — a server idle after a drain. 160 MB in 16 KiB blocks
    /// from mimalloc's own entry points (the test binary's global allocator is the system's),
    /// freed by a thread that then ends, as a blocking-pool thread does after a burst; then
    /// nothing but trims. Without `mi_collect` the RSS stays up however long one waits.
    #[test]
    #[allow(unsafe_code)]
    fn a_trim_returns_pages_mimalloc_freed_while_idle() {
        const BLOCK: usize = 16 * 1024;
        let _one = RSS.lock().unwrap_or_else(|e| e.into_inner());
        let start = rss_kib();
        std::thread::spawn(|| {
            let blocks: Vec<usize> = (0..10_240)
                .map(|i| {
                    // SAFETY: a fresh block of BLOCK bytes, written within its length.
                    unsafe {
                        let p = libmimalloc_sys::mi_malloc(BLOCK).cast::<u8>();
                        assert!(!p.is_null(), "mi_malloc failed");
                        std::ptr::write_bytes(p, i as u8, BLOCK);
                        p as usize
                    }
                })
                .collect();
            for p in blocks {
                // SAFETY: each pointer came from mi_malloc above and is freed once.
                unsafe { libmimalloc_sys::mi_free(p as *mut std::ffi::c_void) }
            }
        })
        .join()
        .expect("thread");
        // In `herald` every thread allocates from mimalloc before it trims; the test's thread
        // must too, or mimalloc has no heap for it to collect from and returns at once.
        // SAFETY: one byte allocated and freed at once.
        unsafe { libmimalloc_sys::mi_free(libmimalloc_sys::mi_malloc(1)) };
        let freed = rss_kib();
        assert!(
            freed > start + 100_000,
            "the blocks were not resident: {start} -> {freed} KiB"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            trim();
            let now = rss_kib();
            if now + 100_000 < freed {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "160 MB freed by mimalloc still resident 10 s later: {freed} KiB -> {now} KiB"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Freed blocks go back to the system: a trim after freeing many small allocations made
    /// on another thread (another arena) lowers the process's resident memory.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_trim_returns_memory_freed_by_bulk_work() {
        let _one = RSS.lock().unwrap_or_else(|e| e.into_inner());
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
