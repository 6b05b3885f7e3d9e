//! `herald post`: an administrator's post injected through the API, and (with `--wait`, and
//! for the demo) a progress bar until every copy has a final outcome, then its summary.

use crate::client::{enc, or_null, Api};
use anyhow::{bail, Context, Result};
use herald_api_types::{Injected, PostSummary};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::Path;
use std::time::Duration;

pub async fn post(api: &Api, list: &str, file: &Path, wait: bool) -> Result<()> {
    let body = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let r: Injected = api
        .post_bytes(
            &format!("/api/v1/lists/{}/posts", enc(list)),
            body,
            "message/rfc822",
        )
        .await?;
    let id = r.post;
    outln!("post {id} accepted for {list}");
    if wait {
        let summary = wait_for_post(api, &id, Duration::from_secs(7 * 24 * 3600)).await?;
        print_summary(&summary);
    }
    Ok(())
}

/// Shows a progress bar until every recipient of the post has a final outcome.
pub async fn wait_for_post(api: &Api, id: &str, limit: Duration) -> Result<PostSummary> {
    let bar = ProgressBar::new(1);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] [{bar:40}] {pos}/{len} copies {per_sec} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = std::time::Instant::now();
    loop {
        let p: PostSummary = api.get(&format!("/api/v1/posts/{id}")).await?;
        if let Some(total) = p.recipients {
            bar.set_length(total.saturating_sub(p.already_done).max(1));
        }
        bar.set_position(p.delivered + p.failed);
        bar.set_message(format!(
            "delivered {} failed {} deferred {}",
            p.delivered, p.failed, p.deferred_attempts
        ));
        if p.complete {
            bar.finish_and_clear();
            return Ok(p);
        }
        if started.elapsed() > limit {
            bar.abandon();
            bail!("post {id} is still not complete after {:?}", limit);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ms(v: Option<u64>) -> String {
    v.map_or("-".into(), |m| format!("{:.3} s", m as f64 / 1000.0))
}
pub fn print_summary(p: &PostSummary) {
    outln!("post {} to {}", p.post, p.list);
    outln!("  recipients        {}", or_null(p.recipients));
    outln!("  delivered         {}", p.delivered);
    outln!("  failed            {}", p.failed);
    outln!("  deferred attempts {}", p.deferred_attempts);
    outln!("  first copy        {}", ms(p.t_first_ms));
    outln!("  50 % delivered    {}", ms(p.t50_ms));
    outln!("  95 % delivered    {}", ms(p.t95_ms));
    outln!("  100 % delivered   {}", ms(p.t100_ms));
}
