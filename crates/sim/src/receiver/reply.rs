//! The receivers' replies, as typed constants (never literals at call sites): the code and
//! enhanced status are data, so rejections are recorded without parsing text.
//!
//! SECURITY: replies are fixed text (plus the host's own name in the banner and EHLO); nothing
//! a client sent is ever echoed back.

/// One fixed reply line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reply {
    pub code: u16,
    pub status: &'static str,
    /// The whole line, CRLF included.
    pub line: &'static str,
}

macro_rules! replies {
    ($($name:ident = $code:literal $status:literal $text:literal;)*) => {
        $(pub(crate) const $name: Reply = Reply {
            code: $code,
            status: $status,
            line: concat!($code, " ", $status, " ", $text, "\r\n"),
        };)*
    };
}

replies! {
    MAIL_OK = 250 "2.1.0" "Sender ok";
    RCPT_OK = 250 "2.1.5" "Recipient ok";
    QUEUED = 250 "2.0.0" "Ok: queued";
    OK = 250 "2.0.0" "Ok";
    BYE = 221 "2.0.0" "Bye";
    TLS_READY = 220 "2.0.0" "Ready to start TLS";
    CANNOT_VRFY = 252 "2.5.2" "Cannot VRFY user, but will accept message";
    GREYLISTED = 451 "4.7.1" "Greylisted, please try again later";
    USER_UNKNOWN = 550 "5.1.1" "User unknown";
    THROTTLED_CONN = 421 "4.7.28" "Too many messages on this connection, try again later";
    THROTTLED_RATE = 452 "4.5.3" "Too many recipients this minute, try again later";
    RATE_LIMITED = 451 "4.7.28" "Our system has detected an unusual rate of mail from your IP address; mail has been temporarily rate limited, please try again later";
    TOO_MANY_RCPTS = 452 "4.5.3" "Too many recipients";
    TOO_BIG = 552 "5.3.4" "Message too big";
    BUSY = 421 "4.3.2" "Too many connections, try again later";
    IDLE_TIMEOUT = 421 "4.4.2" "Idle timeout, closing connection";
    LINE_TOO_LONG = 500 "5.5.2" "Line too long";
    UNRECOGNIZED = 500 "5.5.2" "Command not recognized";
    BAD_SEQUENCE = 503 "5.5.1" "Bad sequence of commands";
    SYNTAX = 501 "5.5.4" "Syntax error in parameters";
    NO_VALID_RCPTS = 554 "5.5.1" "No valid recipients";
    NO_STARTTLS = 502 "5.5.1" "STARTTLS not available";
    UNKNOWN_PARAMETER = 555 "5.5.4" "Parameter not recognized";
    NEEDS_SMTPUTF8 = 553 "5.6.7" "Non-ASCII address not permitted";
}

/// RFC 2034 gives 3xx replies no enhanced status code.
pub(crate) const START_DATA: Reply = Reply {
    code: 354,
    status: "",
    line: "354 End data with <CR><LF>.<CR><LF>\r\n",
};
