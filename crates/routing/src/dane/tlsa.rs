//! TLSA records (RFC 6698 §2.1; parameter names from RFC 7218), parsed strictly. No I/O.
//!
//! Only what SMTP can use survives parsing (RFC 7672 §3.1): certificate usages DANE-TA(2) and
//! DANE-EE(3), selectors Cert(0) and SPKI(1), matching types Full(0), SHA2-256(1) and
//! SHA2-512(2). Everything else is *unusable* ([`Unusable`] says why): the PKIX usages 0 and 1
//! (RFC 7672 §3.1.3), unknown parameters, digests of the wrong length (RFC 7671 §10.1.2), full
//! data that is not a DER SEQUENCE, and data over [`MAX_DATA_LEN`]. An unusable record is
//! ignored; a host whose records are all unusable is treated as having none (RFC 7672 §2.2).
//!
//! Limits: association data up to [`MAX_DATA_LEN`] octets; at most [`MAX_RECORDS`] usable
//! records per host (more are dropped, with the first ones kept).
//!
//! SECURITY: rdata comes from DNS and is hostile. Parsing only indexes within bounds it has
//! checked; nothing here panics or allocates more than the rdata's own size.

use sha2::{Digest, Sha256, Sha512};
use std::fmt;

/// Largest association data accepted: a full certificate with a long chain of names fits, a
/// DNS message cannot carry much more (64 KiB) anyway.
pub const MAX_DATA_LEN: usize = 16 * 1024;
/// Most usable records kept per host: each one is a comparison per handshake.
pub const MAX_RECORDS: usize = 32;

/// Certificate usage (the first octet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Usage {
    /// DANE-TA(2): the record names a trust anchor; the chain must lead to it and the
    /// certificate must name the MX host.
    DaneTa,
    /// DANE-EE(3): the record names the server's own certificate or key; names and dates are
    /// not checked (RFC 7672 §3.1.1).
    DaneEe,
}

/// Which part of a certificate is matched (the second octet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Selector {
    /// Cert(0): the whole DER certificate.
    Cert,
    /// SPKI(1): the DER SubjectPublicKeyInfo.
    Spki,
}

/// How the selected data is compared (the third octet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Matching {
    /// Full(0): octet for octet.
    Full,
    /// SHA2-256(1).
    Sha256,
    /// SHA2-512(2).
    Sha512,
}

impl Matching {
    /// The digest length the record's data must have, None for `Full`.
    fn digest_len(self) -> Option<usize> {
        match self {
            Matching::Full => None,
            Matching::Sha256 => Some(32),
            Matching::Sha512 => Some(64),
        }
    }
}

/// One usable TLSA record.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Tlsa {
    pub usage: Usage,
    pub selector: Selector,
    pub matching: Matching,
    /// The certificate association data: a digest, or the full DER certificate or SPKI.
    pub data: Box<[u8]>,
}

impl fmt::Debug for Tlsa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// The presentation form, `3 1 1 <hex>` (long data is shortened for logs).
impl fmt::Display for Tlsa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let u = match self.usage {
            Usage::DaneTa => 2,
            Usage::DaneEe => 3,
        };
        let s = match self.selector {
            Selector::Cert => 0,
            Selector::Spki => 1,
        };
        let m = match self.matching {
            Matching::Full => 0,
            Matching::Sha256 => 1,
            Matching::Sha512 => 2,
        };
        write!(f, "{u} {s} {m} ")?;
        for b in self.data.iter().take(32) {
            write!(f, "{b:02x}")?;
        }
        if self.data.len() > 32 {
            write!(f, "…")?;
        }
        Ok(())
    }
}

/// Why a TLSA record cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    #[error("rdata of {0} octets is too short (at least 4)")]
    TooShort(usize),
    #[error("association data of {0} octets is longer than {MAX_DATA_LEN}")]
    TooLong(usize),
    #[error("certificate usage {0} is PKIX, unusable for SMTP (RFC 7672 §3.1.3)")]
    PkixUsage(u8),
    #[error("unknown certificate usage {0}")]
    UnknownUsage(u8),
    #[error("unknown selector {0}")]
    UnknownSelector(u8),
    #[error("unknown matching type {0}")]
    UnknownMatching(u8),
    #[error("digest of {got} octets where {expected} are expected")]
    DigestLength { got: usize, expected: usize },
    #[error("full association data is not a DER SEQUENCE")]
    NotDer,
}

/// Parses one record's rdata (wire form: usage, selector, matching type, data).
pub fn parse(rdata: &[u8]) -> Result<Tlsa, Unusable> {
    let [u, s, m, data @ ..] = rdata else {
        return Err(Unusable::TooShort(rdata.len()));
    };
    if data.is_empty() {
        return Err(Unusable::TooShort(rdata.len()));
    }
    let usage = match *u {
        0 | 1 => return Err(Unusable::PkixUsage(*u)),
        2 => Usage::DaneTa,
        3 => Usage::DaneEe,
        other => return Err(Unusable::UnknownUsage(other)),
    };
    let selector = match *s {
        0 => Selector::Cert,
        1 => Selector::Spki,
        other => return Err(Unusable::UnknownSelector(other)),
    };
    let matching = match *m {
        0 => Matching::Full,
        1 => Matching::Sha256,
        2 => Matching::Sha512,
        other => return Err(Unusable::UnknownMatching(other)),
    };
    if data.len() > MAX_DATA_LEN {
        return Err(Unusable::TooLong(data.len()));
    }
    match matching.digest_len() {
        Some(expected) if data.len() != expected => {
            return Err(Unusable::DigestLength {
                got: data.len(),
                expected,
            })
        }
        // A certificate and an SPKI are both DER SEQUENCEs: anything else can never match.
        None if data.first() != Some(&0x30) => return Err(Unusable::NotDer),
        _ => {}
    }
    Ok(Tlsa {
        usage,
        selector,
        matching,
        data: data.into(),
    })
}

impl Tlsa {
    /// True when `selected` (the certificate's DER, or its SPKI, as the selector says) is
    /// what this record names.
    pub fn matches(&self, selected: &[u8]) -> bool {
        match self.matching {
            Matching::Full => *self.data == *selected,
            Matching::Sha256 => Sha256::digest(selected).as_slice() == &*self.data,
            Matching::Sha512 => Sha512::digest(selected).as_slice() == &*self.data,
        }
    }
}

/// The usable TLSA records of one host, in the order DNS gave them, at most [`MAX_RECORDS`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TlsaSet {
    records: Vec<Tlsa>,
}

impl TlsaSet {
    /// The records in presentation form (`3 1 1 <hex>`), for TLS reports (RFC 8460
    /// `policy-string`).
    pub fn presentation(&self) -> Vec<String> {
        self.records.iter().map(|r| r.to_string()).collect()
    }

    /// Parses every rdata; returns the usable records and the reasons the others were not.
    pub fn from_rdata<'a>(rdatas: impl IntoIterator<Item = &'a [u8]>) -> (TlsaSet, Vec<Unusable>) {
        let mut records = Vec::new();
        let mut unusable = Vec::new();
        for rdata in rdatas {
            match parse(rdata) {
                Ok(t) if !records.contains(&t) && records.len() < MAX_RECORDS => records.push(t),
                Ok(_) => {}
                Err(e) => unusable.push(e),
            }
        }
        (TlsaSet { records }, unusable)
    }

    /// A set of already parsed records (tests, tools).
    pub fn new(mut records: Vec<Tlsa>) -> TlsaSet {
        records.truncate(MAX_RECORDS);
        TlsaSet { records }
    }

    pub fn records(&self) -> &[Tlsa] {
        &self.records
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rdata(u: u8, s: u8, m: u8, data: &[u8]) -> Vec<u8> {
        let mut v = vec![u, s, m];
        v.extend_from_slice(data);
        v
    }

    /// Every usage × selector × matching combination, with data of the right shape for the
    /// matching type: only usages 2 and 3 with known selectors and matching types are usable.
    #[test]
    fn every_parameter_combination() {
        for u in 0..=4u8 {
            for s in 0..=2u8 {
                for m in 0..=3u8 {
                    let data: Vec<u8> = match m {
                        1 => vec![7; 32],
                        2 => vec![7; 64],
                        _ => vec![0x30, 0x03, 1, 2, 3],
                    };
                    let got = parse(&rdata(u, s, m, &data));
                    let expected = match (u, s, m) {
                        (0 | 1, _, _) => Err(Unusable::PkixUsage(u)),
                        (4, _, _) => Err(Unusable::UnknownUsage(4)),
                        (_, 2, _) => Err(Unusable::UnknownSelector(2)),
                        (_, _, 3) => Err(Unusable::UnknownMatching(3)),
                        _ => Ok(()),
                    };
                    match (got, expected) {
                        (Ok(t), Ok(())) => {
                            assert_eq!(t.usage, [Usage::DaneTa, Usage::DaneEe][u as usize - 2]);
                            assert_eq!(t.selector, [Selector::Cert, Selector::Spki][s as usize]);
                            let ms = [Matching::Full, Matching::Sha256, Matching::Sha512];
                            assert_eq!(t.matching, ms[m as usize]);
                            assert_eq!(&*t.data, &data[..]);
                        }
                        (Err(e), Err(want)) => assert_eq!(e, want, "{u} {s} {m}"),
                        (got, want) => panic!("{u} {s} {m}: got {got:?}, want {want:?}"),
                    }
                }
            }
        }
    }

    #[test]
    fn hostile_rdata_is_unusable() {
        let table: &[(&[u8], Unusable)] = &[
            (b"", Unusable::TooShort(0)),
            (&[3], Unusable::TooShort(1)),
            (&[3, 1, 1], Unusable::TooShort(3)),
            (
                &[3, 1, 1, 0],
                Unusable::DigestLength {
                    got: 1,
                    expected: 32,
                },
            ),
            (
                &[3, 1, 2, 1, 2],
                Unusable::DigestLength {
                    got: 2,
                    expected: 64,
                },
            ),
            (&[255, 1, 1, 0], Unusable::UnknownUsage(255)),
            (&[3, 255, 1, 0], Unusable::UnknownSelector(255)),
            (&[3, 1, 255, 0], Unusable::UnknownMatching(255)),
            (&[3, 0, 0, 0x04, 0x01], Unusable::NotDer),
        ];
        for (bytes, want) in table {
            assert_eq!(parse(bytes).as_ref().err(), Some(want), "{bytes:?}");
        }
        let mut oversized = vec![3, 0, 0, 0x30];
        oversized.resize(4 + MAX_DATA_LEN, 0);
        assert_eq!(parse(&oversized), Err(Unusable::TooLong(MAX_DATA_LEN + 1)));
        let mut long_digest = vec![3, 1, 1];
        long_digest.resize(3 + 33, 0);
        assert_eq!(
            parse(&long_digest),
            Err(Unusable::DigestLength {
                got: 33,
                expected: 32
            })
        );
    }

    #[test]
    fn digests_match_what_they_name() {
        let spki = b"\x30\x03any";
        let sha256 = Sha256::digest(spki);
        let sha512 = Sha512::digest(spki);
        let full = parse(&rdata(3, 1, 0, spki)).expect("usable");
        let r256 = parse(&rdata(3, 1, 1, &sha256)).expect("usable");
        let r512 = parse(&rdata(3, 1, 2, &sha512)).expect("usable");
        for r in [&full, &r256, &r512] {
            assert!(r.matches(spki), "{r}");
            assert!(!r.matches(b"\x30\x03ant"), "{r}");
        }
        assert!(r256.to_string().starts_with("3 1 1 "), "{r256}");
    }

    #[test]
    fn a_set_keeps_usable_records_once_and_bounded() {
        let good = rdata(3, 1, 1, &[1; 32]);
        let pkix = rdata(1, 1, 1, &[1; 32]);
        let many: Vec<Vec<u8>> = (0..MAX_RECORDS as u8 + 5)
            .map(|i| rdata(3, 1, 1, &[i; 32]))
            .collect();
        let (set, bad) = TlsaSet::from_rdata([&good[..], &good[..], &pkix[..]]);
        assert_eq!((set.len(), bad), (1, vec![Unusable::PkixUsage(1)]));
        let (set, bad) = TlsaSet::from_rdata(many.iter().map(Vec::as_slice));
        assert_eq!((set.len(), bad.len()), (MAX_RECORDS, 0));
    }

    proptest! {
        /// Any octets: parsing never panics, and what it accepts is exactly the rules above.
        #[test]
        fn parse_never_panics_and_accepts_only_well_formed(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(t) = parse(&bytes) {
                prop_assert!(matches!(bytes[0], 2 | 3));
                prop_assert!(bytes[1] <= 1 && bytes[2] <= 2);
                prop_assert_eq!(&*t.data, &bytes[3..]);
                match t.matching {
                    Matching::Sha256 => prop_assert_eq!(t.data.len(), 32),
                    Matching::Sha512 => prop_assert_eq!(t.data.len(), 64),
                    Matching::Full => prop_assert_eq!(t.data[0], 0x30),
                }
            }
        }

        /// Well-formed digest records always parse, whatever their data.
        #[test]
        fn well_formed_digests_parse(u in 2u8..=3, s in 0u8..=1, digest in proptest::collection::vec(any::<u8>(), 32)) {
            prop_assert!(parse(&rdata(u, s, 1, &digest)).is_ok());
        }
    }
}
