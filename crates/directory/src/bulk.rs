//! Bulk import and export of members as other systems hold them (`herald-import`):
//! a batch of members with their delivery mode and status written in one transaction, a page
//! scan that reads them back with their mode, and a suppression entry written with its original
//! date.
//!
//! Invariants:
//! - Every member of a batch passes the same suppression and ban check as every other path
//!   that adds a member (`suppression::refusal_on`); a refused member is reported in its
//!   [`ImportOutcome`] and not written, the rest of the batch is.
//! - An import never re-enables a member: a member Herald has disabled (bounces, suppression,
//!   an administrator) stays disabled whatever the source says; a source that says "disabled"
//!   disables.
//! - Consent is recorded as given (source `import`) only where none exists, so an import never
//!   overwrites a member's own confirmation (see `consent`).
//!
//! SECURITY: members arrive as validated [`Address`] values; names, fields and reasons pass the
//! same checks as the API's (`model::validate_new_member`); an invalid one is reported per
//! member, never written.

use crate::consent::Consent;
use crate::error::{storage, DirectoryError};
use crate::lists::ensure_list;
use crate::members::{high_water, upsert_members};
use crate::model::{validate_new_member, NewMember, MAX_REASON_CHARS};
use crate::refusal::{Refusal, SuppressionSource};
use crate::Directory;
use herald_types::{Address, DeliveryMode, ListId, Member, MemberId};
use rusqlite::params;

/// Most members one [`Directory::import_members`] call takes (one transaction).
pub const MAX_IMPORT_BATCH: usize = 50_000;

/// A member as another system holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportMember {
    pub member: NewMember,
    pub delivery: DeliveryMode,
    /// The member's posts are held for a moderator (Mailman's per-member moderation).
    pub moderated: bool,
    /// `Some(reason)`: disabled in the source (disabled here too); `None`: status left as is.
    pub disabled: Option<String>,
    /// The consent the source recorded (a Herald export); `None`: the batch's (an import).
    pub consent: Option<Consent>,
}

/// A member's per-list options besides name and fields, as an export writes them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemberOptions {
    pub delivery: DeliveryMode,
    pub moderated: bool,
}

/// What became of one member of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportOutcome {
    Added,
    Updated,
    /// On a suppression list or banned: not written.
    Refused(Refusal),
    /// A name, field or reason the directory refuses: not written.
    Invalid(String),
}

impl Directory {
    /// Writes `batch` to `list` in one transaction (see the module doc); one outcome per
    /// member, in order. A member's own consent (a Herald export's) is recorded, else
    /// `consent` (an import's), only where none exists; `None` records none.
    pub fn import_members(
        &self,
        list: ListId,
        batch: &[ImportMember],
        consent: Option<&Consent>,
    ) -> Result<Vec<ImportOutcome>, DirectoryError> {
        if batch.len() > MAX_IMPORT_BATCH {
            return Err(DirectoryError::invalid(
                "members",
                format!("at most {MAX_IMPORT_BATCH} members per batch"),
            ));
        }
        let checked: Vec<Option<String>> = batch.iter().map(check).collect();
        let store = sqlite_or!(self, pg => pg.import_members(list, batch, &checked, consent));
        store.write(|tx| {
            ensure_list(tx, list)?;
            let mut high = high_water(tx)?;
            let mut out = Vec::with_capacity(batch.len());
            for (m, invalid) in batch.iter().zip(checked.iter()) {
                if let Some(why) = invalid {
                    out.push(ImportOutcome::Invalid(why.clone()));
                    continue;
                }
                let addr = &m.member.address;
                if let Some(why) = crate::suppression::refusal_on(store, tx, list, addr)? {
                    out.push(ImportOutcome::Refused(why));
                    continue;
                }
                let tally = upsert_members(
                    tx,
                    list,
                    [&m.member],
                    &mut high,
                    m.consent.as_ref().or(consent),
                )?;
                tx.prepare_cached(
                    "UPDATE members SET delivery = ?3, moderated = ?4 \
                     WHERE list_id = ?1 AND address = ?2",
                )
                .and_then(|mut st| {
                    st.execute(params![
                        list.0,
                        addr.to_string(),
                        m.delivery.as_str(),
                        m.moderated
                    ])
                })
                .map_err(storage("set imported delivery mode and moderation"))?;
                if let Some(reason) = &m.disabled {
                    tx.prepare_cached(
                        "UPDATE members SET disabled_reason = ?3 \
                         WHERE list_id = ?1 AND address = ?2 AND disabled_reason IS NULL",
                    )
                    .and_then(|mut st| st.execute(params![list.0, addr.to_string(), reason]))
                    .map_err(storage("disable imported member"))?;
                }
                out.push(if tally.added > 0 {
                    ImportOutcome::Added
                } else {
                    ImportOutcome::Updated
                });
            }
            Ok(out)
        })
    }

    /// Up to `limit` members of `list` with id above `after`, in id order, each with their
    /// delivery mode and moderation flag: the scan an import plans against and an export writes.
    pub fn members_with_options(
        &self,
        list: ListId,
        after: MemberId,
        limit: usize,
    ) -> Result<Vec<(Member, MemberOptions)>, DirectoryError> {
        let page = self.members_page(list, after, MemberId(i64::MAX), limit, false)?;
        if page.is_empty() {
            return Ok(Vec::new());
        }
        // A second range scan on the same index for the options: `members_page` stays the one
        // member decoder, and the two reads see the same rows unless a writer slips between
        // them, in which case a member added since has an id the caller pages to next.
        let (first, last) = (page[0].id.0, page[page.len() - 1].id.0);
        let rows = match self.backend() {
            crate::Backend::Postgres(pg) => pg.member_options(list, first, last)?,
            crate::Backend::Sqlite(store) => sqlite_member_options(store, list, first, last)?,
        };
        let mut options = std::collections::HashMap::with_capacity(page.len());
        for (id, word, moderated) in rows {
            let delivery = DeliveryMode::parse(&word).ok_or_else(|| DirectoryError::Corrupt {
                what: "members.delivery",
                reason: format!("unknown delivery mode {word:?}"),
            })?;
            options.insert(
                id,
                MemberOptions {
                    delivery,
                    moderated,
                },
            );
        }
        Ok(page
            .into_iter()
            .map(|m| {
                let o = options.get(&m.id.0).copied().unwrap_or_default();
                (m, o)
            })
            .collect())
    }

    /// Puts `address` on a suppression list with the date and source it had where it comes
    /// from (an import or a restore of an export), disabling matching members as
    /// [`Directory::suppress`] does. True if it was new; an existing entry is kept as it is.
    pub fn import_suppression(
        &self,
        list: Option<ListId>,
        address: &Address,
        reason: &str,
        source: SuppressionSource,
        at_ms: u64,
    ) -> Result<bool, DirectoryError> {
        if self
            .suppression_for(list, address)?
            .is_some_and(|s| s.list == list)
        {
            return Ok(false);
        }
        self.suppress(list, address, reason, source)?;
        let at = i64::try_from(at_ms).unwrap_or(i64::MAX);
        let store = sqlite_or!(self, pg => pg.date_suppression(list, address, at).map(|()| true));
        store.write(|tx| {
            tx.prepare_cached(
                "UPDATE suppressions SET at_ms = ?3 WHERE address = ?1 AND COALESCE(list_id, 0) = ?2",
            )
            .and_then(|mut st| st.execute(params![address.to_string(), list.map_or(0, |l| l.0), at]))
            .map_err(storage("date imported suppression"))?;
            Ok(true)
        })
    }
}

/// (id, delivery word, moderated) of `list`'s members with `first <= id <= last`, on SQLite.
fn sqlite_member_options(
    store: &crate::store::Store,
    list: ListId,
    first: i64,
    last: i64,
) -> Result<Vec<(i64, String, bool)>, DirectoryError> {
    let conn = store.reader()?;
    let mut st = conn
        .prepare_cached(
            "SELECT id, delivery, moderated FROM members \
             WHERE list_id = ?1 AND id >= ?2 AND id <= ?3",
        )
        .map_err(storage("read member options"))?;
    let rows = st
        .query_map(params![list.0, first, last], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, bool>(2)?,
            ))
        })
        .map_err(storage("read member options"))?;
    rows.collect::<Result<_, _>>()
        .map_err(storage("read member options"))
}

/// Why the directory would refuse this member's name or fields (the API's checks), as a
/// reason for a report; `None` when it would take it. An import's dry run predicts with it.
pub fn member_problem(m: &NewMember) -> Option<String> {
    validate_new_member(m).err().map(|e| e.to_string())
}

/// Ban patterns compiled once, to test many addresses against the bans an import brings
/// before they are stored (the same matcher [`Directory::add_ban`] stores).
#[derive(Debug, Default)]
pub struct BanPatterns(Vec<(String, crate::patterns::Matcher)>);

impl BanPatterns {
    /// Compiles `patterns`; an unusable one is returned as an error naming it.
    pub fn compile<'a>(
        patterns: impl IntoIterator<Item = &'a String>,
    ) -> Result<BanPatterns, DirectoryError> {
        let mut out = Vec::new();
        for p in patterns {
            let (text, m) = crate::patterns::parse(p)?;
            out.push((text, m));
        }
        Ok(BanPatterns(out))
    }

    /// The first pattern matching `address`.
    pub fn find(&self, address: &Address) -> Option<&str> {
        let text = address.to_string();
        self.0
            .iter()
            .find(|(_, m)| m.matches(&text, address.domain()))
            .map(|(t, _)| t.as_str())
    }
}

/// Whether the ban `pattern` (as [`Directory::add_ban`] takes it) matches `address`: an import
/// plans with the bans it brings before they are stored, by the same matcher.
pub fn ban_pattern_matches(pattern: &str, address: &Address) -> Result<bool, DirectoryError> {
    let (_, m) = crate::patterns::parse(pattern)?;
    Ok(m.matches(&address.to_string(), address.domain()))
}

/// Why the directory would refuse `m`, as a reason for the report; `None` when it is fine.
fn check(m: &ImportMember) -> Option<String> {
    if let Err(e) = validate_new_member(&m.member) {
        return Some(e.to_string());
    }
    let reason = m.disabled.as_deref()?;
    if reason.chars().count() > MAX_REASON_CHARS
        || reason.chars().any(crate::model::is_forbidden_char)
    {
        return Some(format!(
            "disabled reason is longer than {MAX_REASON_CHARS} characters or has control characters"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConsentSource;
    use herald_types::ListSettings;

    fn member(addr: &str, delivery: DeliveryMode, disabled: Option<&str>) -> ImportMember {
        ImportMember {
            member: NewMember::new(Address::parse(addr).unwrap()),
            delivery,
            moderated: false,
            disabled: disabled.map(str::to_string),
            consent: None,
        }
    }

    #[test]
    fn a_batch_keeps_modes_refuses_suppressed_and_banned_and_never_re_enables() {
        crate::tests::on_both(
            a_batch_keeps_modes_refuses_suppressed_and_banned_and_never_re_enables_on,
        );
    }

    fn a_batch_keeps_modes_refuses_suppressed_and_banned_and_never_re_enables_on(d: Directory) {
        let list = d
            .create_list(
                &Address::parse("l@x.test").unwrap(),
                &ListSettings::default(),
            )
            .unwrap();
        let gone = Address::parse("gone@y.test").unwrap();
        d.suppress(None, &gone, "complained", SuppressionSource::Complaint)
            .unwrap();
        d.add_ban(Some(list.id), "@banned.test").unwrap();
        let c = Consent::now(ConsentSource::Import, None);
        let batch = vec![
            member("a@y.test", DeliveryMode::DigestMime, None),
            member("gone@y.test", DeliveryMode::Regular, None),
            member("x@banned.test", DeliveryMode::Regular, None),
            member(
                "off@y.test",
                DeliveryMode::Nomail,
                Some("disabled in source"),
            ),
        ];
        let out = d.import_members(list.id, &batch, Some(&c)).unwrap();
        assert_eq!(out[0], ImportOutcome::Added);
        assert!(matches!(
            out[1],
            ImportOutcome::Refused(Refusal::Suppressed(_))
        ));
        assert!(matches!(out[2], ImportOutcome::Refused(Refusal::Banned(_))));
        assert_eq!(out[3], ImportOutcome::Added);
        let a = Address::parse("a@y.test").unwrap();
        assert_eq!(
            d.delivery(list.id, &a).unwrap(),
            Some(DeliveryMode::DigestMime)
        );
        assert_eq!(d.member(list.id, &gone).unwrap(), None);
        assert_eq!(
            d.member_consent(list.id, &a).unwrap().map(|c| c.source),
            Some(ConsentSource::Import)
        );
        // Disabled here, enabled in the source: stays disabled.
        d.set_member_status(
            list.id,
            &a,
            &herald_types::MemberStatus::Disabled("bounces".into()),
        )
        .unwrap();
        let again = d
            .import_members(
                list.id,
                &[member("a@y.test", DeliveryMode::Regular, None)],
                Some(&c),
            )
            .unwrap();
        assert_eq!(again, vec![ImportOutcome::Updated]);
        let m = d.member(list.id, &a).unwrap().unwrap();
        assert!(!m.status.is_enabled());
        let page = d.members_with_options(list.id, MemberId(0), 10).unwrap();
        assert_eq!(page.len(), 2);
        assert_eq!(page[0].1.delivery, DeliveryMode::Regular);
        assert_eq!(page[1].1.delivery, DeliveryMode::Nomail);
        assert!(!page[0].1.moderated);
        // The source's moderation flag is written, and a re-import with it cleared clears it.
        let mut flagged = member("a@y.test", DeliveryMode::Regular, None);
        flagged.moderated = true;
        d.import_members(list.id, &[flagged.clone()], Some(&c))
            .unwrap();
        assert_eq!(d.moderated(list.id, &a).unwrap(), Some(true));
        let page = d.members_with_options(list.id, MemberId(0), 10).unwrap();
        assert!(page.iter().any(|(m, o)| m.address == a && o.moderated));
        flagged.moderated = false;
        d.import_members(list.id, &[flagged], Some(&c)).unwrap();
        assert_eq!(d.moderated(list.id, &a).unwrap(), Some(false));
    }

    #[test]
    fn invalid_members_are_reported_not_written() {
        crate::tests::on_both(invalid_members_are_reported_not_written_on);
    }

    fn invalid_members_are_reported_not_written_on(d: Directory) {
        let list = d
            .create_list(
                &Address::parse("l@x.test").unwrap(),
                &ListSettings::default(),
            )
            .unwrap();
        let mut bad = member("b@y.test", DeliveryMode::Regular, None);
        bad.member.display_name = Some("Eve\r\nBcc: x".into());
        let c = Consent::now(ConsentSource::Import, None);
        let out = d.import_members(list.id, &[bad], Some(&c)).unwrap();
        assert!(matches!(out[0], ImportOutcome::Invalid(_)));
        assert_eq!(d.member_counts(list.id).unwrap().total, 0);
    }

    #[test]
    fn an_imported_suppression_keeps_its_date() {
        crate::tests::on_both(an_imported_suppression_keeps_its_date_on);
    }

    fn an_imported_suppression_keeps_its_date_on(d: Directory) {
        let a = Address::parse("z@y.test").unwrap();
        assert!(d
            .import_suppression(None, &a, "blocklisted", SuppressionSource::Operator, 1234)
            .unwrap());
        assert!(!d
            .import_suppression(None, &a, "blocklisted", SuppressionSource::Operator, 99)
            .unwrap());
        assert_eq!(d.suppression_for(None, &a).unwrap().unwrap().at_ms, 1234);
    }
}
