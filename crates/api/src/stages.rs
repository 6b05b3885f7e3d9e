//! The API's boundary to the enqueue and lists stages: [`crate::Injector`] for the enqueue
//! path and [`ListOps`] for the lists stage, each mapping the stage's own error type to HTTP
//! answers here, so that neither stage speaks HTTP.

use crate::{ApiError, ConfirmView, Injector, ListOps, OpsFuture};
use bytes::Bytes;
use herald_api_types::LinkSpent;
use herald_directory::{Consent, ConsentSource};
use herald_enqueue::{EnqueueError, Enqueuer};
use herald_lists::{Lists, ListsError};
use herald_types::token::{Action, Confirmation};
use herald_types::{Address, PostId};
use std::future::Future;
use std::pin::Pin;

/// What an HTTP client is told when the spool cannot store mail (the detail goes to the log).
pub(crate) const SPOOL_FULL: &str =
    "the server cannot store mail right now (its data disk is full); try again later";
/// The same for any other spool failure.
pub(crate) const SPOOL_FAILED: &str = "the server cannot store mail right now; try again later";

/// Enqueue's refusals, mapped once: what the sender must change is a 400 (as a 5xx reply over
/// SMTP), what the server cannot do now a 503 (a 4xx over SMTP: the client keeps the message
/// and retries), a failed task a 500.
impl From<EnqueueError> for ApiError {
    fn from(e: EnqueueError) -> ApiError {
        match e {
            EnqueueError::Directory(d) => ApiError::from(d),
            e if e.is_storage_shortage() => {
                tracing::warn!(error = %e, "API post refused: the spool cannot store it");
                ApiError::Unavailable(SPOOL_FULL.into())
            }
            EnqueueError::Spool(e) => {
                tracing::error!(error = %e, "API post refused: the spool failed");
                ApiError::Unavailable(SPOOL_FAILED.into())
            }
            EnqueueError::Task(e) => ApiError::Internal(e.to_string()),
            e if e.is_transient() => {
                tracing::warn!(error = %e, "API post refused for now");
                ApiError::Unavailable(e.to_string())
            }
            e => ApiError::BadRequest(e.to_string()),
        }
    }
}

impl From<ListsError> for ApiError {
    fn from(e: ListsError) -> ApiError {
        match e {
            ListsError::Directory(d) => ApiError::from(d),
            e if e.is_not_found() => ApiError::NotFound(e.to_string()),
            e if e.is_invalid() => ApiError::BadRequest(e.to_string()),
            e => ApiError::Internal(e.to_string()),
        }
    }
}

impl Injector for Enqueuer {
    fn inject(
        &self,
        list: Address,
        body: Bytes,
    ) -> Pin<Box<dyn Future<Output = Result<PostId, EnqueueError>> + Send + '_>> {
        Box::pin(async move { Enqueuer::inject(self, &list, body).await })
    }

    fn hold_imported(
        &self,
        list: Address,
        envelope_from: Option<Address>,
        reason: String,
        body: Bytes,
    ) -> Pin<Box<dyn Future<Output = Result<PostId, EnqueueError>> + Send + '_>> {
        Box::pin(
            async move { Enqueuer::hold_imported(self, &list, envelope_from, reason, body).await },
        )
    }

    fn send_mail(
        &self,
        from: Address,
        to: Address,
        body: Bytes,
    ) -> Pin<Box<dyn Future<Output = Result<PostId, EnqueueError>> + Send + '_>> {
        Box::pin(async move {
            self.enqueue(herald_enqueue::Submission::Server {
                from,
                to: vec![to],
                // Herald originates it: no DSN request of anyone's to relay.
                dsn: None,
                body,
            })
            .await
        })
    }
}

fn view(c: &Confirmation) -> ConfirmView {
    ConfirmView {
        action: c.action.verb().to_string(),
        list: c.list.to_string(),
        address: c.address.to_string(),
        spent: None,
    }
}

impl ListOps for Lists {
    fn approve(&self, post: PostId) -> OpsFuture<'_, PostId> {
        Box::pin(async move { Ok(Lists::approve(self, post).await?) })
    }

    fn reject(&self, post: PostId) -> OpsFuture<'_, ()> {
        Box::pin(async move { Ok(Lists::reject(self, post).await?) })
    }

    fn reject_with(&self, post: PostId, reason: Option<String>) -> OpsFuture<'_, ()> {
        Box::pin(async move { Ok(Lists::reject_with(self, post, reason).await?) })
    }

    fn discard(&self, post: PostId) -> OpsFuture<'_, ()> {
        Box::pin(async move { Ok(Lists::discard(self, post).await?) })
    }

    fn request(&self, list: Address, address: Address, action: String) -> OpsFuture<'_, String> {
        Box::pin(async move {
            let action = match action.as_str() {
                "subscribe" => Action::Subscribe,
                "unsubscribe" => Action::Unsubscribe,
                other => return Err(ApiError::BadRequest(format!("unknown action {other}"))),
            };
            match Lists::request(self, &list, &address, action).await? {
                Some(refusal) => Err(ApiError::Conflict(refusal)),
                None => Ok("confirmation sent".to_string()),
            }
        })
    }

    fn web_subscribe(
        &self,
        list: Address,
        address: Address,
        client: std::net::IpAddr,
    ) -> OpsFuture<'_, Option<String>> {
        Box::pin(async move {
            Ok(Lists::request_from(self, &list, &address, Action::Subscribe, Some(client)).await?)
        })
    }

    fn manage_link(&self, address: Address, client: std::net::IpAddr) -> OpsFuture<'_, ()> {
        Box::pin(async move { Ok(Lists::send_manage_link(self, &address, Some(client)).await?) })
    }

    fn confirm(&self, token: String, apply: Option<String>) -> OpsFuture<'_, ConfirmView> {
        Box::pin(async move {
            let consent = apply.map(|client| Consent::now(ConsentSource::Web, Some(&client)));
            // A spent link is an answer for the page to word, not an error.
            let (c, spent) = match Lists::confirm(self, &token, consent).await {
                Ok(c) => (c, None),
                Err(ListsError::LinkUsed(c)) => (*c, Some(LinkSpent::Used)),
                Err(ListsError::LinkSuperseded(c)) => (*c, Some(LinkSpent::Superseded)),
                Err(e) => return Err(e.into()),
            };
            Ok(ConfirmView { spent, ..view(&c) })
        })
    }

    fn welcome(
        &self,
        list: Address,
        req: herald_api_types::WelcomeRequest,
    ) -> OpsFuture<'_, herald_api_types::WelcomeSent> {
        Box::pin(async move {
            let limit = req
                .limit
                .map_or(herald_lists::MAX_WELCOME_PAGE, |l| l as usize);
            let b = Lists::welcome_members(
                self,
                &list,
                herald_types::MemberId(req.after_member_id),
                herald_types::MemberId(req.up_to_member_id),
                limit,
            )
            .await?;
            Ok(herald_api_types::WelcomeSent {
                sent: b.sent,
                skipped: b.skipped,
                last_member_id: b.last.0,
                done: b.done,
            })
        })
    }
}
