//! The sign-in mail: a plain-text message from `postmaster@<hostname>` carrying the one-time
//! link, built with `mail-builder` (headers encoded and folded by the library).
//!
//! The body goes out as written (`7bit` when ASCII, lines in CRLF): quoted-printable would
//! split the long link with soft breaks, and people (and the end-to-end test) copy it from
//! the raw text.

use herald_types::Address;
use mail_builder::headers::address::Address as MailAddress;
use mail_builder::headers::date::Date;
use mail_builder::headers::raw::Raw;
use mail_builder::mime::{BodyPart, MimePart};
use mail_builder::MessageBuilder;

/// The message (RFC 5322 bytes) mailing `url` to `to`, valid `minutes`.
pub fn sign_in_link(
    hostname: &str,
    to: &Address,
    url: &str,
    minutes: u64,
    now_secs: u64,
) -> Vec<u8> {
    let from = format!("postmaster@{hostname}");
    let text = format!(
        "Somebody (probably you) asked to sign in to the list server {hostname} as {to}.\n\n\
         Open this link within {minutes} minutes and press the button to sign in. It works once:\n\n  \
         {url}\n\n\
         If you did not ask for this, ignore this message: nobody can sign in without the link.\n"
    );
    let mut body = String::with_capacity(text.len() + 64);
    for line in text.lines() {
        body.push_str(line);
        body.push_str("\r\n");
    }
    let cte = if body.is_ascii() { "7bit" } else { "8bit" };
    let content_type = mail_builder::headers::content_type::ContentType::new("text/plain")
        .attribute("charset", "utf-8");
    let part = MimePart::new(content_type, BodyPart::Text(body.into())).transfer_encoding(cte);
    let nonce: u64 = rand::random();
    let builder = MessageBuilder::new()
        .from(MailAddress::new_address(None::<&str>, from))
        .to(MailAddress::new_address(None::<&str>, to.to_string()))
        .subject("Your sign-in link")
        .date(Date::new(i64::try_from(now_secs).unwrap_or(i64::MAX)))
        .message_id(format!("herald.signin.{nonce:016x}@{hostname}"))
        .header("Auto-Submitted", Raw::new("auto-generated"))
        .header("MIME-Version", Raw::new("1.0"))
        .body(part);
    let mut out = Vec::with_capacity(1024);
    // Into a Vec: no I/O, nothing can fail.
    builder.serialize(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_stays_whole_on_one_line() {
        let to = Address::parse("jörg@bücher.example").expect("address");
        let url = format!("https://lists.example/login/{}", "A".repeat(43));
        let raw = sign_in_link("lists.example", &to, &url, 15, 1_700_000_000);
        let text = String::from_utf8_lossy(&raw);
        assert!(text.contains(&format!("  {url}\r\n")), "{text}");
        assert!(text.contains("From: <postmaster@lists.example>"), "{text}");
        assert!(text.contains("Auto-Submitted: auto-generated"));
    }
}
