//! The pre-parse layer against good and hostile commands: RETURN options, `$` where a key or a
//! set stands (and not where a string does), extended LIST, and junk that must never panic.

use super::*;

fn prep(s: &str) -> Prepared<'_> {
    prepare(s.as_bytes()).unwrap()
}

fn text(p: &Prepared<'_>) -> String {
    String::from_utf8_lossy(&p.bytes).into_owned()
}

#[test]
fn return_options_are_cut_out_for_the_codec() {
    let p = prep("a UID SEARCH RETURN (MIN MAX COUNT) SUBJECT x\r\n");
    assert_eq!(text(&p), "a UID SEARCH SUBJECT x\r\n");
    let r = p.search_return.unwrap();
    assert!(r.min && r.max && r.count && !r.all && !r.save);
    let p = prep("a search return () ALL\r\n");
    assert_eq!(text(&p), "a search ALL\r\n");
    assert_eq!(p.search_return, Some(SearchReturn::all()));
    let p = prep("a SEARCH RETURN (SAVE) ALL\r\n");
    let r = p.search_return.unwrap();
    assert!(r.save && !r.answers());
    // Plain commands pass through borrowed and unchanged.
    let p = prep("a SEARCH ALL\r\n");
    assert!(matches!(p.bytes, Cow::Borrowed(_)) && p.search_return.is_none());
    let p = prep("a FETCH 1:* (FLAGS)\r\n");
    assert!(matches!(p.bytes, Cow::Borrowed(_)) && !p.dollar_set);
}

#[test]
fn hostile_return_options_are_refused() {
    for bad in [
        "a SEARCH RETURN (MIN FOO) ALL\r\n",
        "a SEARCH RETURN ((MIN)) ALL\r\n",
        "a SEARCH RETURN (MIN\r\n",
        "a SEARCH RETURN MIN ALL\r\n",
        "a SEARCH RETURN\r\n",
        "a SEARCH RETURN (\"MIN\") ALL\r\n",
        "a SEARCH RETURN ({3}\r\nMIN) ALL\r\n",
        "a SEARCH RETURN (PARTIAL 1:10) ALL\r\n",
    ] {
        assert!(prepare(bad.as_bytes()).is_err(), "{bad:?}");
    }
    let many = format!("a SEARCH RETURN ({}) ALL\r\n", "MIN ".repeat(17));
    assert_eq!(
        prepare(many.as_bytes()).unwrap_err(),
        Malformed("too many RETURN options")
    );
}

#[test]
fn dollar_is_found_only_where_a_key_or_a_set_stands() {
    let p = prep("a SEARCH $\r\n");
    assert_eq!(p.dollar_keys, vec![9..10]);
    assert_eq!(
        p.substituted(b"UID 4:9", 1024).unwrap(),
        b"a SEARCH UID 4:9\r\n"
    );
    // Written out many times, a big saved result would make a command of any size.
    let many = prep("a SEARCH $ $ $ $\r\n");
    assert_eq!(
        many.substituted(&[b'1'; 300], 1024).unwrap_err(),
        Malformed("the saved result is too large to use that many times")
    );
    assert!(many.substituted(&[b'1'; 200], 1024).is_ok());
    let p = prep("a UID SEARCH RETURN (COUNT) UID $ SUBJECT $\r\n");
    // `SUBJECT $` is a subject containing "$", not the saved result.
    assert_eq!(text(&p), "a UID SEARCH UID $ SUBJECT $\r\n");
    assert_eq!(p.dollar_keys, vec![13..18]);
    assert_eq!(
        p.substituted(b"NOT ALL", 1024).unwrap(),
        b"a UID SEARCH NOT ALL SUBJECT $\r\n"
    );
    let p = prep("a SEARCH OR $ (NOT $ FROM {1}\r\n$) HEADER $ $ CHARSET\r\n");
    assert_eq!(p.dollar_keys.len(), 2);
    let p = prep("a SEARCH CHARSET UTF-8 $\r\n");
    assert_eq!(p.dollar_keys.len(), 1);
    let p = prep("a UID FETCH $ (FLAGS)\r\n");
    assert!(p.dollar_set);
    assert_eq!(text(&p), "a UID FETCH 1 (FLAGS)\r\n");
    let p = prep("a FETCH $ FAST\r\n");
    assert!(p.dollar_set);
    let p = prep("a STORE $ +FLAGS (\\Seen)\r\n");
    assert!(p.dollar_set);
    let p = prep("a UID EXPUNGE $\r\n");
    assert!(p.dollar_set);
    let p = prep("a FETCH $1 FAST\r\n");
    assert!(!p.dollar_set, "only a bare $");
}

#[test]
fn hostile_searches_never_panic_and_stay_bounded() {
    let deep = format!("a SEARCH {}ALL{}\r\n", "(".repeat(40), ")".repeat(40));
    assert_eq!(
        prepare(deep.as_bytes()).unwrap_err(),
        Malformed("search keys nested too deep")
    );
    let nots = format!("a SEARCH {}ALL\r\n", "NOT ".repeat(40));
    assert!(prepare(nots.as_bytes()).is_err());
    let dollars = format!("a SEARCH {}\r\n", "$ ".repeat(65));
    assert_eq!(
        prepare(dollars.as_bytes()).unwrap_err(),
        Malformed("too many $ in one SEARCH")
    );
    // Unbalanced, truncated, lying literals, binary junk: passed on for the codec to refuse.
    for junk in [
        &b"a SEARCH ((((\r\n"[..],
        b"a SEARCH ))))$\r\n",
        b"a SEARCH SUBJECT {999}\r\nabc\r\n",
        b"a SEARCH SUBJECT {99999999999999999999}\r\n\r\n",
        b"a SEARCH SUBJECT \"unterminated\r\n",
        b"a SEARCH \x00\xff\x01 $\r\n",
        b"a SEARCH ~{2}\r\n$$ $\r\n",
        b"a",
        b"",
        b"\r\n",
        b"a UID",
        b"a UID FETCH",
        b"a SEARCH RETURN (MIN) ",
    ] {
        let _ = prepare(junk);
    }
    // A huge set is one atom: scanned once, kept as it is.
    let huge = format!("a UID SEARCH UID {}\r\n", "1:2,".repeat(10_000) + "3");
    let p = prepare(huge.as_bytes()).unwrap();
    assert!(p.dollar_keys.is_empty() && matches!(p.bytes, Cow::Borrowed(_)));
}

#[test]
fn extended_list_becomes_plain_lists_for_the_codec() {
    // A plain LIST is the codec's alone.
    let p = prep("a LIST \"\" *\r\n");
    assert!(p.list.is_none() && matches!(p.bytes, Cow::Borrowed(_)));
    let p = prep("a LIST (SUBSCRIBED RECURSIVEMATCH) \"\" (\"pub*\" {3}\r\nx%y) RETURN (CHILDREN STATUS (MESSAGES SIZE))\r\n");
    let l = p.list.clone().unwrap();
    assert!(l.select_subscribed && l.return_children && !l.return_subscribed);
    assert_eq!(text(&p), "a LIST \"\" \"pub*\"\r\n");
    assert_eq!(l.patterns[1], b"a LIST \"\" {3}\r\nx%y\r\n");
    assert_eq!(l.status.unwrap(), b"a STATUS INBOX (MESSAGES SIZE)\r\n");
    let p = prep("a LIST \"\" * RETURN ()\r\n");
    assert_eq!(p.list.unwrap().patterns.len(), 1);
    let p = prep("b LIST \"\" ({5}\r\npub@*) RETURN ()\r\n");
    assert_eq!(text(&p), "b LIST \"\" {5}\r\npub@*\r\n");
}

#[test]
fn hostile_list_options_are_refused() {
    for bad in [
        "a LIST (BOGUS) \"\" *\r\n",
        "a LIST (RECURSIVEMATCH) \"\" *\r\n",
        "a LIST ((SUBSCRIBED)) \"\" *\r\n",
        "a LIST (SUBSCRIBED \"\" *\r\n",
        "a LIST (SUBSCRIBED)\r\n",
        "a LIST \"\" ()\r\n",
        "a LIST \"\" ((*))\r\n",
        "a LIST \"\" * RETURN (BOGUS)\r\n",
        "a LIST \"\" * RETURN (STATUS MESSAGES)\r\n",
        "a LIST \"\" * RETURN (STATUS (MESSAGES (X)))\r\n",
        "a LIST \"\" * RETURN (STATUS (MESSAGES) STATUS (SIZE))\r\n",
        "a LIST \"\" * RETURN (CHILDREN) extra\r\n",
        "a LIST \"\" * RETURN CHILDREN\r\n",
    ] {
        assert!(prepare(bad.as_bytes()).is_err(), "{bad:?}");
    }
    let many = format!("a LIST \"\" ({})\r\n", "* ".repeat(17));
    assert_eq!(
        prepare(many.as_bytes()).unwrap_err(),
        Malformed("too many LIST patterns")
    );
    let opts = format!("a LIST ({}) \"\" *\r\n", "REMOTE ".repeat(40));
    assert!(prepare(opts.as_bytes()).is_err());
}

#[test]
fn sets_and_esearch_lines() {
    assert_eq!(sequence_set(&[1, 2, 3, 7, 9, 10]), "1:3,7,9:10");
    assert_eq!(sequence_set(&[]), "");
    assert_eq!(sequence_set(&[u32::MAX]), "4294967295");
    let uids = [3, 5, 9, 10, 20];
    assert_eq!(uid_key(&uids, &[0, 1, 2, 4]), b"UID 3:9,20");
    assert_eq!(uid_key(&uids, &[]), b"NOT ALL");
    assert_eq!(
        uid_key(&uids, &[7]),
        b"NOT ALL",
        "gone indexes name nothing"
    );
    let r = SearchReturn {
        min: true,
        max: true,
        count: true,
        all: true,
        save: false,
    };
    assert_eq!(
        esearch_line("A1", true, &r, &[3, 4, 9]),
        b"* ESEARCH (TAG \"A1\") UID MIN 3 MAX 9 ALL 3:4,9 COUNT 3\r\n"
    );
    assert_eq!(
        esearch_line("A2", false, &r, &[]),
        b"* ESEARCH (TAG \"A2\") COUNT 0\r\n"
    );
    let minmax = SearchReturn {
        min: true,
        max: true,
        save: true,
        ..Default::default()
    };
    assert_eq!(minmax.saved(&[2, 5, 8]), vec![2, 8]);
    assert_eq!(minmax.saved(&[5]), vec![5]);
    assert_eq!(minmax.saved(&[]), Vec::<u32>::new());
    let with_count = SearchReturn {
        min: true,
        count: true,
        save: true,
        ..Default::default()
    };
    assert_eq!(with_count.saved(&[2, 5, 8]), vec![2, 5, 8]);
}

/// Mutated commands from a fixed seed (a failure reproduces): [`prepare`] never panics, its
/// `$` spans are in order, inside the bytes and name `$` or `UID $`, writing them out works,
/// and the codec survives everything this layer hands it.
#[test]
fn mutated_commands_never_panic_and_spans_stay_in_bounds() {
    use imap_codec::{decode::Decoder, CommandCodec};
    let seeds: &[&[u8]] = &[
        b"a UID SEARCH RETURN (MIN MAX COUNT SAVE) OR $ (NOT UID $ SUBJECT {3}\r\nabc) HEADER X $\r\n",
        b"a LIST (SUBSCRIBED) \"\" (\"p*\" {2}\r\nx%) RETURN (CHILDREN STATUS (MESSAGES SIZE))\r\n",
        b"a UID FETCH $ (BINARY.PEEK[1]<0.10> BODY[HEADER.FIELDS (A)])\r\n",
        b"a SEARCH CHARSET UTF-8 $ 1:* \"q\\\"x\" RETURN\r\n",
    ];
    let pieces: &[&[u8]] = &[
        b"$",
        b"(",
        b")",
        b" ",
        b"\"",
        b"\\",
        b"{3}\r\n",
        b"{99999999999}\r\n",
        b"~{2}\r\n",
        b"RETURN",
        b"UID",
        b"NOT",
        b"OR",
        b"\r\n",
        b"\x00",
        b"STATUS",
        b"*",
        b"LIST",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // How often each path was taken: the mutations must not all end in the first BAD.
    let (mut dollars, mut lists, mut returns) = (0, 0, 0);
    for _ in 0..20_000 {
        let mut m = seeds[next() as usize % seeds.len()].to_vec();
        for _ in 0..1 + next() % 4 {
            let at = next() as usize % (m.len() + 1);
            match next() % 3 {
                0 => {
                    let p = pieces[next() as usize % pieces.len()];
                    m.splice(at..at, p.iter().copied());
                }
                1 if at < m.len() => {
                    m.remove(at);
                }
                _ if at < m.len() => m[at] = next() as u8,
                _ => {}
            }
        }
        let Ok(p) = prepare(&m) else { continue };
        dollars += usize::from(!p.dollar_keys.is_empty());
        lists += usize::from(p.list.is_some());
        returns += usize::from(p.search_return.is_some());
        let mut end = 0;
        for span in &p.dollar_keys {
            assert!(end <= span.start && span.end <= p.bytes.len(), "{m:?}");
            end = span.end;
            let t = &p.bytes[span.clone()];
            assert!(
                t == b"$" || (t[..3].eq_ignore_ascii_case(b"UID") && t.ends_with(b"$")),
                "{m:?}"
            );
        }
        let _ = p.substituted(b"UID 1:2", 1 << 20);
        let _ = CommandCodec::default().decode(&p.bytes);
        for c in p
            .list
            .iter()
            .flat_map(|l| l.patterns.iter().chain(l.status.iter()))
        {
            assert!(c.ends_with(b"\r\n"), "{m:?}");
            let _ = CommandCodec::default().decode(c);
        }
    }
    assert!(
        dollars > 500 && lists > 500 && returns > 500,
        "{dollars} {lists} {returns}"
    );
}
