//! `herald probe`: asks the running server whether it is alive (`GET /healthz`) or ready to
//! take mail (`GET /readyz`), and exits 0 only when it is — for service managers (the systemd
//! unit's `ExecStartPost`), container health checks and monitoring scripts without curl.
//!
//! `--wait-secs` retries until the answer is yes or the time is up (a server still starting).
//! The answer's text is printed: `ready`, or each reason it is not.

use crate::client::Api;
use anyhow::Result;
use clap::Args;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct ProbeArgs {
    /// Ask for readiness (`/readyz`: the spool takes posts, the store answers, the listeners
    /// accept) instead of liveness (`/healthz`: the process answers).
    #[arg(long)]
    ready: bool,
    /// Keep asking for up to this many seconds before giving up.
    #[arg(long, default_value_t = 0)]
    wait_secs: u64,
}

/// Between tries while waiting.
const RETRY: Duration = Duration::from_millis(200);

pub async fn run(api: &Api, args: ProbeArgs) -> Result<()> {
    let path = if args.ready { "/readyz" } else { "/healthz" };
    let deadline = Instant::now() + Duration::from_secs(args.wait_secs);
    loop {
        match api.get_bytes(path).await {
            Ok(body) => {
                print!("{}", String::from_utf8_lossy(&body));
                return Ok(());
            }
            Err(e) if Instant::now() >= deadline => return Err(e.context(format!("GET {path}"))),
            Err(_) => tokio::time::sleep(RETRY).await,
        }
    }
}
