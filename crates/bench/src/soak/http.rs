//! A minimal HTTP/1.1 client for the soak's API calls and polls: one connection per request
//! (`Connection: close`), the response read to its end, chunked bodies decoded. Enough for a
//! local Herald; not a general client.
//!
//! SECURITY: talks only to the base URL given (plain http on a local address); responses are
//! bounded by [`MAX_RESPONSE`] and every request by [`TIMEOUT`].

use anyhow::{bail, Context, Result};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response read (a /metrics page is tens of KB).
const MAX_RESPONSE: u64 = 16 << 20;
/// Time allowed for one request, connect to last byte.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// `http://host:port` of a base URL, without a trailing slash.
pub fn host_port(base: &str) -> Result<&str> {
    let rest = base
        .strip_prefix("http://")
        .context("the HTTP base must be http://host:port")?;
    Ok(rest.trim_end_matches('/'))
}

/// Sends one request; returns the status and the body.
pub async fn request(
    base: &str,
    method: &str,
    path: &str,
    json: Option<&str>,
) -> Result<(u16, Vec<u8>)> {
    let host = host_port(base)?;
    tokio::time::timeout(TIMEOUT, exchange(host, method, path, json))
        .await
        .with_context(|| format!("{method} {path}: timeout"))?
}

async fn exchange(
    host: &str,
    method: &str,
    path: &str,
    json: Option<&str>,
) -> Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(host).await.context("connect")?;
    let body = json.unwrap_or("");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if json.is_some() {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    s.take(MAX_RESPONSE).read_to_end(&mut raw).await?;
    parse(&raw)
}

fn parse(raw: &[u8]) -> Result<(u16, Vec<u8>)> {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        bail!("no end of headers in the response");
    };
    let head = String::from_utf8_lossy(&raw[..end]);
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no status code")?;
    let body = &raw[end + 4..];
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    Ok((
        status,
        if chunked {
            dechunk(body)?
        } else {
            body.to_vec()
        },
    ))
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            bail!("truncated chunked body");
        };
        let size_text = String::from_utf8_lossy(&b[..eol]);
        let size_hex = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16).context("bad chunk size")?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size {
            bail!("truncated chunk");
        }
        out.extend_from_slice(&b[..size]);
        b = b.get(size + 2..).unwrap_or(&[]);
    }
}

/// Percent-encodes a path segment (an email address in the API's member URLs).
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked_responses() {
        let plain = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(parse(plain).unwrap(), (201, b"ok".to_vec()));
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse(chunked).unwrap(), (200, b"abcde".to_vec()));
        assert!(parse(b"HTTP/1.1 200 OK\r\n").is_err());
    }

    #[test]
    fn encodes_addresses_for_paths() {
        assert_eq!(segment("a+b@x.test"), "a%2Bb%40x.test");
    }
}
