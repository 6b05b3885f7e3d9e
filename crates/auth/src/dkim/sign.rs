//! Building and signing one `DKIM-Signature` field (RFC 6376 §3.5, §5) from a copy's header
//! block and a body hash computed elsewhere (shared prefix + per-copy tail, see `canon`).
//!
//! Signature format: `v=1; a=rsa-sha256|ed25519-sha256; c=relaxed/relaxed; d; s; t; h; bh; b`.
//! The cryptography is in `key` (aws-lc-rs); this module only lays out the tag list, because
//! mail-auth's signer insists on hashing the whole body itself. The field selection and the
//! sign-and-fold step are shared with the ARC sealer (`crate::arc`), which signs with the same
//! key.
//!
//! Signed fields: every instance present of [`SIGNED_FIELDS`], bottom-up per RFC 6376 §5.4.2,
//! plus one extra `from` (over-signing: a From added in transit then breaks the signature).
//!
//! SECURITY: the key never leaves [`DkimSigner`]; its `Debug` prints the domain and selector
//! only. The header block comes from our own template, but it may carry posters' fields: it is
//! parsed defensively (no panics, bounded by its length).

use super::canon::relaxed_header;
use super::key::PrivateKey;
use super::{DkimAlgorithm, DkimError};
use base64::Engine;

/// Fields covered by the list's signature when present. RFC 8058 §4 requires the two
/// List-Unsubscribe fields; the rest are what a reader sees or what decides MIME rendering.
pub const SIGNED_FIELDS: &[&str] = &[
    "From",
    "To",
    "Cc",
    "Subject",
    "Date",
    "Message-ID",
    "Reply-To",
    "In-Reply-To",
    "References",
    "MIME-Version",
    "Content-Type",
    "Content-Transfer-Encoding",
    "List-Id",
    "List-Unsubscribe",
    "List-Unsubscribe-Post",
    "List-Post",
    "List-Help",
    "List-Subscribe",
    "List-Archive",
];

/// A list domain's signing key with its DNS coordinates (`<selector>._domainkey.<domain>`).
pub struct DkimSigner {
    domain: String,
    selector: String,
    algorithm: DkimAlgorithm,
    key: PrivateKey,
    /// Also ARC-seal copies with this key (two more signatures per copy).
    seals_arc: bool,
    /// A second key of the same domain that signs every copy too, typically Ed25519 beside
    /// RSA (RFC 8463 §3): receivers that do not know one algorithm use the other signature.
    second: Option<Box<DkimSigner>>,
}

impl std::fmt::Debug for DkimSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is deliberately absent.
        f.debug_struct("DkimSigner")
            .field("domain", &self.domain)
            .field("selector", &self.selector)
            .field("algorithm", &self.algorithm)
            .field("seals_arc", &self.seals_arc)
            .field("second", &self.second)
            .finish_non_exhaustive()
    }
}

impl DkimSigner {
    pub(crate) fn new(
        domain: &str,
        selector: &str,
        algorithm: DkimAlgorithm,
        key: PrivateKey,
    ) -> Self {
        DkimSigner {
            domain: domain.to_ascii_lowercase(),
            selector: selector.to_string(),
            algorithm,
            key,
            seals_arc: true,
            second: None,
        }
    }

    /// Adds a second signature with `other`, a key of the same domain under another selector.
    pub fn with_second(mut self, other: DkimSigner) -> Result<Self, DkimError> {
        if other.domain != self.domain || other.selector == self.selector {
            return Err(DkimError::Second(format!(
                "the second key must be of {} under another selector than {}",
                self.domain, self.selector
            )));
        }
        self.second = Some(Box::new(DkimSigner {
            second: None,
            ..other
        }));
        Ok(self)
    }

    /// The second signer, if copies carry two signatures.
    pub fn second(&self) -> Option<&DkimSigner> {
        self.second.as_deref()
    }

    /// Turns ARC sealing with this key on or off (on by default). With RSA-2048 an ARC set
    /// triples the signing cost of a copy; see BENCHMARKS.md.
    pub fn with_arc(mut self, seals_arc: bool) -> Self {
        self.seals_arc = seals_arc;
        self
    }

    /// Whether copies signed with this key are ARC-sealed too.
    pub fn seals_arc(&self) -> bool {
        self.seals_arc
    }

    pub fn domain(&self) -> &str {
        &self.domain
    }

    pub fn selector(&self) -> &str {
        &self.selector
    }

    pub fn algorithm(&self) -> DkimAlgorithm {
        self.algorithm
    }

    /// The TXT record to publish at `<selector>._domainkey.<domain>` for this key (what
    /// `herald dkim keygen` printed when it made it; `herald doctor` compares DNS with it).
    pub fn dns_record(&self) -> String {
        format!(
            "v=DKIM1; k={}; p={}",
            self.algorithm().key_type(),
            self.key.public_p()
        )
    }

    /// Returns the complete `DKIM-Signature` field (folded, CRLF-terminated) for a message
    /// whose header block is `header` (fields in wire form, without the blank line) and whose
    /// relaxed body hash is `body_hash`. `now` is the signing time (`t=`, Unix seconds).
    pub fn sign(
        &self,
        header: &[u8],
        body_hash: &[u8; 32],
        now: u64,
    ) -> Result<Vec<u8>, DkimError> {
        let mut canonical = Vec::with_capacity(1024);
        let names = canonical_signed_fields(&header_fields(header), &[], &mut canonical)?;
        let field = format!(
            "DKIM-Signature: v=1; a={}; c=relaxed/relaxed; d={}; s={};\r\n t={now}; h={names};\r\n bh={};\r\n b=",
            self.algorithm.tag(),
            self.domain,
            self.selector,
            base64::engine::general_purpose::STANDARD.encode(body_hash),
        );
        self.finish_field(field.into_bytes(), &mut canonical)
    }

    /// Signs `canonical` (the relaxed canonical fields this signature covers) followed by
    /// `field` itself, and returns `field` completed: the signature in base64, folded, and
    /// the final CRLF. `field` is a whole signature field ending in the empty `b=` tag.
    ///
    /// Shared by DKIM-Signature and the ARC fields (`arc`), which differ only in their tag
    /// lists and in what `canonical` holds. Crate-private: a public "sign these bytes" would
    /// be a signing oracle for the list domain's key.
    pub(crate) fn finish_field(
        &self,
        mut field: Vec<u8>,
        canonical: &mut Vec<u8>,
    ) -> Result<Vec<u8>, DkimError> {
        if !relaxed_header(&field, canonical) {
            return Err(DkimError::Sign("signature field without a colon".into()));
        }
        // The signed form of our own field has no trailing CRLF (RFC 6376 §3.7).
        canonical.truncate(canonical.len() - 2);
        let signature = self.key.sign(canonical)?;
        let encoded = base64::engine::general_purpose::STANDARD.encode(signature);
        for (i, chunk) in encoded.as_bytes().chunks(72).enumerate() {
            if i > 0 {
                field.extend_from_slice(b"\r\n ");
            }
            field.extend_from_slice(chunk);
        }
        field.extend_from_slice(b"\r\n");
        Ok(field)
    }
}

/// Appends the relaxed canonical form of every instance present of [`SIGNED_FIELDS`] and of
/// `extra` (bottom-up per name, RFC 6376 §5.4.2) to `canonical`, and returns the `h=` value:
/// those names in that order plus one more `from` (over-signing). Fails without a From.
pub(crate) fn canonical_signed_fields(
    fields: &[(&str, &[u8])],
    extra: &[&str],
    canonical: &mut Vec<u8>,
) -> Result<String, DkimError> {
    let mut names: Vec<&str> = Vec::with_capacity(SIGNED_FIELDS.len() + extra.len() + 1);
    for &name in SIGNED_FIELDS.iter().chain(extra) {
        for raw in fields
            .iter()
            .rev()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            if relaxed_header(raw.1, canonical) {
                names.push(name);
            }
        }
    }
    if !names.contains(&"From") {
        return Err(DkimError::NoFrom);
    }
    names.push("From");
    Ok(fold_h(&names))
}

/// Where the `h=` value starts on its line: ` t=<10 digits>; h=`.
const H_COLUMN: usize = 17;
/// Lines stay within RFC 5322's 78 octets (leaving room for the `;` after the value).
const FOLD_AT: usize = 77;

/// The `h=` value, lower-cased and folded after a colon where the line would pass 78 octets.
/// RFC 6376 §3.5 allows FWS around the colons, and the field is signed in the relaxed form of
/// exactly these bytes, so signer and verifier see the same text.
fn fold_h(names: &[&str]) -> String {
    let mut out = String::with_capacity(names.iter().map(|n| n.len() + 1).sum::<usize>() + 8);
    let mut column = H_COLUMN;
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push(':');
            column += 1;
            if column + name.len() > FOLD_AT {
                out.push_str("\r\n ");
                column = 1;
            }
        }
        out.push_str(&name.to_ascii_lowercase());
        column += name.len();
    }
    out
}

/// Splits a header block into (name, raw field) pairs; stops at the blank line. Lines that
/// are not fields (no colon) are skipped; they cannot be signed anyway.
pub fn header_fields(header: &[u8]) -> Vec<(&str, &[u8])> {
    let mut fields = Vec::with_capacity(32);
    let mut start = 0;
    while start < header.len() && !header[start..].starts_with(b"\r\n") {
        let mut end = start;
        loop {
            match header[end..].windows(2).position(|w| w == b"\r\n") {
                Some(i) => end += i + 2,
                None => {
                    end = header.len();
                    break;
                }
            }
            if !matches!(header.get(end), Some(b' ' | b'\t')) {
                break;
            }
        }
        let raw = &header[start..end];
        if let Some(colon) = raw.iter().position(|&b| b == b':') {
            if let Ok(name) = std::str::from_utf8(&raw[..colon]) {
                fields.push((name.trim_end_matches([' ', '\t']), raw));
            }
        }
        start = end;
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h_is_folded_within_78_octets() {
        let h = fold_h(SIGNED_FIELDS);
        let first = format!(" t=1795239116; h={h};");
        for line in first.split("\r\n") {
            assert!(line.len() <= 78, "{line:?}");
        }
        assert_eq!(
            h.replace("\r\n ", ""),
            SIGNED_FIELDS.join(":").to_ascii_lowercase()
        );
        assert_eq!(fold_h(&["From", "To"]), "from:to");
    }

    #[test]
    fn fields_are_split_with_their_folding() {
        let h = b"From: a\r\nSubject: x\r\n y\r\nbad line\r\nTo : b\r\n\r\nbody";
        let f = header_fields(h);
        let names: Vec<&str> = f.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["From", "Subject", "To"]);
        assert_eq!(f[1].1, b"Subject: x\r\n y\r\n");
    }
}
