//! The admin commands: thin clients of a running server's HTTP API. When no server answers they
//! say so plainly instead of printing a connection error chain.

use anyhow::{anyhow, bail, Context, Result};
use clap::{Subcommand, ValueEnum};
use herald_server::Config;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A running server's HTTP API.
pub struct Api {
    base: String,
    http: reqwest::Client,
    /// Sent as `Authorization: Bearer` (from `http.admin_token` or `HERALD_ADMIN_TOKEN`).
    token: Option<String>,
}

impl Api {
    pub fn new(server: Option<String>, config: &Config) -> Result<Api> {
        let base = server
            .unwrap_or_else(|| format!("http://{}", config.listen.http))
            .trim_end_matches('/')
            .to_string();
        Ok(Api::with_base(base)?.with_token(config.http.admin_token()))
    }

    pub fn with_base(base: String) -> Result<Api> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(300))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Api {
            base,
            http,
            token: None,
        })
    }

    /// The same client, sending `token` as a bearer token.
    pub fn with_token(mut self, token: Option<String>) -> Api {
        self.token = token;
        self
    }

    /// The server's base URL, e.g. `http://127.0.0.1:8025`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends a request: the status and the body, or a plain error when nothing answers.
    async fn raw(&self, req: reqwest::RequestBuilder) -> Result<(reqwest::StatusCode, Vec<u8>)> {
        let req = match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let resp = req.send().await.map_err(|e| {
            if e.is_connect() {
                anyhow!(
                    "no Herald server is answering at {} (is `herald serve` running? use --server to point elsewhere)",
                    self.base
                )
            } else {
                anyhow!("request to {} failed: {e}", self.base)
            }
        })?;
        let status = resp.status();
        let body = resp.bytes().await.context("reading the server's answer")?;
        Ok((status, body.to_vec()))
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Value> {
        let (status, body) = self.raw(req).await?;
        let text = String::from_utf8_lossy(&body).into_owned();
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if !status.is_success() {
            bail!("{} (HTTP {status})", error_text(&value));
        }
        Ok(value)
    }

    pub async fn get(&self, path: &str) -> Result<Value> {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }
    pub async fn post_json(&self, path: &str, body: &Value) -> Result<Value> {
        self.send(self.http.post(format!("{}{path}", self.base)).json(body))
            .await
    }
    pub async fn patch_json(&self, path: &str, body: &Value) -> Result<Value> {
        self.send(self.http.patch(format!("{}{path}", self.base)).json(body))
            .await
    }
    pub async fn post_bytes(&self, path: &str, body: Vec<u8>, content_type: &str) -> Result<Value> {
        let req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", content_type)
            .body(body);
        self.send(req).await
    }
    /// A raw body (a stored message), not JSON; errors read like [`Api::get`]'s.
    pub async fn get_bytes(&self, path: &str) -> Result<Vec<u8>> {
        let (status, body) = self
            .raw(self.http.get(format!("{}{path}", self.base)))
            .await?;
        if !status.is_success() {
            let value = serde_json::from_slice(&body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
            bail!("{} (HTTP {status})", error_text(&value));
        }
        Ok(body)
    }
    pub async fn delete(&self, path: &str) -> Result<Value> {
        self.send(self.http.delete(format!("{}{path}", self.base)))
            .await
    }
}

/// The `error` of an API error body, or the whole body.
fn error_text(value: &Value) -> String {
    value["error"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| value.to_string())
}

/// When From is rewritten to the list address (DMARC).
#[derive(Clone, Copy, ValueEnum)]
pub enum FromRewrite {
    /// When the poster's domain publishes DMARC p=reject or p=quarantine.
    WhenNeeded,
    Always,
    Never,
}

/// The poster's own DKIM-Signature in copies.
#[derive(Clone, Copy, ValueEnum)]
pub enum PosterDkim {
    Keep,
    /// Renamed to X-Original-DKIM-Signature when From is rewritten.
    RenameWhenRewritten,
    Remove,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Policy {
    Members,
    Anyone,
    Moderators,
}

#[derive(Subcommand)]
pub enum ListCommand {
    /// Create a list.
    Create {
        /// The posting address, e.g. announce@lists.example.org
        address: String,
        /// Display name (List-Id, footers).
        #[arg(long)]
        name: Option<String>,
        /// Who may post without moderation.
        #[arg(long, value_enum, default_value_t = Policy::Members)]
        policy: Policy,
        /// Subject prefix, e.g. "[announce]".
        #[arg(long)]
        prefix: Option<String>,
        /// Reply-To: "poster", "list" or an address.
        #[arg(long, default_value = "poster")]
        reply_to: String,
        /// Footer template ({{name}}, {{email}}, {{unsubscribe_url}}, custom fields).
        #[arg(long, conflicts_with = "footer_file")]
        footer: Option<String>,
        /// Read the footer template from a file.
        #[arg(long)]
        footer_file: Option<PathBuf>,
        /// Do not address each copy's To: to its member.
        #[arg(long)]
        no_personalize: bool,
        /// Give up on a copy after this many hours (default 120).
        #[arg(long)]
        max_age_hours: Option<u64>,
        /// Rewrite From to "Poster via List" <list> (DMARC).
        #[arg(long, value_enum, default_value_t = FromRewrite::WhenNeeded)]
        from_rewrite: FromRewrite,
        /// What becomes of the poster's DKIM-Signature.
        #[arg(long, value_enum, default_value_t = PosterDkim::RenameWhenRewritten)]
        poster_dkim: PosterDkim,
    },
    /// List all lists with member counts.
    Ls,
    /// Show one list's settings and counts.
    Show { address: String },
    /// Change settings of a list: `name=value` pairs with the names `list show` prints, e.g.
    /// `from_rewrite=always`, `subject_prefix="[dev]"`, `personalize=false`. A value that
    /// reads as JSON (true, 5, "x", null, [..]) is taken as such; anything else as a string.
    Set {
        address: String,
        #[arg(required = true, value_parser = parse_setting)]
        settings: Vec<(String, Value)>,
    },
    /// Delete a list and its members.
    Rm { address: String },
}

#[derive(Subcommand)]
pub enum MemberCommand {
    /// Add (or update) one member.
    Add {
        list: String,
        address: String,
        #[arg(long)]
        name: Option<String>,
        /// A custom field for footers, as key=value (repeatable).
        #[arg(long = "field", value_parser = parse_field)]
        fields: Vec<(String, String)>,
    },
    /// Remove a member.
    Rm { list: String, address: String },
    /// List members.
    Ls {
        list: String,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Import members from a CSV file with a header row: email[,name][,custom fields…].
    Import { list: String, file: PathBuf },
    /// A member's status, bounce score and bounce history.
    Show { list: String, address: String },
}

fn parse_setting(s: &str) -> Result<(String, Value), String> {
    let (k, v) = s
        .split_once('=')
        .filter(|(k, _)| !k.trim().is_empty())
        .ok_or_else(|| format!("expected name=value, got {s:?}"))?;
    let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
    Ok((k.trim().to_string(), value))
}

fn parse_field(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

pub(crate) fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'@' | b'+' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub async fn list(api: &Api, cmd: ListCommand) -> Result<()> {
    match cmd {
        ListCommand::Create {
            address,
            name,
            policy,
            prefix,
            reply_to,
            footer,
            footer_file,
            no_personalize,
            max_age_hours,
            from_rewrite,
            poster_dkim,
        } => {
            let footer = match footer_file {
                Some(p) => Some(
                    std::fs::read_to_string(&p)
                        .with_context(|| format!("reading {}", p.display()))?,
                ),
                None => footer,
            };
            let reply_to = match reply_to.as_str() {
                "poster" => json!({"kind": "poster"}),
                "list" => json!({"kind": "list"}),
                addr => json!({"kind": "explicit", "address": addr}),
            };
            let policy = match policy {
                Policy::Members => "members",
                Policy::Anyone => "anyone",
                Policy::Moderators => "moderators",
            };
            let mut settings = json!({
                "display_name": name.unwrap_or_default(),
                "posting_policy": policy,
                "subject_prefix": prefix,
                "reply_to": reply_to,
                "footer": footer,
                "personalize": !no_personalize,
                "from_rewrite": match from_rewrite {
                    FromRewrite::WhenNeeded => "when_needed",
                    FromRewrite::Always => "always",
                    FromRewrite::Never => "never",
                },
                "poster_dkim": match poster_dkim {
                    PosterDkim::Keep => "keep",
                    PosterDkim::RenameWhenRewritten => "rename_when_rewritten",
                    PosterDkim::Remove => "remove",
                },
            });
            if let Some(h) = max_age_hours {
                settings["max_age_secs"] = json!(h * 3600);
            }
            let list = api
                .post_json(
                    "/api/lists",
                    &json!({"address": address, "settings": settings}),
                )
                .await?;
            outln!(
                "created list {} (id {})",
                list["address"].as_str().unwrap_or("?"),
                list["id"]
            );
        }
        ListCommand::Ls => {
            let lists = api.get("/api/lists").await?;
            outln!(
                "{:<40} {:>10} {:>10} {:>10}",
                "LIST",
                "MEMBERS",
                "ENABLED",
                "DISABLED"
            );
            for l in lists.as_array().into_iter().flatten() {
                outln!(
                    "{:<40} {:>10} {:>10} {:>10}",
                    l["address"].as_str().unwrap_or("?"),
                    l["members"]["total"],
                    l["members"]["enabled"],
                    l["members"]["disabled"]
                );
            }
        }
        ListCommand::Show { address } => {
            let l = api.get(&format!("/api/lists/{}", enc(&address))).await?;
            outln!("{}", serde_json::to_string_pretty(&l)?);
        }
        ListCommand::Set { address, settings } => {
            let changes: serde_json::Map<String, Value> = settings.into_iter().collect();
            let l = api
                .patch_json(
                    &format!("/api/lists/{}", enc(&address)),
                    &Value::Object(changes),
                )
                .await?;
            outln!("{}", serde_json::to_string_pretty(&l["settings"])?);
        }
        ListCommand::Rm { address } => {
            api.delete(&format!("/api/lists/{}", enc(&address))).await?;
            outln!("deleted list {address}");
        }
    }
    Ok(())
}

pub async fn member(api: &Api, cmd: MemberCommand) -> Result<()> {
    match cmd {
        MemberCommand::Show { list, address } => {
            crate::lists_cmd::member_show(api, &list, &address).await?
        }
        MemberCommand::Add {
            list,
            address,
            name,
            fields,
        } => {
            let fields: serde_json::Map<String, Value> = fields
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            let m = api
                .post_json(
                    &format!("/api/lists/{}/members", enc(&list)),
                    &json!({"address": address, "name": name, "fields": fields}),
                )
                .await?;
            outln!(
                "added {} to {list} (member id {})",
                m["address"].as_str().unwrap_or("?"),
                m["id"]
            );
        }
        MemberCommand::Rm { list, address } => {
            api.delete(&format!(
                "/api/lists/{}/members/{}",
                enc(&list),
                enc(&address)
            ))
            .await?;
            outln!("removed {address} from {list}");
        }
        MemberCommand::Ls { list, limit } => {
            let ms = api
                .get(&format!(
                    "/api/lists/{}/members?limit={}",
                    enc(&list),
                    limit.clamp(1, 10_000)
                ))
                .await?;
            for m in ms.as_array().into_iter().flatten() {
                let status = m["status"]["state"].as_str().unwrap_or("?");
                outln!(
                    "{:<8} {:<40} {:<10} {}",
                    m["id"],
                    m["address"].as_str().unwrap_or("?"),
                    status,
                    m["display_name"].as_str().unwrap_or("")
                );
            }
        }
        MemberCommand::Import { list, file } => import(api, &list, &file).await?,
    }
    Ok(())
}

/// Rows sent per request: small enough for a smooth progress bar, big enough to be fast.
const IMPORT_CHUNK_ROWS: usize = 5000;

/// Splits a CSV document into chunks of `rows` lines, each chunk starting with the header line.
/// Herald's importer reads one record per line (member data has no line breaks, and a stray
/// quote must cost one row, not swallow the rest of the file), so splitting on lines keeps every
/// record whole. Returns (line number of the chunk's first data line, chunk).
pub fn csv_chunks(text: &[u8], rows: usize) -> Vec<(u64, Vec<u8>)> {
    let mut lines = text.split_inclusive(|&b| b == b'\n');
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let mut header = header.to_vec();
    if !header.ends_with(b"\n") {
        header.push(b'\n');
    }
    let mut chunks = Vec::new();
    let mut current = header.clone();
    let (mut count, mut line_no, mut chunk_start) = (0usize, 1u64, 2u64);
    for line in lines {
        line_no += 1;
        current.extend_from_slice(line);
        count += 1;
        if count >= rows.max(1) {
            chunks.push((chunk_start, std::mem::replace(&mut current, header.clone())));
            count = 0;
            chunk_start = line_no + 1;
        }
    }
    if current.len() > header.len() {
        chunks.push((chunk_start, current));
    }
    chunks
}

async fn import(api: &Api, list: &str, file: &Path) -> Result<()> {
    let text = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    import_bytes(api, list, &text).await
}

/// Imports a CSV document in chunks, with a progress bar and a report of rejected rows.
pub async fn import_bytes(api: &Api, list: &str, text: &[u8]) -> Result<()> {
    let chunks = csv_chunks(text, IMPORT_CHUNK_ROWS);
    let total_lines = text.iter().filter(|&&b| b == b'\n').count().max(1) as u64;
    let bar = ProgressBar::new(total_lines.saturating_sub(1));
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} importing [{bar:40}] {pos}/{len} rows {per_sec} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let (mut added, mut updated, mut rejected) = (0u64, 0u64, Vec::new());
    let path = format!("/api/lists/{}/import", enc(list));
    for (start, chunk) in chunks {
        let lines_in_chunk = chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        let r = api.post_bytes(&path, chunk, "text/csv").await?;
        added += r["added"].as_u64().unwrap_or(0);
        updated += r["updated"].as_u64().unwrap_or(0);
        for row in r["rejected"].as_array().into_iter().flatten() {
            // The server numbers lines within the chunk, whose line 1 is the header.
            let local = row["line"].as_u64().unwrap_or(0);
            let line = start + local.saturating_sub(2);
            rejected.push((line, row["reason"].as_str().unwrap_or("?").to_string()));
        }
        bar.inc(lines_in_chunk.saturating_sub(1));
        bar.set_message(format!("{} rejected", rejected.len()));
    }
    bar.finish_and_clear();
    outln!(
        "imported into {list}: {added} added, {updated} updated, {} rejected",
        rejected.len()
    );
    for (line, reason) in &rejected {
        outln!("  line {line}: {reason}");
    }
    Ok(())
}

pub async fn post(api: &Api, list: &str, file: &Path, wait: bool) -> Result<()> {
    let body = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let r = api
        .post_bytes(
            &format!("/api/lists/{}/posts", enc(list)),
            body,
            "message/rfc822",
        )
        .await?;
    let id = r["post"].as_str().unwrap_or("?").to_string();
    outln!("post {id} accepted for {list}");
    if wait {
        let summary = wait_for_post(api, &id, Duration::from_secs(7 * 24 * 3600)).await?;
        print_summary(&summary);
    }
    Ok(())
}

/// Shows a progress bar until every recipient of the post has a final outcome.
pub async fn wait_for_post(api: &Api, id: &str, limit: Duration) -> Result<Value> {
    let bar = ProgressBar::new(1);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] [{bar:40}] {pos}/{len} copies {per_sec} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = std::time::Instant::now();
    loop {
        let p = api.get(&format!("/api/posts/{id}")).await?;
        if let Some(total) = p["recipients"].as_u64() {
            bar.set_length(
                total
                    .saturating_sub(p["already_done"].as_u64().unwrap_or(0))
                    .max(1),
            );
        }
        let done = p["delivered"].as_u64().unwrap_or(0) + p["failed"].as_u64().unwrap_or(0);
        bar.set_position(done);
        bar.set_message(format!(
            "delivered {} failed {} deferred {}",
            p["delivered"], p["failed"], p["deferred_attempts"]
        ));
        if p["complete"].as_bool() == Some(true) {
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

fn ms(v: &Value) -> String {
    v.as_u64()
        .map_or("-".into(), |m| format!("{:.3} s", m as f64 / 1000.0))
}

pub fn print_summary(p: &Value) {
    outln!(
        "post {} to {}",
        p["post"].as_str().unwrap_or("?"),
        p["list"].as_str().unwrap_or("?")
    );
    outln!("  recipients        {}", p["recipients"]);
    outln!("  delivered         {}", p["delivered"]);
    outln!("  failed            {}", p["failed"]);
    outln!("  deferred attempts {}", p["deferred_attempts"]);
    outln!("  first copy        {}", ms(&p["t_first_ms"]));
    outln!("  50 % delivered    {}", ms(&p["t50_ms"]));
    outln!("  95 % delivered    {}", ms(&p["t95_ms"]));
    outln!("  100 % delivered   {}", ms(&p["t100_ms"]));
}

pub async fn queue(api: &Api, as_json: bool, limit: usize, stragglers: bool) -> Result<()> {
    let q = api
        .get(&format!("/api/queue?limit={limit}&stragglers={stragglers}"))
        .await?;
    if as_json {
        outln!("{}", serde_json::to_string_pretty(&q)?);
        return Ok(());
    }
    outln!(
        "queued {}  (fast {}  slow {})  resolving {}  connections {} (slow {})  hosts down {}",
        q["queued"],
        q["fast_lane"],
        q["slow_lane"],
        q["resolving"],
        q["connections"],
        q["slow_connections"],
        q["hosts_down"]
    );
    outln!(
        "{:<40} {:>7} {:>7} {:>7} {:>9} {:>8} {:>8}  LAST ERROR",
        "DESTINATION",
        "READY",
        "RETRY",
        "WAITING",
        "CONNS",
        "OLDEST",
        "DOWN"
    );
    for d in q["destinations"]
        .as_array()
        .into_iter()
        .flatten()
        .take(limit)
    {
        let down = d["down_for_secs"]
            .as_u64()
            .map_or("-".into(), |s| format!("{s}s"));
        outln!(
            "{:<40} {:>7} {:>7} {:>7} {:>9} {:>7}s {:>8}  {}",
            d["destination"].as_str().unwrap_or("?"),
            d["ready"],
            d["retry_ready"],
            d["waiting"],
            format!("{}/{}", d["connections"], d["connection_limit"]),
            d["oldest_age_secs"],
            down,
            d["last_error"].as_str().unwrap_or("")
        );
    }
    if stragglers {
        outln!("\n{:<50} {:>8} {:>10}", "STRAGGLER", "PENDING", "OLDEST");
        for s in q["stragglers"].as_array().into_iter().flatten().take(limit) {
            outln!(
                "{:<50} {:>8} {:>9}s",
                s["recipient"].as_str().unwrap_or("?"),
                s["pending"],
                s["oldest_age_secs"]
            );
        }
    }
    let down: Vec<_> = q["down_hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .take(limit)
        .collect();
    if !down.is_empty() {
        outln!(
            "\n{:<40} {:<16} {:>8} {:>8}  LAST ERROR",
            "DOWN HOST",
            "ADDRESS",
            "FAILURES",
            "PROBE IN"
        );
        for h in down {
            outln!(
                "{:<40} {:<16} {:>8} {:>7}s  {}",
                h["host"].as_str().unwrap_or("?"),
                h["addr"].as_str().unwrap_or("?"),
                h["consecutive_failures"],
                h["probe_in_secs"],
                h["last_error"].as_str().unwrap_or("")
            );
        }
    }
    Ok(())
}

pub async fn status(api: &Api) -> Result<()> {
    let s = api.get("/api/status").await?;
    outln!(
        "herald {}  up {} s",
        s["version"].as_str().unwrap_or("?"),
        s["uptime_secs"]
    );
    outln!("lists {}  members {}", s["lists"], s["members"]);
    outln!(
        "queue: {} copies queued, {} connections, {} destinations with work",
        s["queued"],
        s["connections"],
        s["destinations"]
    );
    let sp = &s["spool"];
    outln!(
        "spool: {} live posts, {} segments, {} commits, fsync avg {} µs",
        sp["live_posts"],
        sp["segments"],
        sp["commits"],
        sp["fsync_avg_us"]
    );
    outln!("recent posts:");
    for p in s["posts"].as_array().into_iter().flatten() {
        outln!(
            "  {} {:<32} recipients {} delivered {} failed {} pending {}{}",
            p["post"].as_str().unwrap_or("?"),
            p["list"].as_str().unwrap_or("?"),
            p["recipients"],
            p["delivered"],
            p["failed"],
            p["pending"],
            if p["complete"].as_bool() == Some(true) {
                " (complete)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_chunks_repeat_the_header_and_number_lines() {
        let text = b"email,name\na@x.example,A\nb@x.example,\"B\nc@x.example,C";
        let chunks = csv_chunks(text, 2);
        assert_eq!(chunks.len(), 2);
        assert_eq!(
            chunks[0],
            (2, b"email,name\na@x.example,A\nb@x.example,\"B\n".to_vec())
        );
        assert_eq!(chunks[1], (4, b"email,name\nc@x.example,C".to_vec()));
        assert!(csv_chunks(b"", 10).is_empty());
        assert!(csv_chunks(b"email\n", 10).is_empty());
    }
}
