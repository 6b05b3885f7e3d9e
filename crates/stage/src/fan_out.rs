//! The one fan-out consumer: the loop that takes each list post and piece of generated mail
//! enqueue hands over and gives it to fan-out — this node's scheduler, or the cluster's
//! shared fan-out — and then to a [`Tap`] (the archive), so a post's fan-out never waits for
//! the archive. It ends at its stop or when enqueue hangs up; a post not taken by then is
//! durable in the spool and resumed at the next start. Ending drops the tap, which lets a
//! writer behind it finish what was queued.

use crate::{Started, StopAt};
use herald_spool::SpooledPost;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Where posts go to be fanned out (implemented by the scheduler and by the shard node).
/// `submit` never waits: it starts the post's expansion, or skips a kind that is not its own.
pub trait FanOut: Send + Sync {
    fn submit(&self, post: SpooledPost);
}

/// What sees every post after fan-out has it (the archive). May wait, when it is behind.
pub trait Tap: Send + Sync {
    fn take<'a>(&'a self, post: &'a SpooledPost) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
}

/// Starts the consumer of `posts` as a row of the running table, stopped at `stop` (a child
/// of delivery's: it ends with the scheduler) and waited for with the other stages.
pub fn start(
    posts: mpsc::Receiver<SpooledPost>,
    fan_out: Arc<dyn FanOut>,
    tap: Option<Arc<dyn Tap>>,
    stop: CancellationToken,
) -> Started {
    Started::spawn_on("fan-out hand-over", StopAt::Stages, stop, move |stop| {
        consume(posts, fan_out, tap, stop)
    })
}

/// The loop: each post to `fan_out` first, then to `tap`.
pub async fn consume(
    mut posts: mpsc::Receiver<SpooledPost>,
    fan_out: Arc<dyn FanOut>,
    tap: Option<Arc<dyn Tap>>,
    stop: CancellationToken,
) {
    loop {
        let post = tokio::select! {
            _ = stop.cancelled() => break,
            post = posts.recv() => match post {
                Some(post) => post,
                None => break,
            },
        };
        match &tap {
            Some(tap) => {
                fan_out.submit(post.clone());
                tap.take(&post).await;
            }
            None => fan_out.submit(post),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Seen(Mutex<Vec<&'static str>>);

    impl Seen {
        fn push(&self, what: &'static str) {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push(what);
        }
        fn all(&self) -> Vec<&'static str> {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
        }
    }

    impl FanOut for Seen {
        fn submit(&self, _post: SpooledPost) {
            self.push("fan-out");
        }
    }

    struct Archive(Arc<Seen>);

    impl Tap for Archive {
        fn take<'a>(
            &'a self,
            _post: &'a SpooledPost,
        ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
            Box::pin(async move { self.0.push("tap") })
        }
    }

    fn post() -> SpooledPost {
        let list = herald_types::Address::parse("list@example.org").expect("an address");
        SpooledPost {
            id: herald_types::PostId(1),
            meta: herald_spool::PostMeta {
                kind: herald_spool::PostKind::ListPost,
                list_id: herald_types::ListId(7),
                list_address: list,
                envelope_from: None,
                received_at_ms: 1_700_000_000_000,
                max_member_id: herald_types::MemberId(42),
                message_id: Some("<m1@example.com>".into()),
                recipients: Vec::new(),
                hold_reason: None,
                null_sender: false,
                audience: Default::default(),
                dsn: None,
                member_range: None,
            },
            body: bytes::Bytes::from_static(b"Subject: x\r\n\r\nbody\r\n"),
        }
    }

    #[tokio::test]
    async fn each_post_goes_to_fan_out_first_then_to_the_tap_until_enqueue_hangs_up() {
        let seen = Arc::new(Seen::default());
        let (tx, rx) = mpsc::channel(4);
        tx.send(post()).await.ok();
        tx.send(post()).await.ok();
        drop(tx);
        let tap: Arc<dyn Tap> = Arc::new(Archive(seen.clone()));
        consume(rx, seen.clone(), Some(tap), CancellationToken::new()).await;
        assert_eq!(seen.all(), ["fan-out", "tap", "fan-out", "tap"]);
    }

    #[tokio::test]
    async fn the_consumer_ends_at_its_stop_with_enqueue_still_connected() {
        let seen = Arc::new(Seen::default());
        let (_tx, rx) = mpsc::channel::<SpooledPost>(4);
        let stop = CancellationToken::new();
        stop.cancel();
        consume(rx, seen.clone(), None, stop).await;
        assert!(seen.all().is_empty());
    }
}
