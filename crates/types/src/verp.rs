//! The addresses a list answers to, and VERP return paths.
//!
//! A list `announce@lists.example.org` answers to:
//! - `announce@…`: posts;
//! - `announce-bounces@…` and `announce-bounces+<verp>@…`: bounces, where `<verp>` is the member
//!   address with its `@` replaced by `=`, so `bob@example.com` gets copies with the return path
//!   `announce-bounces+bob=example.com@lists.example.org` (Variable Envelope Return Path);
//! - `announce-request@…`: subscription commands.
//!
//! Decoding splits `<verp>` at its last `=`: a domain never contains `=`, a local part may.
//! International members round-trip: the member's domain is an A-label (ASCII) and its UTF-8
//! local part is carried as is, so a return path is UTF-8 exactly when the member's address is,
//! and such a copy is sent with SMTPUTF8 (or not at all) either way.
//!
//! SECURITY: bounce addresses arrive from the network; [`ListAddressParts::classify`] only splits
//! strings and re-validates the decoded member address through [`Address::from_parts`].

use crate::Address;

const BOUNCES_SUFFIX: &str = "-bounces";
const REQUEST_SUFFIX: &str = "-request";

/// Which of a list's addresses a recipient names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListAddressKind {
    Post,
    /// `-bounces`, with the member decoded from a VERP suffix when there is one and it is valid.
    Bounces {
        member: Option<Address>,
    },
    Request,
}

/// A recipient address split into the list it may belong to and the role it plays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListAddressParts {
    /// The list's posting address this recipient would belong to.
    pub list_address: Address,
    pub kind: ListAddressKind,
}

impl ListAddressParts {
    /// Splits a recipient into candidate list address and role. The caller still has to check
    /// that the list exists. `-bounces+junk` with an undecodable suffix still classifies as
    /// bounces (so the bounce is kept for an administrator), with `member: None`.
    pub fn classify(rcpt: &Address) -> ListAddressParts {
        let local = rcpt.local();
        let domain = rcpt.domain();
        let plain = |base: &str, kind| {
            Address::from_parts(base, domain)
                .ok()
                .map(|list_address| ListAddressParts { list_address, kind })
        };
        if let Some(idx) = local.find(&format!("{BOUNCES_SUFFIX}+")) {
            let base = &local[..idx];
            let member = decode_verp(&local[idx + BOUNCES_SUFFIX.len() + 1..]);
            if let Some(p) = plain(base, ListAddressKind::Bounces { member }) {
                return p;
            }
        }
        if let Some(base) = local.strip_suffix(BOUNCES_SUFFIX) {
            if let Some(p) = plain(base, ListAddressKind::Bounces { member: None }) {
                return p;
            }
        }
        if let Some(base) = local.strip_suffix(REQUEST_SUFFIX) {
            if let Some(p) = plain(base, ListAddressKind::Request) {
                return p;
            }
        }
        ListAddressParts {
            list_address: rcpt.clone(),
            kind: ListAddressKind::Post,
        }
    }
}

fn decode_verp(encoded: &str) -> Option<Address> {
    let eq = encoded.rfind('=')?;
    Address::from_parts(&encoded[..eq], &encoded[eq + 1..]).ok()
}

/// `<list>-bounces@<domain>`: the return path when a member cannot be VERP-encoded.
pub fn bounces_address(list: &Address) -> String {
    format!("{}{BOUNCES_SUFFIX}@{}", list.local(), list.domain())
}

/// `<list>-request@<domain>`.
pub fn request_address(list: &Address) -> String {
    format!("{}{REQUEST_SUFFIX}@{}", list.local(), list.domain())
}

/// The VERP return path for one member's copy. Members with a quoted local part fall back to
/// the plain bounces address, since a quoted string cannot sit inside another local part.
pub fn verp_return_path(list: &Address, member: &Address) -> String {
    if !member.is_dot_atom() {
        return bounces_address(list);
    }
    format!(
        "{}{BOUNCES_SUFFIX}+{}={}@{}",
        list.local(),
        member.local(),
        member.domain(),
        list.domain()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Address {
        Address::parse(s).expect("valid test address")
    }

    #[test]
    fn verp_round_trips() {
        let list = a("announce@lists.example.org");
        // International members (RFC 6531): the UTF-8 local part travels as is (such a copy
        // goes with SMTPUTF8 anyway), the IDN domain as its A-label.
        for member in [
            "bob@example.com",
            "a=b+c@x.example",
            "Mixed.Case@EX.com",
            "jörg@münchen.example",
            "用户@例子.example",
            "info@bücher.example",
        ] {
            let member = a(member);
            let rp = verp_return_path(&list, &member);
            let parts = ListAddressParts::classify(&a(&rp));
            assert_eq!(parts.list_address, list);
            assert_eq!(
                parts.kind,
                ListAddressKind::Bounces {
                    member: Some(member.clone())
                }
            );
        }
    }

    #[test]
    fn classifies_list_addresses() {
        let list = a("dev@l.example");
        assert_eq!(
            ListAddressParts::classify(&a("dev-request@l.example")),
            ListAddressParts {
                list_address: list.clone(),
                kind: ListAddressKind::Request
            }
        );
        assert_eq!(
            ListAddressParts::classify(&a("dev-bounces@l.example")).kind,
            ListAddressKind::Bounces { member: None }
        );
        assert_eq!(
            ListAddressParts::classify(&a("dev-bounces+garbage@l.example")),
            ListAddressParts {
                list_address: list.clone(),
                kind: ListAddressKind::Bounces { member: None }
            }
        );
        assert_eq!(
            ListAddressParts::classify(&a("dev@l.example")).kind,
            ListAddressKind::Post
        );
        // A bare "-request" has no list name in front of it: it is just an address.
        assert_eq!(
            ListAddressParts::classify(&a("-request@l.example")).kind,
            ListAddressKind::Post
        );
    }

    #[test]
    fn quoted_members_fall_back_to_plain_bounces() {
        let list = a("x@l.example");
        assert_eq!(
            verp_return_path(&list, &a("\"a b\"@ex.com")),
            "x-bounces@l.example"
        );
    }
}
