//! The SMTP/LMTP command-line parser: one line (without its CRLF) in, one [`Command`] out.
//!
//! Strict RFC 5321 §4.1 syntax: verbs and the `FROM:`/`TO:` keywords are case-insensitive, but
//! spacing is exact (one SP after the verb, none around the colon), paths must be in angle
//! brackets, and commands without arguments take none. Source routes (`<@a,@b:user@c>`) are
//! accepted and ignored as §4.1.1.3 asks. `<Postmaster>` without a domain is recognised (§4.5.1).
//!
//! Limits: the caller bounds the line length; this module allocates at most the parsed address
//! and EHLO domain.
//!
//! International addresses (RFC 6531): a MAIL or RCPT path may carry UTF-8 (`UTF8-non-ascii` in
//! `atext`, quoted strings and domains); `SMTPUTF8` is a MAIL parameter. Whether a UTF-8 address
//! came with it is the session's check (`553 5.6.7`), since a RCPT depends on its MAIL. Every
//! other command, and every parameter, stays ASCII.
//!
//! DSN (RFC 3461): `RET`/`ENVID` on MAIL and `NOTIFY`/`ORCPT` on RCPT, validated by
//! [`herald_types::dsn`]; a repeated parameter is a syntax error.
//!
//! SECURITY: the input is untrusted. Any control character (NUL, bare CR, DEL, …) refuses the
//! whole line before anything else looks at it, as do octets that are not valid UTF-8 (overlong
//! forms, surrogates, truncated sequences) and non-ASCII outside a MAIL or RCPT path, so a
//! [`Command`] never carries one; addresses are validated (and C1 controls, U+2028/U+2029 in
//! them refused) by [`Address::parse`]; the HELO domain is checked against the RFC 5321 `Domain`
//! / `address-literal` grammar because it is later spliced into a `Received:` header.

use herald_types::dsn::{Notify, Orcpt, Ret, XText};
use herald_types::{Address, AddressError, DsnError, Reply};

use crate::replies;

/// Longest domain (or address literal) accepted in HELO/EHLO/LHLO.
const MAX_HELO_DOMAIN: usize = 255;
/// Digits accepted in `SIZE=`: 20 covers u64; longer is a syntax error, not a huge size.
const MAX_SIZE_DIGITS: usize = 20;

/// Which greeting opened the session; decides the `with` protocol of the `Received:` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeloVerb {
    Helo,
    Ehlo,
    Lhlo,
}

impl HeloVerb {
    /// The registered `with` keyword (RFC 5321 §4.4, RFC 3848).
    pub fn protocol(self) -> &'static str {
        match self {
            HeloVerb::Helo => "SMTP",
            HeloVerb::Ehlo => "ESMTP",
            HeloVerb::Lhlo => "LMTP",
        }
    }
}

/// RFC 6152 `BODY=` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyType {
    SevenBit,
    EightBitMime,
}

/// The MAIL parameters we implement (RFC 1870 SIZE, RFC 6152 BODY, RFC 6531 SMTPUTF8, RFC 3461
/// RET and ENVID).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MailParams {
    /// Declared size; saturates at `u64::MAX` so an absurd value is "too big", not a syntax error.
    pub size: Option<u64>,
    pub body: Option<BodyType>,
    /// RFC 6531: the envelope or headers may carry UTF-8 addresses.
    pub smtputf8: bool,
    /// RFC 3461 §4.3.
    pub ret: Option<Ret>,
    /// RFC 3461 §4.4 (xtext, as sent).
    pub envid: Option<XText>,
}

/// The RCPT parameters we implement (RFC 3461 NOTIFY and ORCPT).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RcptParams {
    pub notify: Option<Notify>,
    pub orcpt: Option<Orcpt>,
}

/// A RCPT argument: a mailbox, or the domain-less `<Postmaster>` every server must accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardPath {
    Postmaster,
    Mailbox(Address),
}

/// One parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Hello {
        verb: HeloVerb,
        domain: String,
    },
    /// `from: None` is the null reverse path `<>` (bounces).
    Mail {
        from: Option<Address>,
        params: MailParams,
    },
    Rcpt {
        to: ForwardPath,
        params: RcptParams,
    },
    Data,
    Rset,
    Noop,
    Quit,
    Vrfy,
    Help,
    /// RFC 3207: the session answers 502 unless TLS is configured and the connection is still
    /// in plaintext (see [`crate::Session::with_starttls`]).
    StartTls,
}

/// Why a line is not a command we accept. Each maps to one reply via [`ParseError::reply`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("control character or non-ASCII octet in command")]
    InvalidCharacter,
    #[error("command not recognized")]
    Unknown,
    #[error("command not implemented")]
    NotImplemented,
    #[error("syntax error: {0}")]
    Syntax(&'static str),
    #[error("bad sender address: {0}")]
    BadSender(AddressError),
    #[error("bad recipient address: {0}")]
    BadRecipient(AddressError),
    #[error("parameter not implemented")]
    UnknownParameter,
    #[error("bad DSN parameter: {0}")]
    BadDsn(DsnError),
}

impl ParseError {
    /// The reply a peer gets for this error (all 5xx).
    pub fn reply(&self) -> Reply {
        match self {
            ParseError::InvalidCharacter => replies::INVALID_CHARACTER.reply(),
            ParseError::Unknown => replies::UNKNOWN_COMMAND.reply(),
            ParseError::NotImplemented => replies::NOT_IMPLEMENTED.reply(),
            ParseError::Syntax(why) => replies::SYNTAX_ERROR.with_detail(why),
            ParseError::BadSender(e) => replies::BAD_SENDER_SYNTAX.with_detail(&e.to_string()),
            ParseError::BadRecipient(e) => {
                replies::BAD_RECIPIENT_SYNTAX.with_detail(&e.to_string())
            }
            ParseError::UnknownParameter => replies::UNKNOWN_PARAMETER.reply(),
            ParseError::BadDsn(e) => replies::SYNTAX_ERROR.with_detail(&e.to_string()),
        }
    }
}

/// Parses one command line, CRLF already removed.
pub fn parse(line: &[u8]) -> Result<Command, ParseError> {
    if line.iter().any(|&b| b < 0x20 || b == 0x7f) {
        return Err(ParseError::InvalidCharacter);
    }
    // Strict UTF-8: overlong forms, surrogates and truncated sequences are refused here.
    let line = std::str::from_utf8(line).map_err(|_| ParseError::InvalidCharacter)?;
    let (verb, args) = match line.split_once(' ') {
        Some((verb, args)) => (verb, Some(args)),
        None => (line, None),
    };
    let is = |name: &str| verb.eq_ignore_ascii_case(name);
    let utf8_allowed = is("MAIL") || is("RCPT");
    if !utf8_allowed && !line.is_ascii() {
        return Err(ParseError::InvalidCharacter);
    }
    if is("HELO") || is("EHLO") || is("LHLO") {
        let verb = match verb.as_bytes()[0].to_ascii_uppercase() {
            b'H' => HeloVerb::Helo,
            b'E' => HeloVerb::Ehlo,
            _ => HeloVerb::Lhlo,
        };
        return parse_hello(verb, args);
    }
    if is("MAIL") {
        return parse_mail(args);
    }
    if is("RCPT") {
        return parse_rcpt(args);
    }
    let simple = [
        ("DATA", Command::Data),
        ("RSET", Command::Rset),
        ("QUIT", Command::Quit),
        ("STARTTLS", Command::StartTls),
    ];
    if let Some((_, cmd)) = simple.into_iter().find(|(name, _)| is(name)) {
        return match args {
            None => Ok(cmd),
            Some(_) => Err(ParseError::Syntax("command takes no arguments")),
        };
    }
    // RFC 5321 §4.1.1.9 and §4.1.1.8: NOOP and HELP take an optional string, ignored.
    if is("NOOP") {
        return Ok(Command::Noop);
    }
    if is("HELP") {
        return Ok(Command::Help);
    }
    if is("VRFY") {
        return match args {
            Some(a) if !a.is_empty() => Ok(Command::Vrfy),
            _ => Err(ParseError::Syntax("VRFY needs an argument")),
        };
    }
    const NOT_IMPLEMENTED: [&str; 9] = [
        "EXPN", "BDAT", "AUTH", "ETRN", "TURN", "ATRN", "SEND", "SOML", "SAML",
    ];
    if NOT_IMPLEMENTED.iter().any(|name| is(name)) {
        return Err(ParseError::NotImplemented);
    }
    Err(ParseError::Unknown)
}

fn parse_hello(verb: HeloVerb, args: Option<&str>) -> Result<Command, ParseError> {
    match args {
        Some(domain) if is_domain(domain) || is_address_literal(domain) => Ok(Command::Hello {
            verb,
            domain: domain.to_string(),
        }),
        _ => Err(ParseError::Syntax("expected one domain or address literal")),
    }
}

fn parse_mail(args: Option<&str>) -> Result<Command, ParseError> {
    let rest = strip_keyword(args, "FROM:")?;
    let (path, params) = split_path(rest)?;
    let from = if path.is_empty() {
        None
    } else {
        Some(mailbox(path).map_err(ParseError::BadSender)?)
    };
    Ok(Command::Mail {
        from,
        params: parse_mail_params(params)?,
    })
}

fn parse_rcpt(args: Option<&str>) -> Result<Command, ParseError> {
    let rest = strip_keyword(args, "TO:")?;
    let (path, params) = split_path(rest)?;
    let params = parse_rcpt_params(params)?;
    if path.eq_ignore_ascii_case("postmaster") {
        return Ok(Command::Rcpt {
            to: ForwardPath::Postmaster,
            params,
        });
    }
    let to = mailbox(path).map_err(ParseError::BadRecipient)?;
    Ok(Command::Rcpt {
        to: ForwardPath::Mailbox(to),
        params,
    })
}

/// Splits ` KEY[=VALUE] KEY[=VALUE]…` after a path into validated keywords and their values.
/// Parameters are ASCII (only the path may carry UTF-8).
fn esmtp_params(s: &str) -> Result<Vec<(&str, Option<&str>)>, ParseError> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    if !s.is_ascii() {
        return Err(ParseError::InvalidCharacter);
    }
    let s = s
        .strip_prefix(' ')
        .ok_or(ParseError::Syntax("unexpected text after the path"))?;
    let mut out = Vec::new();
    for param in s.split(' ') {
        let (key, value) = match param.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (param, None),
        };
        if !is_esmtp_keyword(key) {
            return Err(ParseError::Syntax("malformed parameter"));
        }
        out.push((key, value));
    }
    Ok(out)
}

/// Stores a parameter's value once: a second occurrence is a syntax error (RFC 3461 §4: each
/// parameter at most once).
fn once<T>(slot: &mut Option<T>, value: T, dup: &'static str) -> Result<(), ParseError> {
    if slot.replace(value).is_some() {
        return Err(ParseError::Syntax(dup));
    }
    Ok(())
}

fn parse_rcpt_params(s: &str) -> Result<RcptParams, ParseError> {
    let mut params = RcptParams::default();
    for (key, value) in esmtp_params(s)? {
        let value = value.unwrap_or_default();
        if key.eq_ignore_ascii_case("NOTIFY") {
            let n = Notify::parse(value).map_err(ParseError::BadDsn)?;
            once(&mut params.notify, n, "duplicate NOTIFY")?;
        } else if key.eq_ignore_ascii_case("ORCPT") {
            let o = Orcpt::parse(value).map_err(ParseError::BadDsn)?;
            once(&mut params.orcpt, o, "duplicate ORCPT")?;
        } else {
            return Err(ParseError::UnknownParameter);
        }
    }
    Ok(params)
}

/// `FROM:` / `TO:` right after the verb's single space, with no space before the path.
fn strip_keyword<'a>(args: Option<&'a str>, keyword: &str) -> Result<&'a str, ParseError> {
    let args = args.ok_or(ParseError::Syntax("missing argument"))?;
    match args.get(..keyword.len()) {
        Some(head) if head.eq_ignore_ascii_case(keyword) => Ok(&args[keyword.len()..]),
        _ => Err(ParseError::Syntax("expected FROM:<path> or TO:<path>")),
    }
}

/// Splits `<path>rest` at the first `>` outside a quoted string.
fn split_path(s: &str) -> Result<(&str, &str), ParseError> {
    let missing = ParseError::Syntax("path must be enclosed in <>");
    let inner = s.strip_prefix('<').ok_or(missing.clone())?;
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in inner.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '>' if !quoted => return Ok((&inner[..i], &inner[i + 1..])),
            _ => {}
        }
    }
    Err(missing)
}

/// A path's mailbox, after dropping an optional source route (`@a,@b:`).
fn mailbox(path: &str) -> Result<Address, AddressError> {
    let mailbox = match path.strip_prefix('@') {
        Some(_) => {
            let (route, mailbox) = path.split_once(':').ok_or(AddressError::MissingAt)?;
            let route_ok = route
                .split(',')
                .all(|hop| hop.strip_prefix('@').is_some_and(is_domain));
            if !route_ok {
                return Err(AddressError::BadLabel(route.chars().take(70).collect()));
            }
            mailbox
        }
        None => path,
    };
    // Address::parse trims and strips one pair of brackets; neither is valid inside a path.
    if mailbox.starts_with([' ', '<']) || mailbox.ends_with(' ') {
        return Err(AddressError::BadLocalChar(' '));
    }
    Address::parse(mailbox)
}

fn parse_mail_params(s: &str) -> Result<MailParams, ParseError> {
    let mut params = MailParams::default();
    for (key, value) in esmtp_params(s)? {
        let is = |name: &str| key.eq_ignore_ascii_case(name);
        if is("SIZE") {
            once(&mut params.size, parse_size(value)?, "duplicate SIZE")?;
        } else if is("BODY") {
            let body = match value {
                Some(v) if v.eq_ignore_ascii_case("7BIT") => BodyType::SevenBit,
                Some(v) if v.eq_ignore_ascii_case("8BITMIME") => BodyType::EightBitMime,
                _ => return Err(ParseError::Syntax("BODY must be 7BIT or 8BITMIME")),
            };
            once(&mut params.body, body, "duplicate BODY")?;
        } else if is("SMTPUTF8") {
            // RFC 6531 §3.4: a keyword without a value.
            if value.is_some() {
                return Err(ParseError::Syntax("SMTPUTF8 takes no value"));
            }
            if std::mem::replace(&mut params.smtputf8, true) {
                return Err(ParseError::Syntax("duplicate SMTPUTF8"));
            }
        } else if is("RET") {
            let ret = Ret::parse(value.unwrap_or_default()).map_err(ParseError::BadDsn)?;
            once(&mut params.ret, ret, "duplicate RET")?;
        } else if is("ENVID") {
            let envid = XText::envid(value.unwrap_or_default()).map_err(ParseError::BadDsn)?;
            once(&mut params.envid, envid, "duplicate ENVID")?;
        } else {
            return Err(ParseError::UnknownParameter);
        }
    }
    Ok(params)
}

fn parse_size(value: Option<&str>) -> Result<u64, ParseError> {
    match value {
        Some(v)
            if !v.is_empty()
                && v.len() <= MAX_SIZE_DIGITS
                && v.bytes().all(|b| b.is_ascii_digit()) =>
        {
            Ok(v.parse().unwrap_or(u64::MAX))
        }
        _ => Err(ParseError::Syntax("SIZE must be a decimal number")),
    }
}

/// RFC 5321 `esmtp-keyword`: `(ALPHA / DIGIT) *(ALPHA / DIGIT / "-")`.
fn is_esmtp_keyword(k: &str) -> bool {
    let b = k.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
}

/// RFC 5321 `Domain`: dot-separated labels of letters, digits and inner hyphens.
fn is_domain(d: &str) -> bool {
    !d.is_empty()
        && d.len() <= MAX_HELO_DOMAIN
        && d.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        })
}

/// RFC 5321 `address-literal`, restricted to the characters of IPv4, `IPv6:` and
/// `tag:value` literals (letters, digits, `.`, `:`, `-`). The content is not parsed as an IP
/// address; it only has to be safe to splice into a `Received:` header (no `;`, `(`, spaces).
fn is_address_literal(d: &str) -> bool {
    match d.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        Some(inner) => {
            !inner.is_empty()
                && d.len() <= MAX_HELO_DOMAIN
                && inner
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".:-".contains(&b))
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Command, ParseError> {
        parse(s.as_bytes())
    }
    fn addr(s: &str) -> Address {
        Address::parse(s).expect("valid test address")
    }

    #[test]
    fn parses_greetings_case_insensitively() {
        for (line, verb) in [
            ("EHLO client.example", HeloVerb::Ehlo),
            ("helo client.example", HeloVerb::Helo),
            ("LhLo client.example", HeloVerb::Lhlo),
        ] {
            assert_eq!(
                p(line),
                Ok(Command::Hello {
                    verb,
                    domain: "client.example".into()
                })
            );
        }
        assert!(p("EHLO [127.0.0.1]").is_ok());
        assert!(p("EHLO [IPv6:::1]").is_ok());
        for bad in [
            "EHLO",
            "EHLO ",
            "EHLO a b",
            "EHLO -a.example",
            "EHLO a..b",
            "EHLO [a]b]",
            "EHLO a_b",
            "EHLO [1.2.3.4;x]",
            "EHLO [a b]",
        ] {
            assert!(matches!(p(bad), Err(ParseError::Syntax(_))), "{bad}");
        }
    }

    #[test]
    fn parses_mail_with_parameters_and_null_path() {
        assert_eq!(
            p("mail from:<a@b.example> SIZE=1000 BODY=8bitmime"),
            Ok(Command::Mail {
                from: Some(addr("a@b.example")),
                params: MailParams {
                    size: Some(1000),
                    body: Some(BodyType::EightBitMime),
                    ..MailParams::default()
                }
            })
        );
        assert_eq!(
            p("MAIL FROM:<>"),
            Ok(Command::Mail {
                from: None,
                params: MailParams::default()
            })
        );
        assert_eq!(
            p("MAIL FROM:<@relay.example,@r2.example:a@b.example>"),
            p("MAIL FROM:<a@b.example>")
        );
        assert_eq!(
            p("MAIL FROM:<\"odd >name\"@b.example>"),
            Ok(Command::Mail {
                from: Some(addr("\"odd >name\"@b.example")),
                params: MailParams::default()
            })
        );
        let huge = p("MAIL FROM:<a@b.example> SIZE=99999999999999999999");
        assert!(matches!(
            huge,
            Ok(Command::Mail {
                params: MailParams {
                    size: Some(u64::MAX),
                    ..
                },
                ..
            })
        ));
    }

    #[test]
    fn refuses_malformed_mail_and_rcpt() {
        let syntax = |s: &str| assert!(matches!(p(s), Err(ParseError::Syntax(_))), "{s}");
        syntax("MAIL FROM:a@b.example");
        syntax("MAIL FROM: <a@b.example>");
        syntax("MAIL FROM :<a@b.example>");
        syntax("MAIL TO:<a@b.example>");
        syntax("MAIL FROM:<a@b.example");
        syntax("MAIL FROM:<a@b.example>  SIZE=1");
        syntax("MAIL FROM:<a@b.example> SIZE=");
        syntax("MAIL FROM:<a@b.example> SIZE=12x");
        syntax("MAIL FROM:<a@b.example> SIZE=1 SIZE=2");
        syntax("MAIL FROM:<a@b.example> BODY=BINARYMIME");
        syntax("MAIL FROM:<a@b.example>junk");
        syntax("MAIL");
        syntax("RCPT TO:list@l.example");
        syntax("RCPT TO:<list@l.example>x");
        assert_eq!(
            p("MAIL FROM:<a@b.example> XCLIENT=1"),
            Err(ParseError::UnknownParameter)
        );
        assert_eq!(
            p("RCPT TO:<a@b.example> SIZE=1"),
            Err(ParseError::UnknownParameter)
        );
        assert!(matches!(
            p("MAIL FROM:<a b@x.example>"),
            Err(ParseError::BadSender(_))
        ));
        assert!(matches!(
            p("MAIL FROM:< a@x.example>"),
            Err(ParseError::BadSender(_))
        ));
        assert!(matches!(
            p("RCPT TO:<>"),
            Err(ParseError::BadRecipient(AddressError::Empty))
        ));
        assert!(matches!(
            p("RCPT TO:<a@[10.0.0.1]>"),
            Err(ParseError::BadRecipient(_))
        ));
        assert!(p("RCPT TO:<<a@b.example>>").is_err());
        assert!(matches!(
            p("RCPT TO:<<a@b.example>"),
            Err(ParseError::BadRecipient(_))
        ));
    }

    #[test]
    fn parses_rcpt_and_postmaster() {
        assert_eq!(
            p("rcpt to:<List@L.Example>"),
            Ok(Command::Rcpt {
                to: ForwardPath::Mailbox(addr("List@l.example")),
                params: RcptParams::default()
            })
        );
        assert_eq!(
            p("RCPT TO:<postMaster>"),
            Ok(Command::Rcpt {
                to: ForwardPath::Postmaster,
                params: RcptParams::default()
            })
        );
    }

    #[test]
    fn simple_commands_take_no_arguments() {
        assert_eq!(p("data"), Ok(Command::Data));
        assert_eq!(p("RSET"), Ok(Command::Rset));
        assert_eq!(p("QUIT"), Ok(Command::Quit));
        assert_eq!(p("STARTTLS"), Ok(Command::StartTls));
        assert!(matches!(p("DATA now"), Err(ParseError::Syntax(_))));
        assert!(matches!(p("QUIT "), Err(ParseError::Syntax(_))));
        assert_eq!(p("NOOP whatever"), Ok(Command::Noop));
        assert_eq!(p("HELP"), Ok(Command::Help));
        assert_eq!(p("VRFY bob"), Ok(Command::Vrfy));
        assert!(matches!(p("VRFY"), Err(ParseError::Syntax(_))));
    }

    #[test]
    fn refuses_unknown_verbs_and_control_characters() {
        assert_eq!(p(""), Err(ParseError::Unknown));
        assert_eq!(p("FOO bar"), Err(ParseError::Unknown));
        assert_eq!(p("EXPN list"), Err(ParseError::NotImplemented));
        assert_eq!(p("NOOP\0"), Err(ParseError::InvalidCharacter));
        assert_eq!(
            p("RCPT TO:<a@b.example>\r"),
            Err(ParseError::InvalidCharacter)
        );
        assert_eq!(
            p("HELO caf\u{e9}.example"),
            Err(ParseError::InvalidCharacter)
        );
        assert_eq!(p("NOOP\tx"), Err(ParseError::InvalidCharacter));
    }

    #[test]
    fn every_error_maps_to_a_permanent_reply() {
        let errors = [
            ParseError::InvalidCharacter,
            ParseError::Unknown,
            ParseError::NotImplemented,
            ParseError::Syntax("x"),
            ParseError::BadSender(AddressError::Empty),
            ParseError::BadRecipient(AddressError::Empty),
            ParseError::UnknownParameter,
            ParseError::BadDsn(DsnError::BadRet),
        ];
        for e in errors {
            assert!(e.reply().is_permanent(), "{e}");
        }
        assert_eq!(
            ParseError::BadRecipient(AddressError::Empty).reply().code,
            501
        );
        assert_eq!(ParseError::UnknownParameter.reply().code, 555);
    }

    #[test]
    fn parses_smtputf8_and_utf8_paths() {
        assert_eq!(
            p("MAIL FROM:<jörg@münchen.example> SMTPUTF8 BODY=8BITMIME"),
            Ok(Command::Mail {
                from: Some(addr("jörg@xn--mnchen-3ya.example")),
                params: MailParams {
                    smtputf8: true,
                    body: Some(BodyType::EightBitMime),
                    ..MailParams::default()
                }
            })
        );
        // The parser accepts a UTF-8 path either way: whether SMTPUTF8 came with it is the
        // session's 553 5.6.7.
        assert!(matches!(
            p("RCPT TO:<用户@例子.example>"),
            Ok(Command::Rcpt { to: ForwardPath::Mailbox(a), .. }) if a.needs_smtputf8()
        ));
        let syntax = |s: &str| assert!(matches!(p(s), Err(ParseError::Syntax(_))), "{s}");
        syntax("MAIL FROM:<a@b.example> SMTPUTF8 SMTPUTF8");
        syntax("MAIL FROM:<a@b.example> SMTPUTF8=yes");
    }

    #[test]
    fn refuses_hostile_utf8_in_commands() {
        let raw = |b: &[u8]| parse(b);
        // Overlong '/' (C0 AF), an encoded surrogate, a truncated sequence, a lone continuation
        // byte, and 0xFF: not UTF-8 at all.
        for bad in [
            &b"RCPT TO:<a\xc0\xafb@x.example>"[..],
            b"RCPT TO:<a\xed\xa0\x80@x.example>",
            b"RCPT TO:<a\xe4\xb8@x.example>",
            b"MAIL FROM:<\x80@x.example> SMTPUTF8",
            b"MAIL FROM:<a@x.example> SMTPUTF8\xff",
        ] {
            assert_eq!(raw(bad), Err(ParseError::InvalidCharacter), "{bad:?}");
        }
        // C1 controls and line separators are valid UTF-8 but never part of an address.
        for bad in [
            "RCPT TO:<a\u{85}b@x.example>",
            "RCPT TO:<a\u{2028}b@x.example>",
            "RCPT TO:<a\u{2029}@x.example>",
            "RCPT TO:<a@x\u{2028}.example>",
        ] {
            assert!(
                matches!(p(bad), Err(ParseError::BadRecipient(_))),
                "{bad:?}"
            );
        }
        // UTF-8 outside a path: HELO, parameters, other verbs.
        for bad in [
            "EHLO münchen.example",
            "NOOP grüß",
            "MAIL FROM:<a@x.example> ENVID=grüß",
            "RCPT TO:<a@x.example> ORCPT=utf-8;jörg@x.example",
        ] {
            assert_eq!(p(bad), Err(ParseError::InvalidCharacter), "{bad:?}");
        }
        // The NFC and NFD spellings of one mailbox are one address.
        assert_eq!(
            p("RCPT TO:<jo\u{308}rg@x.example>"),
            p("RCPT TO:<j\u{f6}rg@x.example>")
        );
    }

    #[test]
    fn parses_dsn_parameters() {
        let mail = p("MAIL FROM:<a@b.example> RET=hdrs ENVID=QQ314159+2Bx SIZE=10");
        let Ok(Command::Mail { params, .. }) = mail else {
            panic!("{mail:?}")
        };
        assert_eq!(params.ret, Some(Ret::Hdrs));
        assert_eq!(
            params.envid.as_ref().map(XText::as_str),
            Some("QQ314159+2Bx")
        );
        assert_eq!(params.size, Some(10));
        let rcpt = p("RCPT TO:<postmaster> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;pm+40x.example");
        let Ok(Command::Rcpt { to, params }) = rcpt else {
            panic!("{rcpt:?}")
        };
        assert_eq!(to, ForwardPath::Postmaster);
        assert_eq!(
            params.notify.map(|n| n.to_string()).as_deref(),
            Some("SUCCESS,FAILURE")
        );
        assert_eq!(
            params.orcpt.as_ref().map(Orcpt::as_str),
            Some("rfc822;pm+40x.example")
        );
        assert!(p("RCPT TO:<a@b.example> NOTIFY=never").is_ok());
    }

    #[test]
    fn refuses_hostile_dsn_parameters() {
        let dsn = |s: &str| assert!(matches!(p(s), Err(ParseError::BadDsn(_))), "{s}");
        dsn("MAIL FROM:<a@b.example> RET=ALL");
        dsn("MAIL FROM:<a@b.example> RET");
        dsn("MAIL FROM:<a@b.example> ENVID=");
        dsn("MAIL FROM:<a@b.example> ENVID=a+0d");
        dsn("MAIL FROM:<a@b.example> ENVID=a+2");
        dsn("MAIL FROM:<a@b.example> ENVID=a=b");
        dsn(&format!(
            "MAIL FROM:<a@b.example> ENVID={}",
            "x".repeat(101)
        ));
        dsn("RCPT TO:<a@b.example> NOTIFY=NEVER,SUCCESS");
        dsn("RCPT TO:<a@b.example> NOTIFY=SUCCESS,SUCCESS");
        dsn("RCPT TO:<a@b.example> NOTIFY=");
        dsn("RCPT TO:<a@b.example> NOTIFY=SOMETIMES");
        dsn("RCPT TO:<a@b.example> ORCPT=a@b.example");
        dsn("RCPT TO:<a@b.example> ORCPT=rfc822;a+0D+0AMAIL");
        dsn(&format!(
            "RCPT TO:<a@b.example> ORCPT=rfc822;{}",
            "a".repeat(500)
        ));
        let syntax = |s: &str| assert!(matches!(p(s), Err(ParseError::Syntax(_))), "{s}");
        syntax("MAIL FROM:<a@b.example> RET=FULL RET=HDRS");
        syntax("MAIL FROM:<a@b.example> ENVID=a ENVID=a");
        syntax("RCPT TO:<a@b.example> NOTIFY=DELAY NOTIFY=DELAY");
        syntax("RCPT TO:<a@b.example> ORCPT=rfc822;a ORCPT=rfc822;a");
        syntax("RCPT TO:<a@b.example>  NOTIFY=NEVER");
    }
}
