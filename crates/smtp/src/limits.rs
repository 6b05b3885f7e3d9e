//! The bounds a session enforces (TIGER_STYLE: a limit on everything that comes from a peer).
//!
//! Embedded in the server's TOML configuration, so every field has a default and unknown keys are
//! refused. Units are in the field names.
//!
//! Invariants: [`Limits::validate`] refuses values below what RFC 5321 §4.5.3.1 requires a server
//! to accept (512-octet command lines, 1000-octet text lines) and zero counts or timeouts, which
//! would make the server unusable rather than safer.
//!
//! SECURITY: together these bound the memory a peer can pin (one line, or one message body) and
//! the time it can hold a session slot; `max_errors` ends sessions that pipeline garbage.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// RFC 5321 §4.5.3.1.4: a command line, CRLF included.
pub const RFC_COMMAND_LINE_OCTETS: usize = 512;
/// RFC 5321 §4.5.3.1.6: a text line, CRLF included.
pub const RFC_TEXT_LINE_OCTETS: usize = 1000;

/// Per-session limits. `Copy` because every session takes its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Longest command line, CRLF included. Longer lines get `500 5.5.2` and are discarded
    /// without being buffered.
    pub max_command_line_octets: usize,
    /// Longest DATA line, CRLF included, measured after dot-unstuffing. A message with a longer
    /// line is read to its end and refused with `500 5.5.2` (RFC 5321 §4.5.3.1.10 "Line too long").
    pub max_data_line_octets: usize,
    /// Largest message accepted, as received (before the `Received:` header is added). Advertised
    /// in `SIZE`; checked against `MAIL FROM … SIZE=` and again against the real body.
    pub max_message_octets: u64,
    /// Successful `RCPT` commands per transaction; more get `452 4.5.3` (RFC 5321 §4.5.3.1.10
    /// says a server must accept at least 100).
    pub max_recipients: usize,
    /// Permanent (5xx) replies a session may earn before it gets `421 4.7.0` and is closed.
    pub max_errors: u32,
    /// How long the peer has for a whole command line, counted from our last reply (RFC 5321
    /// §4.5.3.2.7 server timeout). A deadline, not a per-read idle limit: trickling one byte at
    /// a time does not extend it.
    pub command_timeout_secs: u64,
    /// How long the driver waits for the next chunk of a DATA body: the idle limit between reads
    /// (RFC 5321 §4.5.3.2.5 suggests 3 minutes per block).
    pub data_timeout_secs: u64,
    /// How long the whole DATA phase may take, from our 354 to the peer's final `.`, however
    /// busy the peer keeps the connection. At least `data_timeout_secs`. Generous: 25 MiB at
    /// 15 KiB/s fits in the default.
    pub data_deadline_secs: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_command_line_octets: RFC_COMMAND_LINE_OCTETS,
            max_data_line_octets: RFC_TEXT_LINE_OCTETS,
            max_message_octets: 25 * 1024 * 1024,
            max_recipients: 100,
            max_errors: 10,
            command_timeout_secs: 300,
            data_timeout_secs: 600,
            data_deadline_secs: 1800,
        }
    }
}

/// A limit that would break the protocol or the service. The text names the configuration key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    #[error(
        "max_command_line_octets must be at least {RFC_COMMAND_LINE_OCTETS} (RFC 5321 §4.5.3.1.4)"
    )]
    CommandLineTooSmall,
    #[error("max_data_line_octets must be at least {RFC_TEXT_LINE_OCTETS} (RFC 5321 §4.5.3.1.6)")]
    DataLineTooSmall,
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    #[error("data_deadline_secs must be at least data_timeout_secs")]
    DataDeadlineBelowTimeout,
}

impl Limits {
    /// Checks the values once, when the configuration is loaded.
    pub fn validate(&self) -> Result<(), LimitsError> {
        if self.max_command_line_octets < RFC_COMMAND_LINE_OCTETS {
            return Err(LimitsError::CommandLineTooSmall);
        }
        if self.max_data_line_octets < RFC_TEXT_LINE_OCTETS {
            return Err(LimitsError::DataLineTooSmall);
        }
        let zero = [
            ("max_message_octets", self.max_message_octets == 0),
            ("max_recipients", self.max_recipients == 0),
            ("max_errors", self.max_errors == 0),
            ("command_timeout_secs", self.command_timeout_secs == 0),
            ("data_timeout_secs", self.data_timeout_secs == 0),
            ("data_deadline_secs", self.data_deadline_secs == 0),
        ];
        if let Some((key, _)) = zero.iter().find(|(_, is_zero)| *is_zero) {
            return Err(LimitsError::Zero(key));
        }
        if self.data_deadline_secs < self.data_timeout_secs {
            return Err(LimitsError::DataDeadlineBelowTimeout);
        }
        Ok(())
    }

    pub fn command_timeout(&self) -> Duration {
        Duration::from_secs(self.command_timeout_secs)
    }

    pub fn data_timeout(&self) -> Duration {
        Duration::from_secs(self.data_timeout_secs)
    }

    pub fn data_deadline(&self) -> Duration {
        Duration::from_secs(self.data_deadline_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_the_rfc() {
        let l = Limits::default();
        assert_eq!(l.validate(), Ok(()));
        assert_eq!(l.max_command_line_octets, 512);
        assert_eq!(l.max_data_line_octets, 1000);
        assert_eq!(l.max_message_octets, 25 * 1024 * 1024);
        assert_eq!((l.max_recipients, l.max_errors), (100, 10));
        assert_eq!(l.command_timeout(), Duration::from_secs(300));
        assert_eq!(l.data_timeout(), Duration::from_secs(600));
        assert_eq!(l.data_deadline(), Duration::from_secs(1800));
    }

    #[test]
    fn deserializes_partial_toml_with_defaults_and_refuses_unknown_keys() {
        let l: Limits = toml::from_str("max_recipients = 5\ncommand_timeout_secs = 1").unwrap();
        assert_eq!(l.max_recipients, 5);
        assert_eq!(l.command_timeout_secs, 1);
        assert_eq!(l.max_errors, 10);
        assert!(toml::from_str::<Limits>("max_recipient = 5").is_err());
    }

    #[test]
    fn refuses_unusable_values() {
        let bad = |f: fn(&mut Limits)| {
            let mut l = Limits::default();
            f(&mut l);
            l.validate()
        };
        assert_eq!(
            bad(|l| l.max_command_line_octets = 100),
            Err(LimitsError::CommandLineTooSmall)
        );
        assert_eq!(
            bad(|l| l.max_data_line_octets = 999),
            Err(LimitsError::DataLineTooSmall)
        );
        assert_eq!(
            bad(|l| l.max_errors = 0),
            Err(LimitsError::Zero("max_errors"))
        );
        assert_eq!(
            bad(|l| l.data_timeout_secs = 0),
            Err(LimitsError::Zero("data_timeout_secs"))
        );
        assert_eq!(
            bad(|l| l.data_deadline_secs = 0),
            Err(LimitsError::Zero("data_deadline_secs"))
        );
        let below = bad(|l| l.data_deadline_secs = 599);
        assert_eq!(below, Err(LimitsError::DataDeadlineBelowTimeout));
        assert!(below
            .unwrap_err()
            .to_string()
            .contains("data_deadline_secs"));
    }
}
