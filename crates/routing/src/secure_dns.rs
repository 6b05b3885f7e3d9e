//! DNSSEC-aware queries to the configured resolver: one question, and the answer with its AD
//! (authenticated data) bit.
//!
//! Why not hickory-resolver: its lookups return records without the response header, so the AD
//! bit is lost; and hickory-proto's client machinery (multiplexer, exchange, background task)
//! is a lot of moving parts for one question and one answer. This stub is small: a query with
//! RD, AD (RFC 6840 §5.7) and EDNS DO set, over UDP from a fresh socket (a kernel-chosen port)
//! with a random id, TCP when the answer is truncated.
//!
//! Trust (like Postfix): the configured `[dns]` nameservers are a local *validating* resolver,
//! as the operator promises by enabling DANE; its AD bit is believed. Only answers with AD=1 are
//! secure. A SERVFAIL (what a validating resolver answers for bogus data), a timeout or an
//! answer that does not decode is a failure the caller must not treat as "no records".
//!
//! Limits: each try waits `timeout` for its answer; `attempts` rounds over the nameservers;
//! answers are at most 64 KiB (TCP framing) and 4096 octets over UDP.
//!
//! SECURITY: answers are hostile. They are decoded by hickory-proto (which rejects malformed
//! messages without panicking) and accepted only from the server asked, with the query's id and
//! question; anything else on the socket is ignored.

use hickory_resolver::proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::Instant;

/// EDNS payload size we advertise (the DNS flag day 2020 value: no IP fragmentation).
const EDNS_PAYLOAD: u16 = 1232;
/// Largest UDP answer read.
const UDP_BUFFER: usize = 4096;
/// TTL assumed for a negative answer without a SOA.
const DEFAULT_NEGATIVE_TTL: u32 = 60;

/// Where and how DNSSEC-aware queries are sent.
#[derive(Debug, Clone)]
pub struct SecureDns {
    pub nameservers: Vec<SocketAddr>,
    /// One try's wait for its answer.
    pub timeout: Duration,
    /// Rounds over the nameservers.
    pub attempts: usize,
}

/// An answer the resolver gave (NOERROR or NXDOMAIN).
#[derive(Debug, Clone)]
pub struct Answer {
    pub rcode: ResponseCode,
    /// The AD bit: the resolver validated the answer (records, or their denial) with DNSSEC.
    pub authentic: bool,
    /// The answer records of the asked type (the resolver has followed any CNAMEs).
    pub records: Vec<RData>,
    /// How long the answer may be cached: the smallest record TTL, or the negative TTL.
    pub ttl: u32,
}

/// Why a query got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("no answer from {0} within the timeout")]
    Timeout(String),
    /// SERVFAIL, REFUSED, …: for a validating resolver SERVFAIL usually means bogus data.
    #[error("{server} answered {rcode}")]
    Failed { server: SocketAddr, rcode: String },
    #[error("{0}")]
    Other(String),
}

impl SecureDns {
    /// Asks `name`/`rtype` of each nameserver in turn, `attempts` rounds, until one answers
    /// NOERROR or NXDOMAIN. The last failure is returned otherwise.
    pub async fn query(&self, name: &Name, rtype: RecordType) -> Result<Answer, QueryError> {
        let mut last = QueryError::Other("no nameservers configured".into());
        for _ in 0..self.attempts.max(1) {
            for &server in &self.nameservers {
                match self.ask(server, name, rtype).await {
                    Ok(answer) => return Ok(answer),
                    Err(e) => last = e,
                }
            }
        }
        Err(last)
    }

    async fn ask(
        &self,
        server: SocketAddr,
        name: &Name,
        rtype: RecordType,
    ) -> Result<Answer, QueryError> {
        let id: u16 = rand::random();
        let query = Query::query(name.clone(), rtype);
        let bytes = request(id, query.clone())
            .to_vec()
            .map_err(|e| QueryError::Other(format!("cannot encode the query: {e}")))?;
        let deadline = Instant::now() + self.timeout;
        let mut response = udp_exchange(server, &bytes, id, &query, deadline).await?;
        if response.truncated() {
            response = tcp_exchange(server, &bytes, id, &query, deadline).await?;
        }
        judge(server, response, rtype)
    }
}

/// The query: RD for recursion, AD to ask for the AD bit (RFC 6840 §5.7), DO for DNSSEC.
fn request(id: u16, query: Query) -> Message {
    let mut msg = Message::new();
    msg.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .set_authentic_data(true);
    msg.add_query(query);
    let mut edns = Edns::new();
    edns.set_max_payload(EDNS_PAYLOAD)
        .set_version(0)
        .set_dnssec_ok(true);
    msg.set_edns(edns);
    msg
}

/// True when `msg` answers our query (id, response, same question).
fn answers(msg: &Message, id: u16, query: &Query) -> bool {
    msg.id() == id
        && msg.message_type() == MessageType::Response
        // hickory compares names case-insensitively, as DNS does (0x20 randomization aside).
        && matches!(msg.queries(), [q] if q.query_type() == query.query_type()
            && q.query_class() == query.query_class()
            && q.name() == query.name())
}

async fn udp_exchange(
    server: SocketAddr,
    bytes: &[u8],
    id: u16,
    query: &Query,
    deadline: Instant,
) -> Result<Message, QueryError> {
    let io = |e: std::io::Error| QueryError::Other(format!("UDP to {server}: {e}"));
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let sock = UdpSocket::bind(local).await.map_err(io)?;
    sock.connect(server).await.map_err(io)?;
    sock.send(bytes).await.map_err(io)?;
    let mut buf = vec![0u8; UDP_BUFFER];
    loop {
        let n = match tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
            Err(_elapsed) => return Err(QueryError::Timeout(server.to_string())),
            Ok(Err(e)) => return Err(io(e)),
            Ok(Ok(n)) => n,
        };
        // A connected socket only receives from `server`; stray or spoofed datagrams with
        // another id or question are skipped until the deadline.
        if let Ok(msg) = Message::from_vec(&buf[..n]) {
            if answers(&msg, id, query) {
                return Ok(msg);
            }
        }
    }
}

async fn tcp_exchange(
    server: SocketAddr,
    bytes: &[u8],
    id: u16,
    query: &Query,
    deadline: Instant,
) -> Result<Message, QueryError> {
    let exchange = async {
        let mut tcp = TcpStream::connect(server).await?;
        let len = u16::try_from(bytes.len()).map_err(std::io::Error::other)?;
        let mut framed = Vec::with_capacity(bytes.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(bytes);
        tcp.write_all(&framed).await?;
        let mut len = [0u8; 2];
        tcp.read_exact(&mut len).await?;
        let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
        tcp.read_exact(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = match tokio::time::timeout_at(deadline, exchange).await {
        Err(_elapsed) => return Err(QueryError::Timeout(server.to_string())),
        Ok(Err(e)) => return Err(QueryError::Other(format!("TCP to {server}: {e}"))),
        Ok(Ok(buf)) => buf,
    };
    let msg = Message::from_vec(&buf)
        .map_err(|e| QueryError::Other(format!("undecodable answer from {server}: {e}")))?;
    if !answers(&msg, id, query) {
        return Err(QueryError::Other(format!(
            "{server} answered another question over TCP"
        )));
    }
    Ok(msg)
}

/// NOERROR and NXDOMAIN are answers; every other code is a failure.
fn judge(server: SocketAddr, msg: Message, rtype: RecordType) -> Result<Answer, QueryError> {
    let rcode = msg.response_code();
    if !matches!(rcode, ResponseCode::NoError | ResponseCode::NXDomain) {
        let rcode = match rcode {
            // The mnemonics operators grep for (hickory's words are "Server Failure", …).
            ResponseCode::ServFail => "SERVFAIL".to_string(),
            ResponseCode::Refused => "REFUSED".to_string(),
            ResponseCode::FormErr => "FORMERR".to_string(),
            other => other.to_string(),
        };
        return Err(QueryError::Failed { server, rcode });
    }
    let records: Vec<&Record> = msg
        .answers()
        .iter()
        .filter(|r| r.record_type() == rtype)
        .collect();
    let ttl = match records.iter().map(|r| r.ttl()).min() {
        Some(ttl) => ttl,
        None => negative_ttl(&msg),
    };
    Ok(Answer {
        rcode,
        authentic: msg.authentic_data(),
        records: records.into_iter().map(|r| r.data().clone()).collect(),
        ttl,
    })
}

/// RFC 2308 §5: the smaller of the SOA's TTL and its MINIMUM field.
fn negative_ttl(msg: &Message) -> u32 {
    msg.name_servers()
        .iter()
        .find_map(|r| match r.data() {
            RData::SOA(soa) => Some(r.ttl().min(soa.minimum())),
            _ => None,
        })
        .unwrap_or(DEFAULT_NEGATIVE_TTL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_asks_for_dnssec() {
        let name = Name::from_ascii("_25._tcp.mx.example.").expect("name");
        let msg = request(7, Query::query(name, RecordType::TLSA));
        let back = Message::from_vec(&msg.to_vec().expect("encode")).expect("decode");
        assert!(back.recursion_desired() && back.authentic_data());
        let edns = back.extensions().as_ref().expect("EDNS");
        assert!(edns.flags().dnssec_ok);
        assert_eq!(edns.max_payload(), EDNS_PAYLOAD);
    }

    #[test]
    fn only_the_matching_response_is_taken() {
        let name = Name::from_ascii("mx.example.").expect("name");
        let q = Query::query(name.clone(), RecordType::A);
        let mut resp = request(9, q.clone());
        resp.set_message_type(MessageType::Response);
        assert!(answers(&resp, 9, &q));
        assert!(!answers(&resp, 10, &q), "other id");
        let other = Query::query(name, RecordType::AAAA);
        assert!(!answers(&resp, 9, &other), "other question");
        let mut not_resp = resp.clone();
        not_resp.set_message_type(MessageType::Query);
        assert!(!answers(&not_resp, 9, &q), "a query is not an answer");
    }
}
