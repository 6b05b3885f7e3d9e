//! Scripted SMTP receivers on 127.0.0.1 for client tests.
//!
//! [`serve`] runs a small but real SMTP server for one connection: it answers every complete
//! line of each read, and writes all the replies for that read in one write (as a pipelining
//! server does), so the record of reads shows how the client grouped its commands. Behaviour is
//! scripted by [`Script`]. [`raw`] runs arbitrary (hostile) code on an accepted socket.

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

type RcptFn = Box<dyn Fn(&str) -> String + Send + Sync>;
/// Given the message index: Some(reply) or None to close the connection instead.
type FinalFn = Box<dyn Fn(usize) -> Option<String> + Send + Sync>;
/// The reply to the n-th MAIL (0-based) of the session.
type MailFn = Box<dyn Fn(usize) -> String + Send + Sync>;

pub struct Script {
    pub banner: String,
    /// EHLO extension lines; None: EHLO is refused with 502 (HELO only).
    pub extensions: Option<Vec<&'static str>>,
    pub rcpt: RcptFn,
    pub final_reply: FinalFn,
    pub mail: MailFn,
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            banner: "220 mx.test ESMTP".into(),
            extensions: Some(vec![
                "PIPELINING",
                "SIZE 1000000",
                "8BITMIME",
                "ENHANCEDSTATUSCODES",
            ]),
            rcpt: Box::new(|_| "250 2.1.5 ok".into()),
            final_reply: Box::new(|i| Some(format!("250 2.0.0 queued as {i}"))),
            mail: Box::new(|_| "250 2.1.0 ok".into()),
            tls: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub mail: String,
    pub rcpts: Vec<String>,
    pub body: Vec<u8>,
}

/// What the server saw during the session.
#[derive(Debug, Default)]
pub struct Recorded {
    /// Every read, as received (after TLS decryption).
    pub reads: Vec<Vec<u8>>,
    /// Every command line.
    pub commands: Vec<String>,
    /// Messages whose final reply was 2xx.
    pub accepted: Vec<Message>,
    pub tls: bool,
}

impl Recorded {
    /// The reads that carried commands or data after the greeting exchange (EHLO/STARTTLS).
    pub fn transaction_reads(&self) -> Vec<String> {
        self.reads
            .iter()
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .filter(|r| {
                !r.starts_with("EHLO") && !r.starts_with("HELO") && !r.starts_with("STARTTLS")
            })
            .filter(|r| r != "QUIT\r\n")
            .collect()
    }
}

#[derive(Default)]
struct State {
    in_data: bool,
    mail: String,
    rcpts: Vec<String>,
    body: Vec<u8>,
    messages: usize,
    close: bool,
    starttls: bool,
    partial: Vec<u8>,
}

/// Accepts one connection and runs `script` on it. The handle yields the record.
pub async fn serve(script: Script) -> (SocketAddr, JoinHandle<Recorded>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut rec = Recorded::default();
        let mut st = State::default();
        write_line(&mut tcp, &script.banner).await;
        session(&mut tcp, &script, &mut st, &mut rec).await;
        if st.starttls {
            let Some(cfg) = script.tls.clone() else {
                return rec;
            };
            let Ok(mut tls) = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp).await else {
                return rec;
            };
            rec.tls = true;
            st = State::default();
            session(&mut tls, &script, &mut st, &mut rec).await;
        }
        rec
    });
    (addr, handle)
}

async fn write_line<S: AsyncWrite + Unpin>(s: &mut S, line: &str) {
    let _ = s.write_all(format!("{line}\r\n").as_bytes()).await;
}

/// Reads and answers until QUIT, a close or STARTTLS.
async fn session<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    script: &Script,
    st: &mut State,
    rec: &mut Recorded,
) {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        rec.reads.push(buf[..n].to_vec());
        st.partial.extend_from_slice(&buf[..n]);
        let mut out = String::new();
        while let Some(pos) = st.partial.windows(2).position(|w| w == b"\r\n") {
            let line: Vec<u8> = st.partial.drain(..pos + 2).take(pos).collect();
            line_in(&line, script, st, rec, &mut out);
            if st.close || st.starttls {
                break;
            }
        }
        if !out.is_empty() {
            let _ = s.write_all(out.as_bytes()).await;
        }
        if st.close {
            let _ = s.shutdown().await;
            return;
        }
        if st.starttls {
            return;
        }
    }
}

fn line_in(line: &[u8], script: &Script, st: &mut State, rec: &mut Recorded, out: &mut String) {
    if st.in_data {
        if line == b"." {
            st.in_data = false;
            let i = st.messages;
            st.messages += 1;
            match (script.final_reply)(i) {
                None => st.close = true,
                Some(reply) => {
                    if reply.starts_with('2') {
                        rec.accepted.push(Message {
                            mail: std::mem::take(&mut st.mail),
                            rcpts: std::mem::take(&mut st.rcpts),
                            body: std::mem::take(&mut st.body),
                        });
                    }
                    reply_line(out, st, &reply);
                }
            }
            st.mail.clear();
            st.rcpts.clear();
            st.body.clear();
        } else {
            st.body.extend_from_slice(line);
            st.body.extend_from_slice(b"\r\n");
        }
        return;
    }
    let text = String::from_utf8_lossy(line).into_owned();
    rec.commands.push(text.clone());
    let verb = text.get(..4).unwrap_or("").to_ascii_uppercase();
    let reply = match verb.as_str() {
        "EHLO" => ehlo_reply(script, rec),
        "HELO" => "250 mx.test".into(),
        "STAR" => {
            st.starttls = true;
            "220 2.0.0 go ahead".into()
        }
        "MAIL" => {
            let n = rec
                .commands
                .iter()
                .filter(|c| c.starts_with("MAIL"))
                .count()
                - 1;
            let r = (script.mail)(n);
            if r.starts_with('2') {
                st.mail = text.clone();
            }
            r
        }
        "RCPT" if st.mail.is_empty() => "503 5.5.1 MAIL first".into(),
        "RCPT" => {
            let addr = text.split(['<', '>']).nth(1).unwrap_or("").to_string();
            let r = (script.rcpt)(&addr);
            if r.starts_with('2') {
                st.rcpts.push(addr);
            }
            r
        }
        "DATA" if st.rcpts.is_empty() => "554 5.5.1 no valid recipients".into(),
        "DATA" => {
            st.in_data = true;
            "354 go ahead".into()
        }
        "RSET" => {
            st.mail.clear();
            st.rcpts.clear();
            "250 2.0.0 reset".into()
        }
        "QUIT" => {
            st.close = true;
            "221 2.0.0 bye".into()
        }
        _ => "500 5.5.1 unknown command".into(),
    };
    reply_line(out, st, &reply);
}

fn ehlo_reply(script: &Script, rec: &Recorded) -> String {
    let Some(ext) = &script.extensions else {
        return "502 5.5.2 EHLO not supported".to_string();
    };
    let tls = script.tls.is_some() && !rec.tls;
    let lines: Vec<&str> = std::iter::once("mx.test")
        .chain(ext.iter().copied())
        .chain(tls.then_some("STARTTLS"))
        .collect();
    let last = lines.len() - 1;
    let numbered: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| format!("250{}{l}", if i == last { ' ' } else { '-' }))
        .collect();
    numbered.join("\r\n")
}

fn reply_line(out: &mut String, st: &mut State, reply: &str) {
    out.push_str(reply);
    out.push_str("\r\n");
    if reply.starts_with("421") {
        st.close = true;
    }
}

/// Accepts one connection and hands the socket to `f` (hostile behaviours).
pub async fn raw<F, Fut>(f: F) -> SocketAddr
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        f(tcp).await;
    });
    addr
}

/// A rustls server config with a fresh self-signed certificate for `mx.test`.
pub fn self_signed_tls() -> Arc<rustls::ServerConfig> {
    let ck = rcgen::generate_simple_self_signed(vec!["mx.test".to_string()]).unwrap();
    tls_config_for(&ck)
}

/// A rustls server config presenting `ck`.
pub fn tls_config_for(ck: &rcgen::CertifiedKey) -> Arc<rustls::ServerConfig> {
    let cert: CertificateDer<'static> = ck.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    Arc::new(cfg)
}
