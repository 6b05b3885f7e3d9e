//! The one error type of the fan-out boundary.
//!
//! A `FanoutError` means the post cannot be rendered at all, so no member gets a copy: the
//! caller sets the post aside (named quarantine) with this reason. Everything that *can* be
//! handled — malformed MIME, odd charsets, hostile member data — is handled, not reported.
//!
//! SECURITY: messages name the rule that was broken, never echo post bytes at length (a post
//! may be hostile and the text ends up in logs and on the HTTP API).

/// Why a post could not be rendered into a [`crate::Template`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FanoutError {
    /// The input does not start with a header block (empty input, a continuation line first).
    #[error("post is not an RFC 5322 message: {0}")]
    NotAMessage(&'static str),
    /// The header block is longer than the limit, or no blank line ends it within the limit.
    #[error("post header block exceeds {limit} bytes (or has no header/body separator within it)")]
    HeaderTooLong { limit: usize },
    /// A header line is neither a field (`name: value`) nor a continuation line.
    #[error("post header is unparseable: {0}")]
    Unparseable(String),
    /// The list context cannot produce safe headers (e.g. a control character in a URL).
    #[error("list context is invalid: {0}")]
    InvalidContext(&'static str),
    /// No MIME boundary absent from the post could be generated (practically unreachable:
    /// the candidates are keyed hashes, so this means the post was built to contain them all).
    #[error("could not generate a MIME boundary absent from the post")]
    NoBoundary,
}

impl FanoutError {
    /// True when the post itself is at fault (quarantine it); false when the list
    /// configuration is (fix the configuration and retry).
    pub fn is_post_fault(&self) -> bool {
        !matches!(self, FanoutError::InvalidContext(_))
    }
}
