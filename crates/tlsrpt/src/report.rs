//! The report itself (RFC 8460 §4): the JSON document for one policy domain and one UTC day,
//! gzip'd (`application/tlsrpt+gzip`), and the mail that carries it (§5.3: a
//! `multipart/report; report-type="tlsrpt"` with `TLS-Report-Domain` and
//! `TLS-Report-Submitter` fields). Pure: rows in, bytes out.
//!
//! SECURITY: the rows are Herald's own observations; the domain and MX names in them came from
//! DNS answers Herald already validated when it routed mail. JSON escaping is serde_json's.

use crate::ledger::Row;
use flate2::write::GzEncoder;
use flate2::Compression;
use herald_types::{TlsPolicyKind, TlsResultType};
use mail_builder::headers::address::Address as MailAddress;
use mail_builder::headers::content_type::ContentType;
use mail_builder::headers::raw::Raw;
use mail_builder::mime::{BodyPart, MimePart};
use mail_builder::MessageBuilder;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;

/// The report document (RFC 8460 §4.4), field names as the RFC spells them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Report {
    pub organization_name: String,
    pub date_range: DateRange,
    pub contact_info: String,
    pub report_id: String,
    pub policies: Vec<PolicyReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct DateRange {
    pub start_datetime: String,
    pub end_datetime: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PolicyReport {
    pub policy: PolicyDesc,
    pub summary: Summary,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_details: Vec<FailureDetail>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PolicyDesc {
    pub policy_type: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_string: Vec<String>,
    pub policy_domain: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mx_host: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Summary {
    pub total_successful_session_count: u64,
    pub total_failure_session_count: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct FailureDetail {
    pub result_type: String,
    pub receiving_mx_hostname: String,
    pub receiving_ip: String,
    pub failed_session_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_information: Option<String>,
}

/// Who writes the report.
#[derive(Debug, Clone)]
pub struct Submitter {
    /// `organization-name`.
    pub organization: String,
    /// `contact-info` (an address or a URL).
    pub contact: String,
    /// The submitter's domain (`TLS-Report-Submitter`, the file name, the DKIM domain).
    pub domain: String,
}

/// Builds the report of `domain` for `day` (`YYYY-MM-DD`, UTC) from its rows. Policies are the
/// distinct (type, strings) the rows name, in a stable order.
pub fn build(
    submitter: &Submitter,
    domain: &str,
    day: &str,
    report_id: &str,
    rows: &[Row],
) -> Report {
    let mut policies: BTreeMap<(TlsPolicyKind, Vec<String>), PolicyReport> = BTreeMap::new();
    for row in rows {
        let key = (row.policy, row.policy_strings.clone());
        let entry = policies.entry(key).or_insert_with(|| PolicyReport {
            policy: PolicyDesc {
                policy_type: row.policy.word().to_string(),
                policy_string: row.policy_strings.clone(),
                policy_domain: domain.to_string(),
                mx_host: Vec::new(),
            },
            summary: Summary {
                total_successful_session_count: 0,
                total_failure_session_count: 0,
            },
            failure_details: Vec::new(),
        });
        if !entry.policy.mx_host.contains(&row.mx_host) {
            entry.policy.mx_host.push(row.mx_host.clone());
        }
        match row.result {
            None => entry.summary.total_successful_session_count += row.count,
            Some(result) => {
                entry.summary.total_failure_session_count += row.count;
                entry.failure_details.push(FailureDetail {
                    result_type: result.word().to_string(),
                    receiving_mx_hostname: row.mx_host.clone(),
                    receiving_ip: row.receiving_ip.clone(),
                    failed_session_count: row.count,
                    additional_information: (!row.info.is_empty()).then(|| row.info.clone()),
                });
            }
        }
    }
    for p in policies.values_mut() {
        p.policy.mx_host.sort();
    }
    Report {
        organization_name: submitter.organization.clone(),
        date_range: DateRange {
            start_datetime: format!("{day}T00:00:00Z"),
            end_datetime: format!("{day}T23:59:59Z"),
        },
        contact_info: submitter.contact.clone(),
        report_id: report_id.to_string(),
        policies: policies.into_values().collect(),
    }
}

/// The report as `application/tlsrpt+gzip`.
pub fn gzip(report: &Report) -> Vec<u8> {
    // Serializing plain structs of strings and numbers cannot fail; writing to a Vec neither.
    let json = serde_json::to_vec(report).unwrap_or_default();
    let mut enc = GzEncoder::new(
        Vec::with_capacity(json.len() / 4 + 64),
        Compression::default(),
    );
    let _ = enc.write_all(&json);
    enc.finish().unwrap_or_default()
}

/// The file name RFC 8460 §5.1 gives a report:
/// `submitter!policy-domain!begin-timestamp!end-timestamp!unique-id.json.gz`.
pub fn file_name(submitter: &str, domain: &str, begin: i64, end: i64, id: &str) -> String {
    format!("{submitter}!{domain}!{begin}!{end}!{id}.json.gz")
}

/// The report mail (RFC 8460 §5.3) from `from` to `to`: a human-readable part and the gzip'd
/// JSON, under `multipart/report; report-type="tlsrpt"`.
#[allow(clippy::too_many_arguments)]
pub fn mail(
    submitter: &Submitter,
    from: &str,
    to: &[String],
    domain: &str,
    report: &Report,
    gz: &[u8],
    file: &str,
    date_unix: i64,
) -> Vec<u8> {
    let subject = format!(
        "Report Domain: {domain} Submitter: {} Report-ID: <{}>",
        submitter.domain, report.report_id
    );
    let (ok, failed) = report.policies.iter().fold((0, 0), |(o, f), p| {
        (
            o + p.summary.total_successful_session_count,
            f + p.summary.total_failure_session_count,
        )
    });
    let text = format!(
        "This is an SMTP TLS report (RFC 8460) for {domain} from {}.\r\n\
         Period: {} to {}.\r\nSessions with TLS as required: {ok}; failed: {failed}.\r\n\
         The attached file has the details.\r\n",
        submitter.organization, report.date_range.start_datetime, report.date_range.end_datetime
    );
    let note = MimePart::new(
        ContentType::new("text/plain").attribute("charset", "us-ascii"),
        BodyPart::Text(text.into()),
    )
    .transfer_encoding("7bit");
    let attached = MimePart::new(
        "application/tlsrpt+gzip",
        BodyPart::Binary(gz.to_vec().into()),
    )
    .attachment(file.to_string());
    let report_type = ContentType::new("multipart/report").attribute("report-type", "tlsrpt");
    let to = MailAddress::new_list(
        to.iter()
            .map(|t| MailAddress::new_address(None::<&str>, t.clone()))
            .collect(),
    );
    let builder = MessageBuilder::new()
        .from(MailAddress::new_address(None::<&str>, from.to_string()))
        .to(to)
        .header("Subject", Raw::new(subject))
        .date(date_unix)
        .message_id(format!("{}@{}", report.report_id, submitter.domain))
        .header("TLS-Report-Domain", Raw::new(domain.to_string()))
        .header("TLS-Report-Submitter", Raw::new(submitter.domain.clone()))
        .header("Auto-Submitted", Raw::new("auto-generated"))
        .header("MIME-Version", Raw::new("1.0"))
        .body(MimePart::new(report_type, vec![note, attached]));
    let mut out = Vec::with_capacity(gz.len() * 2 + 2048);
    let _ = builder.write_to(&mut out);
    out
}

/// The failure types in a report, for tests and the log.
pub fn result_types(report: &Report) -> Vec<TlsResultType> {
    report
        .policies
        .iter()
        .flat_map(|p| &p.failure_details)
        .filter_map(|d| TlsResultType::from_word(&d.result_type))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::GzDecoder;
    use std::io::Read;

    fn row(policy: TlsPolicyKind, mx: &str, result: Option<TlsResultType>, count: u64) -> Row {
        Row {
            policy,
            policy_strings: match policy {
                TlsPolicyKind::Sts => vec!["version: STSv1".into(), "mode: enforce".into()],
                _ => Vec::new(),
            },
            mx_host: mx.into(),
            receiving_ip: "127.0.0.9".into(),
            result,
            info: result
                .map(|_| "no STARTTLS".to_string())
                .unwrap_or_default(),
            count,
        }
    }

    #[test]
    fn report_sums_sessions_per_policy_and_round_trips_through_gzip() {
        let sub = Submitter {
            organization: "Herald".into(),
            contact: "postmaster@lists.example".into(),
            domain: "lists.example".into(),
        };
        let rows = vec![
            row(TlsPolicyKind::Sts, "mx1.d.example", None, 7),
            row(TlsPolicyKind::Sts, "mx2.d.example", None, 3),
            row(
                TlsPolicyKind::NoPolicyFound,
                "mx3.d.example",
                Some(TlsResultType::StarttlsNotSupported),
                2,
            ),
        ];
        let r = build(&sub, "d.example", "2026-11-24", "rid-1", &rows);
        assert_eq!(r.policies.len(), 2);
        let sts = r
            .policies
            .iter()
            .find(|p| p.policy.policy_type == "sts")
            .unwrap();
        assert_eq!(sts.summary.total_successful_session_count, 10);
        assert_eq!(sts.policy.mx_host, vec!["mx1.d.example", "mx2.d.example"]);
        let none = r
            .policies
            .iter()
            .find(|p| p.policy.policy_type == "no-policy-found")
            .unwrap();
        assert_eq!(none.summary.total_failure_session_count, 2);
        assert_eq!(
            none.failure_details[0].result_type,
            "starttls-not-supported"
        );
        let gz = gzip(&r);
        let mut json = String::new();
        GzDecoder::new(&gz[..]).read_to_string(&mut json).unwrap();
        assert!(json.contains("\"organization-name\":\"Herald\""));
        assert!(json.contains("\"total-successful-session-count\":10"));
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
        let m = mail(
            &sub,
            "postmaster@lists.example",
            &["tls@r.example".into()],
            "d.example",
            &r,
            &gz,
            "f.json.gz",
            1_764_000_000,
        );
        let text = String::from_utf8_lossy(&m);
        assert!(text.contains("multipart/report"), "{text}");
        assert!(
            text.contains("report-type=\"tlsrpt\"") || text.contains("report-type=tlsrpt"),
            "{text}"
        );
        assert!(text.contains("TLS-Report-Domain: d.example"));
        assert!(text.contains("TLS-Report-Submitter: lists.example"));
        assert!(text.contains("application/tlsrpt+gzip"));
    }
}
