//! The mail the lists stage writes itself: confirmation requests, request replies, held-post
//! and moderator notices, disabled-member notices. All go out as generated mail through the one
//! enqueue path (`Submission::Generated`), from `<list>-request`.
//!
//! SECURITY: header values are ASCII addresses and tokens (base64url) or fixed texts, never free
//! text from the request; body text may quote validated addresses and a sanitized subject.

use bytes::Bytes;
use herald_types::{verp, Address};

/// A plain-text message from `<list>-request` to `to`, marked as automatic (RFC 3834) so that
/// vacation responders do not answer it.
pub fn compose(hostname: &str, list: &Address, to: &Address, subject: &str, text: &str) -> Bytes {
    let now = herald_types::unix_ms_now() / 1000;
    let date = mail_parser::DateTime::from_timestamp(now as i64).to_rfc822();
    let request = verp::request_address(list);
    let nonce: u64 = rand::random();
    let mut m = String::with_capacity(text.len() + 512);
    m.push_str(&format!("From: <{request}>\r\n"));
    m.push_str(&format!("To: <{to}>\r\n"));
    m.push_str(&format!("Reply-To: <{request}>\r\n"));
    m.push_str(&format!("Subject: {subject}\r\n"));
    m.push_str(&format!("Date: {date}\r\n"));
    m.push_str(&format!("Message-ID: <herald.{nonce:016x}@{hostname}>\r\n"));
    m.push_str("Auto-Submitted: auto-replied\r\nPrecedence: list\r\n");
    m.push_str("MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n");
    m.push_str("Content-Transfer-Encoding: 8bit\r\n\r\n");
    for line in text.lines() {
        m.push_str(line);
        m.push_str("\r\n");
    }
    Bytes::from(m)
}
