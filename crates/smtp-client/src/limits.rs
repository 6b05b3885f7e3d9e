//! The bounds on what a server may send in one reply. A leaf module: the reply reader enforces
//! them and the errors name them, so neither has to import the other for a number.
//!
//! SECURITY: these bound the memory a hostile server can make the client hold per reply.

/// Longest reply line accepted, in octets without CRLF.
pub const MAX_LINE_LEN: usize = 2048;
/// Most lines accepted in one reply (an EHLO reply lists maybe a dozen extensions).
pub const MAX_LINES: usize = 100;
