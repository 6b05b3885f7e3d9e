//! The DNS and network checks, per list domain and per sending address.

use crate::dns::{reverse_name, Answer, Dns};
use crate::{Finding, Inputs, Severity};
use herald_auth::Authenticator;
use std::net::{IpAddr, SocketAddr};
use tokio::io::AsyncReadExt;

/// Longest banner line read from an MX host.
const MAX_BANNER: usize = 512;

/// Every check of one list domain.
pub async fn domain(
    inputs: &Inputs,
    dns: &Dns,
    auth: &Authenticator,
    domain: &str,
    out: &mut Vec<Finding>,
) {
    let domain = domain.trim_end_matches('.').to_ascii_lowercase();
    mx(inputs, dns, &domain, out).await;
    spf(inputs, auth, &domain, out).await;
    dkim(inputs, dns, &domain, out).await;
    dmarc(dns, &domain, out).await;
    policy_records(dns, &domain, out).await;
}

/// MX: lists receive their posts, bounces and commands at the list domain.
async fn mx(inputs: &Inputs, dns: &Dns, domain: &str, out: &mut Vec<Finding>) {
    let suggestion = format!("{domain}. IN MX 10 {}.", inputs.helo);
    let hosts = match dns.mx(domain).await {
        Answer::Found(mut mx) => {
            if mx.iter().any(|(_, h)| h == ".") {
                out.push(
                    Finding::new(
                        Severity::Error,
                        "mx",
                        domain,
                        "null MX (RFC 7505): the domain says it accepts no mail, so no post, \
                         bounce or command reaches the lists",
                    )
                    .publish(suggestion),
                );
                return;
            }
            mx.sort();
            mx.into_iter().map(|(_, h)| h).collect::<Vec<_>>()
        }
        Answer::NoRecord => {
            out.push(
                Finding::new(
                    Severity::Warn,
                    "mx",
                    domain,
                    "no MX record: senders fall back to the domain's own address (RFC 5321 \
                     §5.1), which many refuse to do for list domains",
                )
                .publish(suggestion),
            );
            vec![domain.to_string()]
        }
        Answer::NoName => {
            out.push(
                Finding::new(
                    Severity::Error,
                    "mx",
                    domain,
                    "the domain does not exist in DNS",
                )
                .publish(suggestion),
            );
            return;
        }
        Answer::Failed(e) => {
            out.push(Finding::new(
                Severity::Error,
                "mx",
                domain,
                format!("MX lookup failed: {e}"),
            ));
            return;
        }
    };
    for host in hosts {
        match dns.addresses(&host).await {
            Answer::Found(addrs) => {
                out.push(Finding::new(
                    Severity::Ok,
                    "mx",
                    domain,
                    format!("MX host {host} resolves to {}", join(&addrs)),
                ));
                for addr in addrs {
                    port25(inputs, &host, SocketAddr::new(addr, inputs.smtp_port), out).await;
                }
            }
            other => out.push(
                Finding::new(
                    Severity::Error,
                    "mx",
                    domain,
                    format!("MX host {host} has no address ({})", describe(&other)),
                )
                .publish(format!("{host}. IN A <this server's public address>")),
            ),
        }
    }
}

/// Connects to an MX host address and reads its banner.
async fn port25(inputs: &Inputs, host: &str, addr: SocketAddr, out: &mut Vec<Finding>) {
    let subject = format!("{host} {addr}");
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let mut buf = vec![0u8; MAX_BANNER];
        let mut got = 0;
        while got < MAX_BANNER && !buf[..got].contains(&b'\n') {
            let n = stream
                .read(&mut buf[got..])
                .await
                .map_err(|e| format!("reading the banner: {e}"))?;
            if n == 0 {
                break;
            }
            got += n;
        }
        let line = String::from_utf8_lossy(&buf[..got]);
        Ok::<String, String>(line.lines().next().unwrap_or("").to_string())
    };
    let finding = match tokio::time::timeout(inputs.connect_timeout, attempt).await {
        Ok(Ok(banner)) if banner.starts_with("220") => Finding::new(
            Severity::Ok,
            "port25",
            subject,
            format!("answers: {banner}"),
        ),
        Ok(Ok(banner)) => Finding::new(
            Severity::Error,
            "port25",
            subject,
            format!("answers without a 220 greeting: {banner:?}"),
        ),
        Ok(Err(e)) => Finding::new(Severity::Error, "port25", subject, e),
        Err(_) => Finding::new(
            Severity::Error,
            "port25",
            subject,
            format!(
                "no banner within {} s (a firewall, or nothing listening)",
                inputs.connect_timeout.as_secs()
            ),
        ),
    };
    out.push(finding);
}

/// SPF as receivers evaluate it for copies: the envelope sender is a VERP address at the list
/// domain, sent from each egress address with our HELO name.
async fn spf(inputs: &Inputs, auth: &Authenticator, domain: &str, out: &mut Vec<Finding>) {
    let sender = format!("bounces@{domain}");
    let mechanisms: Vec<String> = inputs
        .egress
        .iter()
        .map(|ip| match ip {
            IpAddr::V4(v4) => format!("ip4:{v4}"),
            IpAddr::V6(v6) => format!("ip6:{v6}"),
        })
        .collect();
    let suggestion = format!("{domain}. IN TXT \"v=spf1 {} -all\"", mechanisms.join(" "));
    for ip in &inputs.egress {
        let result = auth.spf_result(*ip, &inputs.helo, &sender).await;
        let subject = format!("{domain} from {ip}");
        let finding = match result.as_str() {
            "pass" => Finding::new(Severity::Ok, "spf", subject, "pass"),
            "none" => Finding::new(
                Severity::Error,
                "spf",
                subject,
                "no SPF record: receivers cannot tell our copies from forgeries",
            )
            .publish(suggestion.clone()),
            "temperror" => Finding::new(
                Severity::Error,
                "spf",
                subject,
                "temperror: the SPF lookup failed (DNS trouble); receivers defer or treat it as none",
            ),
            "permerror" => Finding::new(
                Severity::Error,
                "spf",
                subject,
                "permerror: the SPF record is broken (syntax, or more than 10 lookups)",
            )
            .publish(suggestion.clone()),
            other => Finding::new(
                Severity::Error,
                "spf",
                subject,
                format!(
                    "{other}: the record does not authorize this address (add {} to it; the \
                     record below authorizes only this server)",
                    match ip {
                        IpAddr::V4(v4) => format!("ip4:{v4}"),
                        IpAddr::V6(v6) => format!("ip6:{v6}"),
                    }
                ),
            )
            .publish(suggestion.clone()),
        };
        out.push(finding);
    }
}

/// The DKIM key published at each configured selector matches the configured private key.
async fn dkim(inputs: &Inputs, dns: &Dns, domain: &str, out: &mut Vec<Finding>) {
    let Some(keys) = inputs.dkim.get(domain) else {
        out.push(Finding::new(
            Severity::Warn,
            "dkim",
            domain,
            format!(
                "no DKIM key configured: copies go out unsigned, and DMARC then rests on SPF \
                 alone (run `herald dkim keygen {domain}` and add its [dkim.\"{domain}\"] lines)"
            ),
        ));
        return;
    };
    for key in keys {
        let name = format!("{}._domainkey.{domain}", key.selector);
        let expected = match &key.record {
            Ok(r) => r,
            Err(e) => {
                out.push(Finding::new(
                    Severity::Error,
                    "dkim",
                    &name,
                    format!("the configured key cannot be read: {e}"),
                ));
                continue;
            }
        };
        let publish = format!("{name}. IN TXT \"{expected}\"");
        let want = tag(expected, "p").unwrap_or_default();
        let finding = match dns.txt(&name).await {
            Answer::Found(txts) => {
                let keys: Vec<&String> = txts.iter().filter(|t| tag(t, "p").is_some()).collect();
                if keys
                    .iter()
                    .any(|t| tag(t, "p").as_deref() == Some(want.as_str()))
                {
                    Finding::new(
                        Severity::Ok,
                        "dkim",
                        &name,
                        "the published key matches the configured key",
                    )
                } else if keys.is_empty() {
                    Finding::new(
                        Severity::Error,
                        "dkim",
                        &name,
                        "a TXT record without a key (p=)",
                    )
                    .publish(publish)
                } else {
                    Finding::new(
                        Severity::Error,
                        "dkim",
                        &name,
                        "the published key is not the configured key: every signature fails",
                    )
                    .publish(publish)
                }
            }
            Answer::Failed(e) => Finding::new(
                Severity::Error,
                "dkim",
                &name,
                format!("lookup failed: {e}"),
            ),
            _ => Finding::new(
                Severity::Error,
                "dkim",
                &name,
                "no key published: every signature fails",
            )
            .publish(publish),
        };
        out.push(finding);
    }
}

/// A `tag=value` of a DKIM/DMARC-style record, whitespace removed from the value.
fn tag(record: &str, name: &str) -> Option<String> {
    record.split(';').find_map(|part| {
        let (k, v) = part.split_once('=')?;
        (k.trim().eq_ignore_ascii_case(name))
            .then(|| v.chars().filter(|c| !c.is_whitespace()).collect())
    })
}

async fn dmarc(dns: &Dns, domain: &str, out: &mut Vec<Finding>) {
    let name = format!("_dmarc.{domain}");
    let publish = format!("{name}. IN TXT \"v=DMARC1; p=none; rua=mailto:postmaster@{domain}\"");
    let record = match dns.txt(&name).await {
        Answer::Found(txts) => txts.into_iter().find(|t| t.starts_with("v=DMARC1")),
        Answer::Failed(e) => {
            out.push(Finding::new(
                Severity::Error,
                "dmarc",
                &name,
                format!("lookup failed: {e}"),
            ));
            return;
        }
        _ => None,
    };
    out.push(match record {
        Some(r) => Finding::new(
            Severity::Ok,
            "dmarc",
            &name,
            format!("policy p={}", tag(&r, "p").unwrap_or_else(|| "?".into())),
        ),
        None => Finding::new(
            Severity::Warn,
            "dmarc",
            &name,
            "no DMARC record: large receivers expect one from bulk senders (p=none to start)",
        )
        .publish(publish),
    });
}

/// MTA-STS and TLS-RPT: optional, but what lets senders insist on TLS to the lists and tell
/// the operator when it fails.
async fn policy_records(dns: &Dns, domain: &str, out: &mut Vec<Finding>) {
    for (check, name, prefix, publish) in [
        (
            "mta-sts",
            format!("_mta-sts.{domain}"),
            "v=STSv1",
            format!(
                "_mta-sts.{domain}. IN TXT \"v=STSv1; id=1\" (and the policy at \
                 https://mta-sts.{domain}/.well-known/mta-sts.txt)"
            ),
        ),
        (
            "tls-rpt",
            format!("_smtp._tls.{domain}"),
            "v=TLSRPTv1",
            format!("_smtp._tls.{domain}. IN TXT \"v=TLSRPTv1; rua=mailto:postmaster@{domain}\""),
        ),
    ] {
        let found = match dns.txt(&name).await {
            Answer::Found(txts) => txts.into_iter().find(|t| t.starts_with(prefix)),
            _ => None,
        };
        // A TLS-RPT record is read as senders read it: one whose destinations are unusable
        // asks for reports nobody can send.
        let unusable = match (&found, check) {
            (Some(r), "tls-rpt") => herald_routing::tlsrpt_record::parse(r).err(),
            _ => None,
        };
        out.push(match (found, unusable) {
            (Some(r), Some(e)) => {
                Finding::new(Severity::Warn, check, &name, format!("{r}: {e}")).publish(publish)
            }
            (Some(r), None) => Finding::new(Severity::Ok, check, &name, r),
            (None, _) => {
                Finding::new(Severity::Warn, check, &name, "not published").publish(publish)
            }
        });
    }
}

/// Reverse DNS of a sending address, forward-confirmed, and the HELO name against it.
pub async fn egress(inputs: &Inputs, dns: &Dns, ip: IpAddr, out: &mut Vec<Finding>) {
    let subject = ip.to_string();
    let publish_ptr = format!("{}. IN PTR {}.", reverse_name(ip), inputs.helo);
    let names = match dns.ptr(ip).await {
        Answer::Found(names) => names,
        Answer::Failed(e) => {
            out.push(Finding::new(
                Severity::Error,
                "rdns",
                subject,
                format!("PTR lookup failed: {e}"),
            ));
            return;
        }
        _ => {
            out.push(
                Finding::new(
                    Severity::Error,
                    "rdns",
                    subject,
                    "no reverse DNS: most large receivers refuse mail from such addresses \
                     (ask whoever runs the address block to publish it)",
                )
                .publish(publish_ptr),
            );
            return;
        }
    };
    let mut confirmed = Vec::new();
    for name in &names {
        if let Answer::Found(addrs) = dns.addresses(name).await {
            if addrs.contains(&ip) {
                confirmed.push(name.clone());
            }
        }
    }
    if confirmed.is_empty() {
        out.push(
            Finding::new(
                Severity::Error,
                "rdns",
                &subject,
                format!(
                    "reverse name {} does not resolve back to {ip} (not forward-confirmed)",
                    names.join(", ")
                ),
            )
            .publish(format!("{}. IN A {ip}", names[0])),
        );
    } else {
        out.push(Finding::new(
            Severity::Ok,
            "rdns",
            &subject,
            format!("{} (forward-confirmed)", confirmed.join(", ")),
        ));
    }
    let helo = inputs.helo.to_ascii_lowercase();
    out.push(if confirmed.contains(&helo) {
        Finding::new(
            Severity::Ok,
            "helo",
            &subject,
            format!("HELO {helo} matches the reverse name"),
        )
    } else {
        Finding::new(
            Severity::Warn,
            "helo",
            &subject,
            format!(
                "HELO name {helo} is not this address's (forward-confirmed) reverse name: set \
                 `hostname` to it, or publish the PTR"
            ),
        )
        .publish(publish_ptr)
    });
}

fn join(addrs: &[IpAddr]) -> String {
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn describe<T>(a: &Answer<T>) -> String {
    match a {
        Answer::Found(_) => "found".into(),
        Answer::NoRecord => "no A/AAAA record".into(),
        Answer::NoName => "no such name".into(),
        Answer::Failed(e) => format!("lookup failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::tag;

    #[test]
    fn tags_are_read_leniently_and_safely() {
        assert_eq!(
            tag("v=DKIM1; k=rsa; p=AB CD\tEF", "p").as_deref(),
            Some("ABCDEF")
        );
        assert_eq!(tag("v=DMARC1;p=reject", "P").as_deref(), Some("reject"));
        assert_eq!(tag("garbage without tags", "p"), None);
        assert_eq!(tag(";;;=;=", "p"), None);
        assert!(tag(&"p=".repeat(10_000), "p").is_some_and(|v| v.len() < 20_000));
    }
}
