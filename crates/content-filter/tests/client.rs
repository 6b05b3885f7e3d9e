//! The rspamd client against hostile servers on loopback (real sockets): one that never answers,
//! one that refuses connections, HTTP errors, truncated, huge and wrongly typed answers. Each
//! must come back as `FilterVerdict::Failed` with a reason (the enqueue path then holds the
//! post), within the timeout, never as a verdict. The real rspamd is exercised by the root
//! crate's `tests/it/content_filter.rs`.

use bytes::Bytes;
use herald_content_filter::{CheckRequest, ContentFilter, ContentFilterConfig, FilterVerdict};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A server that answers every connection with `response` (raw HTTP bytes) after reading the
/// request head, or never answers when `response` is `None`. Returns its address and a
/// receiver of the request heads it read.
async fn serve(response: Option<Vec<u8>>) -> (SocketAddr, tokio::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let (response, tx) = (response.clone(), tx.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tx.send(String::from_utf8_lossy(&got).into_owned()).await;
                match response {
                    Some(r) => {
                        let _ = sock.write_all(&r).await;
                        let _ = sock.shutdown().await;
                    }
                    // Hold the socket open and silent for longer than any test waits.
                    None => tokio::time::sleep(Duration::from_secs(120)).await,
                }
            });
        }
    });
    (addr, rx)
}

fn filter(addr: SocketAddr, timeout_ms: u64) -> ContentFilter {
    let cfg = ContentFilterConfig {
        enabled: true,
        rspamd_url: format!("http://{addr}"),
        timeout_ms,
        password: "s3cret".into(),
        ..Default::default()
    };
    ContentFilter::new(&cfg).expect("valid").expect("enabled")
}

fn http(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn request() -> CheckRequest {
    CheckRequest {
        ip: Some("127.0.0.9".parse().expect("ip")),
        helo: Some("poster.test".into()),
        mail_from: Some("carol@d0.test".into()),
        rcpts: vec!["dev@lists.test".into()],
        queue_id: "q1".into(),
    }
}

const MESSAGE: &[u8] = b"From: carol@d0.test\r\nSubject: hi\r\n\r\nhello\r\n";

#[tokio::test]
async fn sends_the_envelope_headers_rspamd_reads() {
    let ok = r#"{"action":"no action","score":0.5,"required_score":15,"symbols":{}}"#;
    let (addr, mut heads) = serve(Some(http("200 OK", ok))).await;
    let d = filter(addr, 2000)
        .check(&request(), Bytes::from_static(MESSAGE))
        .await;
    assert_eq!(d.verdict, FilterVerdict::Accept, "{}", d.reason);
    let head = heads.recv().await.expect("a request").to_ascii_lowercase();
    assert!(head.starts_with("post /checkv2 http/1.1"), "{head}");
    for h in [
        "ip: 127.0.0.9",
        "helo: poster.test",
        "from: carol@d0.test",
        "rcpt: dev@lists.test",
        "queue-id: q1",
        "password: s3cret",
    ] {
        assert!(head.contains(h), "{h} missing in {head}");
    }
}

#[tokio::test]
async fn hostile_or_absent_servers_fail_with_a_reason_within_the_timeout() {
    let huge = format!(
        "{{\"action\":\"no action\",\"score\":0,\"pad\":\"{}\"}}",
        "x".repeat(herald_content_filter::MAX_ANSWER_BYTES + 10)
    );
    let truncated = b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{\"action\":\"no act".to_vec();
    let cases: Vec<(&str, Option<Vec<u8>>, &str)> = vec![
        ("silent", None, "no answer within 300 ms"),
        (
            "500",
            Some(http("500 Internal Server Error", "{}")),
            "HTTP 500",
        ),
        (
            "wrong types",
            Some(http("200 OK", r#"{"action":["reject"],"score":"high"}"#)),
            "not rspamd's JSON",
        ),
        (
            "not json",
            Some(http("200 OK", "<html>hi</html>")),
            "not rspamd's JSON",
        ),
        ("huge", Some(http("200 OK", &huge)), "larger than"),
        ("truncated", Some(truncated), "content filter unavailable"),
        (
            "garbage",
            Some(b"\0\0\0 hello\r\n\r\n".to_vec()),
            "content filter unavailable",
        ),
    ];
    for (name, response, why) in cases {
        let (addr, _heads) = serve(response).await;
        let started = Instant::now();
        let d = filter(addr, 300)
            .check(&request(), Bytes::from_static(MESSAGE))
            .await;
        assert_eq!(d.verdict, FilterVerdict::Failed, "{name}: {}", d.reason);
        assert!(d.reason.contains(why), "{name}: {}", d.reason);
        assert!(
            started.elapsed() < Duration::from_millis(2000),
            "{name}: took {:?}",
            started.elapsed()
        );
    }
    // Nothing listening: a free port, closed again.
    let free = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = free.local_addr().expect("addr");
    drop(free);
    let d = filter(addr, 1000)
        .check(&request(), Bytes::from_static(MESSAGE))
        .await;
    assert_eq!(d.verdict, FilterVerdict::Failed);
    assert!(d.reason.contains("cannot reach rspamd"), "{}", d.reason);
}
