//! The CLI's client of a running server's HTTP API: requests with the admin token, answers
//! decoded into `herald-api-types` views, and plain errors (when no server answers it says
//! so, instead of printing a connection error chain; a server's problem body is shown by its
//! `detail`). The commands that use it live in the `*_cmd.rs` files; the helpers at the end
//! (`enc`, `pretty`, `or_null`) are how they all write paths and answers.

use anyhow::{anyhow, bail, Context, Result};
use herald_server::Config;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::path::Path;
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

/// A path segment percent-encoded (an address keeps its `@` and `+`, readable in logs).
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

/// An optional count as the CLI has always printed it (`null` when the server has none yet).
pub(crate) fn or_null(v: Option<u64>) -> String {
    v.map_or_else(|| "null".into(), |n| n.to_string())
}

/// A view as indented JSON with its keys sorted, as `--json` has always printed answers.
pub(crate) fn pretty<T: Serialize>(view: &T) -> Result<String> {
    Ok(serde_json::to_string_pretty(&serde_json::to_value(view)?)?)
}
