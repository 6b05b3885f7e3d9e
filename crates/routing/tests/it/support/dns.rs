//! A tiny authoritative DNS responder on 127.0.0.1 (UDP only) for resolver tests.
//!
//! Answers from a fixed list of records: matching records → NOERROR with answers; a known name
//! without records of the asked type → NODATA; an unknown name → NXDOMAIN; names listed in
//! `servfail` → SERVFAIL. A `silent` responder reads queries and never answers.

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, MX, SOA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use tokio::net::UdpSocket;

pub enum Rr {
    Mx(u16, &'static str),
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
}

#[derive(Default)]
pub struct Zone {
    pub records: Vec<(&'static str, Rr)>,
    pub servfail: Vec<&'static str>,
    pub silent: bool,
}

fn name(s: &str) -> Name {
    let mut n = Name::from_ascii(s).unwrap();
    n.set_fqdn(true);
    n
}

impl Zone {
    fn answer(&self, query: &Message) -> Message {
        let q = query.queries()[0].clone();
        let qname = q.name().to_ascii().trim_end_matches('.').to_lowercase();
        let mut msg = Message::new();
        msg.set_id(query.id())
            .set_message_type(MessageType::Response)
            .set_op_code(query.op_code())
            .set_recursion_desired(query.recursion_desired())
            .set_recursion_available(true)
            .set_authoritative(true)
            .add_query(q.clone());
        if self.servfail.contains(&qname.as_str()) {
            msg.set_response_code(ResponseCode::ServFail);
            return msg;
        }
        let mut known = false;
        for (owner, rr) in &self.records {
            if *owner != qname {
                continue;
            }
            known = true;
            let rdata = match (rr, q.query_type()) {
                (Rr::Mx(p, x), RecordType::MX) => RData::MX(MX::new(*p, name(x))),
                (Rr::A(a), RecordType::A) => RData::A(A::from(*a)),
                (Rr::Aaaa(a), RecordType::AAAA) => RData::AAAA(AAAA::from(*a)),
                _ => continue,
            };
            msg.add_answer(Record::from_rdata(q.name().clone(), 60, rdata));
        }
        if msg.answers().is_empty() {
            let soa = SOA::new(name("ns.test"), name("hostmaster.test"), 1, 60, 60, 60, 60);
            msg.add_name_server(Record::from_rdata(name("test"), 60, RData::SOA(soa)));
            let code = if known {
                ResponseCode::NoError
            } else {
                ResponseCode::NXDomain
            };
            msg.set_response_code(code);
        }
        msg
    }
}

/// Serves `zone` until the test's runtime ends; returns the server's address.
pub async fn serve(zone: Zone) -> SocketAddr {
    let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
                return;
            };
            if zone.silent {
                continue;
            }
            let Ok(query) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            if query.queries().is_empty() {
                continue;
            }
            let reply = zone.answer(&query).to_vec().unwrap();
            let _ = socket.send_to(&reply, peer).await;
        }
    });
    addr
}
