//! `herald node …`: this node's place in a cluster. `node drain` stops the node
//! claiming shards of shared posts and hands back those it has not finished, through the
//! running server's API (`POST /api/v1/node/drain`).

use crate::client::Api;
use anyhow::{bail, Result};
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Stop claiming shards of shared posts and hand back the unfinished ones (maintenance);
    /// exits with status 1 if shards are still held when the wait runs out.
    Drain {
        /// Seconds to wait for the hand-back (0 to 300).
        #[arg(long, default_value_t = 30)]
        wait_secs: u64,
    },
}

pub async fn run(api: &Api, cmd: NodeCommand) -> Result<()> {
    match cmd {
        NodeCommand::Drain { wait_secs } => {
            let r: herald_api_types::NodeDrained = api
                .post_empty(&format!("/api/v1/node/drain?wait_secs={wait_secs}"))
                .await?;
            outln!(
                "node {}: held {} shard(s): {} handed back, {} finished here, {} still held",
                r.node_id,
                r.held,
                r.handed_back,
                r.finished,
                r.remaining
            );
            if r.remaining > 0 {
                bail!("node {} is not drained yet: run the drain again", r.node_id);
            }
            outln!("drained: this node claims no shards until it restarts");
        }
    }
    Ok(())
}
