//! One request to rspamd: `POST <rspamd_url>/checkv2` with the raw message as the body and the
//! envelope in the headers rspamd reads (`IP`, `Helo`, `From`, `Rcpt`, `Queue-Id`; `Password`
//! when configured). Async I/O with one deadline over connect, send and the whole answer, so a
//! slow or silent rspamd costs the waiting session its timeout and nothing else: the listeners'
//! other sessions run on their own tasks.
//!
//! SECURITY: header values come from the SMTP envelope (already validated by the SMTP layer:
//! addresses parsed by `Address::parse`, HELO checked as a domain or address literal); each is
//! still built with `HeaderValue::from_str`, and one that is not a valid header value is left
//! out rather than sent. The answer is read up to `MAX_ANSWER_BYTES` (see `answer.rs`). No
//! proxy from the environment is used: the post goes to the configured address only.

use crate::answer::{Answer, AnswerError, MAX_ANSWER_BYTES};
use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::net::IpAddr;
use std::time::Duration;

/// The envelope of a post, as rspamd's protocol names it.
#[derive(Debug, Clone, Default)]
pub struct CheckRequest {
    /// The SMTP client's address (`None` over LMTP: the MTA in front is not the client, and
    /// rspamd then reads the `Received:` fields itself).
    pub ip: Option<IpAddr>,
    pub helo: Option<String>,
    /// The envelope sender (`None`: the null reverse path).
    pub mail_from: Option<String>,
    pub rcpts: Vec<String>,
    /// A short id that Herald logs beside the verdict, so the two logs can be matched.
    pub queue_id: String,
}

/// Why rspamd gave no usable answer. The post is then held with this as its reason.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("no answer within {0} ms")]
    Timeout(u64),
    #[error("cannot reach rspamd: {0}")]
    Connect(String),
    #[error("rspamd answered HTTP {0}")]
    Status(u16),
    #[error("{0}")]
    Answer(#[from] AnswerError),
    #[error("request failed: {0}")]
    Request(String),
}

/// An HTTP client for one rspamd.
#[derive(Clone)]
pub struct Rspamd {
    http: reqwest::Client,
    url: reqwest::Url,
    password: Option<HeaderValue>,
    timeout: Duration,
}

/// Why the client could not be built (from a configuration `check` already accepted, so
/// rare: the TLS back end failing to initialise).
#[derive(Debug, thiserror::Error)]
#[error("content_filter: {0}")]
pub struct SetupError(String);

impl Rspamd {
    pub fn new(rspamd_url: &str, password: &str, timeout: Duration) -> Result<Rspamd, SetupError> {
        let base = reqwest::Url::parse(rspamd_url).map_err(|e| SetupError(e.to_string()))?;
        let url = base
            .join("/checkv2")
            .map_err(|e| SetupError(e.to_string()))?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(timeout)
            .timeout(timeout)
            .build()
            .map_err(|e| SetupError(e.to_string()))?;
        let password = match password {
            "" => None,
            p => Some(HeaderValue::from_str(p).map_err(|e| SetupError(e.to_string()))?),
        };
        Ok(Rspamd {
            http,
            url,
            password,
            timeout,
        })
    }

    /// Asks rspamd about `message`. Never waits longer than the timeout.
    pub async fn check(&self, req: &CheckRequest, message: Bytes) -> Result<Answer, FilterError> {
        let ms = self.timeout.as_millis() as u64;
        match tokio::time::timeout(self.timeout, self.exchange(req, message)).await {
            Ok(r) => r,
            Err(_) => Err(FilterError::Timeout(ms)),
        }
    }

    async fn exchange(&self, req: &CheckRequest, message: Bytes) -> Result<Answer, FilterError> {
        let ms = self.timeout.as_millis() as u64;
        let classify = |e: reqwest::Error| {
            if e.is_timeout() {
                FilterError::Timeout(ms)
            } else if e.is_connect() {
                FilterError::Connect(root_cause(&e))
            } else {
                FilterError::Request(root_cause(&e))
            }
        };
        let mut response = self
            .http
            .post(self.url.clone())
            .headers(self.headers(req))
            .body(message)
            .send()
            .await
            .map_err(classify)?;
        if !response.status().is_success() {
            return Err(FilterError::Status(response.status().as_u16()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(classify)? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(AnswerError::TooLarge.into());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer::parse(&body)?)
    }

    fn headers(&self, req: &CheckRequest) -> HeaderMap {
        let mut h = HeaderMap::new();
        let mut put = |name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                h.append(HeaderName::from_static(name), v);
            }
        };
        if let Some(ip) = req.ip {
            put("ip", &ip.to_string());
        }
        if let Some(helo) = &req.helo {
            put("helo", helo);
        }
        put("from", req.mail_from.as_deref().unwrap_or("<>"));
        for r in &req.rcpts {
            put("rcpt", r);
        }
        if !req.queue_id.is_empty() {
            put("queue-id", &req.queue_id);
        }
        if let Some(p) = &self.password {
            h.insert(HeaderName::from_static("password"), p.clone());
        }
        h
    }
}

/// The innermost cause of a reqwest error ("Connection refused (os error 111)"), which says
/// more to an operator than reqwest's outer "error sending request".
fn root_cause(e: &reqwest::Error) -> String {
    let mut source: &dyn std::error::Error = e;
    while let Some(next) = source.source() {
        source = next;
    }
    source.to_string()
}
