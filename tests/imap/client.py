"""A real IMAP client from another ecosystem (Python's imaplib) reading Herald's archive.

Run by tests/it/imap.rs: `python3 client.py <mode>` with the server and the lists in the
environment. Each mode asserts what a reader must see and exits non-zero with a message
otherwise; it prints what it found as one JSON line for the Rust side to check as well.
"""

import imaplib
import json
import os
import re
import ssl
import sys

ENV = os.environ
HOST = ENV.get("IMAP_HOST", "127.0.0.1")
PORT = int(ENV.get("IMAP_PORT", "0"))


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)


def ok(result, what):
    typ, data = result
    check(typ == "OK", "%s: %s %r" % (what, typ, data))
    return data


def uids_of(M):
    data = ok(M.uid("SEARCH", "ALL"), "UID SEARCH ALL")
    return [int(x) for x in data[0].split()]


def read_all(M, mailbox):
    """EXAMINE the mailbox, UID SEARCH, UID FETCH every message: {uid: (envelope, body)}."""
    data = ok(M.select(mailbox, readonly=True), "EXAMINE " + mailbox)
    exists = int(data[0])
    uids = uids_of(M)
    check(len(uids) == exists, "UID SEARCH ALL gave %d UIDs, EXISTS %d" % (len(uids), exists))
    out = {}
    for uid in uids:
        data = ok(M.uid("FETCH", str(uid), "(UID RFC822.SIZE ENVELOPE BODY.PEEK[])"), "UID FETCH")
        meta, body = data[0]
        meta = meta.decode("utf-8", "replace")
        check(("UID %d" % uid) in meta, "UID FETCH answer names the UID: " + meta)
        size = int(re.search(r"RFC822\.SIZE (\d+)", meta).group(1))
        check(size == len(body), "RFC822.SIZE %d == len(BODY[]) %d" % (size, len(body)))
        check("ENVELOPE (" in meta, "ENVELOPE present: " + meta)
        out[uid] = (meta, body.decode("utf-8", "replace"))
    return out


def search(M, *criteria):
    data = ok(M.search(None, *criteria), "SEARCH %r" % (criteria,))
    return [int(x) for x in data[0].split()]


def login_anonymous(M):
    # RFC 4505: the trace string is sent after the server's continuation.
    ok(M.authenticate("ANONYMOUS", lambda _: b"reader@outside.test"), "AUTHENTICATE ANONYMOUS")


def mode_read(M):
    public, members, private = ENV["PUBLIC_LIST"], ENV["MEMBERS_LIST"], ENV["PRIVATE_LIST"]
    caps = M.capabilities
    check("IDLE" in caps and "AUTH=ANONYMOUS" in caps, "capabilities: %r" % (caps,))
    login_anonymous(M)
    names = " ".join(x.decode() for x in ok(M.list(), "LIST"))
    check(public in names, "anonymous LIST shows the public list: " + names)
    check(members not in names and private not in names, "anonymous LIST hides the others: " + names)
    msgs = read_all(M, public)
    check(len(msgs) == 2, "two posts in the public archive, got %d" % len(msgs))
    bodies = " ".join(b for _, b in msgs.values())
    check("zanzibar release" in bodies, "the post's text is in BODY[]")
    check(search(M, "SUBJECT", '"Release plan"') == [1], "SEARCH SUBJECT")
    check(search(M, "FROM", "ann@outside.test") == [1, 2], "SEARCH FROM")
    check(search(M, "TEXT", "zanzibar") == [1], "SEARCH TEXT (full-text index)")
    check(search(M, "BODY", "pizza") == [2], "SEARCH BODY")
    check(search(M, "OR", "SUBJECT", "lunch", "SUBJECT", "release") == [1, 2], "SEARCH OR")
    check(search(M, "NOT", "SUBJECT", "lunch", "SINCE", "1-Jan-2020") == [1], "SEARCH NOT + SINCE")
    check(search(M, "BEFORE", "1-Jan-2020") == [], "SEARCH BEFORE")
    check(search(M, "UNSEEN") == [1, 2], "nothing seen yet")
    # BODY[] without PEEK sets \Seen for this session only.
    data = ok(M.fetch("1", "(BODY[HEADER.FIELDS (SUBJECT)] FLAGS)"), "FETCH HEADER.FIELDS")
    check(b"Subject: Release plan" in data[0][1], "HEADER.FIELDS: %r" % (data,))
    data = ok(M.fetch("1", "(BODY[TEXT]<0.9>)"), "FETCH partial")
    check(data[0][1] == b"We ship t", "BODY[TEXT]<0.9>: %r" % (data,))
    data = ok(M.fetch("1:2", "(BODYSTRUCTURE)"), "FETCH BODYSTRUCTURE")
    check(b'("TEXT" "PLAIN" ("CHARSET" "us-ascii")' in data[0], "BODYSTRUCTURE: %r" % (data,))
    check(search(M, "SEEN") == [1], "\\Seen after BODY[]")
    typ, _ = M.store("1", "+FLAGS", "\\Flagged")
    check(typ == "NO", "STORE answers NO (read-only): " + typ)
    ok(M.close(), "CLOSE")
    typ, data = M.select(members, readonly=True)
    check(typ == "NO", "anonymous may not open the members list: %s %r" % (typ, data))
    M.logout()
    return {"public": sorted(msgs)}


def mode_member(M):
    members = ENV["MEMBERS_LIST"]
    ok(M.login(ENV["MEMBER"], ENV["MEMBER_PASSWORD"]), "LOGIN member")
    msgs = read_all(M, members)
    check(len(msgs) == 1, "one post in the members archive, got %d" % len(msgs))
    check("members only" in " ".join(b for _, b in msgs.values()), "the members post's text")
    typ, _ = M.select(ENV["PRIVATE_LIST"], readonly=True)
    check(typ == "NO", "a member may not open the private list")
    M.logout()
    # A wrong password is refused.
    M2 = connect()
    try:
        M2.login(ENV["MEMBER"], "AAAAAAAAAAAAAAAAAAAAAA")
        check(False, "a wrong password was accepted")
    except imaplib.IMAP4.error:
        pass
    M2.logout()
    return {"members": sorted(msgs)}


def mode_admin(M):
    ok(M.login("admin", ENV["ADMIN_TOKEN"]), "LOGIN admin")
    names = " ".join(x.decode() for x in ok(M.list(), "LIST"))
    for l in (ENV["PUBLIC_LIST"], ENV["MEMBERS_LIST"], ENV["PRIVATE_LIST"]):
        check(l in names, "admin LIST shows %s: %s" % (l, names))
    msgs = read_all(M, ENV["PRIVATE_LIST"])
    check(len(msgs) == 1, "one post in the private archive")
    data = ok(M.status(ENV["PUBLIC_LIST"], "(MESSAGES UIDNEXT UIDVALIDITY)"), "STATUS")
    check(b"MESSAGES 2" in data[0], "STATUS: %r" % (data,))
    M.logout()
    return {"private": sorted(msgs)}


def mode_idle(M):
    """IDLE on the public list; the Rust side posts when it reads IDLING; EXISTS must come."""
    login_anonymous(M)
    data = ok(M.select(ENV["PUBLIC_LIST"], readonly=True), "EXAMINE")
    before = int(data[0])
    tag = M._new_tag()
    M.send(tag + b" IDLE\r\n")
    line = M.readline()
    check(line.startswith(b"+"), "IDLE continuation: %r" % (line,))
    print("IDLING", flush=True)
    M.sock.settimeout(90)
    seen = None
    while seen is None:
        line = M.readline()
        check(line != b"", "connection closed while idling")
        m = re.match(rb"\* (\d+) EXISTS", line)
        if m:
            seen = int(m.group(1))
    M.send(b"DONE\r\n")
    line = M.readline()
    check(line.startswith(tag + b" OK"), "IDLE ends with OK: %r" % (line,))
    check(seen == before + 1, "EXISTS %d after %d" % (seen, before))
    subjects = search(M, "SUBJECT", "arrived")
    check(subjects == [seen], "the new post is found: %r" % (subjects,))
    M.logout()
    return {"exists": seen}


def esearch(M, tag):
    """The ESEARCH answer to the command tagged `tag` (imaplib keeps untagged responses it has
    no method for under their name): {"UID": bool, "MIN": .., "MAX": .., "COUNT": .., "ALL": ..}."""
    _, lines = M.response("ESEARCH")
    check(lines and lines[0] is not None, "an ESEARCH response for %r" % (tag,))
    found = [l for l in lines if l.startswith(b'(TAG "' + tag + b'")')]
    check(len(found) == 1, "one ESEARCH correlated with tag %r: %r" % (tag, lines))
    words = found[0].split(b")", 1)[1].split()
    out = {"UID": False}
    i = 0
    while i < len(words):
        w = words[i].decode()
        if w == "UID":
            out["UID"] = True
            i += 1
        else:
            out[w] = words[i + 1].decode()
            i += 2
    return out


def last_tag(M):
    return M.tagpre + str(M.tagnum - 1).encode()


def mode_rev2(M):
    """IMAP4rev2 with ENABLE: ESEARCH, SEARCHRES, LIST-STATUS, BINARY; then a rev1 session,
    unchanged."""
    public = ENV["PUBLIC_LIST"]
    uids = [int(u) for u in ENV["PUBLIC_UIDS"].split(",")]
    caps = M.capabilities
    for cap in ("IMAP4REV1", "IMAP4REV2", "ESEARCH", "SEARCHRES", "ENABLE", "BINARY"):
        check(cap in caps, "%s advertised: %r" % (cap, caps))
    login_anonymous(M)
    ok(M.enable("IMAP4rev2"), "ENABLE IMAP4rev2")
    _, enabled = M.response("ENABLED")
    check(enabled == [b"IMAP4rev2"], "* ENABLED IMAP4rev2: %r" % (enabled,))
    data = ok(M.select(public, readonly=True), "EXAMINE (rev2)")
    check(int(data[0]) == len(uids), "EXISTS %r, %d UIDs" % (data, len(uids)))
    check("RECENT" not in M.untagged_responses, "rev2 SELECT sends no RECENT: %r" % (M.untagged_responses,))
    _, listed = M.response("LIST")
    check(listed and public.encode() in listed[0], "rev2 SELECT names the mailbox in LIST: %r" % (listed,))

    ok(M.uid("SEARCH", "RETURN", "(MIN MAX COUNT)", "ALL"), "UID SEARCH RETURN (MIN MAX COUNT)")
    r = esearch(M, last_tag(M))
    check(r == {"UID": True, "MIN": str(uids[0]), "MAX": str(uids[-1]), "COUNT": str(len(uids))},
          "UID SEARCH RETURN (MIN MAX COUNT) ALL: %r, UIDs %r" % (r, uids))
    # A plain SEARCH in rev2 is answered with ESEARCH ALL (no `* SEARCH`).
    typ, data = M.search(None, "ALL")
    check(typ == "OK" and data == [None], "no * SEARCH in rev2: %r" % (data,))
    r = esearch(M, last_tag(M))
    check(r == {"UID": False, "ALL": "1:%d" % len(uids)}, "SEARCH ALL as ESEARCH: %r" % (r,))

    # SEARCHRES: SAVE the release plan, then read it through `$`.
    ok(M.uid("SEARCH", "RETURN", "(SAVE ALL)", "SUBJECT", '"Release plan"'), "SEARCH RETURN (SAVE)")
    release = int(esearch(M, last_tag(M))["ALL"])
    data = ok(M.uid("FETCH", "$", "(FLAGS)"), "UID FETCH $")
    check(len(data) == 1 and ("UID %d " % release).encode() in data[0], "UID FETCH $ (FLAGS): %r" % (data,))
    ok(M.uid("SEARCH", "RETURN", "(COUNT)", "NOT", "$"), "UID SEARCH NOT $")
    check(esearch(M, last_tag(M))["COUNT"] == str(len(uids) - 1), "NOT $ counts the others")

    # LIST-STATUS (rev2's LIST): a STATUS response for each mailbox listed.
    listed = ok(M.list('""', "* RETURN (STATUS (MESSAGES))"), "LIST RETURN (STATUS)")
    check(len(listed) == 1 and public.encode() in listed[0], "anonymous LIST: %r" % (listed,))
    _, status = M.response("STATUS")
    check(status == [("%s (MESSAGES %d)" % (public, len(uids))).encode()], "LIST-STATUS: %r" % (status,))

    # BINARY: the attachment's bytes with base64 undone, NUL and all; the QP part decoded.
    ok(M.uid("SEARCH", "RETURN", "(ALL)", "SUBJECT", "attachment"), "SEARCH SUBJECT attachment")
    att = esearch(M, last_tag(M))["ALL"]
    data = ok(M.uid("FETCH", att, "(BINARY.PEEK[2] BINARY.SIZE[2] BINARY.PEEK[1])"), "UID FETCH BINARY")
    check(data[0][1] == bytes.fromhex(ENV["ATTACHMENT_HEX"]), "BINARY[2]: %r" % (data,))
    check(("BINARY.SIZE[2] %d" % len(data[0][1])).encode() in data[1][0], "BINARY.SIZE[2]: %r" % (data,))
    check(data[1][1].startswith("café au lait".encode()), "BINARY[1] (quoted-printable): %r" % (data,))
    M.logout()

    # Another session that does not ENABLE: IMAP4rev1 exactly as before.
    M1 = connect()
    login_anonymous(M1)
    ok(M1.select(public, readonly=True), "EXAMINE (rev1)")
    check("RECENT" in M1.untagged_responses, "rev1 SELECT still sends RECENT")
    check(search(M1, "ALL") == list(range(1, len(uids) + 1)), "rev1 SEARCH answers * SEARCH")
    M1.logout()
    return {"rev2": uids, "release": release, "attachment": int(att)}


def mode_tls(M):
    check(isinstance(M.sock, ssl.SSLSocket), "implicit TLS")
    return mode_member(M)


def mode_starttls(M):
    check("STARTTLS" in M.capabilities and "LOGINDISABLED" in M.capabilities,
          "plain connection offers STARTTLS and disables LOGIN: %r" % (M.capabilities,))
    try:
        M.login(ENV["MEMBER"], ENV["MEMBER_PASSWORD"])
        check(False, "LOGIN accepted before STARTTLS")
    except imaplib.IMAP4.error:
        pass
    ok(M.starttls(ssl_context=context()), "STARTTLS")
    check("LOGINDISABLED" not in M.capabilities, "LOGIN enabled after STARTTLS")
    return mode_member(M)


def context():
    return ssl.create_default_context(cafile=ENV["CA_FILE"])


def connect():
    if ENV.get("IMAP_TLS") == "1":
        return imaplib.IMAP4_SSL(HOST, PORT, ssl_context=context())
    return imaplib.IMAP4(HOST, PORT)


def main():
    mode = sys.argv[1]
    M = connect()
    M.sock.settimeout(30)
    result = globals()["mode_" + mode](M)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
