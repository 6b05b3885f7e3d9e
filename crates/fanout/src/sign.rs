//! DKIM signing of spliced copies at fan-out speed.
//!
//! The body hash is computed once per post where possible: at render time the body bytes
//! every copy shares (from the blank line up to the first footer slot) are fed to a
//! [`BodyHasher`]. Without footer slots that is the whole body and the hash is final: all
//! copies share one `bh=`. With a per-member footer, each copy clones the saved hasher state
//! and feeds only its own tail (the footer and what follows, usually a few hundred bytes).
//! The header block is canonicalized and signed per copy, because `To` and
//! `List-Unsubscribe` differ per member and must be covered (RFC 8058 §4).
//!
//! Invariant: the hasher sees exactly the spliced wire bytes (dot-stuffed, CRLF) and
//! un-stuffs them itself, so what is hashed is what the receiver reassembles from DATA.
//!
//! ARC: when the post carries our trusted Authentication-Results (see `arc`), each copy is
//! also sealed (RFC 8617) with the same key, right after DKIM: the seal's AMS covers the
//! DKIM-Signature and reuses its body hash. Both fields are prepended in one splice, so the
//! copy is moved once: ARC-Seal, ARC-Message-Signature, ARC-Authentication-Results,
//! DKIM-Signature, then the copy as spliced.
//!
//! Failure: a copy that cannot be signed (no From field) goes out unsigned and is counted
//! in `failures`; one that cannot be sealed goes out unsealed and is counted in
//! `seal_failures`. Neither ever blocks or drops a copy.

use herald_auth::dkim::BodyHasher;
use herald_auth::{arc, ArcHop, DkimSigner};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// What one authentication step did to a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stamp {
    /// Not configured for this copy (no key for the list domain, no trusted arrival results).
    #[default]
    NotWanted,
    Added,
    /// Wanted but failed: the copy went out without it (see the log for the reason).
    Failed,
}

/// The DKIM signature and ARC set of one spliced copy, for the caller's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CopyAuth {
    pub dkim: Stamp,
    pub arc: Stamp,
}

enum BodyPlan {
    /// Every copy has this body hash.
    Fixed([u8; 32]),
    /// The state after the shared prefix; each copy continues with its tail.
    Prefix(BodyHasher),
}

pub(crate) struct Signing {
    signer: Arc<DkimSigner>,
    body: BodyPlan,
    /// Index of the segment where each copy's own tail starts (the first footer slot).
    pub tail_seg: Option<usize>,
    /// The ARC set to add to every copy, when the post has a trusted A-R.
    arc: Option<ArcHop>,
    pub failures: AtomicU64,
    pub seal_failures: AtomicU64,
}

impl Signing {
    /// `prefix`: the shared body bytes (wire form); `tail_seg`: the first footer slot; `arc`:
    /// the hop to seal, if any.
    pub fn new(
        signer: Arc<DkimSigner>,
        prefix: &[u8],
        tail_seg: Option<usize>,
        arc: Option<ArcHop>,
    ) -> Signing {
        let mut hasher = BodyHasher::new();
        hasher.update(prefix);
        let body = match tail_seg {
            Some(_) => BodyPlan::Prefix(hasher),
            None => BodyPlan::Fixed(hasher.finish()),
        };
        Signing {
            signer,
            body,
            tail_seg,
            arc,
            failures: AtomicU64::new(0),
            seal_failures: AtomicU64::new(0),
        }
    }

    pub fn seals(&self) -> bool {
        self.arc.is_some()
    }

    /// Room the prepended fields take: a DKIM-Signature, plus an ARC set (two signatures and
    /// the A-R text) when sealing.
    pub fn fields_hint(&self) -> usize {
        1024 * (1 + usize::from(self.signer.second().is_some()))
            + self.arc.as_ref().map_or(0, |h| 2048 + h.auth_results.len())
    }

    /// Prepends the DKIM-Signature field, and the ARC set when sealing, to a spliced copy.
    /// `tail_at`: where the copy's own tail starts in `out` (recorded by `splice` at
    /// `tail_seg`); `body_at`: where its body starts, after the blank line, as `splice` saw it
    /// go by (checked here; the header block is searched for the blank line when it is not).
    pub fn sign_copy(
        &self,
        out: &mut Vec<u8>,
        tail_at: Option<usize>,
        body_at: Option<usize>,
    ) -> CopyAuth {
        let body_hash = match (&self.body, tail_at) {
            (BodyPlan::Fixed(h), _) => *h,
            (BodyPlan::Prefix(state), Some(at)) if at <= out.len() => {
                let mut h = state.clone();
                h.update(&out[at..]);
                h.finish()
            }
            (BodyPlan::Prefix(_), _) => return self.fail_both(),
        };
        let noted = body_at
            .and_then(|at| at.checked_sub(4))
            .filter(|&end| out.get(end..end + 4) == Some(b"\r\n\r\n".as_slice()));
        let Some(header_end) = noted.or_else(|| out.windows(4).position(|w| w == b"\r\n\r\n"))
        else {
            return self.fail_both();
        };
        let mut auth = CopyAuth {
            dkim: Stamp::Added,
            arc: Stamp::NotWanted,
        };
        let header = &out[..header_end + 2];
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut fields = Vec::new();
        // The second signature (if any) goes on top; both share the body hash (c=relaxed,
        // SHA-256 for either algorithm) and neither covers the other.
        for signer in self.signer.second().into_iter().chain([&*self.signer]) {
            match signer.sign(header, &body_hash, now) {
                Ok(field) => fields.extend_from_slice(&field),
                Err(e) => {
                    self.count_failure(&self.failures, "DKIM signing", &e.to_string());
                    auth.dkim = Stamp::Failed;
                }
            }
        }
        if let Some(hop) = &self.arc {
            // The AMS must cover our DKIM-Signature, which is not in `out` yet: seal a copy
            // of the header block (a few KB) rather than move the whole copy twice.
            let mut sealed = Vec::with_capacity(fields.len() + header.len());
            sealed.extend_from_slice(&fields);
            sealed.extend_from_slice(header);
            match arc::seal(&self.signer, &sealed, &body_hash, now, hop) {
                Ok(mut set) => {
                    set.extend_from_slice(&fields);
                    fields = set;
                    auth.arc = Stamp::Added;
                }
                Err(e) => {
                    self.count_failure(&self.seal_failures, "ARC sealing", &e.to_string());
                    auth.arc = Stamp::Failed;
                }
            }
        }
        // One memmove of the copy: cheaper than a second buffer in every worker.
        if !fields.is_empty() {
            drop(out.splice(0..0, fields));
        }
        auth
    }

    /// The copy could not be hashed or split: it goes out neither signed nor sealed.
    fn fail_both(&self) -> CopyAuth {
        self.count_failure(&self.failures, "DKIM signing", "no header block");
        let mut auth = CopyAuth {
            dkim: Stamp::Failed,
            arc: Stamp::NotWanted,
        };
        if self.arc.is_some() {
            self.count_failure(&self.seal_failures, "ARC sealing", "no header block");
            auth.arc = Stamp::Failed;
        }
        auth
    }

    /// Counts a failure; the first of each kind per post is logged, so an operator sees that
    /// copies of a post went out unsigned without a line per copy.
    fn count_failure(&self, counter: &AtomicU64, what: &str, why: &str) {
        if counter.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!(domain = %self.signer.domain(), reason = why,
                "{what} failed; the copy goes out without it (further failures for this post are counted, not logged)");
        }
    }
}
