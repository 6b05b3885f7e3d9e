//! Per-list content rules applied on the enqueue path before a post is accepted as a list post:
//! executable attachments and content types outside the list's allow list send the post to
//! moderation (held with the reason), never silently drop it. The size limit is enforced
//! earlier (552 5.3.4).
//!
//! Limits: at most [`MAX_PARTS`] MIME parts are examined; a post with more is held.
//!
//! SECURITY: the post is untrusted; mail-parser does the MIME parsing, this module only reads
//! content types and file names.

use herald_types::ListSettings;
use mail_parser::{MessageParser, MimeHeaders, PartType};

/// Most MIME parts looked at per post.
pub const MAX_PARTS: usize = 1000;

const EXECUTABLE_EXTENSIONS: &[&str] = &[
    "exe", "bat", "cmd", "com", "scr", "pif", "js", "jse", "vbs", "vbe", "jar", "msi", "ps1",
    "wsf", "cpl", "hta", "lnk", "dll", "sh", "apk", "app",
];

const EXECUTABLE_TYPES: &[&str] = &[
    "application/x-msdownload",
    "application/x-msdos-program",
    "application/x-executable",
    "application/vnd.microsoft.portable-executable",
    "application/x-sh",
    "application/java-archive",
    "application/x-ms-installer",
];

/// Why the post must be held, or `None` when the list's rules allow it.
pub fn hold_reason(settings: &ListSettings, body: &[u8]) -> Option<String> {
    if !settings.hold_executables && settings.allowed_content_types.is_empty() {
        return None;
    }
    let Some(msg) = MessageParser::new().parse(body) else {
        return Some("the message does not parse as MIME".into());
    };
    if msg.parts.len() > MAX_PARTS {
        return Some(format!("more than {MAX_PARTS} MIME parts"));
    }
    for part in &msg.parts {
        if matches!(part.body, PartType::Multipart(_)) {
            continue;
        }
        let ctype = part.content_type().map_or_else(
            || "text/plain".to_string(),
            |ct| format!("{}/{}", ct.ctype(), ct.subtype().unwrap_or("")).to_ascii_lowercase(),
        );
        if settings.hold_executables {
            let name = part.attachment_name().unwrap_or("").to_ascii_lowercase();
            let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
            if EXECUTABLE_TYPES.contains(&ctype.as_str()) || EXECUTABLE_EXTENSIONS.contains(&ext) {
                return Some(format!("executable attachment ({ctype}, {name:?})"));
            }
        }
        if !settings.allowed_content_types.is_empty()
            && !allowed(&settings.allowed_content_types, &ctype)
        {
            return Some(format!("content type {ctype} is not allowed on this list"));
        }
    }
    None
}

fn allowed(list: &[String], ctype: &str) -> bool {
    list.iter().any(|a| {
        let a = a.to_ascii_lowercase();
        match a.strip_suffix("/*") {
            Some(major) => ctype.split('/').next() == Some(major),
            None => a == ctype,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: &[u8] = b"From: a@x.test\r\nSubject: s\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n\
--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"run.EXE\"\r\n\r\nMZ\r\n--b--\r\n";

    #[test]
    fn executables_and_disallowed_types_are_held() {
        let s = ListSettings::default();
        assert!(hold_reason(&s, EXE).is_some_and(|r| r.contains("executable")));
        assert_eq!(hold_reason(&s, b"Subject: x\r\n\r\nplain\r\n"), None);
        let only_text = ListSettings {
            allowed_content_types: vec!["text/*".into()],
            hold_executables: false,
            ..ListSettings::default()
        };
        assert!(hold_reason(&only_text, EXE).is_some_and(|r| r.contains("not allowed")));
        assert_eq!(
            hold_reason(&only_text, b"Subject: x\r\n\r\nplain\r\n"),
            None
        );
    }
}
