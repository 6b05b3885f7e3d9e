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
//! Failure: a copy that cannot be signed (no From field) goes out unsigned and is counted
//! in `failures`; signing never blocks or drops a copy.

use herald_auth::dkim::BodyHasher;
use herald_auth::DkimSigner;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

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
    pub failures: AtomicU64,
}

impl Signing {
    /// `prefix`: the shared body bytes (wire form); `tail_seg`: the first footer slot.
    pub fn new(signer: Arc<DkimSigner>, prefix: &[u8], tail_seg: Option<usize>) -> Signing {
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
            failures: AtomicU64::new(0),
        }
    }

    /// Prepends the DKIM-Signature field to a spliced copy. `tail_at`: where the copy's own
    /// tail starts in `out` (recorded by `splice` at `tail_seg`).
    pub fn sign_copy(&self, out: &mut Vec<u8>, tail_at: Option<usize>) {
        let body_hash = match (&self.body, tail_at) {
            (BodyPlan::Fixed(h), _) => *h,
            (BodyPlan::Prefix(state), Some(at)) if at <= out.len() => {
                let mut h = state.clone();
                h.update(&out[at..]);
                h.finish()
            }
            (BodyPlan::Prefix(_), _) => return self.fail(),
        };
        let Some(header_end) = out.windows(4).position(|w| w == b"\r\n\r\n") else {
            return self.fail();
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        match self.signer.sign(&out[..header_end + 2], &body_hash, now) {
            // One memmove of the copy: cheaper than a second buffer in every worker.
            Ok(field) => drop(out.splice(0..0, field)),
            Err(_) => self.fail(),
        }
    }

    fn fail(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }
}
