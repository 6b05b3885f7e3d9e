//! The SMTP service extensions a server announced in its EHLO reply (RFC 5321 §4.1.1.1).
//!
//! Only the extensions the client acts on are kept. Keywords are case-insensitive; unknown ones
//! are ignored. SECURITY: the EHLO reply comes from a hostile server; parsing is total (never
//! fails) and a `SIZE` value that is not a number is treated as "no limit announced".

use herald_types::Reply;

/// What the server supports, as far as this client cares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extensions {
    /// False when the server refused EHLO and the session runs on HELO (RFC 821 rules).
    pub esmtp: bool,
    /// RFC 2920: commands may be sent in groups.
    pub pipelining: bool,
    /// RFC 1870: `Some(0)` when SIZE is offered without a limit, `Some(n)` for a fixed limit.
    pub size: Option<u64>,
    /// RFC 6152.
    pub eight_bit_mime: bool,
    /// RFC 3207.
    pub starttls: bool,
    /// RFC 2034.
    pub enhanced_status_codes: bool,
    /// RFC 6531.
    pub smtputf8: bool,
    /// RFC 3461: the DSN parameters of a relayed message may be passed on.
    pub dsn: bool,
}

impl Extensions {
    /// Extensions from an EHLO reply: every line after the first names one.
    pub fn from_ehlo(reply: &Reply) -> Extensions {
        let mut ext = Extensions {
            esmtp: true,
            ..Extensions::default()
        };
        for line in reply.text.split('\n').skip(1) {
            let mut words = line.split_ascii_whitespace();
            let Some(keyword) = words.next() else {
                continue;
            };
            match keyword.to_ascii_uppercase().as_str() {
                "PIPELINING" => ext.pipelining = true,
                "8BITMIME" => ext.eight_bit_mime = true,
                "STARTTLS" => ext.starttls = true,
                "ENHANCEDSTATUSCODES" => ext.enhanced_status_codes = true,
                "SMTPUTF8" => ext.smtputf8 = true,
                "DSN" => ext.dsn = true,
                "SIZE" => {
                    let limit = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                    ext.size = Some(limit);
                }
                _ => {}
            }
        }
        ext
    }

    /// A session opened with HELO: no extensions at all.
    pub fn helo_only() -> Extensions {
        Extensions::default()
    }

    /// The fixed size limit, when the server announced one.
    pub fn size_limit(&self) -> Option<u64> {
        self.size.filter(|&n| n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_typical_ehlo_reply() {
        let reply = Reply::parse_lines(&[
            "250-mx.example.com greets you",
            "250-PIPELINING",
            "250-size 10240000",
            "250-8BITMIME",
            "250-STARTTLS",
            "250-X-UNKNOWN a b",
            "250-dsn",
            "250 ENHANCEDSTATUSCODES",
        ])
        .expect("reply");
        let ext = Extensions::from_ehlo(&reply);
        assert!(ext.esmtp && ext.pipelining && ext.eight_bit_mime && ext.starttls);
        assert!(ext.enhanced_status_codes && !ext.smtputf8 && ext.dsn);
        assert_eq!(ext.size_limit(), Some(10_240_000));
    }

    #[test]
    fn greeting_line_is_not_an_extension_and_junk_size_means_unlimited() {
        let reply = Reply::parse_lines(&["250-PIPELINING", "250 SIZE lots"]).expect("reply");
        let ext = Extensions::from_ehlo(&reply);
        assert!(!ext.pipelining);
        assert_eq!((ext.size, ext.size_limit()), (Some(0), None));
    }
}
