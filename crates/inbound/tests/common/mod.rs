//! Test fixtures: a recording handler, a server on 127.0.0.1:0 and a line-oriented client.

// Each test binary uses a different subset of the fixtures.
#![allow(dead_code)]

use herald_inbound::{
    serve_shared, InboundConfig, InboundError, InboundHandler, InboundMessage, InboundShared, Mode,
    Refusal,
};
use herald_smtp::replies;
use herald_types::{Address, EnhancedStatus, ListAddressParts, Reply};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// No test waits longer than this for a reply.
const PATIENCE: Duration = Duration::from_secs(5);
pub const HOSTNAME: &str = "mx.herald.test";

/// Knows two lists; `full@lists.example` refuses messages with 452 4.2.2. Records what it got.
pub struct Recorder {
    lists: Vec<Address>,
    /// Every message handed over. A std Mutex: held only to push or clone, never across `.await`.
    pub messages: Mutex<Vec<InboundMessage<()>>>,
    pub checked: Mutex<Vec<Address>>,
    /// Every bound the listener reported hitting, in order.
    pub refusals: Mutex<Vec<Refusal>>,
    /// Every stress-mode change the listener reported, in order.
    pub stress: Mutex<Vec<bool>>,
}

impl Recorder {
    pub fn new() -> Recorder {
        let lists = ["list@lists.example", "full@lists.example"]
            .iter()
            .map(|a| Address::parse(a).expect("valid list"))
            .collect();
        Recorder {
            lists,
            messages: Mutex::new(Vec::new()),
            checked: Mutex::new(Vec::new()),
            refusals: Mutex::new(Vec::new()),
            stress: Mutex::new(Vec::new()),
        }
    }

    pub fn stress_changes(&self) -> Vec<bool> {
        self.stress.lock().expect("not poisoned").clone()
    }

    pub fn messages(&self) -> Vec<InboundMessage<()>> {
        self.messages.lock().expect("not poisoned").clone()
    }

    pub fn checked(&self) -> Vec<Address> {
        self.checked.lock().expect("not poisoned").clone()
    }

    pub fn refusals(&self) -> Vec<Refusal> {
        self.refusals.lock().expect("not poisoned").clone()
    }
}

impl InboundHandler for Recorder {
    type Recipient = ();

    async fn check_recipient(
        &self,
        rcpt: &Address,
        _sender: Option<&Address>,
    ) -> Result<(), Reply> {
        self.checked
            .lock()
            .expect("not poisoned")
            .push(rcpt.clone());
        let parts = ListAddressParts::classify(rcpt);
        if self.lists.contains(&parts.list_address) {
            Ok(())
        } else {
            Err(replies::NO_SUCH_RECIPIENT.reply())
        }
    }

    async fn accept_message(&self, message: InboundMessage<()>) -> Vec<Reply> {
        let verdicts = message
            .envelope
            .rcpts
            .iter()
            .map(|rcpt| match rcpt.local() {
                "full" => Reply::new(452, Some(EnhancedStatus::new(4, 2, 2)), "Mailbox full"),
                _ => replies::MESSAGE_ACCEPTED.reply(),
            })
            .collect();
        self.messages.lock().expect("not poisoned").push(message);
        verdicts
    }

    fn refused(&self, refusal: Refusal, _peer: SocketAddr) {
        self.refusals.lock().expect("not poisoned").push(refusal);
    }

    fn stress_changed(&self, _mode: Mode, stressed: bool) {
        self.stress.lock().expect("not poisoned").push(stressed);
    }
}

pub struct Server {
    pub addr: SocketAddr,
    pub recorder: Arc<Recorder>,
    /// The buffer budget and per-client counts of this listener.
    pub shared: Arc<InboundShared>,
    pub shutdown: CancellationToken,
    pub task: JoinHandle<Result<(), InboundError>>,
}

pub async fn start(mode: Mode, tune: impl FnOnce(&mut InboundConfig)) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let mut config = InboundConfig::new(HOSTNAME);
    tune(&mut config);
    let recorder = Arc::new(Recorder::new());
    let shutdown = CancellationToken::new();
    let shared = InboundShared::new(&config);
    let task = tokio::spawn(serve_shared(
        listener,
        mode,
        config,
        None,
        shared.clone(),
        recorder.clone(),
        shutdown.clone(),
    ));
    Server {
        addr,
        recorder,
        shared,
        shutdown,
        task,
    }
}

pub struct Client {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl Client {
    /// Connects without reading the banner.
    pub async fn connect_raw(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.expect("connect");
        let (r, w) = stream.into_split();
        Client {
            reader: BufReader::new(r),
            writer: w,
        }
    }

    /// Connects from `local` (any 127.0.0.0/8 address works on loopback) without reading the
    /// banner.
    pub async fn connect_from(local: std::net::IpAddr, addr: SocketAddr) -> Client {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.bind(SocketAddr::new(local, 0)).expect("bind local");
        let stream = socket.connect(addr).await.expect("connect");
        let (r, w) = stream.into_split();
        Client {
            reader: BufReader::new(r),
            writer: w,
        }
    }

    /// Connects and checks the 220 banner.
    pub async fn connect(addr: SocketAddr) -> Client {
        let mut c = Client::connect_raw(addr).await;
        assert_eq!(c.reply().await, "220");
        c
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.expect("write");
    }

    /// The full text of the next reply (all its lines).
    pub async fn reply_text(&mut self) -> String {
        let mut text = String::new();
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(PATIENCE, self.reader.read_line(&mut line))
                .await
                .expect("reply within the patience limit")
                .expect("read");
            assert!(
                n > 0,
                "connection closed while expecting a reply; got so far {text:?}"
            );
            text.push_str(&line);
            if line.as_bytes().get(3) == Some(&b' ') {
                return text;
            }
        }
    }

    /// `code[ enhanced]` of the next reply.
    pub async fn reply(&mut self) -> String {
        let text = self.reply_text().await;
        let last = text
            .trim_end()
            .rsplit("\r\n")
            .next()
            .unwrap_or_default()
            .to_string();
        let mut words = last.split(' ');
        let code = words.next().unwrap_or_default().to_string();
        match words.next() {
            Some(w)
                if w.split('.').count() == 3 && w.split('.').all(|p| p.parse::<u16>().is_ok()) =>
            {
                format!("{code} {w}")
            }
            _ => code,
        }
    }

    /// Writes `bytes` one octet every `every` (ignoring write errors: the server may close
    /// first) until a reply arrives; returns it and how long after the call it came.
    pub async fn trickle_until_reply(
        &mut self,
        bytes: &[u8],
        every: Duration,
    ) -> (String, Duration) {
        let started = tokio::time::Instant::now();
        let writer = &mut self.writer;
        let trickle = async move {
            for b in bytes {
                tokio::time::sleep(every).await;
                if writer.write_all(&[*b]).await.is_err() {
                    break;
                }
            }
            std::future::pending::<()>().await
        };
        let mut line = String::new();
        let read = async {
            tokio::time::timeout(PATIENCE, self.reader.read_line(&mut line))
                .await
                .expect("a reply within the patience limit")
                .expect("read")
        };
        tokio::select! {
            () = trickle => unreachable!("pending"),
            _ = read => {}
        }
        (line, started.elapsed())
    }

    pub async fn replies(&mut self, n: usize) -> Vec<String> {
        let mut all = Vec::with_capacity(n);
        for _ in 0..n {
            all.push(self.reply().await);
        }
        all
    }

    /// True when the server closed the connection (nothing more to read). Drops the client, so
    /// the server's lingering close sees our FIN at once.
    pub async fn closed(mut self) -> bool {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(PATIENCE, self.reader.read_to_end(&mut rest)).await;
        matches!(read, Ok(Ok(0)))
    }
}

pub fn want(codes: &[&str]) -> Vec<String> {
    codes.iter().map(|s| s.to_string()).collect()
}
