//! The query string of the archive's listing and search pages: paging keys, search words,
//! filters and order, and the reader's error for a date that is not one. Kept apart from the
//! handlers because it is the one place a page reads parameters the reader typed.
//!
//! SECURITY: every field is untrusted. Dates are parsed strictly (`YYYY-MM-DD`) and an echo of
//! a bad one is cut to 40 characters; the paging key falls back to the start when malformed;
//! the words and sender filter reach the store only as SQL parameters.

use crate::store::{Filters, SearchOrder};
use herald_i18n::Words;

#[derive(serde::Deserialize, Default)]
pub(super) struct PageQuery {
    #[serde(default)]
    pub(super) page: usize,
    #[serde(default)]
    pub(super) q: String,
    /// Search filters: the sender contains this; first and last day (YYYY-MM-DD, UTC).
    #[serde(default)]
    pub(super) from: String,
    #[serde(default)]
    pub(super) since: String,
    #[serde(default)]
    pub(super) until: String,
    /// Search order: newest first (the default) or best match first.
    #[serde(default)]
    pub(super) sort: SearchOrderParam,
    /// A month or thread page starts after this row: `<date_ms>.<id>` of the last row shown.
    #[serde(default)]
    pub(super) after: String,
}

impl PageQuery {
    /// The key a month or thread page starts after; the start for none or a malformed one.
    pub(super) fn after_key(&self) -> (i64, i64) {
        self.after
            .split_once('.')
            .and_then(|(d, i)| Some((d.parse().ok()?, i.parse().ok()?)))
            .unwrap_or((i64::MIN, 0))
    }

    /// The filters, or the first bad date as the reader's error.
    pub(super) fn filters(&self) -> Result<Filters, BadDate> {
        let day = |s: &str, field: DateField, next: bool| -> Result<Option<i64>, BadDate> {
            let s = s.trim();
            if s.is_empty() {
                return Ok(None);
            }
            let bad = || BadDate {
                field,
                value: s.chars().take(40).collect(),
            };
            let d: jiff::civil::Date = s.parse().map_err(|_| bad())?;
            let d = if next {
                d.tomorrow().map_err(|_| bad())?
            } else {
                d
            };
            let ts = jiff::tz::Offset::UTC
                .to_timestamp(d.at(0, 0, 0, 0))
                .map_err(|_| bad())?;
            Ok(Some(ts.as_millisecond()))
        };
        Ok(Filters {
            from: Some(self.from.trim().to_string()).filter(|f| !f.is_empty()),
            since_ms: day(&self.since, DateField::Since, false)?,
            // `until` names the last day shown: the bound is the next midnight.
            until_ms: day(&self.until, DateField::Until, true)?,
        })
    }
}

/// The `sort` parameter: an unknown value is the default order, not an error page (a link
/// from an older page or a hand-edited URL still finds its results).
#[derive(Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct SearchOrderParam(pub(super) SearchOrder);

impl<'de> serde::Deserialize<'de> for SearchOrderParam {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(SearchOrderParam(match s.as_str() {
            "relevance" => SearchOrder::Relevance,
            _ => SearchOrder::Newest,
        }))
    }
}

impl SearchOrderParam {
    pub(super) fn as_str(self) -> &'static str {
        match self.0 {
            SearchOrder::Newest => "newest",
            SearchOrder::Relevance => "relevance",
        }
    }
}

/// Which date filter a reader got wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DateField {
    Since,
    Until,
}

/// A search date that is not one (shown above the form, in the page's words, with the field's
/// label and the first 40 characters of what was typed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BadDate {
    field: DateField,
    value: String,
}

impl BadDate {
    pub(super) fn say(&self, w: &Words<'_>) -> String {
        let label = w.text(
            match self.field {
                DateField::Since => "archive-since-label",
                DateField::Until => "archive-until-label",
            },
            &[],
        );
        w.text(
            "archive-bad-date",
            &[("field", &label), ("value", &self.value)],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_dates_are_checked() {
        let q = |since: &str, until: &str| PageQuery {
            since: since.into(),
            until: until.into(),
            ..PageQuery::default()
        };
        let f = q("2026-11-24", "2026-11-24").filters().unwrap();
        assert_eq!(
            f.until_ms.unwrap() - f.since_ms.unwrap(),
            86_400_000,
            "until is inclusive"
        );
        for bad in ["yesterday", "2026-13-01", "24.11.2026", "'; DROP TABLE"] {
            assert!(q(bad, "").filters().is_err(), "{bad}");
            assert!(q("", bad).filters().is_err(), "{bad}");
        }
    }
}
