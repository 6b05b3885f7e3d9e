//! The `_mta-sts.<domain>` TXT record (RFC 8461 §3.1). No I/O.
//!
//! Records that do not start with `v=STSv1` followed by `;` are not MTA-STS records and are
//! discarded. Exactly one must remain, and it must be valid, for the domain to announce a policy:
//! `v=STSv1; id=<1 to 32 letters and digits>` with optional extension fields
//! (`name=value`, ignored). A repeated `id` counts once, with its first value.
//!
//! SECURITY: TXT data is hostile. It is checked byte by byte; its size is bounded by DNS.

/// What the TXT records of `_mta-sts.<domain>` say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxtRecord {
    /// A valid record: the policy's current id.
    Policy { id: String },
    /// No MTA-STS record among them.
    Absent,
    /// An MTA-STS record that cannot be used (more than one, or malformed): per §3.1 the domain
    /// then has no available policy. The reason is for the log.
    Invalid(&'static str),
}

/// Sorts TXT records (each one's strings already joined) into the verdict above.
pub fn parse_records<S: AsRef<str>>(records: &[S]) -> TxtRecord {
    let mut sts = records.iter().map(AsRef::as_ref).filter(|r| is_sts(r));
    let Some(first) = sts.next() else {
        return TxtRecord::Absent;
    };
    if sts.next().is_some() {
        return TxtRecord::Invalid("more than one v=STSv1 record");
    }
    match parse_one(first) {
        Ok(id) => TxtRecord::Policy { id },
        Err(why) => TxtRecord::Invalid(why),
    }
}

/// `v=STSv1`, optional blanks, then `;`.
fn is_sts(record: &str) -> bool {
    record
        .strip_prefix("v=STSv1")
        .is_some_and(|rest| rest.trim_start_matches([' ', '\t']).starts_with(';'))
}

fn parse_one(record: &str) -> Result<String, &'static str> {
    let mut fields = record.split(';').map(|f| f.trim_matches([' ', '\t']));
    fields.next(); // "v=STSv1", checked by is_sts
    let rest: Vec<&str> = fields.collect();
    // One optional separator may end the record; any other empty field is a syntax error.
    let used = match rest.split_last() {
        Some((&"", init)) => init,
        _ => &rest[..],
    };
    let mut id = None;
    for field in used {
        let (name, value) = field.split_once('=').ok_or("a field is not name=value")?;
        if !is_ext_name(name) || !is_ext_value(value) {
            return Err("malformed field");
        }
        if name == "id" {
            if !is_valid_id(value) {
                return Err("id must be 1 to 32 letters and digits");
            }
            id.get_or_insert(value);
        }
    }
    id.map(str::to_string).ok_or("no id field")
}

/// `1*32(ALPHA / DIGIT)`: a policy id.
pub(crate) fn is_valid_id(id: &str) -> bool {
    (1..=32).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// `(ALPHA / DIGIT) *31(ALPHA / DIGIT / "_" / "-" / ".")`.
fn is_ext_name(name: &str) -> bool {
    let b = name.as_bytes();
    (1..=32).contains(&b.len())
        && b[0].is_ascii_alphanumeric()
        && b[1..]
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
}

/// `1*(%x21-3A / %x3C / %x3E-7E)`: visible ASCII except `;` and `=`.
fn is_ext_value(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| matches!(b, 0x21..=0x3a | 0x3c | 0x3e..=0x7e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(r: &str) -> TxtRecord {
        parse_records(&[r])
    }

    fn policy(id: &str) -> TxtRecord {
        TxtRecord::Policy { id: id.into() }
    }

    #[test]
    fn valid_records() {
        assert_eq!(
            one("v=STSv1; id=20160831085700Z;"),
            policy("20160831085700Z")
        );
        assert_eq!(one("v=STSv1;id=abc"), policy("abc"));
        assert_eq!(one("v=STSv1 ;\tid=abc ; ext=1.2:3"), policy("abc"));
        assert_eq!(one("v=STSv1; ext=x; id=a; id=b"), policy("a"));
        let id32 = "a".repeat(32);
        assert_eq!(one(&format!("v=STSv1; id={id32}")), policy(&id32));
    }

    #[test]
    fn other_records_are_discarded() {
        assert_eq!(parse_records::<&str>(&[]), TxtRecord::Absent);
        assert_eq!(
            parse_records(&["v=spf1 -all", "v=STSv10; id=1", "V=STSv1; id=1", "x"]),
            TxtRecord::Absent
        );
        assert_eq!(
            parse_records(&["v=spf1 -all", "v=STSv1; id=7"]),
            policy("7")
        );
    }

    #[test]
    fn malformed_or_ambiguous_records_mean_no_policy() {
        let bad = [
            "v=STSv1;",
            "v=STSv1; ",
            "v=STSv1; id=",
            "v=STSv1; id=has-dash",
            "v=STSv1; id=has space",
            "v=STSv1;; id=1",
            "v=STSv1; id=1;;",
            "v=STSv1; noequals; id=1",
            "v=STSv1; _x=1; id=1",
            "v=STSv1; x=a=b; id=1",
            "v=STSv1; id=\u{1}",
        ];
        for r in bad {
            assert!(matches!(one(r), TxtRecord::Invalid(_)), "{r:?}");
        }
        assert!(matches!(
            one(&format!("v=STSv1; id={}", "a".repeat(33))),
            TxtRecord::Invalid(_)
        ));
        assert_eq!(
            parse_records(&["v=STSv1; id=1", "v=STSv1; id=2"]),
            TxtRecord::Invalid("more than one v=STSv1 record")
        );
    }
}
