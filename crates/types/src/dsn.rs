//! Delivery Status Notification parameters (RFC 3461): `RET` and `ENVID` on MAIL, `NOTIFY` and
//! `ORCPT` on RCPT. Parsed once at the SMTP boundary (`herald_smtp`), kept with a message Herald
//! relays on (postmaster forwarding: `PostMeta::dsn` in the spool), and written again by the SMTP
//! client when — and only when — the next server offers `DSN` (RFC 3461 §4: a relay that cannot
//! pass them on drops them; Herald does not send DSNs on their behalf).
//!
//! Values are kept in their wire form (`xtext` encoded), so what leaves is byte for byte what
//! arrived: no re-encoding can change an `ENVID` the originator matches its reports by.
//!
//! Limits: `ENVID` at most 100 characters (§4.4), `ORCPT` at most 500 (§4.2), its address type
//! an atom of at most 32. `NOTIFY` values may not repeat, and `NEVER` stands alone (§4.1).
//!
//! SECURITY: every value comes from a peer. `xtext` (§4) admits only printable ASCII other than
//! `+` and `=`, which it escapes as `+XX` (upper-case hex); a decoded `ENVID` or `ORCPT` must be
//! printable ASCII too (§4.4, §4.2), so no escaped CR, LF or NUL hides in it. Values are spliced into the
//! MAIL and RCPT commands of the next hop only after this validation.

use serde::{Deserialize, Serialize};
use std::fmt;

/// RFC 3461 §4.4: longest `ENVID` value.
pub const MAX_ENVID_LEN: usize = 100;
/// RFC 3461 §4.2: longest `ORCPT` value (address type, `;` and the encoded address).
pub const MAX_ORCPT_LEN: usize = 500;
/// Longest `ORCPT` address type (registered ones are `rfc822`, `utf-8`, `x400`, `unknown`).
const MAX_ADDR_TYPE_LEN: usize = 32;

/// Why a DSN parameter value was refused (the SMTP reply is `501 5.5.4` with this text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DsnError {
    #[error("RET must be FULL or HDRS")]
    BadRet,
    #[error("{0} is not valid xtext")]
    BadXtext(&'static str),
    #[error("{0} is too long")]
    TooLong(&'static str),
    #[error("NOTIFY must be NEVER or a list of SUCCESS, FAILURE, DELAY")]
    BadNotify,
    #[error("NOTIFY=NEVER cannot be combined with other values")]
    NeverWithOthers,
    #[error("NOTIFY repeats a value")]
    RepeatedNotify,
    #[error("ORCPT must be addr-type;xtext")]
    BadOrcpt,
}

/// `RET=`: how much of the message a failure DSN should return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Ret {
    Full,
    Hdrs,
}

impl Ret {
    /// Parses the value, case-insensitively (§4.3).
    pub fn parse(v: &str) -> Result<Ret, DsnError> {
        if v.eq_ignore_ascii_case("FULL") {
            Ok(Ret::Full)
        } else if v.eq_ignore_ascii_case("HDRS") {
            Ok(Ret::Hdrs)
        } else {
            Err(DsnError::BadRet)
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Ret::Full => "FULL",
            Ret::Hdrs => "HDRS",
        }
    }
}

/// A validated `xtext` value in its encoded (wire) form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct XText(String);

impl XText {
    /// Validates `v` as the `ENVID` value.
    pub fn envid(v: &str) -> Result<XText, DsnError> {
        if v.len() > MAX_ENVID_LEN {
            return Err(DsnError::TooLong("ENVID"));
        }
        // §4.4: the identifier itself is printable US-ASCII (graphic and space).
        let printable = |d: Vec<u8>| d.iter().all(|b| (b' '..=b'~').contains(b));
        if v.is_empty() || !decode_xtext(v).is_some_and(printable) {
            return Err(DsnError::BadXtext("ENVID"));
        }
        Ok(XText(v.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for XText {
    type Error = DsnError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        XText::envid(&s)
    }
}

impl From<XText> for String {
    fn from(x: XText) -> String {
        x.0
    }
}

/// Decodes RFC 3461 §4 `xtext`: `xchar` is `!`..`~` except `+` and `=`; `+XX` is one octet in
/// upper-case hex. `None` when the text is not valid xtext.
pub fn decode_xtext(v: &str) -> Option<Vec<u8>> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => {
                let hex = |c: u8| match c {
                    b'0'..=b'9' => Some(c - b'0'),
                    b'A'..=b'F' => Some(c - b'A' + 10),
                    _ => None,
                };
                let hi = hex(*b.get(i + 1)?)?;
                let lo = hex(*b.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'=' => return None,
            c @ b'!'..=b'~' => {
                out.push(c);
                i += 1;
            }
            _ => return None,
        }
    }
    Some(out)
}

/// `NOTIFY=`: `NEVER`, or when to report (any of success, failure, delay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Notify {
    pub success: bool,
    pub failure: bool,
    pub delay: bool,
}

impl Notify {
    pub const NEVER: Notify = Notify {
        success: false,
        failure: false,
        delay: false,
    };

    /// Parses `NEVER` or a comma-separated list of `SUCCESS`, `FAILURE`, `DELAY` (any case).
    pub fn parse(v: &str) -> Result<Notify, DsnError> {
        let mut n = Notify::NEVER;
        let mut never = false;
        for word in v.split(',') {
            let slot = if word.eq_ignore_ascii_case("NEVER") {
                &mut never
            } else if word.eq_ignore_ascii_case("SUCCESS") {
                &mut n.success
            } else if word.eq_ignore_ascii_case("FAILURE") {
                &mut n.failure
            } else if word.eq_ignore_ascii_case("DELAY") {
                &mut n.delay
            } else {
                return Err(DsnError::BadNotify);
            };
            if std::mem::replace(slot, true) {
                return Err(DsnError::RepeatedNotify);
            }
        }
        if never && n != Notify::NEVER {
            return Err(DsnError::NeverWithOthers);
        }
        Ok(n)
    }
}

impl fmt::Display for Notify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Notify::NEVER {
            return f.write_str("NEVER");
        }
        let words = [
            (self.success, "SUCCESS"),
            (self.failure, "FAILURE"),
            (self.delay, "DELAY"),
        ];
        let on: Vec<&str> = words.iter().filter(|w| w.0).map(|w| w.1).collect();
        f.write_str(&on.join(","))
    }
}

impl TryFrom<String> for Notify {
    type Error = DsnError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Notify::parse(&s)
    }
}

impl From<Notify> for String {
    fn from(n: Notify) -> String {
        n.to_string()
    }
}

/// `ORCPT=addr-type;xtext`: the recipient as the originator named it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Orcpt(String);

impl Orcpt {
    /// Validates the value: an atom address type, `;`, xtext. For `rfc822` the decoded address
    /// must be printable ASCII.
    pub fn parse(v: &str) -> Result<Orcpt, DsnError> {
        if v.len() > MAX_ORCPT_LEN {
            return Err(DsnError::TooLong("ORCPT"));
        }
        let (kind, addr) = v.split_once(';').ok_or(DsnError::BadOrcpt)?;
        let atom_ok = !kind.is_empty()
            && kind.len() <= MAX_ADDR_TYPE_LEN
            && kind.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !atom_ok || addr.is_empty() {
            return Err(DsnError::BadOrcpt);
        }
        let decoded = decode_xtext(addr).ok_or(DsnError::BadXtext("ORCPT"))?;
        if !decoded.iter().all(|b| (b' '..=b'~').contains(b)) {
            return Err(DsnError::BadXtext("ORCPT"));
        }
        Ok(Orcpt(v.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Orcpt {
    type Error = DsnError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Orcpt::parse(&s)
    }
}

impl From<Orcpt> for String {
    fn from(o: Orcpt) -> String {
        o.0
    }
}

/// The DSN parameters one relayed copy carries: the transaction's `RET`/`ENVID` and its
/// recipient's `NOTIFY`/`ORCPT`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dsn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ret: Option<Ret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envid: Option<XText>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<Notify>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orcpt: Option<Orcpt>,
}

impl Dsn {
    /// True when there is nothing to pass on.
    pub fn is_empty(&self) -> bool {
        *self == Dsn::default()
    }

    /// The MAIL parameters, each with a leading space (empty when none).
    pub fn mail_params(&self) -> String {
        let mut s = String::new();
        if let Some(ret) = self.ret {
            s.push_str(" RET=");
            s.push_str(ret.as_str());
        }
        if let Some(envid) = &self.envid {
            s.push_str(" ENVID=");
            s.push_str(envid.as_str());
        }
        s
    }

    /// The RCPT parameters, each with a leading space (empty when none).
    pub fn rcpt_params(&self) -> String {
        let mut s = String::new();
        if let Some(notify) = self.notify {
            s.push_str(" NOTIFY=");
            s.push_str(&notify.to_string());
        }
        if let Some(orcpt) = &self.orcpt {
            s.push_str(" ORCPT=");
            s.push_str(orcpt.as_str());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_writes_back_valid_values() {
        assert_eq!(Ret::parse("hdrs"), Ok(Ret::Hdrs));
        assert_eq!(Ret::parse("Full"), Ok(Ret::Full));
        let n = Notify::parse("failure,Delay").expect("valid");
        assert_eq!(n.to_string(), "FAILURE,DELAY");
        assert_eq!(Notify::parse("never"), Ok(Notify::NEVER));
        assert_eq!(Notify::NEVER.to_string(), "NEVER");
        let o = Orcpt::parse("rfc822;bob+40example.com").expect("valid");
        assert_eq!(o.as_str(), "rfc822;bob+40example.com");
        let e = XText::envid("QQ314159+2B").expect("valid");
        assert_eq!(decode_xtext(e.as_str()), Some(b"QQ314159+".to_vec()));
        let dsn = Dsn {
            ret: Some(Ret::Hdrs),
            envid: Some(e),
            notify: Some(n),
            orcpt: Some(o),
        };
        assert_eq!(dsn.mail_params(), " RET=HDRS ENVID=QQ314159+2B");
        assert_eq!(
            dsn.rcpt_params(),
            " NOTIFY=FAILURE,DELAY ORCPT=rfc822;bob+40example.com"
        );
        let json = serde_json::to_string(&dsn).expect("serializes");
        assert_eq!(serde_json::from_str::<Dsn>(&json).expect("reads"), dsn);
        assert!(Dsn::default().is_empty() && Dsn::default().mail_params().is_empty());
    }

    #[test]
    fn refuses_hostile_values() {
        assert_eq!(Ret::parse("ALL"), Err(DsnError::BadRet));
        assert_eq!(Ret::parse(""), Err(DsnError::BadRet));
        for bad in [
            "",
            "a=b",
            "a+2",
            "a+2g",
            "a+0d",
            "a+0D+0AQUIT",
            "a+00",
            "a b",
            "caf\u{e9}",
            "a\u{7f}",
        ] {
            assert_eq!(
                XText::envid(bad),
                Err(DsnError::BadXtext("ENVID")),
                "{bad:?}"
            );
        }
        assert_eq!(
            XText::envid(&"x".repeat(101)),
            Err(DsnError::TooLong("ENVID"))
        );
        assert!(XText::envid(&"x".repeat(100)).is_ok());
        assert_eq!(
            Notify::parse("NEVER,SUCCESS"),
            Err(DsnError::NeverWithOthers)
        );
        assert_eq!(Notify::parse("DELAY,NEVER"), Err(DsnError::NeverWithOthers));
        assert_eq!(
            Notify::parse("SUCCESS,success"),
            Err(DsnError::RepeatedNotify)
        );
        assert_eq!(Notify::parse("NEVER,NEVER"), Err(DsnError::RepeatedNotify));
        for bad in ["", "SUCCESS,", ",FAILURE", "ALWAYS", "SUCCESS FAILURE"] {
            assert_eq!(Notify::parse(bad), Err(DsnError::BadNotify), "{bad:?}");
        }
        for bad in [
            "bob@example.com",
            ";bob",
            "rfc822;",
            "rfc 822;x",
            "rfc822;a=b",
        ] {
            assert!(Orcpt::parse(bad).is_err(), "{bad:?}");
        }
        // An escaped CR/LF or NUL decodes to a control character: refused.
        for bad in ["rfc822;a+0D+0Ab", "rfc822;a+00"] {
            assert_eq!(Orcpt::parse(bad), Err(DsnError::BadXtext("ORCPT")));
        }
        let long = format!("rfc822;{}", "a".repeat(494));
        assert_eq!(Orcpt::parse(&long), Err(DsnError::TooLong("ORCPT")));
        assert!(serde_json::from_str::<Dsn>(r#"{"envid":"a=b"}"#).is_err());
    }
}
