//! The admin commands: thin clients of a running server's HTTP API. When no server answers they
//! say so plainly instead of printing a connection error chain.

use anyhow::{anyhow, bail, Context, Result};
use clap::{Subcommand, ValueEnum};
use herald_api_types::{
    ImportReport, Injected, ListInfo, ListView, PostSummary, QueueSnapshot, Status,
};
use herald_server::Config;
use indicatif::{ProgressBar, ProgressStyle};
use serde::de::DeserializeOwned;
use serde::Serialize;
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
    /// `ca_file`: a PEM file of CA certificates to trust for an `https://` server (the CLI's
    /// client has no built-in roots: an admin listener's certificate is usually the operator's
    /// own CA's). Without `--server`, the URL is the config's `listen.http`, `https` when the
    /// config turns TLS on for it.
    pub fn new(server: Option<String>, config: &Config, ca_file: Option<&Path>) -> Result<Api> {
        let scheme = if config.http.tls_enabled() {
            "https"
        } else {
            "http"
        };
        let base = server
            .unwrap_or_else(|| format!("{scheme}://{}", config.listen.http))
            .trim_end_matches('/')
            .to_string();
        Ok(Api::with_base_and_ca(base, ca_file)?.with_token(config.http.admin_token()))
    }

    pub fn with_base(base: String) -> Result<Api> {
        Api::with_base_and_ca(base, None)
    }

    fn with_base_and_ca(base: String, ca_file: Option<&Path>) -> Result<Api> {
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(Duration::from_secs(300));
        if let Some(path) = ca_file {
            let pem = std::fs::read(path)
                .with_context(|| format!("--ca-file {}: cannot read", path.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("--ca-file {}: not PEM certificates", path.display()))?;
            if certs.is_empty() {
                bail!("--ca-file {}: holds no certificate", path.display());
            }
            for c in certs {
                builder = builder.add_root_certificate(c);
            }
        }
        let http = builder.build().context("cannot build the HTTP client")?;
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

    /// Sends a request with the token: the response, or a plain error when nothing answers.
    async fn respond(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        let req = match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        req.send().await.map_err(|e| {
            if e.is_connect() {
                anyhow!(
                    "no Herald server is answering at {} (is `herald serve` running? use --server to point elsewhere)",
                    self.base
                )
            } else {
                anyhow!("request to {} failed: {e}", self.base)
            }
        })
    }

    /// Sends a request: the status and the body, or a plain error when nothing answers.
    async fn raw(&self, req: reqwest::RequestBuilder) -> Result<(reqwest::StatusCode, Vec<u8>)> {
        let resp = self.respond(req).await?;
        let status = resp.status();
        let body = resp.bytes().await.context("reading the server's answer")?;
        Ok((status, body.to_vec()))
    }

    /// A GET whose answer is read as a stream (a backup), allowed `limit` in all rather than
    /// the usual request timeout: the response once its status says success.
    pub async fn get_streaming(&self, path: &str, limit: Duration) -> Result<reqwest::Response> {
        let resp = self
            .respond(self.http.get(self.url(path)).timeout(limit))
            .await?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.bytes().await.context("reading the server's answer")?;
            bail!("{} (HTTP {status})", error_text(&body));
        }
        Ok(resp)
    }

    /// Sends a request; on success, the body (possibly empty), else the server's error line.
    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Vec<u8>> {
        let (status, body) = self.raw(req).await?;
        if !status.is_success() {
            bail!("{} (HTTP {status})", error_text(&body));
        }
        Ok(body)
    }

    /// Sends a request and decodes the JSON answer into `T` (an `herald-api-types` view); an
    /// answer that does not decode is one clear error naming the endpoint, never a `?` in a
    /// table.
    async fn send_typed<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
        path: &str,
    ) -> Result<T> {
        let body = self.send(req).await?;
        decode(path, &body)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.send_typed(self.http.get(self.url(path)), path).await
    }
    pub async fn post_json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T> {
        self.send_typed(self.http.post(self.url(path)).json(body), path)
            .await
    }
    /// A POST whose success answer carries nothing the caller needs (its body is not decoded).
    pub async fn post_json_unit<B: Serialize + ?Sized>(&self, path: &str, body: &B) -> Result<()> {
        self.send(self.http.post(self.url(path)).json(body))
            .await
            .map(drop)
    }
    /// A POST with no body (an action named by its path), decoding the JSON answer.
    pub async fn post_empty<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.send_typed(self.http.post(self.url(path)), path).await
    }
    pub async fn patch_json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T> {
        self.send_typed(self.http.patch(self.url(path)).json(body), path)
            .await
    }
    pub async fn put_json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T> {
        self.send_typed(self.http.put(self.url(path)).json(body), path)
            .await
    }
    pub async fn post_bytes<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Vec<u8>,
        content_type: &str,
    ) -> Result<T> {
        let req = self
            .http
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body);
        self.send_typed(req, path).await
    }
    /// A raw body (a stored message, `/healthz`), not JSON; errors read like [`Api::get`]'s.
    pub async fn get_bytes(&self, path: &str) -> Result<Vec<u8>> {
        self.send(self.http.get(self.url(path))).await
    }
    /// A PUT answered `204 No Content`.
    pub async fn put_json_unit<B: Serialize + ?Sized>(&self, path: &str, body: &B) -> Result<()> {
        self.send(self.http.put(self.url(path)).json(body))
            .await
            .map(drop)
    }
    /// A DELETE (answered `204 No Content`).
    pub async fn delete(&self, path: &str) -> Result<()> {
        self.send(self.http.delete(self.url(path))).await.map(drop)
    }
    /// A DELETE answered with a JSON body.
    pub async fn delete_typed<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.send_typed(self.http.delete(self.url(path)), path)
            .await
    }
    /// A DELETE naming what to delete in a JSON body (a ban's pattern has `/` and `?` in it).
    pub async fn delete_json<B: Serialize + ?Sized>(&self, path: &str, body: &B) -> Result<()> {
        self.send(self.http.delete(self.url(path)).json(body))
            .await
            .map(drop)
    }
}

/// Decodes a JSON answer into its view type, or says in one line which endpoint answered what.
pub(crate) fn decode<T: DeserializeOwned>(path: &str, body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| {
        anyhow!("unexpected answer from {path} (is the server a different Herald version?): {e}")
    })
}

/// The `detail` of an API problem body ([`herald_api_types::Problem`], which names the field
/// at fault), the `error` of an older server's body, or the whole body: as JSON text
/// when it is JSON, else quoted (as the server's plain-text answers were always shown).
fn error_text(body: &[u8]) -> String {
    /// The fields required, so `{}` or another object falls through.
    #[derive(serde::Deserialize)]
    struct Problem {
        detail: String,
    }
    #[derive(serde::Deserialize)]
    struct Older {
        error: String,
    }
    if let Ok(Problem { detail }) = serde_json::from_slice::<Problem>(body) {
        return detail;
    }
    if let Ok(Older { error }) = serde_json::from_slice::<Older>(body) {
        return error;
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => v.to_string(),
        Err(_) => Value::String(String::from_utf8_lossy(body).into_owned()).to_string(),
    }
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
    /// Re-enable a member (e.g. one disabled for bouncing) and clear their bounce score.
    Enable { list: String, address: String },
    /// Clear a member's bounce score; their status and bounce history stay.
    ResetBounces { list: String, address: String },
    /// Everything Herald holds about an address, on every list (GDPR art. 15), as JSON: memberships
    /// with consent, bounce history, suppression entries, bans, archived posts and recent
    /// delivery-log lines.
    Export { address: String },
    /// Erase an address everywhere (GDPR art. 17): memberships, bounce history, suppression
    /// entries, bans and archived posts go; only a keyed hash stays, so imports and subscriptions
    /// refuse the address from then on. Asks for --yes.
    Erase {
        address: String,
        /// Really erase (there is no undo).
        #[arg(long)]
        yes: bool,
    },
    /// Change a member's settings: `delivery=regular|digest-mime|digest-plain|nomail`.
    Set {
        list: String,
        address: String,
        /// name=value (repeatable); today only `delivery`.
        #[arg(required = true, value_parser = parse_member_setting)]
        settings: Vec<MemberSetting>,
    },
}

/// One `name=value` of `herald member set`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberSetting {
    Delivery(herald_types::DeliveryMode),
    /// Hold the member's posts for a moderator.
    Moderated(bool),
    /// The member's language (a shipped code); empty: the list's.
    Language(String),
}

/// Parses `delivery=<mode>`, `moderated=<yes|no>` or `language=<code>` (empty: the list's);
/// anything else is a clear error naming what is accepted.
pub fn parse_member_setting(s: &str) -> Result<MemberSetting, String> {
    let words = || {
        herald_types::DeliveryMode::ALL
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match s.split_once('=') {
        Some(("delivery", v)) => herald_types::DeliveryMode::parse(v)
            .map(MemberSetting::Delivery)
            .ok_or_else(|| format!("delivery must be one of {}, not {v:?}", words())),
        Some(("moderated", v)) => match v.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Ok(MemberSetting::Moderated(true)),
            "false" | "no" | "off" | "0" => Ok(MemberSetting::Moderated(false)),
            _ => Err(format!("moderated must be true or false, not {v:?}")),
        },
        // Checked here for a clear message before any request; the server checks again.
        Some(("language", v)) if v.is_empty() || herald_i18n::is_shipped(v) => {
            Ok(MemberSetting::Language(v.to_string()))
        }
        Some(("language", v)) => Err(format!(
            "language must be one of {} (or empty for the list's), not {v:?}",
            herald_i18n::CODES.join(", ")
        )),
        Some((k, _)) => Err(format!(
            "unknown member setting {k:?} (known: delivery, moderated, language)"
        )),
        None => Err(format!(
            "expected delivery=<mode>, moderated=<true|false> or language=<code>, got {s:?}"
        )),
    }
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
            // Only when given: an absent setting takes the server's default.
            if let (Some(h), Value::Object(m)) = (max_age_hours, &mut settings) {
                m.insert("max_age_secs".into(), json!(h * 3600));
            }
            let list: ListInfo = api
                .post_json(
                    "/api/v1/lists",
                    &json!({"address": address, "settings": settings}),
                )
                .await?;
            outln!("created list {} (id {})", list.address, list.id);
        }
        ListCommand::Ls => {
            let lists: Vec<ListView> = api.get("/api/v1/lists").await?;
            outln!(
                "{:<40} {:>10} {:>10} {:>10}",
                "LIST",
                "MEMBERS",
                "ENABLED",
                "DISABLED"
            );
            for l in &lists {
                outln!(
                    "{:<40} {:>10} {:>10} {:>10}",
                    l.list.address,
                    l.members.total,
                    l.members.enabled,
                    l.members.disabled
                );
            }
        }
        ListCommand::Show { address } => {
            let l: ListView = api.get(&format!("/api/v1/lists/{}", enc(&address))).await?;
            outln!("{}", pretty(&l)?);
        }
        ListCommand::Set { address, settings } => {
            let changes: serde_json::Map<String, Value> = settings.into_iter().collect();
            let l: ListInfo = api
                .patch_json(
                    &format!("/api/v1/lists/{}", enc(&address)),
                    &Value::Object(changes),
                )
                .await?;
            outln!("{}", pretty(&l.settings)?);
        }
        ListCommand::Rm { address } => {
            api.delete(&format!("/api/v1/lists/{}", enc(&address)))
                .await?;
            outln!("deleted list {address}");
        }
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

pub async fn import(api: &Api, list: &str, file: &Path) -> Result<()> {
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
    let path = format!("/api/v1/lists/{}/import", enc(list));
    for (start, chunk) in chunks {
        let lines_in_chunk = chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        let r: ImportReport = api.post_bytes(&path, chunk, "text/csv").await?;
        added += r.added;
        updated += r.updated;
        for row in r.rejected {
            // The server numbers lines within the chunk, whose line 1 is the header.
            let line = start + row.line.saturating_sub(2);
            rejected.push((line, row.reason));
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

/// An optional count as the CLI has always printed it (`null` when the server has none yet).
pub(crate) fn or_null(v: Option<u64>) -> String {
    v.map_or_else(|| "null".into(), |n| n.to_string())
}

/// A view as indented JSON with its keys sorted, as `--json` has always printed answers.
pub(crate) fn pretty<T: Serialize>(view: &T) -> Result<String> {
    Ok(serde_json::to_string_pretty(&serde_json::to_value(view)?)?)
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

pub async fn queue(api: &Api, as_json: bool, limit: usize, stragglers: bool) -> Result<()> {
    let q: QueueSnapshot = api
        .get(&format!(
            "/api/v1/queue?limit={limit}&stragglers={stragglers}"
        ))
        .await?;
    if as_json {
        outln!("{}", pretty(&q)?);
        return Ok(());
    }
    outln!(
        "queued {}  (fast {}  slow {})  resolving {}  connections {} (slow {})  hosts down {}",
        q.queued,
        q.fast_lane,
        q.slow_lane,
        q.resolving,
        q.connections,
        q.slow_connections,
        q.hosts_down
    );
    outln!(
        "{:<40} {:>7} {:>7} {:>7} {:>7} {:>9} {:>8} {:>8}  LAST ERROR",
        "DESTINATION",
        "READY",
        "RETRY",
        "WAITING",
        "ROOM",
        "CONNS",
        "OLDEST",
        "DOWN"
    );
    for d in q.destinations.iter().take(limit) {
        let down = d.down_for_secs.map_or("-".into(), |s| format!("{s}s"));
        outln!(
            "{:<40} {:>7} {:>7} {:>7} {:>7} {:>9} {:>7}s {:>8}  {}",
            d.destination,
            d.ready,
            d.retry_ready,
            d.waiting,
            d.waiting_for_room,
            format!("{}/{}", d.connections, d.connection_limit),
            d.oldest_age_secs,
            down,
            d.last_error.as_deref().unwrap_or("")
        );
    }
    if stragglers {
        outln!("\n{:<50} {:>8} {:>10}", "STRAGGLER", "PENDING", "OLDEST");
        for s in q.stragglers.iter().take(limit) {
            outln!(
                "{:<50} {:>8} {:>9}s",
                s.recipient,
                s.pending,
                s.oldest_age_secs
            );
        }
    }
    if !q.down_hosts.is_empty() && limit > 0 {
        outln!(
            "\n{:<40} {:<16} {:>8} {:>8}  LAST ERROR",
            "DOWN HOST",
            "ADDRESS",
            "FAILURES",
            "PROBE IN"
        );
        for h in q.down_hosts.iter().take(limit) {
            outln!(
                "{:<40} {:<16} {:>8} {:>7}s  {}",
                h.host,
                h.addr,
                h.consecutive_failures,
                h.probe_in_secs,
                h.last_error.as_deref().unwrap_or("")
            );
        }
    }
    Ok(())
}

pub async fn status(api: &Api) -> Result<()> {
    let s: Status = api.get("/api/v1/status").await?;
    outln!("herald {}  up {} s", s.version, s.uptime_secs);
    match &s.store_error {
        None => outln!("lists {}  members {}", s.lists, s.members),
        Some(why) => {
            outln!("store: DOWN ({why}); lists, members and nodes unknown until it answers")
        }
    }
    outln!(
        "queue: {} copies queued, {} connections, {} destinations with work",
        s.queued,
        s.connections,
        s.destinations
    );
    let sp = &s.spool;
    outln!(
        "spool: {} live posts, {} segments, {} commits, fsync avg {} µs",
        sp.live_posts,
        sp.segments,
        sp.commits,
        sp.fsync_avg_us
    );
    if !s.nodes.is_empty() {
        outln!("nodes:");
        for n in &s.nodes {
            outln!(
                "  {:<24} {:<22} {:<5} heartbeat {:>6.1} s ago  v{} schema {}{}",
                n.node_id,
                n.address,
                n.state,
                n.heartbeat_age_ms as f64 / 1000.0,
                n.version,
                n.schema_version,
                if n.this_node { "  (this node)" } else { "" }
            );
        }
    }
    outln!("recent posts:");
    for p in &s.posts {
        outln!(
            "  {} {:<32} recipients {} delivered {} failed {} pending {}{}",
            p.post,
            p.list,
            or_null(p.recipients),
            p.delivered,
            p.failed,
            or_null(p.pending),
            if p.complete { " (complete)" } else { "" }
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
