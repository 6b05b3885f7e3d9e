//! The scheduler's channels as the operator sees them: depth and capacity of the job channel
//! (expansion → actor), the control channel (workers, resolvers, API → actor) and the report
//! channel (workers → report loop), plus the operator commands on queued copies. Kept out of
//! `lib.rs` so the handle's core stays small.

use crate::actor::{operator, Ctrl};
use crate::{Scheduler, SchedulerError};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

/// One channel's fill level (read without locking; a momentary value).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChannelView {
    pub channel: &'static str,
    pub depth: usize,
    pub capacity: usize,
}

fn view<T>(channel: &'static str, tx: &mpsc::Sender<T>) -> ChannelView {
    ChannelView {
        channel,
        depth: tx.max_capacity() - tx.capacity(),
        capacity: tx.max_capacity(),
    }
}

impl Scheduler {
    /// Depths of the scheduler's bounded channels.
    pub fn channels(&self) -> Vec<ChannelView> {
        vec![
            view("jobs", &self.expand_ctx.jobs),
            view("control", &self.ctrl),
            view("reports", &self.expand_ctx.reports),
        ]
    }

    /// Retries now, or gives up, every queued copy the selector matches; returns how many.
    pub async fn operate(
        &self,
        selector: operator::Selector,
        action: operator::Action,
    ) -> Result<u64, SchedulerError> {
        let (reply, rx) = oneshot::channel();
        self.ctrl
            .send(Ctrl::Operator(operator::Command {
                selector,
                action,
                reply,
            }))
            .await
            .map_err(|_| SchedulerError::Stopped)?;
        rx.await.map_err(|_| SchedulerError::Stopped)
    }
}
