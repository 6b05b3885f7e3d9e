//! Every reply the server side of Herald sends, as named constants (STYLE §8: no reply literals
//! at call sites), plus the few builders whose text carries the host name or a limit.
//!
//! Codes follow RFC 5321 §4.2 and §4.5.3.1.10, enhanced codes RFC 3463 / RFC 2034. RFC 2034 §3
//! exempts the greeting and the HELO/EHLO/LHLO replies from enhanced codes, so their builders
//! leave them out; the 354 intermediate reply has none either.
//!
//! Invariant: texts are generic. They never echo peer input except validated address-syntax
//! reasons, so a reply cannot carry CR/LF or leak internal detail.
//!
//! SECURITY: the host name passed to the builders is spliced into the wire reply; callers take it
//! from validated configuration (`inbound` checks it once at start-up).

use crate::Limits;
use herald_types::{EnhancedStatus, Reply};

/// A reply known at compile time. Kept `const` so call sites name it; a [`Reply`] (which owns its
/// text) is built only when it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Canned {
    pub code: u16,
    pub enhanced: EnhancedStatus,
    pub text: &'static str,
}

impl Canned {
    const fn new(code: u16, class: u8, subject: u16, detail: u16, text: &'static str) -> Canned {
        Canned {
            code,
            enhanced: EnhancedStatus::new(class, subject, detail),
            text,
        }
    }

    /// The owned reply, ready for [`Reply::to_wire`].
    pub fn reply(&self) -> Reply {
        Reply::new(self.code, Some(self.enhanced), self.text)
    }

    /// The same code and enhanced status with a more specific text (e.g. which address rule
    /// failed). The detail must not contain CR or LF; callers pass validated error texts.
    pub fn with_detail(&self, detail: &str) -> Reply {
        Reply::new(
            self.code,
            Some(self.enhanced),
            format!("{}: {}", self.text, ascii_text(detail)),
        )
    }

    /// True when `reply` has this constant's code and enhanced status (text is ignored).
    pub fn matches(&self, reply: &Reply) -> bool {
        reply.code == self.code && reply.enhanced == Some(self.enhanced)
    }
}

/// Reply text as printable ASCII: control characters dropped, characters beyond ASCII (from a
/// UTF-8 address, RFC 6531) written as `\u{…}` escapes. RFC 6531 allows UTF-8 in replies only
/// to clients that sent SMTPUTF8, and a reply names addresses for people to read in a bounce:
/// an escape is unambiguous everywhere.
fn ascii_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars().filter(|c| !c.is_control()) {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.extend(c.escape_unicode());
        }
    }
    out
}

impl From<Canned> for Reply {
    fn from(c: Canned) -> Reply {
        c.reply()
    }
}

// --- Positive replies -------------------------------------------------------------------------

pub const OK: Canned = Canned::new(250, 2, 0, 0, "OK");
pub const SENDER_OK: Canned = Canned::new(250, 2, 1, 0, "Sender OK");
pub const RECIPIENT_OK: Canned = Canned::new(250, 2, 1, 5, "Recipient OK");
/// What a handler answers once a message is durably queued.
pub const MESSAGE_ACCEPTED: Canned = Canned::new(250, 2, 0, 0, "Message accepted for delivery");
pub const BYE: Canned = Canned::new(221, 2, 0, 0, "Bye");
pub const HELP: Canned = Canned::new(214, 2, 0, 0, "Herald mailing-list server; see RFC 5321");
/// RFC 5321 §3.5.3: VRFY is not answered, to avoid address harvesting.
pub const CANNOT_VRFY: Canned = Canned::new(252, 2, 5, 0, "Cannot VRFY user");

// --- Transient failures -----------------------------------------------------------------------

/// Session slots are full, or the server is shutting down.
pub const SERVICE_UNAVAILABLE: Canned =
    Canned::new(421, 4, 3, 2, "Service not available, closing channel");
/// The peer was silent longer than the command or DATA timeout.
pub const TIMEOUT: Canned = Canned::new(421, 4, 4, 2, "Timeout exceeded, closing channel");
/// The peer reached `max_errors` permanent errors.
pub const TOO_MANY_ERRORS: Canned = Canned::new(421, 4, 7, 0, "Too many errors, closing channel");
/// The peer's address already has `max_sessions_per_client` sessions open (sent at connect,
/// before the banner; RFC 5321 §3.1 allows 421 in place of the greeting).
pub const TOO_MANY_CONNECTIONS: Canned = Canned::new(
    421,
    4,
    7,
    0,
    "Too many connections from your address, closing channel",
);
/// The peer's /24 (IPv6 /48) already has `max_sessions_per_network` sessions open (sent at
/// connect, like [`TOO_MANY_CONNECTIONS`]).
pub const TOO_MANY_FROM_NETWORK: Canned = Canned::new(
    421,
    4,
    7,
    0,
    "Too many connections from your network, closing channel",
);
/// Every session slot was taken and this session was the one idle longest with no MAIL yet:
/// it is closed to admit a newcomer. Transient: come back with a command ready.
pub const SHED_IDLE: Canned = Canned::new(
    421,
    4,
    7,
    0,
    "Server busy and this session idle, closing channel",
);
/// RFC 5321 §4.2.2 / RFC 1870: the global buffer budget for inbound messages is spent. Sent
/// instead of 354, or at the end of DATA after the body was read to its end; transient, so
/// the client keeps the message and retries.
pub const INSUFFICIENT_STORAGE: Canned =
    Canned::new(452, 4, 3, 1, "Insufficient system storage, try again later");
/// RFC 5321 §4.2.2 at RCPT for a list post: more copies wait for delivery than
/// `[intake] max_unfinished_copies` allows; the sender keeps the message and retries later.
pub const BACKLOG_FULL: Canned = Canned::new(
    452,
    4,
    3,
    1,
    "Too much mail waiting for delivery here, try again later",
);
/// RFC 5321 §4.2.2 at RCPT: `postmaster.max_stored` messages to postmaster are waiting; the
/// sender keeps the message and retries once some expire or are deleted.
pub const POSTMASTER_FULL: Canned = Canned::new(
    452,
    4,
    3,
    1,
    "too much mail for postmaster waiting here, try again later",
);
pub const TOO_MANY_RECIPIENTS: Canned = Canned::new(452, 4, 5, 3, "Too many recipients");
/// What a handler answers when it cannot look up or store right now (directory or spool error).
pub const LOCAL_ERROR: Canned =
    Canned::new(451, 4, 3, 0, "Local error in processing, try again later");

// --- Permanent failures -----------------------------------------------------------------------

pub const UNKNOWN_COMMAND: Canned = Canned::new(500, 5, 5, 1, "Command not recognized");
pub const LINE_TOO_LONG: Canned = Canned::new(500, 5, 5, 2, "Line too long");
/// RFC 5321 §4.1.1: command lines end with CRLF; a bare LF is refused rather than guessed at.
pub const BARE_LF_IN_COMMAND: Canned = Canned::new(
    500,
    5,
    5,
    2,
    "Syntax error: command lines must end with CRLF",
);
/// NUL, other control characters and non-ASCII octets in a command line.
pub const INVALID_CHARACTER: Canned =
    Canned::new(500, 5, 5, 2, "Syntax error: invalid character in command");
pub const SYNTAX_ERROR: Canned =
    Canned::new(501, 5, 5, 4, "Syntax error in parameters or arguments");
pub const BAD_SENDER_SYNTAX: Canned = Canned::new(501, 5, 1, 7, "Bad sender address syntax");
pub const BAD_RECIPIENT_SYNTAX: Canned = Canned::new(501, 5, 1, 3, "Bad recipient address syntax");
pub const NOT_IMPLEMENTED: Canned = Canned::new(502, 5, 5, 1, "Command not implemented");
pub const BAD_SEQUENCE: Canned = Canned::new(503, 5, 5, 1, "Bad sequence of commands");
/// RFC 3207 §4: the go-ahead for the TLS handshake. Nothing else is read in plaintext after it.
pub const READY_TO_START_TLS: Canned = Canned::new(220, 2, 0, 0, "Ready to start TLS");
pub const NEED_HELO: Canned = Canned::new(
    503,
    5,
    5,
    1,
    "Bad sequence of commands: send EHLO/HELO first",
);
pub const NEED_LHLO: Canned =
    Canned::new(503, 5, 5, 1, "Bad sequence of commands: send LHLO first");
pub const NEED_MAIL: Canned =
    Canned::new(503, 5, 5, 1, "Bad sequence of commands: send MAIL first");
pub const NEED_RCPT: Canned =
    Canned::new(503, 5, 5, 1, "Bad sequence of commands: send RCPT first");
pub const NESTED_MAIL: Canned = Canned::new(
    503,
    5,
    5,
    1,
    "Bad sequence of commands: transaction already started",
);
/// RFC 5321 §3.3 / RFC 2920 §3.1: DATA after every RCPT was refused (SMTP only; LMTP uses 503).
pub const NO_VALID_RECIPIENTS: Canned = Canned::new(554, 5, 5, 1, "No valid recipients");
/// The recipient is not one of our lists (nor its -bounces / -request form): never relay.
pub const NO_SUCH_RECIPIENT: Canned =
    Canned::new(550, 5, 1, 1, "No such list here; relaying denied");
/// RFC 1870 §6: declared or actual size over the fixed maximum.
pub const MESSAGE_TOO_BIG: Canned = Canned::new(
    552,
    5,
    3,
    4,
    "Message size exceeds fixed maximum message size",
);
/// RFC 5321 §4.5.3.1.10 "500 Line too long", sent at the end of DATA: a text line over the limit.
pub const DATA_LINE_TOO_LONG: Canned = Canned::new(
    500,
    5,
    5,
    2,
    "Line too long: message has a line over the text line limit",
);
/// A bare CR or LF in DATA (SMTP smuggling defence, RFC 5321 §2.3.8 and §4.1.1.4): the message is
/// refused at its real end. 5.6.0 because the fault is in the content, not the command syntax.
pub const BARE_LINE_ENDING: Canned = Canned::new(
    550,
    5,
    6,
    0,
    "Message refused: bare CR or LF in data; lines must end with CRLF",
);
/// A NUL octet in DATA (RFC 5321 §4.1.1.4: not allowed in text). Refused rather than stripped:
/// a receiver that strips NULs would see `\r\n\0.\r\n` as the end of data (smuggling).
pub const NUL_IN_DATA: Canned = Canned::new(550, 5, 6, 0, "Message refused: NUL octet in data");
/// RFC 6531 §3.5: a UTF-8 address in a transaction whose MAIL did not say `SMTPUTF8`.
pub const NEEDS_SMTPUTF8: Canned = Canned::new(
    553,
    5,
    6,
    7,
    "Non-ASCII address needs MAIL FROM with the SMTPUTF8 parameter",
);
/// RFC 6532: a header field with raw 8-bit bytes that cannot be written as RFC 2047 encoded
/// words (not UTF-8, or in a structured field such as Message-ID), in a transaction without
/// `SMTPUTF8`. Text fields and display names are encoded instead of refused.
pub const HEADER_NEEDS_SMTPUTF8: Canned = Canned::new(
    554,
    5,
    6,
    0,
    "Non-ASCII header field needs SMTPUTF8, or RFC 2047 encoding in UTF-8",
);
/// RFC 5321 §4.1.1.11: a MAIL or RCPT parameter we do not implement.
pub const UNKNOWN_PARAMETER: Canned =
    Canned::new(555, 5, 5, 4, "Parameter not recognized or not implemented");

// --- Replies that carry the host name or a limit ----------------------------------------------

/// The 220 banner. `protocol` is `ESMTP` or `LMTP`.
pub fn greeting(hostname: &str, protocol: &str) -> Reply {
    Reply::new(220, None, format!("{hostname} {protocol} Herald ready"))
}

/// The 250 answer to HELO.
pub fn helo(hostname: &str) -> Reply {
    Reply::new(250, None, hostname.to_string())
}

/// The multi-line 250 answer to EHLO and LHLO: the extensions we implement (RFC 3461 DSN: its
/// parameters are accepted and kept for mail Herald relays on; RFC 6531 SMTPUTF8). STARTTLS
/// joins this list when TLS is configured (see [`ehlo_with`]).
pub fn ehlo(hostname: &str, limits: &Limits) -> Reply {
    ehlo_with(hostname, limits, false)
}

/// [`ehlo`], with `STARTTLS` advertised when `starttls` is true (RFC 3207 §4: only on a
/// connection that can still be upgraded).
pub fn ehlo_with(hostname: &str, limits: &Limits, starttls: bool) -> Reply {
    let tls = if starttls { "\nSTARTTLS" } else { "" };
    let text = format!(
        "{hostname}\nPIPELINING\nSIZE {}\n8BITMIME\nENHANCEDSTATUSCODES\nDSN\nSMTPUTF8{tls}",
        limits.max_message_octets
    );
    Reply::new(250, None, text)
}

/// The 250 at the end of DATA once the message is durable in the spool, naming the post id the
/// operator finds in `herald queue`, the delivery log and the API.
pub fn queued_as(id: impl std::fmt::Display) -> Reply {
    Reply::new(
        250,
        Some(EnhancedStatus::new(2, 0, 0)),
        format!("queued as {id}"),
    )
}

/// [`NO_SUCH_RECIPIENT`] naming the refused address (validated: an `Address` has no CR/LF).
pub fn no_such_list(rcpt: &herald_types::Address) -> Reply {
    Reply::new(
        NO_SUCH_RECIPIENT.code,
        Some(NO_SUCH_RECIPIENT.enhanced),
        ascii_text(&format!("<{rcpt}>: no such list here (relaying denied)")),
    )
}

/// [`MESSAGE_TOO_BIG`] for a list's own limit (`max_message_bytes`), lower than the server's.
pub fn too_big_for_list(limit: u64) -> Reply {
    Reply::new(
        MESSAGE_TOO_BIG.code,
        Some(MESSAGE_TOO_BIG.enhanced),
        format!("message larger than the list allows ({limit} bytes)"),
    )
}

/// A list post a loop or auto-reply guard stopped, on a list whose `guard_action` is
/// `reject`: `550 5.7.1` with the guard's reason (a fixed text, never the post's).
pub const GUARD_REFUSED: Canned = Canned::new(550, 5, 7, 1, "Message refused by the list");

/// A list post the content filter (rspamd) refused. Generic text: rspamd's
/// symbols are for the operator's log, not for a spammer tuning a message.
pub const CONTENT_REJECTED: Canned = Canned::new(
    550,
    5,
    7,
    1,
    "Message rejected as spam by the list's content filter",
);

/// [`GUARD_REFUSED`] with the guard's reason.
pub fn guard_refused(reason: &str) -> Reply {
    Reply::new(
        GUARD_REFUSED.code,
        Some(GUARD_REFUSED.enhanced),
        ascii_text(&format!("Message refused by the list: {reason}")),
    )
}

/// [`GUARD_REFUSED`] for a banned sender: names the sender, the list and the ban,
/// so the person reading the bounce knows which rule stopped them.
pub fn sender_banned(
    sender: &herald_types::Address,
    list: &herald_types::Address,
    ban: &str,
) -> Reply {
    Reply::new(
        GUARD_REFUSED.code,
        Some(GUARD_REFUSED.enhanced),
        ascii_text(&format!("<{sender}> is banned from {list} ({ban})")),
    )
}

/// The 354 go-ahead after DATA.
pub fn start_data() -> Reply {
    Reply::new(354, None, "End data with <CR><LF>.<CR><LF>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canned_replies_render_with_enhanced_codes() {
        assert_eq!(
            BAD_SEQUENCE.reply().to_wire(),
            "503 5.5.1 Bad sequence of commands\r\n"
        );
        assert!(TOO_MANY_RECIPIENTS.reply().is_transient());
        assert!(NO_SUCH_RECIPIENT.matches(&NO_SUCH_RECIPIENT.with_detail("x")));
        assert!(!NO_SUCH_RECIPIENT.matches(&BAD_SEQUENCE.reply()));
        assert_eq!(
            SYNTAX_ERROR.with_detail("a\r\nb").text,
            "Syntax error in parameters or arguments: ab"
        );
        // Replies stay ASCII, whatever an address holds (RFC 6531).
        let rcpt = herald_types::Address::parse("jörg@lists.example").expect("valid");
        assert_eq!(
            no_such_list(&rcpt).to_wire(),
            "550 5.1.1 <j\\u{f6}rg@lists.example>: no such list here (relaying denied)\r\n"
        );
        assert!(SYNTAX_ERROR
            .with_detail("'\u{a0}' \u{85}")
            .to_wire()
            .is_ascii());
    }

    #[test]
    fn ehlo_lists_extensions_without_enhanced_codes() {
        let wire = ehlo("mx.example", &Limits::default()).to_wire();
        assert_eq!(
            wire,
            "250-mx.example\r\n250-PIPELINING\r\n250-SIZE 26214400\r\n250-8BITMIME\r\n250-ENHANCEDSTATUSCODES\r\n250-DSN\r\n250 SMTPUTF8\r\n"
        );
        assert_eq!(
            greeting("mx.example", "LMTP").to_wire(),
            "220 mx.example LMTP Herald ready\r\n"
        );
    }
}
