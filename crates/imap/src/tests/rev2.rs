//! IMAP4rev2 over real sockets: ENABLE switches one session to rev2 rules while another stays
//! rev1 as before; ESEARCH (`RETURN (MIN MAX COUNT ALL)`, empty RETURN, rev2's plain SEARCH);
//! SEARCHRES (`SAVE`, `$` in FETCH, UID FETCH and SEARCH, `$` before any SAVE, reset at
//! SELECT); BINARY of base64 and quoted-printable parts; STATUS SIZE; extended LIST
//! (selection and return options, several patterns, STATUS per mailbox); and hostile RETURN
//! options, LIST options and `$` storms, which must end in BAD with the session still
//! answering.

use super::*;

async fn anonymous(h: &Harness) -> Client {
    let mut c = h.client().await;
    assert!(last(&c.cmd("l", "LOGIN anonymous x").await).starts_with("l OK"));
    c
}

#[tokio::test]
async fn enable_switches_one_session_to_rev2_and_another_stays_rev1() {
    let h = harness(5).await;
    let mut v1 = anonymous(&h).await;
    let caps = v1.cmd("c", "CAPABILITY").await;
    for cap in [
        "IMAP4rev1",
        "IMAP4rev2",
        "ESEARCH",
        "SEARCHRES",
        "ENABLE",
        "BINARY",
        "LITERAL-",
        "STATUS=SIZE",
        "UNSELECT",
        "NAMESPACE",
        "IDLE",
        "LIST-EXTENDED",
        "LIST-STATUS",
        "SPECIAL-USE",
    ] {
        let listed = caps[0].to_ascii_uppercase();
        assert!(
            listed
                .split_whitespace()
                .any(|w| w == cap.to_ascii_uppercase()),
            "{cap}: {caps:?}"
        );
    }
    assert!(
        caps[0].starts_with("* CAPABILITY IMAP4REV1 IMAP4rev2 "),
        "{caps:?}"
    );
    // Rev1: RECENT at SELECT, `* SEARCH` for SEARCH, exactly as before.
    let sel = v1.cmd("s", "EXAMINE pub@l.test").await;
    assert!(sel.contains(&"* 0 RECENT\r\n".to_string()), "{sel:?}");
    assert!(!sel.iter().any(|l| l.starts_with("* LIST")), "{sel:?}");
    assert_eq!(v1.cmd("a", "SEARCH ALL").await[0], "* SEARCH 1 2 3 4 5\r\n");
    // ESEARCH is advertised, so a rev1 session may ask for it.
    assert_eq!(
        v1.cmd("b", "SEARCH RETURN (COUNT) ALL").await[0],
        "* ESEARCH (TAG \"b\") COUNT 5\r\n"
    );

    let mut v2 = anonymous(&h).await;
    assert_eq!(
        v2.cmd("e", "ENABLE IMAP4rev2").await,
        ["* ENABLED IMAP4rev2\r\n", "e OK ENABLE done\r\n"]
    );
    // Already on, and an unknown name: nothing newly enabled.
    assert_eq!(
        v2.cmd("e2", "ENABLE imap4rev2 X-NOPE").await[0],
        "* ENABLED\r\n"
    );
    let sel = v2.cmd("s", "EXAMINE pub@l.test").await;
    assert!(!sel.iter().any(|l| l.contains("RECENT")), "{sel:?}");
    assert!(
        sel.contains(&"* LIST (\\Noinferiors) \"/\" pub@l.test\r\n".to_string()),
        "{sel:?}"
    );
    assert!(last(&sel).starts_with("s OK [READ-ONLY]"), "{sel:?}");
    // A plain SEARCH is RETURN (ALL), answered with ESEARCH.
    assert_eq!(
        v2.cmd("a", "SEARCH ALL").await,
        ["* ESEARCH (TAG \"a\") ALL 1:5\r\n", "a OK SEARCH done\r\n"]
    );
    assert_eq!(
        v2.cmd("b", "UID SEARCH RETURN (MIN MAX COUNT) SUBJECT note")
            .await[0],
        "* ESEARCH (TAG \"b\") UID MIN 1 MAX 5 COUNT 5\r\n"
    );
    assert_eq!(
        v2.cmd(
            "c",
            "SEARCH RETURN () OR SUBJECT \"note 1\" SUBJECT \"note 3\""
        )
        .await[0],
        "* ESEARCH (TAG \"c\") ALL 2,4\r\n"
    );
    // Nothing found: MIN, MAX and ALL are left out, COUNT is 0.
    assert_eq!(
        v2.cmd("d", "UID SEARCH RETURN (MIN MAX ALL COUNT) SUBJECT nowhere")
            .await[0],
        "* ESEARCH (TAG \"d\") UID COUNT 0\r\n"
    );
    // Selecting again closes the first mailbox, and says so.
    let again = v2.cmd("s2", "EXAMINE pub@l.test").await;
    assert!(again[0].starts_with("* OK [CLOSED]"), "{again:?}");
    // STATUS SIZE: the stored sizes summed.
    let size: usize = (0..5).map(|i| message(i).raw.len()).sum();
    let st = v2.cmd("t", "STATUS pub@l.test (MESSAGES SIZE)").await;
    assert_eq!(
        st[0],
        format!("* STATUS pub@l.test (MESSAGES 5 SIZE {size})\r\n"),
        "{st:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn searchres_saves_a_result_and_dollar_reads_it() {
    let h = harness(6).await;
    let mut c = anonymous(&h).await;
    c.cmd("e", "ENABLE IMAP4rev2").await;
    c.cmd("s", "EXAMINE pub@l.test").await;
    // `$` before any SAVE is the empty set (RFC 5182 §2.1).
    assert_eq!(
        c.cmd("a", "UID FETCH $ (FLAGS)").await,
        ["a OK FETCH done\r\n"]
    );
    assert_eq!(c.cmd("b", "SEARCH $").await[0], "* ESEARCH (TAG \"b\")\r\n");
    // SAVE alone answers no ESEARCH.
    assert_eq!(
        c.cmd(
            "c",
            "SEARCH RETURN (SAVE) OR SUBJECT \"note 2\" SUBJECT \"note 4\""
        )
        .await,
        ["c OK SEARCH done\r\n"]
    );
    assert_eq!(
        c.cmd("d", "UID FETCH $ (FLAGS)").await,
        [
            "* 3 FETCH (UID 3 FLAGS ())\r\n",
            "* 5 FETCH (UID 5 FLAGS ())\r\n",
            "d OK FETCH done\r\n"
        ]
    );
    assert_eq!(c.cmd("f", "FETCH $ (UID)").await.len(), 3);
    assert_eq!(
        c.cmd("g", "SEARCH NOT $").await[0],
        "* ESEARCH (TAG \"g\") ALL 1:2,4,6\r\n"
    );
    assert_eq!(
        c.cmd("h", "UID SEARCH RETURN (COUNT) UID $ SUBJECT $")
            .await[0],
        "* ESEARCH (TAG \"h\") UID COUNT 0\r\n",
        "`SUBJECT $` is the string \"$\""
    );
    assert_eq!(
        c.cmd("i", "SEARCH (OR $ 1) NOT SUBJECT \"note 4\"").await[0],
        "* ESEARCH (TAG \"i\") ALL 1,3\r\n"
    );
    // SAVE with MIN and MAX only keeps those two.
    c.cmd("j", "SEARCH RETURN (SAVE MIN MAX) ALL").await;
    assert_eq!(
        c.cmd("k", "SEARCH $").await[0],
        "* ESEARCH (TAG \"k\") ALL 1,6\r\n"
    );
    // A search may save from `$` itself; STORE with `$` is parsed and refused (read-only).
    assert!(last(&c.cmd("l", "SEARCH RETURN (SAVE) $ 6").await).starts_with("l OK"));
    assert_eq!(
        c.cmd("m", "SEARCH $").await[0],
        "* ESEARCH (TAG \"m\") ALL 6\r\n"
    );
    assert!(last(&c.cmd("n", "STORE $ +FLAGS (\\Seen)").await).starts_with("n NO"));
    assert!(last(&c.cmd("n1", "UID EXPUNGE $").await).starts_with("n1 NO"));
    // A SEARCH SAVE that fails leaves `$` empty (RFC 5182 §2.1).
    let failed = c.cmd("n2", "SEARCH RETURN (SAVE) CHARSET KOI8-R ALL").await;
    assert!(last(&failed).starts_with("n2 NO [BADCHARSET"), "{failed:?}");
    assert_eq!(
        c.cmd("n3", "UID FETCH $ (UID)").await,
        ["n3 OK FETCH done\r\n"]
    );
    c.cmd("n4", "SEARCH RETURN (SAVE) 6").await;
    // UNSELECT forgets it.
    c.cmd("o", "UNSELECT").await;
    c.cmd("p", "EXAMINE pub@l.test").await;
    assert_eq!(
        c.cmd("q", "UID FETCH $ (UID)").await,
        ["q OK FETCH done\r\n"]
    );
    h.stop().await;
}

#[tokio::test]
async fn hostile_return_options_and_dollars_get_bad_and_the_session_goes_on() {
    let h = harness(3).await;
    let mut c = anonymous(&h).await;
    c.cmd("s", "EXAMINE pub@l.test").await;
    let dollars = format!("SEARCH {}", "$ ".repeat(200));
    let nested = format!("SEARCH {}ALL{}", "(".repeat(100), ")".repeat(100));
    let huge = format!("UID SEARCH RETURN (COUNT) UID {}9", "1:2,".repeat(900));
    for (i, bad) in [
        "SEARCH RETURN (BOGUS) ALL",
        "SEARCH RETURN ((MIN)) ALL",
        "SEARCH RETURN (MIN ALL",
        "SEARCH RETURN MIN ALL",
        "SEARCH RETURN (\"MIN\") ALL",
        "SEARCH RETURN (MIN) ",
        "SEARCH RETURN (MIN MIN MIN MIN MIN MIN MIN MIN MIN MIN MIN MIN MIN MIN MIN MIN MIN) ALL",
        "FETCH $,1 (FLAGS)",
        "FETCH $$ (FLAGS)",
        "SEARCH $:4",
        dollars.as_str(),
        nested.as_str(),
    ]
    .iter()
    .enumerate()
    {
        let tag = format!("h{i}");
        let r = c.cmd(&tag, bad).await;
        assert!(last(&r).starts_with(&format!("{tag} BAD")), "{bad}: {r:?}");
        // Between BADs a good command resets the server's count of BADs in a row.
        assert!(last(&c.cmd("n", "NOOP").await).starts_with("n OK"));
    }
    // A huge set is only long, not wrong.
    assert_eq!(
        c.cmd("u", &huge).await[0],
        "* ESEARCH (TAG \"u\") UID COUNT 2\r\n"
    );
    h.stop().await;
}

#[tokio::test]
async fn binary_fetch_undoes_base64_and_quoted_printable() {
    let h = harness(0).await;
    let mut a = Archive::open(&h.archive_path).unwrap();
    let raw = "From: a@x.test\r\nSubject: parts\r\nMessage-ID: <parts@x.test>\r\n\
MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n\
--b\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n\
caf=C3=A9 au lait\r\n\
--b\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n\
aGkAdGhlcmU=\r\n\
--b\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: x-uuencode\r\n\r\n\
begin 644 x\r\n\
--b--\r\n";
    a.insert_batch(&[NewMessage {
        list: LIST.into(),
        raw: raw.as_bytes().to_vec(),
        received_ms: 1_795_000_000_000,
    }])
    .unwrap();
    let mut c = anonymous(&h).await;
    c.cmd("s", "EXAMINE pub@l.test").await;
    let joined = |lines: Vec<String>| lines.concat();
    // base64 with a NUL inside: literal8.
    let b = joined(c.cmd("a", "FETCH 1 (BINARY.PEEK[2] BINARY.SIZE[2])").await);
    assert!(
        b.starts_with("* 1 FETCH (BINARY[2] ~{8}\r\nhi\0there BINARY.SIZE[2] 8)\r\n"),
        "{b:?}"
    );
    let q = joined(c.cmd("b", "FETCH 1 (BINARY.PEEK[1])").await);
    assert!(
        q.starts_with("* 1 FETCH (BINARY[1] {13}\r\ncafé au lait"),
        "{q:?}"
    );
    let p = joined(c.cmd("c", "FETCH 1 (BINARY.PEEK[2]<1.4>)").await);
    assert!(
        p.starts_with("* 1 FETCH (BINARY[2] ~{4}\r\ni\0th)"),
        "{p:?}"
    );
    let whole = joined(c.cmd("d", "FETCH 1 (BINARY.SIZE[])").await);
    assert!(
        whole.starts_with(&format!("* 1 FETCH (BINARY.SIZE[] {})", raw.len())),
        "{whole:?}"
    );
    let missing = joined(c.cmd("e", "FETCH 1 (BINARY.PEEK[9])").await);
    assert!(
        missing.starts_with("* 1 FETCH (BINARY[9] {0}\r\n)"),
        "{missing:?}"
    );
    let unknown = c.cmd("f", "FETCH 1 (BINARY.PEEK[3])").await;
    assert!(
        last(&unknown).starts_with("f NO [UNKNOWN-CTE]"),
        "{unknown:?}"
    );
    // BINARY without PEEK reads the message: \Seen for this session.
    let seen = joined(c.cmd("g", "FETCH 1 (BINARY[1])").await);
    assert!(seen.contains("FLAGS (\\Seen)"), "{seen:?}");
    h.stop().await;
}

#[tokio::test]
async fn extended_list_selects_patterns_and_returns_status() {
    let h = harness(4).await;
    let mut c = anonymous(&h).await;
    let size: usize = (0..4).map(|i| message(i).raw.len()).sum();
    let l = c
        .cmd(
            "a",
            "LIST (SUBSCRIBED) \"\" (\"nothing*\" pub%) RETURN (CHILDREN STATUS (MESSAGES SIZE))",
        )
        .await;
    assert_eq!(
        l,
        [
            "* LIST (\\Noinferiors \\Subscribed \\HasNoChildren) \"/\" pub@l.test\r\n".to_string(),
            format!("* STATUS pub@l.test (MESSAGES 4 SIZE {size})\r\n"),
            "a OK LIST done\r\n".to_string(),
        ]
    );
    // A literal pattern, RETURN (): a plain answer.
    c.send(b"b LIST \"\" ({5}\r\n").await;
    assert!(c.line().await.starts_with('+'));
    c.send(b"pub@*) RETURN ()\r\n").await;
    let l = c.until("b").await;
    assert_eq!(l[0], "* LIST (\\Noinferiors) \"/\" pub@l.test\r\n", "{l:?}");
    // No mailbox has a special use.
    assert_eq!(
        c.cmd("c", "LIST (SPECIAL-USE) \"\" *").await,
        ["c OK LIST done\r\n"]
    );
    for (i, bad) in [
        "LIST (RECURSIVEMATCH) \"\" *",
        "LIST (NOPE) \"\" *",
        "LIST \"\" * RETURN (STATUS (NOPE))",
        "LIST \"\" * RETURN (STATUS (MESSAGES) STATUS (SIZE))",
        "LIST \"\" (* \"unterminated) RETURN ()",
        "LIST \"\" () RETURN ()",
    ]
    .iter()
    .enumerate()
    {
        let tag = format!("h{i}");
        let r = c.cmd(&tag, bad).await;
        assert!(last(&r).starts_with(&format!("{tag} BAD")), "{bad}: {r:?}");
        assert!(last(&c.cmd("n", "NOOP").await).starts_with("n OK"));
    }
    h.stop().await;
}
