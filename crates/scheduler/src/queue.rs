//! Per-destination queues. A destination is the set of MX hosts that serves one or more recipient
//! domains (keyed by the sorted MX host names), so every domain hosted at one provider shares
//! one queue, one connection budget and one health record.
//!
//! Owned by the scheduler actor alone: no locks. Workers get batches through the actor.

use crate::job::Job;
use herald_delivery::MxHost;
use serde::Serialize;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// A job waiting for its retry time. Ordered so the earliest time is at the top of the heap.
pub struct Waiting {
    pub at: Instant,
    pub seq: u64,
    pub job: Job,
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Waiting {}
impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest first.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A connected worker waiting for its next batch.
pub struct Parked {
    pub until: Instant,
    pub reply: oneshot::Sender<Vec<Job>>,
}

/// One destination's queue and state.
pub struct Destination {
    pub key: Arc<str>,
    pub hosts: Arc<Vec<MxHost>>,
    pub ready: VecDeque<Job>,
    pub waiting: BinaryHeap<Waiting>,
    /// Workers started for this destination (connecting or connected).
    pub workers: usize,
    pub parked: Vec<Parked>,
    /// No new connection before this instant (set after connection failures).
    pub down_until: Option<Instant>,
    pub consecutive_failures: u32,
    pub last_error: Option<String>,
    pub delivered: u64,
    pub deferred: u64,
    pub failed: u64,
}

impl Destination {
    pub fn new(key: Arc<str>, hosts: Arc<Vec<MxHost>>) -> Destination {
        Destination {
            key,
            hosts,
            ready: VecDeque::new(),
            waiting: BinaryHeap::new(),
            workers: 0,
            parked: Vec::new(),
            down_until: None,
            consecutive_failures: 0,
            last_error: None,
            delivered: 0,
            deferred: 0,
            failed: 0,
        }
    }

    pub fn queued(&self) -> usize {
        self.ready.len() + self.waiting.len()
    }

    pub fn is_down(&self, now: Instant) -> bool {
        self.down_until.is_some_and(|t| t > now)
    }

    /// Moves jobs whose retry time has come to the ready queue; returns how many moved.
    pub fn promote_due(&mut self, now: Instant) -> usize {
        let mut moved = 0;
        while self.waiting.peek().is_some_and(|w| w.at <= now) {
            if let Some(w) = self.waiting.pop() {
                self.ready.push_back(w.job);
                moved += 1;
            }
        }
        moved
    }

    /// Takes up to `max` ready jobs whose spliced size stays within `max_bytes` (at least one).
    pub fn take_batch(&mut self, max: usize, max_bytes: usize) -> Vec<Job> {
        let mut batch = Vec::new();
        let mut bytes = 0;
        while batch.len() < max {
            let Some(job) = self.ready.front() else { break };
            let size = job.post.template.size_hint();
            if !batch.is_empty() && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            if let Some(job) = self.ready.pop_front() {
                batch.push(job);
            }
        }
        batch
    }

    /// Workers this destination could use now: one per `batch` ready copies, within its cap.
    pub fn wanted_workers(&self, batch: usize, cap: usize) -> usize {
        let by_load = self.ready.len().div_ceil(batch.max(1));
        by_load.min(cap)
    }
}

/// One destination as `herald queue` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DestinationView {
    pub destination: String,
    pub ready: usize,
    pub waiting: usize,
    pub connections: usize,
    pub down_for_secs: Option<u64>,
    pub consecutive_failures: u32,
    pub last_error: Option<String>,
    pub delivered: u64,
    pub deferred: u64,
    pub failed: u64,
}

/// The whole queue: destinations with work first, most queued first.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct QueueSnapshot {
    pub queued: usize,
    pub resolving: usize,
    pub connections: usize,
    pub destinations: Vec<DestinationView>,
}

impl Destination {
    pub fn view(&self, now: Instant) -> DestinationView {
        DestinationView {
            destination: self.key.to_string(),
            ready: self.ready.len(),
            waiting: self.waiting.len(),
            connections: self.workers,
            down_for_secs: self
                .down_until
                .filter(|t| *t > now)
                .map(|t| (t - now).as_secs()),
            consecutive_failures: self.consecutive_failures,
            last_error: self.last_error.clone(),
            delivered: self.delivered,
            deferred: self.deferred,
            failed: self.failed,
        }
    }
}

/// The queue key of a resolved domain: its MX host names, sorted, joined by commas. Domains that
/// share all their MX hosts share a destination.
pub fn destination_key(hosts: &[MxHost]) -> Arc<str> {
    let mut names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    Arc::from(names.join(","))
}
