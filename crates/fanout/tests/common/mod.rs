//! Helpers shared by the integration tests: fixtures, SMTP-level checks, MIME checks.
#![allow(dead_code, clippy::unwrap_used)] // shared by several test binaries; tests may unwrap

use herald_fanout::ListContext;
use herald_types::{Address, List, ListId, ListSettings, Member, MemberId, MemberStatus};
use mail_parser::{MessageParser, MimeHeaders, PartType};
use std::collections::BTreeMap;

pub const SECRET: &[u8] = b"test-secret";
pub const BASE_URL: &str = "https://lists.example.org";

pub fn addr(s: &str) -> Address {
    Address::parse(s).unwrap()
}

pub fn list(address: &str, settings: ListSettings) -> List {
    List {
        id: ListId(1),
        address: addr(address),
        settings,
        created_at_ms: 0,
    }
}

pub fn member(address: &str, name: Option<&str>, fields: &[(&str, &str)]) -> Member {
    Member {
        id: MemberId(7),
        list_id: ListId(1),
        address: addr(address),
        display_name: name.map(str::to_string),
        status: MemberStatus::Enabled,
        fields: fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    }
}

/// Our authserv-id: the Authentication-Results field fan-out trusts carries it.
pub const AUTHSERV_ID: &str = "herald.test";

pub fn ctx(archive: Option<&str>) -> ListContext {
    ListContext {
        unsubscribe_base_url: BASE_URL.to_string(),
        archive_url: archive.map(str::to_string),
        archived_at: None,
        secret: SECRET.to_vec(),
        dkim: Default::default(),
        authserv_id: AUTHSERV_ID.to_string(),
    }
}

/// Undoes SMTP dot-stuffing (what the receiving server does).
pub fn undot(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut at_line_start = true;
    for &b in data {
        if at_line_start && b == b'.' {
            at_line_start = false;
            continue;
        }
        out.push(b);
        at_line_start = b == b'\n';
    }
    out
}

/// Wire-level checks every spliced copy must pass: CRLF only, lines ≤ 998 octets, correct
/// dot-stuffing (no line is a lone "." and re-stuffing the unstuffed text gives it back).
pub fn check_wire(data: &[u8]) {
    for (i, &b) in data.iter().enumerate() {
        if b == b'\n' {
            assert!(i > 0 && data[i - 1] == b'\r', "bare LF at {i}");
        }
        if b == b'\r' {
            assert_eq!(data.get(i + 1), Some(&b'\n'), "bare CR at {i}");
        }
    }
    assert!(data.ends_with(b"\r\n"), "copy must end with CRLF");
    for line in data.split(|&b| b == b'\n') {
        assert!(
            line.len() <= 1000,
            "line longer than 998 octets: {} bytes",
            line.len()
        );
        assert_ne!(line, b".\r", "unstuffed lone dot");
    }
    let plain = undot(data);
    let mut restuffed = Vec::new();
    let mut at_line_start = true;
    for &b in &plain {
        if at_line_start && b == b'.' {
            restuffed.push(b'.');
        }
        restuffed.push(b);
        at_line_start = b == b'\n';
    }
    assert_eq!(restuffed, data, "dot-stuffing is not exact");
}

/// The header block's field names, in order (continuation lines must start with WSP).
pub fn header_names(message: &[u8]) -> Vec<String> {
    let end = find(message, b"\r\n\r\n").expect("header/body separator") + 2;
    let mut names = Vec::new();
    for line in message[..end]
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
    {
        if line[0] == b' ' || line[0] == b'\t' {
            continue;
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .expect("every header line is a field");
        let name = std::str::from_utf8(&line[..colon]).unwrap();
        assert!(
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic()),
            "bad field name {name:?}"
        );
        names.push(name.to_string());
    }
    names
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Decoded contents of every leaf part (text as UTF-8 bytes, binary as is), in order.
pub fn leaf_contents(message: &[u8]) -> Vec<(String, Vec<u8>)> {
    let parsed = MessageParser::new()
        .parse(message)
        .expect("copy parses as a message");
    let mut out = Vec::new();
    for part in &parsed.parts {
        let ctype = part
            .content_type()
            .map(|c| format!("{}/{}", c.ctype(), c.subtype().unwrap_or("")))
            .unwrap_or_else(|| "text/plain".to_string())
            .to_ascii_lowercase();
        let contents = match &part.body {
            PartType::Text(t) | PartType::Html(t) => t.as_bytes().to_vec(),
            PartType::Binary(b) | PartType::InlineBinary(b) => b.to_vec(),
            PartType::Message(m) => m.raw_message.to_vec(),
            PartType::Multipart(_) => continue,
        };
        out.push((ctype, contents));
    }
    out
}

/// Structural check: every leaf of the original is in the copy unchanged (text may have had
/// the footer appended at its end), and when `footer` is given, a text/plain leaf of the copy
/// contains it.
pub fn check_structure(name: &str, original: &[u8], copy: &[u8], footer: Option<&str>) {
    let plain = undot(copy);
    let before = leaf_contents(&crlf(original));
    let after = leaf_contents(&plain);
    for (ctype, contents) in &before {
        let found = after
            .iter()
            .any(|(c, got)| c == ctype && (got == contents || got.starts_with(contents)));
        assert!(
            found,
            "{name}: original {ctype} part not intact in the copy:\n{}",
            String::from_utf8_lossy(&plain)
        );
    }
    if let Some(footer) = footer {
        let found = after
            .iter()
            .any(|(c, got)| c == "text/plain" && String::from_utf8_lossy(got).contains(footer));
        assert!(
            found,
            "{name}: footer {footer:?} not found in a text/plain part:\n{}",
            String::from_utf8_lossy(&plain)
        );
    }
}

/// LF and lone CR → CRLF (inputs of tolerance tests are written with LF).
pub fn crlf(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 64);
    for (i, &b) in data.iter().enumerate() {
        match b {
            b'\n' if i == 0 || data[i - 1] != b'\r' => out.extend_from_slice(b"\r\n"),
            b'\r' if data.get(i + 1) != Some(&b'\n') => out.extend_from_slice(b"\r\n"),
            b => out.push(b),
        }
    }
    out
}

/// dkimpy in a virtualenv under the target directory (installed on first use); shared by the
/// DKIM and ARC cross-checks.
pub fn dkimpy_python() -> Option<std::path::PathBuf> {
    let venv = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dkimpy-venv");
    let python = venv.join("bin/python");
    let ok = |p: &std::path::Path| {
        std::process::Command::new(p)
            .args(["-c", "import dkim, nacl"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if python.exists() && ok(&python) {
        return Some(python);
    }
    let made = std::process::Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .is_ok_and(|s| s.success());
    let installed = made
        && std::process::Command::new(&python)
            .args(["-m", "pip", "install", "-q", "dkimpy", "pynacl"])
            .status()
            .is_ok_and(|s| s.success());
    (installed && ok(&python)).then_some(python)
}

/// `None` when dkimpy cannot be installed here; a failure under CI=true (where it must run).
pub fn dkimpy_or_skip() -> Option<std::path::PathBuf> {
    let python = dkimpy_python();
    if python.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "dkimpy could not be installed (pip install dkimpy pynacl) and CI=true"
        );
        eprintln!("SKIPPED: dkimpy is not installable here (no network?); CI would fail");
    }
    python
}
