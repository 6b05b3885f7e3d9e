//! CSV imports started from the members page run as background jobs, so the browser can be
//! sent to a progress page at once and the upload's request does not wait for a large file.
//! A job is its counters (rows read of rows in the file) and, once done, the report.
//!
//! Bounded: at most [`MAX_JOBS`] jobs are kept; a new one replaces the oldest finished one,
//! and when every slot holds a running import a new one is refused (503). Jobs live in memory
//! only: a restart forgets them (the import itself is one transaction per batch, see
//! `herald_directory::import`).

use herald_api_types::ImportReport;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Most import jobs remembered.
pub const MAX_JOBS: usize = 32;

/// One import.
#[derive(Debug)]
pub struct Job {
    /// The list's canonical address: a job is shown only under its own list's path.
    pub list: String,
    pub total: u64,
    pub done: AtomicU64,
    /// `Some` once finished: the report, or why the whole import failed.
    pub outcome: Mutex<Option<Result<ImportReport, String>>>,
}

impl Job {
    pub fn finished(&self) -> bool {
        self.outcome.lock().map(|o| o.is_some()).unwrap_or(true)
    }

    pub fn progress(&self) -> herald_webadmin::members::ImportProgress {
        let outcome = self.outcome.lock().map(|o| o.clone()).unwrap_or(None);
        let (report, failed) = match outcome {
            Some(Ok(r)) => (Some(r), None),
            Some(Err(e)) => (None, Some(e)),
            None => (None, None),
        };
        herald_webadmin::members::ImportProgress {
            done: self.done.load(Ordering::Relaxed),
            total: self.total,
            report,
            failed,
        }
    }
}

/// The jobs, by id.
#[derive(Debug, Default)]
pub struct ImportJobs {
    // A std Mutex: held for a map insert or lookup, never across an await.
    jobs: Mutex<BTreeMap<u64, Arc<Job>>>,
    next: AtomicU64,
}

impl ImportJobs {
    /// A new job for `list` with `total` rows; `None` when every slot holds a running import.
    pub fn start(&self, list: String, total: u64) -> Option<(u64, Arc<Job>)> {
        let mut jobs = self.jobs.lock().ok()?;
        if jobs.len() >= MAX_JOBS {
            let oldest_done = jobs.iter().find(|(_, j)| j.finished()).map(|(id, _)| *id)?;
            jobs.remove(&oldest_done);
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let job = Arc::new(Job {
            list,
            total,
            done: AtomicU64::new(0),
            outcome: Mutex::new(None),
        });
        jobs.insert(id, job.clone());
        Some((id, job))
    }

    pub fn get(&self, id: u64) -> Option<Arc<Job>> {
        self.jobs.lock().ok()?.get(&id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_are_bounded_and_running_ones_are_kept() {
        let jobs = ImportJobs::default();
        let mut running = Vec::new();
        for _ in 0..MAX_JOBS {
            running.push(jobs.start("l@x.test".into(), 1).expect("slot"));
        }
        assert!(
            jobs.start("l@x.test".into(), 1).is_none(),
            "all running: refused"
        );
        if let Ok(mut o) = running[3].1.outcome.lock() {
            *o = Some(Err("done".into()));
        }
        let (id, _) = jobs
            .start("l@x.test".into(), 1)
            .expect("a finished slot is reused");
        assert!(jobs.get(running[3].0).is_none() && jobs.get(id).is_some());
    }
}
