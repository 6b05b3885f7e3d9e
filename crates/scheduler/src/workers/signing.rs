//! The signing pool: a fixed set of OS threads that splice and DKIM-sign
//! (and ARC-seal) the copies of signed posts, so the runtime threads that drive the SMTP
//! connections never spend a public-key operation (0.23 ms per RSA-2048 signature, three per
//! copy with ARC) between two reads of a socket.
//!
//! Place in the flow: a delivery worker (`Batch::send`) takes its batch's bytes from the copy
//! budget (`budget.rs`), then hands the batch to the pool in chunks — one per thread, so one
//! batch is signed on every core at once — through a bounded queue, and awaits the signed
//! copies. Meanwhile its runtime thread serves the other connections: their replies are read
//! and their next batches sent while this one is being signed. Splicing and signing are the same
//! call the inline path makes (`Template::splice`), so a pooled copy is byte for byte the copy
//! inline signing makes.
//!
//! What the pool does not do: sign a connection's *next* batch before its current one is
//! answered. A worker asks the actor for work only when its batch is done (the actor's
//! per-connection accounting — warm-up reservations, the unjournaled window, a 421 cap — is
//! built on that), so the overlap is between connections, not within one.
//!
//! Bounds: the queue holds at most [`QUEUE_PER_THREAD`] chunks per thread; a worker whose chunk
//! does not fit waits (without blocking its runtime thread) for room. Every chunk's buffers were
//! counted in the copy budget before the chunk was queued, so signed copies waiting for their
//! connection are bounded in memory by `max_copy_bytes`, as inline ones are.
//!
//! Failure: a pool that is gone (a signing thread panicked, the runtime is shutting down) loses
//! no copy: the worker splices and signs what came back unsigned itself, inline.
//!
//! Off switch: `[delivery] signing_threads = 0` signs inline on the delivery worker, as before
//! this pool existed (see docs/benchmarks/scale.md, "Signing on all cores", for which wins where).

use super::WorkerCtx;
use crate::messages::{Job, PostCtx};
use herald_fanout::CopyAuth;
use herald_types::Member;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{mpsc, oneshot};

/// Chunks queued per signing thread at most (a chunk is one worker's share of a batch).
pub const QUEUE_PER_THREAD: usize = 4;
/// Most signing threads `[delivery] signing_threads` may ask for.
pub const MAX_THREADS: usize = herald_smtp_client::config::MAX_SIGNING_THREADS;

/// One copy to splice and sign: its post, its member and the buffer it is spliced into.
type Copy = (Arc<PostCtx>, Arc<Member>, Vec<u8>);

/// A worker's share of a batch, and where the signed copies go back to.
struct Chunk {
    copies: Vec<Copy>,
    done: oneshot::Sender<Vec<(Vec<u8>, CopyAuth)>>,
}

/// The signing threads and their queue. Dropping the last clone of the sender (the scheduler's
/// `WorkerCtx`) ends the threads once the queue is empty.
pub struct SigningPool {
    tx: mpsc::Sender<Chunk>,
    threads: usize,
}

impl std::fmt::Debug for SigningPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningPool")
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl SigningPool {
    /// Starts `threads` signing threads (at least one).
    pub fn start(threads: usize) -> std::io::Result<SigningPool> {
        let threads = threads.clamp(1, MAX_THREADS);
        let (tx, rx) = mpsc::channel(threads * QUEUE_PER_THREAD);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("herald-sign-{i}"))
                .spawn(move || serve(&rx))?;
        }
        Ok(SigningPool { tx, threads })
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Splices and signs every job's copy on the pool's threads. Returns each copy's buffer
    /// and what it got, in the jobs' order; `None` in a slot the pool did not answer (it is
    /// gone), for the caller to splice inline.
    async fn splice(&self, jobs: &[Job], bufs: Vec<Vec<u8>>) -> Vec<Option<(Vec<u8>, CopyAuth)>> {
        let per_chunk = jobs.len().div_ceil(self.threads).max(1);
        let mut bufs = bufs.into_iter();
        let mut waiting = Vec::with_capacity(self.threads);
        for part in jobs.chunks(per_chunk) {
            let copies: Vec<Copy> = part
                .iter()
                .map(|j| {
                    let buf = bufs.next().unwrap_or_default();
                    (j.post.clone(), j.member.clone(), buf)
                })
                .collect();
            let (done, rx) = oneshot::channel();
            let queued = self.tx.send(Chunk { copies, done }).await.is_ok();
            waiting.push((part.len(), queued.then_some(rx)));
        }
        let mut out = Vec::with_capacity(jobs.len());
        for (len, rx) in waiting {
            match rx {
                Some(rx) => match rx.await {
                    Ok(signed) if signed.len() == len => out.extend(signed.into_iter().map(Some)),
                    _ => out.extend(std::iter::repeat_with(|| None).take(len)),
                },
                None => out.extend(std::iter::repeat_with(|| None).take(len)),
            }
        }
        out
    }
}

/// The pool `[delivery] signing_threads` asks for: unset, one thread per available core; 0, none
/// (copies are signed inline). A pool whose threads cannot be started is logged and signing
/// stays inline: slower, never stopped.
pub fn start(signing_threads: Option<usize>) -> Option<SigningPool> {
    let threads = signing_threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    if threads == 0 {
        return None;
    }
    match SigningPool::start(threads) {
        Ok(pool) => Some(pool),
        Err(e) => {
            tracing::warn!(error = %e, threads, "cannot start the signing pool; copies are signed inline");
            None
        }
    }
}

/// A signing thread: takes chunks until the queue is closed and empty.
fn serve(rx: &Mutex<mpsc::Receiver<Chunk>>) {
    loop {
        // One thread waits on the queue at a time; the guard is dropped at the end of this
        // statement, before the chunk is worked on, so the others take the next chunks.
        let next = rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .blocking_recv();
        let Some(chunk) = next else {
            return;
        };
        let signed = chunk
            .copies
            .into_iter()
            .map(|(post, member, mut buf)| {
                let auth = post.template.splice(&member, &mut buf);
                (buf, auth)
            })
            .collect();
        // A worker that stopped waiting (its task was cancelled at shutdown) wants nothing.
        let _ = chunk.done.send(signed);
    }
}

/// Splices every job's copy into `bufs` (one per job, in order), in the signing pool when the
/// batch has a signed post and the pool is on, else inline; counts what each copy got.
pub(super) async fn splice_batch(
    jobs: &[Job],
    mut bufs: Vec<Vec<u8>>,
    ctx: &WorkerCtx,
) -> Vec<Vec<u8>> {
    let metrics = ctx.telemetry.metrics();
    let signed = jobs.iter().filter(|j| j.post.template.is_signed()).count() as u64;
    let pool = ctx.signing.as_ref().filter(|_| signed > 0);
    let Some(pool) = pool else {
        for (job, buf) in jobs.iter().zip(bufs.iter_mut()) {
            let auth = job.post.template.splice(&job.member, buf);
            count(ctx, auth);
        }
        metrics.count_signed_copies(false, signed);
        return bufs;
    };
    let results = pool.splice(jobs, bufs).await;
    let mut out = Vec::with_capacity(jobs.len());
    let mut inline = 0u64;
    for (job, result) in jobs.iter().zip(results) {
        let (buf, auth) = result.unwrap_or_else(|| {
            // The pool is gone: this copy is spliced here, never lost.
            let mut buf = Vec::with_capacity(job.post.template.size_hint());
            let auth = job.post.template.splice(&job.member, &mut buf);
            inline += u64::from(job.post.template.is_signed());
            (buf, auth)
        });
        count(ctx, auth);
        out.push(buf);
    }
    metrics.count_signed_copies(true, signed - inline);
    metrics.count_signed_copies(false, inline);
    out
}

fn count(ctx: &WorkerCtx, auth: CopyAuth) {
    ctx.telemetry
        .metrics()
        .count_copy_auth(super::stamp(auth.dkim), super::stamp(auth.arc));
}

#[cfg(test)]
mod tests {
    use super::super::scripted::{test_ctx_signing, test_post_at, Scripted};
    use super::*;
    use herald_auth::dkim::generate;
    use herald_auth::{DkimAlgorithm, DkimKeys, DkimSigner};
    use herald_types::{Address, List, ListId, ListSettings, MemberId, MemberStatus, PostId};
    use std::time::{SystemTime, UNIX_EPOCH};

    /// A post of a list whose domain signs with a fresh `algorithm` key, with a per-member
    /// footer (so each copy hashes its own body tail from the saved state).
    fn signed_post(algorithm: DkimAlgorithm) -> Arc<PostCtx> {
        let key = generate(algorithm).expect("keygen");
        let signer =
            DkimSigner::from_pem("lists.test", "s1", algorithm, key.private_pem.as_bytes())
                .expect("key loads");
        let list = List {
            id: ListId(1),
            address: Address::parse("l@lists.test").expect("addr"),
            settings: ListSettings {
                footer: Some("--\n{{name}} <{{email}}>: {{unsubscribe_url}}".into()),
                personalize: true,
                ..ListSettings::default()
            },
            created_at_ms: 0,
        };
        let lctx = herald_fanout::ListContext {
            unsubscribe_base_url: "http://x".into(),
            archive_url: None,
            archived_at: None,
            secret: b"0123456789abcdef".to_vec(),
            dkim: DkimKeys::new([signer]),
            authserv_id: "herald.test".into(),
        };
        let raw = b"From: A <a@outside.test>\r\nSubject: x\r\nMessage-ID: <p@outside.test>\r\n\r\n\
                    body line\r\n.dot line\r\n";
        let template = herald_fanout::render(&list, &lctx, raw).expect("render");
        assert!(template.is_signed());
        Arc::new(PostCtx {
            id: PostId(7),
            list_id: ListId(1),
            template,
            accepted_at_ms: 0,
            max_age_ms: u64::MAX,
            window: Arc::new(tokio::sync::Semaphore::new(0)),
            dsn: None,
            egress_pool: None,
        })
    }

    fn jobs(posts: &[Arc<PostCtx>], n: usize) -> Vec<Job> {
        (0..n)
            .map(|i| {
                let member = Arc::new(Member {
                    id: MemberId(i as i64),
                    list_id: ListId(1),
                    address: Address::parse(&format!("m{i}@d{}.test", i % 3)).expect("addr"),
                    display_name: Some(format!("Member {i}")),
                    status: MemberStatus::Enabled,
                    fields: Default::default(),
                });
                Job::new(posts[i % posts.len()].clone(), member)
            })
            .collect()
    }

    fn bufs(jobs: &[Job]) -> Vec<Vec<u8>> {
        jobs.iter().map(|_| Vec::new()).collect()
    }

    fn inline(jobs: &[Job]) -> Vec<Vec<u8>> {
        jobs.iter()
            .map(|j| {
                let mut out = Vec::new();
                j.post.template.splice(&j.member, &mut out);
                out
            })
            .collect()
    }

    fn now_secs() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }

    fn ctx(pool: Option<SigningPool>) -> Arc<WorkerCtx> {
        let (ctrl, _) = mpsc::channel(1);
        let (reports, _) = mpsc::channel(1);
        test_ctx_signing(Arc::new(Scripted::default()), ctrl, reports, pool)
    }

    /// (pooled, inline) signed copies counted so far.
    fn signed(ctx: &WorkerCtx) -> (u64, u64) {
        let m = ctx.telemetry.metrics();
        (m.signed_copies(true), m.signed_copies(false))
    }

    /// RSA PKCS#1 v1.5 and Ed25519 signatures are deterministic, so a pooled copy must equal
    /// the inline one byte for byte when both are signed in the same second (`t=`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pooled_copies_are_the_inline_copies_byte_for_byte_in_the_jobs_order() {
        let posts = [
            signed_post(DkimAlgorithm::Ed25519),
            signed_post(DkimAlgorithm::Rsa),
            // An unsigned post in the same batch goes through the pool unchanged.
            test_post_at(3, 0, u64::MAX),
        ];
        let jobs = jobs(&posts, 41);
        let ctx = ctx(Some(SigningPool::start(3).expect("pool")));
        let mut matched = false;
        for _ in 0..3 {
            let second = now_secs();
            let pooled = splice_batch(&jobs, bufs(&jobs), &ctx).await;
            let inline = inline(&jobs);
            if now_secs() != second {
                continue; // `t=` moved on between the two: try again within one second.
            }
            assert_eq!(pooled.len(), jobs.len());
            for (i, (p, q)) in pooled.iter().zip(&inline).enumerate() {
                assert!(p == q, "copy {i} differs");
            }
            assert!(pooled[0].starts_with(b"DKIM-Signature: v=1; a=ed25519-sha256;"));
            assert!(pooled[1].starts_with(b"DKIM-Signature: v=1; a=rsa-sha256;"));
            assert!(!pooled[2].starts_with(b"DKIM-Signature"));
            matched = true;
            break;
        }
        assert!(matched, "three runs each crossed a second boundary");
        // 28 of the 41 copies per run are of signed posts, all signed in the pool.
        let (pooled, inline) = signed(&ctx);
        assert_eq!(inline, 0);
        assert!(pooled >= 28 && pooled % 28 == 0, "{pooled}");
    }

    /// The pool's threads are gone (as after a panic): every copy is still spliced and signed,
    /// inline, and counted as such.
    #[tokio::test]
    async fn a_pool_that_is_gone_loses_no_copy() {
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let pool = SigningPool { tx, threads: 2 };
        let posts = [signed_post(DkimAlgorithm::Ed25519)];
        let jobs = jobs(&posts, 5);
        let ctx = ctx(Some(pool));
        let copies = splice_batch(&jobs, bufs(&jobs), &ctx).await;
        assert_eq!(copies.len(), 5);
        for (copy, job) in copies.iter().zip(&jobs) {
            assert!(copy.starts_with(b"DKIM-Signature: "));
            let to = format!("<{}>", job.member.address);
            assert!(copy.windows(to.len()).any(|w| w == to.as_bytes()));
        }
        assert_eq!(signed(&ctx), (0, 5));
    }

    /// With the pool off (`signing_threads = 0`) copies are signed where they are written.
    #[tokio::test]
    async fn without_a_pool_copies_are_signed_inline() {
        assert!(start(Some(0)).is_none());
        let pool = start(Some(2)).expect("two threads");
        assert_eq!(pool.threads(), 2);
        let posts = [signed_post(DkimAlgorithm::Ed25519)];
        let jobs = jobs(&posts, 4);
        let ctx = ctx(None);
        let copies = splice_batch(&jobs, bufs(&jobs), &ctx).await;
        assert!(copies.iter().all(|c| c.starts_with(b"DKIM-Signature: ")));
        assert_eq!(signed(&ctx), (0, 4));
    }
}
