//! What the digest stage offers the HTTP API (`herald_stage::offers`): `send-now` and the
//! per-list count of digests sent, in the API's terms.

use crate::Digests;
use herald_api_types::DigestSent;
use herald_stage::offers::{self, OfferError, Offered};
use herald_telemetry::exposition::{self, Counter, Registry};
use herald_types::Address;

impl offers::Digests for Digests {
    fn send_now<'a>(&'a self, list: &'a Address) -> Offered<'a, Result<DigestSent, OfferError>> {
        Box::pin(async move {
            match Digests::send_now(self, list).await {
                Ok(Some(d)) => Ok(DigestSent {
                    sent: true,
                    volume: d.volume,
                    issue: d.issue,
                    posts: d.posts,
                    formats: d.formats.iter().map(|f| f.to_string()).collect(),
                }),
                Ok(None) => Ok(DigestSent::default()),
                Err(e) if e.is_not_found() => Err(OfferError::NotFound(e.to_string())),
                Err(e) => Err(OfferError::Internal(e.to_string())),
            }
        })
    }
}

impl offers::Metrics for Digests {
    fn register_metrics<'a>(&'a self, out: &'a mut Registry) -> Offered<'a, ()> {
        // Per list, since the server started (a restart resets it, as counters may).
        let rows = self
            .sent_totals()
            .into_iter()
            .map(|(list, n)| ([("list", list)], n));
        exposition::rows(
            out,
            "herald_digests_sent_total",
            "Digests sent per list since the server started (one per issue, all formats).",
            rows,
            |c: &Counter, n| {
                c.inc_by(n);
            },
        );
        Box::pin(std::future::ready(()))
    }
}
