//! The records the simulated DNS server serves, and the pure function that answers a query from
//! them.
//!
//! Invariants: names are case-insensitive (stored lower-cased, without the trailing dot); a name
//! that is not in the zone gets NXDOMAIN, a name that is in the zone but has no record of the
//! asked type gets NOERROR with an empty answer (RFC 2308 NODATA); both carry a SOA in the
//! authority section so that resolvers can cache the negative answer for `negative_ttl` seconds.
//!
//! Limits: only the record types a mail system needs (MX, A, AAAA, TXT, TLSA, PTR) and SOA for
//! negative answers; no wildcards, no CNAMEs, no delegation.
//!
//! DNSSEC is simulated the way a stub resolver sees it behind a *validating* resolver, not
//! with signatures: a name at or below a domain marked [`Zone::set_signed`] is answered with
//! the AD (authenticated data) bit when the query asks for DNSSEC — DO set in its EDNS, or AD
//! set in its header (RFC 6840 §5.7) — exactly when a validating resolver would set it; a
//! query that asks for neither (hickory-resolver's ordinary lookups) gets AD=0, as from a real
//! one. A name at or below a domain marked [`Zone::set_bogus`] answers SERVFAIL to every query,
//! which is what a validating resolver answers for data whose signatures do not validate;
//! [`Zone::set_servfail`] does the same for one name (e.g. only a TLSA RRset is bogus). No
//! RRSIG, DNSKEY or NSEC records are served.
//!
//! SECURITY: [`answer`] takes a decoded query from the network; it never panics on odd input
//! (multiple questions, other opcodes, other classes all get a well-formed error response).

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::tlsa::{CertUsage, Matching, Selector};
use hickory_proto::rr::rdata::{A, AAAA, MX, PTR, SOA, TLSA, TXT};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::SimError;

/// Default TTL of positive answers, seconds.
pub const DEFAULT_TTL_SECS: u32 = 60;
/// Default TTL of negative answers (SOA minimum), seconds. Short, so that tests changing a zone
/// at run time do not wait long for caches.
pub const DEFAULT_NEGATIVE_TTL_SECS: u32 = 5;
/// Longest character-string in a TXT record (RFC 1035 §3.3).
const TXT_CHUNK: usize = 255;

/// What one owner name has.
#[derive(Debug, Clone, Default)]
struct NameRecords {
    mx: Vec<(u16, String)>,
    null_mx: bool,
    a: Vec<Ipv4Addr>,
    aaaa: Vec<Ipv6Addr>,
    txt: Vec<String>,
    tlsa: Vec<TlsaRecord>,
    /// PTR targets (reverse names `d.c.b.a.in-addr.arpa`).
    ptr: Vec<String>,
    servfail: bool,
}

/// A TLSA record as published: any parameter values (unusable ones too), any data.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TlsaRecord {
    usage: u8,
    selector: u8,
    matching: u8,
    data: Vec<u8>,
}

/// The records of the simulated Internet, built in code. Methods chain and never fail; names
/// are checked when the zone is handed to [`crate::DnsServer::start`] (see [`Zone::check`]).
#[derive(Debug, Clone)]
pub struct Zone {
    names: HashMap<String, NameRecords>,
    /// Domains whose names (and everything below) answer with AD when DNSSEC is asked for.
    signed: HashSet<String>,
    /// Domains whose names (and everything below) answer SERVFAIL (bogus signatures).
    bogus: HashSet<String>,
    ttl: u32,
    negative_ttl: u32,
}

impl Default for Zone {
    fn default() -> Self {
        Zone::new()
    }
}

/// Lower-cases and strips one trailing dot: the key names are stored under.
fn key(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

impl Zone {
    /// An empty zone with the default TTLs.
    pub fn new() -> Zone {
        Zone {
            names: HashMap::new(),
            signed: HashSet::new(),
            bogus: HashSet::new(),
            ttl: DEFAULT_TTL_SECS,
            negative_ttl: DEFAULT_NEGATIVE_TTL_SECS,
        }
    }

    /// Sets the TTL of positive answers and the negative-caching TTL (SOA minimum).
    pub fn set_ttls(&mut self, ttl_secs: u32, negative_ttl_secs: u32) -> &mut Self {
        self.ttl = ttl_secs;
        self.negative_ttl = negative_ttl_secs;
        self
    }

    fn entry(&mut self, name: &str) -> &mut NameRecords {
        self.names.entry(key(name)).or_default()
    }

    /// Adds an MX record `domain MX preference host`. Clears a null MX set earlier.
    pub fn add_mx(&mut self, domain: &str, preference: u16, host: &str) -> &mut Self {
        let e = self.entry(domain);
        e.null_mx = false;
        e.mx.push((preference, key(host)));
        self
    }

    /// Makes `domain` publish a null MX (`MX 0 .`, RFC 7505): it accepts no mail. Replaces any
    /// MX records added before.
    pub fn set_null_mx(&mut self, domain: &str) -> &mut Self {
        let e = self.entry(domain);
        e.mx.clear();
        e.null_mx = true;
        self
    }

    /// Adds an A record.
    pub fn add_a(&mut self, name: &str, addr: Ipv4Addr) -> &mut Self {
        self.entry(name).a.push(addr);
        self
    }

    /// Adds an AAAA record.
    pub fn add_aaaa(&mut self, name: &str, addr: Ipv6Addr) -> &mut Self {
        self.entry(name).aaaa.push(addr);
        self
    }

    /// Adds a PTR record for `addr` (at its `in-addr.arpa` name) pointing at `host`: the
    /// reverse DNS a receiver checks of a sending IP.
    pub fn add_ptr(&mut self, addr: Ipv4Addr, host: &str) -> &mut Self {
        let [a, b, c, d] = addr.octets();
        let owner = format!("{d}.{c}.{b}.{a}.in-addr.arpa");
        let host = key(host);
        self.entry(&owner).ptr.push(host);
        self
    }

    /// Adds a TXT record; text longer than 255 octets is split into several character-strings
    /// of one record, as SPF and DKIM publishers do.
    pub fn add_txt(&mut self, name: &str, text: &str) -> &mut Self {
        self.entry(name).txt.push(text.to_string());
        self
    }

    /// Adds a TLSA record (RFC 6698) at `name` (e.g. `_25._tcp.mx.example`). Parameters are
    /// published as given, unusable values included, so that clients can be tested against
    /// them. An identical record is added once.
    pub fn add_tlsa(
        &mut self,
        name: &str,
        usage: u8,
        selector: u8,
        matching: u8,
        data: &[u8],
    ) -> &mut Self {
        let rec = TlsaRecord {
            usage,
            selector,
            matching,
            data: data.to_vec(),
        };
        let e = self.entry(name);
        if !e.tlsa.contains(&rec) {
            e.tlsa.push(rec);
        }
        self
    }

    /// Marks `domain` and every name below it as DNSSEC-signed (see the module docs: AD=1 on
    /// answers to queries that ask for DNSSEC). `false` unmarks it.
    pub fn set_signed(&mut self, domain: &str, signed: bool) -> &mut Self {
        set_mark(&mut self.signed, domain, signed);
        self
    }

    /// Marks `domain` and every name below it as bogus: every query answers SERVFAIL, as a
    /// validating resolver does when signatures do not validate. `false` unmarks it.
    pub fn set_bogus(&mut self, domain: &str, bogus: bool) -> &mut Self {
        set_mark(&mut self.bogus, domain, bogus);
        self
    }

    /// True when `name` is at or below a domain marked signed.
    pub fn is_signed(&self, name: &str) -> bool {
        under_any(&self.signed, &key(name))
    }

    /// True when `name` is at or below a domain marked bogus.
    pub fn is_bogus(&self, name: &str) -> bool {
        under_any(&self.bogus, &key(name))
    }

    /// Makes every query for `name` (any type) answer SERVFAIL, as a broken authoritative
    /// server would. `false` restores normal answers.
    pub fn set_servfail(&mut self, name: &str, servfail: bool) -> &mut Self {
        self.entry(name).servfail = servfail;
        self
    }

    /// Removes a name and all its records (it will answer NXDOMAIN).
    pub fn remove(&mut self, name: &str) -> &mut Self {
        self.names.remove(&key(name));
        self
    }

    /// True when the zone has an entry (any record, or a servfail mark) for `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.names.contains_key(&key(name))
    }

    /// Checks that every owner name, MX host and marked domain is a valid DNS name.
    pub fn check(&self) -> Result<(), SimError> {
        for domain in self.signed.iter().chain(&self.bogus) {
            parse_name(domain)?;
        }
        for (name, recs) in &self.names {
            parse_name(name)?;
            for (_, host) in &recs.mx {
                parse_name(host)?;
            }
        }
        Ok(())
    }
}

fn set_mark(set: &mut HashSet<String>, domain: &str, on: bool) {
    if on {
        set.insert(key(domain));
    } else {
        set.remove(&key(domain));
    }
}

/// True when `name` (a key) is one of `domains` or below one of them: its suffixes after each
/// dot are looked up, so the cost is one lookup per label.
fn under_any(domains: &HashSet<String>, name: &str) -> bool {
    if domains.is_empty() {
        return false;
    }
    let mut rest = name;
    loop {
        if domains.contains(rest) {
            return true;
        }
        match rest.split_once('.') {
            Some((_, parent)) => rest = parent,
            None => return false,
        }
    }
}

/// Parses a stored (lower-case, dotless) name into an absolute DNS name.
fn parse_name(name: &str) -> Result<Name, SimError> {
    let bad = |reason: String| SimError::BadName {
        name: name.to_string(),
        reason,
    };
    if name.is_empty() {
        return Err(bad("empty name".into()));
    }
    let mut n = Name::from_ascii(name).map_err(|e| bad(e.to_string()))?;
    n.set_fqdn(true);
    Ok(n)
}

/// Answers one decoded query. The response echoes the id, opcode, RD flag and question; it is
/// authoritative (AA) and claims recursion available (RA) because resolvers configured with this
/// server as their only nameserver expect a recursive server.
pub(crate) fn answer(zone: &Zone, request: &Message) -> Message {
    let mut resp = Message::new();
    resp.set_id(request.id())
        .set_message_type(MessageType::Response)
        .set_op_code(request.op_code())
        .set_recursion_desired(request.recursion_desired())
        .set_recursion_available(true)
        .set_authoritative(true);
    resp.add_queries(request.queries().iter().cloned());
    let mut wants_dnssec = request.authentic_data();
    if let Some(req_edns) = request.extensions() {
        let dnssec_ok = req_edns.flags().dnssec_ok;
        wants_dnssec |= dnssec_ok;
        let mut edns = Edns::new();
        // RFC 3225 §3: the DO bit is copied into the response.
        edns.set_max_payload(req_edns.max_payload().clamp(512, 4096))
            .set_version(0)
            .set_dnssec_ok(dnssec_ok);
        resp.set_edns(edns);
    }
    if request.message_type() != MessageType::Query || request.op_code() != OpCode::Query {
        resp.set_response_code(ResponseCode::NotImp);
        return resp;
    }
    let [query] = request.queries() else {
        resp.set_response_code(ResponseCode::FormErr);
        return resp;
    };
    let qkey = key(&query.name().to_ascii());
    if under_any(&zone.bogus, &qkey) {
        resp.set_response_code(ResponseCode::ServFail);
        return resp;
    }
    fill_answer(zone, query, &mut resp);
    // A validating resolver sets AD on validated answers (positive or an authenticated denial)
    // only for queries that ask for it (RFC 6840 §5.7, RFC 4035 §3.2.3).
    let answered = matches!(
        resp.response_code(),
        ResponseCode::NoError | ResponseCode::NXDomain
    );
    if answered && wants_dnssec && under_any(&zone.signed, &qkey) {
        resp.set_authentic_data(true);
    }
    resp
}

fn fill_answer(zone: &Zone, query: &Query, resp: &mut Message) {
    let qname = query.name();
    let Some(recs) = zone.names.get(&key(&qname.to_ascii())) else {
        resp.set_response_code(ResponseCode::NXDomain);
        resp.add_name_server(soa_record(zone, qname));
        return;
    };
    if recs.servfail {
        resp.set_response_code(ResponseCode::ServFail);
        return;
    }
    let answers = if query.query_class() == DNSClass::IN {
        records_of(zone, qname, recs, query.query_type())
    } else {
        Vec::new()
    };
    if answers.is_empty() {
        resp.add_name_server(soa_record(zone, qname));
        return;
    }
    if query.query_type() == RecordType::MX {
        resp.add_additionals(mx_glue(zone, recs));
    }
    resp.add_answers(answers);
}

/// The records of `recs` of type `qtype` (all of them for ANY), owned by the name as asked.
fn records_of(zone: &Zone, qname: &Name, recs: &NameRecords, qtype: RecordType) -> Vec<Record> {
    let any = qtype == RecordType::ANY;
    let rec = |rdata: RData| Record::from_rdata(qname.clone(), zone.ttl, rdata);
    let mut out = Vec::new();
    if any || qtype == RecordType::MX {
        if recs.null_mx {
            out.push(rec(RData::MX(MX::new(0, Name::root()))));
        }
        for (pref, host) in &recs.mx {
            // Names were checked at start; a name that still fails to parse is skipped rather
            // than answered wrongly.
            if let Ok(h) = parse_name(host) {
                out.push(rec(RData::MX(MX::new(*pref, h))));
            }
        }
    }
    if any || qtype == RecordType::A {
        out.extend(recs.a.iter().map(|a| rec(RData::A(A::from(*a)))));
    }
    if any || qtype == RecordType::AAAA {
        out.extend(recs.aaaa.iter().map(|a| rec(RData::AAAA(AAAA::from(*a)))));
    }
    if any || qtype == RecordType::TXT {
        out.extend(
            recs.txt
                .iter()
                .map(|t| rec(RData::TXT(TXT::new(txt_chunks(t))))),
        );
    }
    if any || qtype == RecordType::PTR {
        for host in &recs.ptr {
            if let Ok(h) = parse_name(host) {
                out.push(rec(RData::PTR(PTR(h))));
            }
        }
    }
    if any || qtype == RecordType::TLSA {
        out.extend(recs.tlsa.iter().map(|t| {
            rec(RData::TLSA(TLSA::new(
                CertUsage::from(t.usage),
                Selector::from(t.selector),
                Matching::from(t.matching),
                t.data.clone(),
            )))
        }));
    }
    out
}

/// The A/AAAA records of the MX hosts, for the additional section (saves a round trip for
/// resolvers that use them; harmless for those that don't).
fn mx_glue(zone: &Zone, recs: &NameRecords) -> Vec<Record> {
    let mut out = Vec::new();
    for (_, host) in &recs.mx {
        let (Some(h), Ok(name)) = (zone.names.get(host), parse_name(host)) else {
            continue;
        };
        let rec = |rdata: RData| Record::from_rdata(name.clone(), zone.ttl, rdata);
        out.extend(h.a.iter().map(|a| rec(RData::A(A::from(*a)))));
        out.extend(h.aaaa.iter().map(|a| rec(RData::AAAA(AAAA::from(*a)))));
    }
    out
}

/// Splits text into ≤255-octet character-strings on char boundaries.
fn txt_chunks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if cur.len() + c.len_utf8() > TXT_CHUNK {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(c);
    }
    if !cur.is_empty() || out.is_empty() {
        out.push(cur);
    }
    out
}

/// A synthetic SOA for negative answers. The owner is the last two labels of the asked name
/// (`d0001.example` for `x.d0001.example`): the simulated world has no delegation, so that is
/// the closest thing to a zone apex.
fn soa_record(zone: &Zone, qname: &Name) -> Record {
    let labels = qname.num_labels();
    let owner = if labels > 2 {
        qname.trim_to(2)
    } else {
        qname.clone()
    };
    let mname = Name::from_ascii("ns.sim.invalid.").unwrap_or_else(|_| Name::root());
    let rname = Name::from_ascii("hostmaster.sim.invalid.").unwrap_or_else(|_| Name::root());
    let soa = SOA::new(mname, rname, 1, 3600, 600, 86400, zone.negative_ttl);
    Record::from_rdata(owner, zone.negative_ttl, RData::SOA(soa))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(zone: &Zone, name: &str, qtype: RecordType) -> Message {
        let mut q = Message::new();
        q.set_id(77).set_recursion_desired(true);
        q.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
        answer(zone, &q)
    }

    #[test]
    fn answers_are_case_insensitive_and_typed() {
        let mut z = Zone::new();
        z.add_mx("Ex.COM", 10, "MX.ex.com")
            .add_a("mx.ex.com.", Ipv4Addr::new(127, 1, 0, 1));
        let r = ask(&z, "ex.com.", RecordType::MX);
        assert_eq!(r.id(), 77);
        assert!(r.authoritative() && r.recursion_available() && r.recursion_desired());
        assert_eq!(r.answers().len(), 1);
        assert_eq!(r.additionals().len(), 1);
        let r = ask(&z, "EX.com.", RecordType::A);
        assert_eq!(r.response_code(), ResponseCode::NoError);
        assert!(r.answers().is_empty());
        assert_eq!(r.name_servers().len(), 1);
        let r = ask(&z, "nope.ex.com.", RecordType::A);
        assert_eq!(r.response_code(), ResponseCode::NXDomain);
    }

    #[test]
    fn long_txt_is_split() {
        let chunks = txt_chunks(&"x".repeat(600));
        assert_eq!(
            chunks.iter().map(String::len).collect::<Vec<_>>(),
            [255, 255, 90]
        );
        assert_eq!(txt_chunks(""), vec![String::new()]);
    }

    fn ask_dnssec(zone: &Zone, name: &str, qtype: RecordType, dnssec_ok: bool) -> Message {
        let mut q = Message::new();
        q.set_id(78).set_recursion_desired(true);
        q.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
        let mut edns = Edns::new();
        edns.set_dnssec_ok(dnssec_ok);
        q.set_edns(edns);
        answer(zone, &q)
    }

    #[test]
    fn signed_zones_answer_with_ad_only_when_dnssec_is_asked_for() {
        let mut z = Zone::new();
        z.add_mx("signed.example", 10, "mx.signed.example")
            .add_a("mx.signed.example", Ipv4Addr::new(127, 1, 0, 1))
            .add_tlsa("_25._tcp.mx.signed.example", 3, 1, 1, &[7; 32])
            .add_tlsa("_25._tcp.mx.signed.example", 3, 1, 1, &[7; 32])
            .add_mx("plain.example", 10, "mx.plain.example")
            .set_signed("Signed.Example.", true);
        z.check().expect("valid");
        let r = ask_dnssec(&z, "_25._tcp.mx.signed.example.", RecordType::TLSA, true);
        assert!(r.authentic_data());
        assert_eq!(r.answers().len(), 1, "a duplicate record is published once");
        let Some(RData::TLSA(t)) = r.answers().first().map(|a| a.data()) else {
            panic!("not a TLSA answer: {r:?}");
        };
        assert_eq!(
            (
                u8::from(t.cert_usage()),
                u8::from(t.selector()),
                u8::from(t.matching())
            ),
            (3, 1, 1)
        );
        assert!(r.extensions().as_ref().is_some_and(|e| e.flags().dnssec_ok));
        // An authenticated denial: the name does not exist, and the zone is signed.
        let r = ask_dnssec(&z, "_25._tcp.mx2.signed.example.", RecordType::TLSA, true);
        assert_eq!(r.response_code(), ResponseCode::NXDomain);
        assert!(r.authentic_data());
        // Without DO or AD in the query, no AD; outside the signed domain, never.
        assert!(!ask(&z, "signed.example.", RecordType::MX).authentic_data());
        assert!(!ask_dnssec(&z, "signed.example.", RecordType::MX, false).authentic_data());
        let mut q = Message::new();
        q.set_authentic_data(true);
        q.add_query(Query::query(
            Name::from_ascii("signed.example.").unwrap(),
            RecordType::MX,
        ));
        assert!(answer(&z, &q).authentic_data(), "AD in the query asks too");
        assert!(!ask_dnssec(&z, "plain.example.", RecordType::MX, true).authentic_data());
        assert!(z.is_signed("x.mx.signed.example") && !z.is_signed("unsigned.example"));
    }

    #[test]
    fn bogus_zones_and_names_answer_servfail() {
        let mut z = Zone::new();
        z.add_mx("bad.example", 10, "mx.bad.example")
            .add_mx("good.example", 10, "mx.good.example")
            .add_tlsa("_25._tcp.mx.good.example", 3, 1, 1, &[7; 32])
            .set_signed("bad.example", true)
            .set_signed("good.example", true)
            .set_bogus("bad.example", true)
            .set_servfail("_25._tcp.mx.good.example", true);
        for name in ["bad.example.", "mx.bad.example.", "nothing.bad.example."] {
            let r = ask_dnssec(&z, name, RecordType::MX, true);
            assert_eq!(r.response_code(), ResponseCode::ServFail, "{name}");
            assert!(!r.authentic_data());
        }
        let r = ask_dnssec(&z, "_25._tcp.mx.good.example.", RecordType::TLSA, true);
        assert_eq!(r.response_code(), ResponseCode::ServFail);
        let r = ask_dnssec(&z, "good.example.", RecordType::MX, true);
        assert!(r.response_code() == ResponseCode::NoError && r.authentic_data());
        z.set_bogus("bad.example", false);
        assert!(!z.is_bogus("mx.bad.example"));
    }

    #[test]
    fn bad_names_are_reported() {
        let mut z = Zone::new();
        z.add_mx("ok.example", 10, "bad..host");
        assert!(matches!(z.check(), Err(SimError::BadName { .. })));
    }
}
