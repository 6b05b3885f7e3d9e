//! Complaints: a feedback-loop report (parsed by `herald-complaints`) that
//! arrived at a list's `-bounces` address or the complaints address is traced to the member
//! whose copy was reported, who is then unsubscribed or disabled (the list's
//! `complaint_action`) and put on the list's suppression list with the report's reason.
//!
//! Whom a report concerns, strongest first:
//! 1. the per-member unsubscribe URL the copy carried (`List-Unsubscribe`): its HMAC token
//!    proves the copy was ours, for that member of that list;
//! 2. the VERP address (the `-bounces+<member>` it was sent to, or the quoted copy's
//!    `Return-Path`), only when the quoted copy's `List-Id` names the same list.
//!
//! Why the list's suppression list and not the global one: the member complained about this
//! list's mail; other lists on the server are other senders to them (they may well want those),
//! and an operator can still suppress globally (`herald suppress add`). docs/security.md says so.
//!
//! Named outcomes: `Acted` (member removed or disabled, suppression recorded, counted in
//! `herald_complaints_total{list}`), `AlreadyHandled` (a second report for the same member:
//! nothing changes), `NotSpam` (a `not-spam` report: nothing to do), `Unmatched` (no member
//! could be verified: counted in `herald_complaints_unmatched_total`, the report kept).
//!
//! SECURITY: the report is hostile. A forged report changes a member only with a valid token
//! (unforgeable without the server's secret) or with the member's VERP address and the list's
//! `List-Id` (both public to anyone who received one copy): the second path lets a list member
//! who knows another member's address unsubscribe them, the same exposure as the unsigned VERP
//! bounces (lib.rs), and it is what providers that strip `List-Unsubscribe` leave us.

use crate::error::StageError;
use herald_complaints::Complaint;
use herald_directory::Directory;
use herald_lists::Membership;
use herald_telemetry::Telemetry;
use herald_types::{
    list_id_label, Address, ComplaintAction, List, ListAddressKind, ListAddressParts, ListId,
};

/// What the bounce stage needs to act on complaints.
#[derive(Clone)]
pub struct ComplaintContext {
    /// The HMAC key of unsubscribe tokens (`herald_types::token`).
    pub secret: Vec<u8>,
    pub telemetry: Telemetry,
}

/// What became of one complaint report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComplaintOutcome {
    Acted {
        list: Address,
        member: Address,
        action: ComplaintAction,
    },
    AlreadyHandled {
        list: Address,
        member: Address,
    },
    NotSpam,
    Unmatched,
}

/// Maps `c` to a member and acts. `post_list`/`verp`: the list whose `-bounces` address the
/// report came to and the member its VERP suffix names (`ListId::NONE`/`None` for the
/// complaints address).
pub async fn handle(
    ctx: &ComplaintContext,
    directory: &Directory,
    post_list: ListId,
    verp: Option<Address>,
    c: &Complaint,
) -> Result<ComplaintOutcome, StageError> {
    if c.feedback_type == "not-spam" {
        return Ok(ComplaintOutcome::NotSpam);
    }
    let (d, secret, c2) = (directory.clone(), ctx.secret.clone(), c.clone());
    let found = tokio::task::spawn_blocking(move || find_member(&d, &secret, post_list, verp, &c2))
        .await??;
    let Some((list, member, how)) = found else {
        ctx.telemetry.metrics().count_complaint_unmatched();
        return Ok(ComplaintOutcome::Unmatched);
    };
    let reason: String = format!(
        "{} complaint via {} ({}, {how})",
        c.feedback_type,
        c.reporter,
        c.format.word()
    )
    .chars()
    .take(200)
    .collect();
    let (d, l, m, action) = (
        directory.clone(),
        list.clone(),
        member.clone(),
        list.settings.complaint_action,
    );
    let changed = tokio::task::spawn_blocking(move || {
        Membership::new(&d).complaint(l.id, &m, &reason, action)
    })
    .await??;
    if !changed {
        tracing::info!(list = %list.address, member = %member, "complaint for a member already handled");
        return Ok(ComplaintOutcome::AlreadyHandled {
            list: list.address,
            member,
        });
    }
    ctx.telemetry
        .metrics()
        .count_complaint(&list.address.to_string());
    tracing::warn!(list = %list.address, member = %member, action = ?action,
        reporter = %c.reporter, feedback_type = %c.feedback_type, "complaint: member removed from the list's mail");
    Ok(ComplaintOutcome::Acted {
        list: list.address,
        member,
        action,
    })
}

/// The list and member a report verifiably concerns (blocking: directory reads).
fn find_member(
    d: &Directory,
    secret: &[u8],
    post_list: ListId,
    verp: Option<Address>,
    c: &Complaint,
) -> Result<Option<(List, Address, &'static str)>, herald_directory::DirectoryError> {
    let original = c.original.clone().unwrap_or_default();
    if let Some(u) = &original.unsubscribe {
        if herald_types::token::verify_unsubscribe_token(secret, &u.list, &u.member, &u.token) {
            if let Some(list) = d.list_by_address(&u.list)? {
                return Ok(Some((list, u.member.clone(), "unsubscribe token")));
            }
        }
    }
    let Some(label) = original.list_id.as_deref() else {
        return Ok(None);
    };
    // The VERP the report was sent to, then the one the quoted copy's Return-Path names.
    let from_post = match (post_list, verp) {
        (l, Some(m)) if l != ListId::NONE => d.list_by_id(l)?.map(|list| (list, m)),
        _ => None,
    };
    let from_copy = || -> Result<Option<(List, Address)>, herald_directory::DirectoryError> {
        let Some(rp) = &original.return_path else {
            return Ok(None);
        };
        let parts = ListAddressParts::classify(rp);
        let ListAddressKind::Bounces { member: Some(m) } = parts.kind else {
            return Ok(None);
        };
        Ok(d.list_by_address(&parts.list_address)?
            .map(|list| (list, m)))
    };
    let candidate = match from_post {
        Some(c) => Some(c),
        None => from_copy()?,
    };
    let Some((list, member)) = candidate else {
        return Ok(None);
    };
    let ours = format!(
        "{}.{}",
        list_id_label(list.address.local()),
        list.address.domain()
    );
    if !ours.eq_ignore_ascii_case(label) {
        return Ok(None);
    }
    if d.member(list.id, &member)?.is_none() && d.suppression_for(Some(list.id), &member)?.is_none()
    {
        return Ok(None);
    }
    Ok(Some((list, member, "VERP and List-Id")))
}
