//! A tiny SMTP client for the receiver tests: send lines, read (multi-line) replies.

#![allow(clippy::unwrap_used, dead_code)]

use herald_sim::{DomainConfig, Profile, World, WorldConfig};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

pub const TIMEOUT: Duration = Duration::from_secs(5);

/// A one-domain world whose MX (at `addr`) has `profile`.
pub fn world_config(name: &str, addr: Ipv4Addr, profile: Profile, starttls: bool) -> WorldConfig {
    let mut cfg = WorldConfig::empty();
    cfg.smtp_port = 0;
    cfg.receiver.keep_messages = true;
    cfg.domains.push(DomainConfig {
        name: name.to_string(),
        weight: 1.0,
        mx_host: format!("mx.{name}"),
        mx_addr: addr,
        mx_preference: 10,
        extra_mx: vec![],
        profile,
        starttls,
        dane: Default::default(),
        extensions: Default::default(),
    });
    cfg
}

pub async fn start(name: &str, addr: Ipv4Addr, profile: Profile, starttls: bool) -> World {
    World::start(world_config(name, addr, profile, starttls))
        .await
        .unwrap()
}

pub fn mx(world: &World, addr: Ipv4Addr) -> SocketAddr {
    SocketAddr::from((addr, world.smtp_port()))
}

pub struct Client<S> {
    io: BufReader<S>,
}

impl Client<TcpStream> {
    pub async fn connect(addr: SocketAddr) -> Client<TcpStream> {
        let s = tokio::time::timeout(TIMEOUT, TcpStream::connect(addr))
            .await
            .unwrap()
            .unwrap();
        Client::new(s)
    }

    pub fn into_inner(self) -> TcpStream {
        self.io.into_inner()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    pub fn new(s: S) -> Client<S> {
        Client {
            io: BufReader::new(s),
        }
    }

    pub async fn send(&mut self, text: &str) {
        self.io.get_mut().write_all(text.as_bytes()).await.unwrap();
    }

    /// Reads one reply: (code, all lines joined by '\n'). None on EOF or reset.
    pub async fn try_reply(&mut self) -> Option<(u16, String)> {
        let mut text = String::new();
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(TIMEOUT, self.io.read_line(&mut line))
                .await
                .expect("reply timed out")
                .ok()?;
            if n == 0 {
                return None;
            }
            let code: u16 = line.get(..3)?.parse().ok()?;
            text.push_str(line.trim_end());
            text.push('\n');
            if line.as_bytes().get(3) != Some(&b'-') {
                return Some((code, text));
            }
        }
    }

    pub async fn reply(&mut self) -> (u16, String) {
        self.try_reply().await.expect("connection closed")
    }

    /// Sends a command and expects a reply code; returns the reply text.
    pub async fn expect(&mut self, cmd: &str, code: u16) -> String {
        self.send(cmd).await;
        let (got, text) = self.reply().await;
        assert_eq!(got, code, "after {cmd:?}: {text}");
        text
    }

    /// Banner and EHLO.
    pub async fn greet(&mut self) -> String {
        let (code, banner) = self.reply().await;
        assert_eq!(code, 220, "{banner}");
        self.expect("EHLO client.example\r\n", 250).await
    }

    /// One whole transaction, pipelined (MAIL, RCPT, DATA in one write, then the body);
    /// returns the reply codes (MAIL, RCPT, DATA, final).
    pub async fn transaction(&mut self, from: &str, to: &str, body: &str) -> Vec<u16> {
        self.send(&format!("MAIL FROM:<{from}>\r\nRCPT TO:<{to}>\r\nDATA\r\n"))
            .await;
        let mut codes = vec![self.reply().await.0, self.reply().await.0];
        let data = self.reply().await.0;
        codes.push(data);
        if data == 354 {
            self.send(&format!("{body}.\r\n")).await;
            codes.push(self.reply().await.0);
        }
        codes
    }
}

pub fn message(id: &str, text: &str) -> String {
    format!(
        "From: list@lists.example\r\nTo: member@x.example\r\nMessage-ID: <{id}>\r\n\
         Subject: test\r\n\r\n{text}\r\n"
    )
}
