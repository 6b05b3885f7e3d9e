//! Store tests on a real SQLite file.

use super::body::deflate;
use super::*;

fn msg(list: &str, mid: &str, extra: &str, subject: &str, body: &str) -> NewMessage {
    NewMessage {
        list: list.into(),
        raw: format!(
            "From: Ann <ann@example.org>\r\nSubject: {subject}\r\nMessage-ID: <{mid}>\r\n{extra}Date: Tue, 24 Nov 2026 10:00:00 +0000\r\n\r\n{body}\r\n"
        )
        .into_bytes(),
        received_ms: 1_795_990_000_000,
    }
}

fn open() -> (tempfile::TempDir, Archive) {
    let dir = tempfile::tempdir().unwrap();
    let a = Archive::open(&dir.path().join("archive.db")).unwrap();
    (dir, a)
}

#[test]
fn a_message_is_stored_once_and_read_back_byte_for_byte() {
    let (_d, mut a) = open();
    let m = msg("dev@x", "a@x", "", "Hello", "first");
    let r = a.insert_batch(&[m.clone(), m.clone()]).unwrap();
    assert!(matches!(r[0], Stored::Added { .. }));
    assert_eq!(
        r[1],
        Stored::Duplicate {
            message_id: "a@x".into()
        }
    );
    assert_eq!(a.message("dev@x", "<a@x>").unwrap().unwrap().raw, m.raw);
    // Same Message-ID on another list is another message.
    assert!(matches!(
        a.insert_batch(&[msg("ops@x", "a@x", "", "Hello", "first")])
            .unwrap()[0],
        Stored::Added { .. }
    ));
    let months = a.months("dev@x").unwrap();
    assert_eq!(
        months,
        vec![Month {
            year: 2026,
            month: 11,
            count: 1
        }]
    );
    assert_eq!(a.month_page("dev@x", 2026, 11, 10, 0).unwrap().len(), 1);
}

#[test]
fn replies_join_threads_by_reference_out_of_order_and_by_subject() {
    let (_d, mut a) = open();
    // The reply arrives before its parent (an import in file order).
    a.insert_batch(&[msg(
        "l",
        "b@x",
        "In-Reply-To: <a@x>\r\n",
        "Re: Topic",
        "reply",
    )])
    .unwrap();
    a.insert_batch(&[msg("l", "a@x", "", "Topic", "root")])
        .unwrap();
    a.insert_batch(&[msg(
        "l",
        "c@x",
        "References: <a@x> <b@x>\r\n",
        "Re: Topic",
        "deeper",
    )])
    .unwrap();
    // No references, a reply subject: joined by subject.
    a.insert_batch(&[msg("l", "d@x", "", "RE: [l] Topic", "by subject")])
        .unwrap();
    // Same words but not a reply: a thread of its own.
    a.insert_batch(&[msg("l", "e@x", "", "Topic", "new thread")])
        .unwrap();
    let root = a.message("l", "a@x").unwrap().unwrap().summary.thread_id;
    let t = a.thread("l", root, 10, 0).unwrap();
    let ids: Vec<_> = t.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(ids.len(), 4, "{ids:?}");
    for m in ["a@x", "b@x", "c@x", "d@x"] {
        assert!(ids.contains(&m), "{m} not in {ids:?}");
    }
    assert_ne!(
        a.message("l", "e@x").unwrap().unwrap().summary.thread_id,
        root
    );
}

#[test]
fn a_removed_message_stays_removed() {
    let (_d, mut a) = open();
    let m = msg("l", "oops@x", "", "Mistake", "secret words");
    a.insert_batch(std::slice::from_ref(&m)).unwrap();
    assert_eq!(a.search("l", "secret", 10, 0).unwrap().len(), 1);
    assert!(a.remove("l", "<oops@x>", 1).unwrap());
    assert!(a.message("l", "oops@x").unwrap().is_none());
    assert!(a.search("l", "secret", 10, 0).unwrap().is_empty());
    assert_eq!(
        a.insert_batch(&[m]).unwrap()[0],
        Stored::Refused(Refused::Tombstoned)
    );
}

/// Removing the newest message must not give its id to the next one: ids are IMAP UIDs and
/// the digest's cursor, and both need an id to mean one message for ever (also across a
/// reopen, where SQLite would otherwise pick max(id) + 1 again).
#[test]
fn the_newest_message_removed_never_gives_its_id_to_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("archive.db");
    let mut a = Archive::open(&path).unwrap();
    let id_of = |r: &Stored| match r {
        Stored::Added { id, .. } => *id,
        other => panic!("not added: {other:?}"),
    };
    let first = id_of(&a.insert_batch(&[msg("l", "1@x", "", "One", "a")]).unwrap()[0]);
    let newest = id_of(&a.insert_batch(&[msg("l", "2@x", "", "Two", "b")]).unwrap()[0]);
    assert!(newest > first);
    assert!(a.remove("l", "<2@x>", 1).unwrap());
    drop(a);
    let mut a = Archive::open(&path).unwrap();
    let next = id_of(
        &a.insert_batch(&[msg("l", "3@x", "", "Three", "c")])
            .unwrap()[0],
    );
    assert!(next > newest, "{next} must be above the removed {newest}");
    // Removing an older one does not lower the floor.
    assert!(a.remove("l", "<1@x>", 2).unwrap());
    let last = id_of(&a.insert_batch(&[msg("l", "4@x", "", "Four", "d")]).unwrap()[0]);
    assert_eq!(last, next + 1);
}

#[test]
fn search_finds_words_and_treats_query_syntax_as_text() {
    let (_d, mut a) = open();
    a.insert_batch(&[
        msg("l", "1@x", "", "Kernel panic", "the scheduler oopsed"),
        msg("l", "2@x", "", "Lunch", "pizza on friday"),
    ])
    .unwrap();
    let hits = a.search("l", "scheduler", 10, 0).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].message_id, "1@x");
    assert_eq!(a.search("l", "ann@example.org", 10, 0).unwrap().len(), 2);
    assert_eq!(a.search("l", "panic kernel", 10, 0).unwrap().len(), 1);
    assert!(a.search("other", "pizza", 10, 0).unwrap().is_empty());
    for hostile in [
        "\"",
        "a OR",
        "NEAR(",
        "*",
        "subject:x",
        "' ; DROP TABLE messages; --",
        "",
    ] {
        assert!(a.search("l", hostile, 10, 0).is_ok(), "{hostile}");
    }
}

#[test]
fn privacy_defaults_and_persists() {
    let (_d, a) = open();
    assert_eq!(a.privacy("l").unwrap(), Privacy::Private);
    a.set_privacy("l", Privacy::Public).unwrap();
    assert_eq!(a.privacy("l").unwrap(), Privacy::Public);
    assert!("bogus".parse::<Privacy>().is_err());
    let a = a.with_default_privacy(Privacy::None);
    assert_eq!(a.privacy("other").unwrap(), Privacy::None);
}

#[test]
fn a_thousand_level_thread_stays_one_thread() {
    let (_d, mut a) = open();
    let mut refs = String::new();
    let mut batch = Vec::new();
    for i in 0..1000 {
        let extra = if i == 0 {
            String::new()
        } else {
            format!("In-Reply-To: <{}@deep>\r\nReferences:{refs}\r\n", i - 1)
        };
        refs.push_str(&format!(" <{i}@deep>"));
        batch.push(msg("l", &format!("{i}@deep"), &extra, "Re: deep", "x"));
    }
    a.insert_batch(&batch).unwrap();
    let root = a.message("l", "0@deep").unwrap().unwrap().summary.thread_id;
    let last = a
        .message("l", "999@deep")
        .unwrap()
        .unwrap()
        .summary
        .thread_id;
    assert_eq!(root, last);
    assert_eq!(a.thread("l", root, 50, 0).unwrap().len(), 50, "paged");
}

#[test]
fn reindex_rebuilds_a_lost_index_and_keeps_ids_and_threads() {
    let (_d, mut a) = open();
    let batch: Vec<NewMessage> = (0..25)
        .map(|i| {
            let extra = if i > 0 { "In-Reply-To: <m0@x>\r\n" } else { "" };
            msg(
                "l@x",
                &format!("m{i}@x"),
                extra,
                "numbat talk",
                &format!("word{i} numbat"),
            )
        })
        .collect();
    a.insert_batch(&batch).unwrap();
    let before = a.month_page("l@x", 2026, 11, 100, 0).unwrap();
    assert_eq!(before.len(), 25);
    assert!(
        before.iter().all(|m| m.thread_id == before[0].thread_id),
        "one thread"
    );
    a.conn
        .execute("INSERT INTO fts (fts) VALUES ('delete-all')", [])
        .unwrap();
    assert!(
        a.search("l@x", "numbat", 100, 0).unwrap().is_empty(),
        "index lost"
    );
    let mut calls = Vec::new();
    let n = a
        .reindex(10, &mut |done, total| calls.push((done, total)))
        .unwrap();
    assert_eq!(n, 25);
    assert_eq!(calls, vec![(10, 25), (20, 25), (25, 25)]);
    assert_eq!(a.search("l@x", "numbat", 100, 0).unwrap().len(), 25);
    assert_eq!(a.search("l@x", "word7", 100, 0).unwrap().len(), 1);
    assert_eq!(a.month_page("l@x", 2026, 11, 100, 0).unwrap(), before);
    // Twice is the same as once (no duplicate index rows).
    a.reindex(1000, &mut |_, _| {}).unwrap();
    assert_eq!(a.search("l@x", "numbat", 100, 0).unwrap().len(), 25);
}

#[test]
fn month_and_thread_pages_follow_the_last_row_shown() {
    let (_d, mut a) = open();
    // 250 posts with the same Date (ties broken by row id), one thread.
    let batch: Vec<NewMessage> = (0..250)
        .map(|i| {
            let extra = if i > 0 { "In-Reply-To: <k0@x>\r\n" } else { "" };
            msg("l@x", &format!("k{i}@x"), extra, "paging", "text")
        })
        .collect();
    a.insert_batch(&batch).unwrap();
    let thread = a.month_page("l@x", 2026, 11, 1, 0).unwrap()[0].thread_id;
    for scope in [
        Scope::Month {
            year: 2026,
            month: 11,
        },
        Scope::Thread(thread),
    ] {
        let (mut after, mut seen, mut pages) = ((i64::MIN, 0), Vec::new(), Vec::new());
        loop {
            let page = a.scope_summaries("l@x", scope, after, 100).unwrap();
            let Some(last) = page.last() else { break };
            after = (last.date_ms, last.id);
            pages.push(page.len());
            seen.extend(page.iter().map(|m| m.id));
        }
        assert_eq!(pages, vec![100, 100, 50], "{scope:?}");
        let mut sorted = seen.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 250, "no row twice, none missed: {scope:?}");
    }
}

/// An archive imported newest first (as a newest-first mbox is): a word in every message
/// comes back newest first by its Date, with the total, and paging reaches the oldest match —
/// through both plans (many matches: the date index; few: sorted matches). A rare word in the
/// oldest message is found, a date filter narrows to old mail, and the relevance order ranks.
#[test]
fn search_is_newest_first_by_date_with_a_total_and_pages_to_the_end() {
    let (_d, mut a) = open();
    let n = super::search::SORT_MATCHES_UP_TO as usize + 700;
    let minute = 60_000i64;
    let t0 = 1_700_000_000_000i64;
    // Archived newest first: row 1 is the newest message.
    let batch: Vec<NewMessage> = (0..n)
        .rev()
        .map(|i| {
            let body = match i {
                0 => "common and zebrafinch".to_string(),
                i if i % 3 == 0 => format!("common word {i} sometimes"),
                i => format!("common word {i}"),
            };
            let date = herald_telemetry::time::rfc5322_date((t0 / 1000) as u64 + i as u64 * 60);
            NewMessage {
                list: "l".into(),
                raw: format!(
                    "From: a@x.test\r\nSubject: s{i}\r\nMessage-ID: <{i}@x>\r\nDate: {date}\r\n\r\n{body}\r\n"
                )
                .into_bytes(),
                received_ms: t0 + n as i64 * minute,
            }
        })
        .collect();
    a.insert_batch(&batch).unwrap();
    let all = |word: &str| -> Vec<String> {
        let none = Filters::default();
        let (mut out, mut offset) = (Vec::new(), 0);
        loop {
            let page = a
                .search_page("l", word, &none, SearchOrder::Newest, 100, offset)
                .unwrap();
            if page.rows.is_empty() {
                return out;
            }
            out.extend(page.rows.iter().map(|m| m.message_id.clone()));
            offset += 100;
        }
    };
    let first = a
        .search_page(
            "l",
            "common",
            &Filters::default(),
            SearchOrder::Newest,
            20,
            0,
        )
        .unwrap();
    assert_eq!(first.total, n as u64, "every match counted");
    assert_eq!(
        first.rows[0].message_id,
        format!("{}@x", n - 1),
        "newest first"
    );
    let common = all("common");
    let expected: Vec<String> = (0..n).rev().map(|i| format!("{i}@x")).collect();
    assert_eq!(common, expected, "newest to oldest, every match once");
    // Fewer matches than the sort plan's limit: the other plan, the same order.
    let some = a
        .search_page(
            "l",
            "sometimes",
            &Filters::default(),
            SearchOrder::Newest,
            10,
            0,
        )
        .unwrap();
    assert_eq!(some.total, ((n - 1) / 3) as u64);
    let expected: Vec<String> = (1..n)
        .rev()
        .filter(|i| i % 3 == 0)
        .map(|i| format!("{i}@x"))
        .collect();
    assert_eq!(all("sometimes"), expected);
    let rare = a.search("l", "zebrafinch", 20, 0).unwrap();
    assert_eq!(rare.len(), 1);
    assert_eq!(rare[0].message_id, "0@x");
    let old = Filters {
        until_ms: Some(t0 + minute * 5),
        ..Filters::default()
    };
    let found = a
        .search_page("l", "common", &old, SearchOrder::Newest, 20, 0)
        .unwrap();
    assert_eq!(
        found.total, 5,
        "the oldest five, reached by the date filter"
    );
    assert_eq!(found.rows.len(), 5);
    let best = a
        .search_page(
            "l",
            "zebrafinch common",
            &Filters::default(),
            SearchOrder::Relevance,
            5,
            0,
        )
        .unwrap();
    assert_eq!((best.total, best.rows[0].message_id.as_str()), (1, "0@x"));
    let past_the_end = a
        .search_page(
            "l",
            "common",
            &Filters::default(),
            SearchOrder::Newest,
            20,
            n,
        )
        .unwrap();
    assert!(past_the_end.rows.is_empty());
    assert_eq!(past_the_end.total, n as u64);
}

/// The per-thread compressor is reset between bodies: every body inflates back to itself, in
/// any order and size (empty, a post, incompressible bytes larger than the first buffer).
#[test]
fn bodies_deflate_and_inflate_back_with_one_reused_compressor() {
    let mut noise = Vec::with_capacity(1 << 20);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while noise.len() < 1 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        noise.extend_from_slice(&x.to_le_bytes());
    }
    let post = b"From: a@b.test\r\nSubject: hi\r\n\r\nHello, list.\r\n".repeat(40);
    for raw in [&b""[..], &post, &noise, &post, &b"x"[..], &noise[..1000]] {
        let packed = deflate(raw);
        assert_eq!(
            inflate(&packed).as_deref(),
            Some(raw),
            "{} bytes",
            raw.len()
        );
    }
}
