#!/usr/bin/env python3
"""The documentation checks CI runs (`.ci/run`), in plain Python with no packages to install.

    python3 .ci/docs.py                       # links, and the reference against herald.example.toml
    python3 .ci/docs.py --herald target/debug/herald   # also every key the binary knows
    python3 .ci/docs.py --write               # regenerate docs/config-reference.md

Three checks, each there so the manual cannot drift from what it describes:

1. Links. Every page of docs/ is in docs/SUMMARY.md, and every relative link and `#anchor` in README.md, ARCHITECTURE.md, BENCHMARKS.md and
   docs/**/*.md resolves: the file exists, and the anchor is a heading of that file, slugged
   as GitHub and mdBook slug it. Links to the web are not fetched (CI has no network to spare).
2. The configuration reference. docs/config-reference.md is generated from herald.example.toml
   (`--write`); the check fails when the two differ, so the reference is never edited by hand
   and never out of date.
3. Every key. With `--herald`, the binary's own config parser is asked which keys exist: a
   probe file holding one unknown key is loaded (`herald --config probe.toml status`), and the
   parser's "unknown field `…`, expected one of …" answer lists the section's keys, because
   every section is `deny_unknown_fields`. Sections are probed recursively. A key the code has
   and herald.example.toml lacks (or the reverse) fails the check with its name. One blind
   spot: a struct with a `#[serde(flatten)]` field (a DKIM domain: its key flattened beside
   `arc` and `second`) names no fields when it refuses one, so its optional fields are checked
   only one way — every documented one must be accepted by the parser.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "herald.example.toml"
REFERENCE = ROOT / "docs" / "config-reference.md"
PROBE = "zz_probe_key"

# ---------------------------------------------------------------------------------------------
# 1. Links


def markdown_files():
    files = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "BENCHMARKS.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    return [f for f in files if f.exists()]


def strip_code(text):
    """The text with fenced blocks and inline code spans blanked (links inside code are code)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "", line))
    return out


def slug(heading):
    """GitHub's (and mdBook's) anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        fenced = False
        for line in path.read_text(encoding="utf-8").split("\n"):
            if re.match(r"^\s*(```|~~~)", line):
                fenced = not fenced
            m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
            for a in re.findall(r'<a (?:name|id)="([^"]+)"', line):
                found.add(a)
        cache[path] = found
    return cache[path]


LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)")


def check_summary():
    """Every page of docs/ is in the book's contents (docs/SUMMARY.md), so none is orphaned."""
    summary = ROOT / "docs" / "SUMMARY.md"
    listed = {(summary.parent / t).resolve() for t in LINK.findall(summary.read_text(encoding="utf-8"))}
    return [f"{p.relative_to(ROOT)}: not in docs/SUMMARY.md" for p in sorted((ROOT / "docs").rglob("*.md"))
            if p != summary and p.resolve() not in listed]


def check_links():
    errors = []
    for md in markdown_files():
        for n, line in enumerate(strip_code(md.read_text(encoding="utf-8")), 1):
            targets = LINK.findall(line) + REFDEF.findall(line)
            for target in targets:
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                    continue  # http:, https:, mailto: — not fetched
                where = f"{md.relative_to(ROOT)}:{n}"
                path_part, _, anchor = target.partition("#")
                dest = (md.parent / path_part).resolve() if path_part else md
                if not dest.exists():
                    errors.append(f"{where}: {target}: no such file")
                    continue
                if anchor:
                    if dest.suffix != ".md":
                        errors.append(f"{where}: {target}: an anchor into a file that is not Markdown")
                    elif anchor not in anchors(dest):
                        errors.append(f"{where}: {target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return errors


# ---------------------------------------------------------------------------------------------
# 2. The reference, from herald.example.toml

HEADER = re.compile(r'^(# )?(\[\[?)([A-Za-z0-9_."\-]+)(\]\]?)\s*(#.*)?$')
KEY = re.compile(r"^(# )?([a-z_][a-z0-9_]*) = (.*)$")


def norm(section):
    """`dkim."lists.example.org".second` -> `dkim.*.second`: a quoted segment is a map key."""
    return re.sub(r'"[^"]*"', "*", section)


def parse_example():
    """The example's chunks (section, is_array, lines) and its keys: {path: (value, is_set)}.

    An uncommented key belongs to the last uncommented header, as TOML reads it. A commented-out
    key belongs to a commented-out header above it in the same paragraph (an example block such
    as `# [[delivery.egress]]`), else to the last uncommented header."""
    lines = EXAMPLE.read_text(encoding="utf-8").rstrip("\n").split("\n")
    keys, real, commented = {}, "", None
    for line in lines:
        m = HEADER.match(line)
        if m:
            if m.group(1):
                commented = norm(m.group(3))
            else:
                real, commented = norm(m.group(3)), None
            continue
        if not line.strip():
            commented = None
            continue
        m = KEY.match(line)
        if m:
            is_commented = m.group(1) is not None
            section = commented if is_commented and commented is not None else real
            path = f"{section}.{m.group(2)}" if section else m.group(2)
            value = re.sub(r"\s+#.*$", "", m.group(3)).strip()
            if path not in keys or (not keys[path][1] and not is_commented):
                keys[path] = (value, not is_commented)
    return chunks_of(lines), keys


def chunks_of(lines):
    """The example cut at each header, real or commented out, for the reference's code blocks.
    A header's chunk starts with the comments right above it; a paragraph that names a
    commented-out header is that header's, commented keys and all (the egress pools' text)."""
    starts = [(0, "", False)]
    for i, line in enumerate(lines):
        m = HEADER.match(line)
        if not m:
            continue
        j = i
        while j > 0 and lines[j - 1].startswith("#") and not KEY.match(lines[j - 1]) \
                and not HEADER.match(lines[j - 1]):
            j -= 1
        if m.group(1):
            p = i
            while p > 0 and lines[p - 1].startswith("#") and not HEADER.match(lines[p - 1]):
                p -= 1
            named = m.group(2) + m.group(3) + m.group(4)
            if p > starts[-1][0] and any(named in lines[k] for k in range(p, i)):
                j = p
        starts.append((j, norm(m.group(3)), m.group(2) == "[["))
    chunks = []
    for k, (start, section, is_array) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        body = lines[start:end]
        while body and body[-1] == "":
            body.pop()
        chunks.append((section, is_array, body))
    return chunks


def render_reference():
    chunks, keys = parse_example()
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated from herald.example.toml by `python3 .ci/docs.py --write`; do not edit.",
        "     CI fails when this page, the example file and the binary's own parser disagree. -->",
        "",
        "Every key Herald's configuration file knows, by section, with its default and the",
        "example file's own words about it. Herald runs with no file at all; copy the keys you want",
        "to change into yours (`herald serve --config herald.toml`). Unknown keys are refused at",
        "start, with the key named. A key shown *unset* has no default value: the example's value",
        "shows its form. `*` in a name stands for a name of your choosing (a DKIM domain).",
        "",
        "The sections: " + ", ".join(
            f"[`{s}`](#{slug('`[' + s + ']`')})" for s in sections_in_order(chunks)) + ".",
        "",
    ]
    seen = set()
    for section, is_array, body in chunks:
        title = "(top level)" if not section else ("[[" + section + "]]" if is_array else "[" + section + "]")
        if section in seen:
            out += ["```toml", *body, "```", ""]
            continue
        seen.add(section)
        out += [f"## `{title}`" if section else "## The top level", ""]
        rows = [(p, v) for p, v in keys.items() if p.rpartition(".")[0] == section]
        if rows:
            # An array of tables has no default entries: what the example holds are examples.
            out += ["| key | example |" if is_array else "| key | default |", "|---|---|"]
            for path, (value, is_set) in rows:
                shown = f"`{value}`" if is_set and not is_array else f"*unset* (e.g. `{value}`)"
                out.append(f"| `{path}` | {shown.replace('|', chr(92) + '|')} |")
            out.append("")
        out += ["```toml", *body, "```", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def sections_in_order(chunks):
    found = []
    for section, _, _ in chunks:
        if section and section not in found:
            found.append(section)
    return found


# ---------------------------------------------------------------------------------------------
# 3. Every key the binary knows


def probe(herald, toml_text, workdir):
    path = Path(workdir) / "probe.toml"
    path.write_text(toml_text, encoding="utf-8")
    run = subprocess.run(
        [herald, "--config", str(path), "--server", "http://127.0.0.1:9", "status"],
        cwd=workdir, capture_output=True, text=True, timeout=60,
        env={**os.environ, "HERALD_ADMIN_TOKEN": ""},
    )
    return run.stderr + run.stdout


def expected_fields(message):
    m = re.search(r"unknown field `" + PROBE + r"`, expected (.*)", message)
    if not m:
        return None
    return re.findall(r"`([^`]+)`", m.group(1))


def table_text(segments, body):
    """TOML for a probe: `segments` is [(name, kind)], kind "table", "array" or "map"."""
    header, lines = [], []
    for name, kind in segments:
        header.append(name if kind != "mapkey" else '"probe.example"')
        if kind == "array":
            lines.append("[[" + ".".join(header) + "]]")
    if header and segments[-1][1] != "array":
        lines.append("[" + ".".join(header) + "]")
    lines.append(body)
    return "\n".join(lines) + "\n"


def probe_table(herald, segments, body, workdir):
    """Probes a table, first giving it the fields the parser says are missing (a required field
    is checked before unknown ones when the struct has a `#[serde(flatten)]` field), with
    placeholder strings. Returns the answer and the required fields it had to add."""
    required = []
    for _ in range(8):
        lines = [f'{name} = "x"' for name in required] + [body]
        answer = probe(herald, table_text(segments, "\n".join(lines)), workdir)
        m = re.search(r"missing field `([^`]+)`", answer)
        if not m or m.group(1) in required:
            return answer, required
        required.append(m.group(1))
    return answer, required


def code_keys(herald):
    keys = set()
    with tempfile.TemporaryDirectory() as workdir:
        def walk(segments, path):
            answer, required = probe_table(herald, segments, f"{PROBE} = 1", workdir)
            fields = expected_fields(answer)
            if fields is None and f"unknown field `{PROBE}`" in answer:
                # A struct with a flattened field names no fields when it refuses one: what the
                # parser asked for is all the walk learns; `accepted` checks the documented rest.
                fields = required
            if fields is None:
                raise SystemExit(f"probe of [{path or 'top level'}] got no field list from the parser:\n{answer}")
            for field in fields:
                full = f"{path}.{field}" if path else field
                answer = probe(herald, table_text(segments + [(field, "table")], f"{PROBE} = 1"), workdir)
                if expected_fields(answer) is not None:
                    walk(segments + [(field, "table")], full)
                elif "expected a sequence" in answer:
                    inner = probe(herald, table_text(segments + [(field, "array")], f"{PROBE} = 1"), workdir)
                    if expected_fields(inner) is not None:
                        walk(segments + [(field, "array")], full)
                    else:
                        keys.add(full)
                elif re.search(r"invalid type: integer `1`, expected struct", answer):
                    walk(segments + [(field, "table"), ("*", "mapkey")], full + ".*")
                else:
                    keys.add(full)
        walk([], "")
    return keys


def accepted(herald, path, value, arrays):
    """Whether the parser takes a documented key: the key with its example value, then the
    probe key in the same table. A known key lets the parser reach the probe and complain about
    it; an unknown one is complained about itself."""
    section, _, key = path.rpartition(".")
    segments = []
    parts = section.split(".") if section else []
    for i, part in enumerate(parts):
        sofar = ".".join(parts[: i + 1])
        kind = "mapkey" if part == "*" else "array" if sofar in arrays else "table"
        segments.append((part, kind))
    with tempfile.TemporaryDirectory() as workdir:
        answer, _ = probe_table(herald, segments, f"{key} = {value}\n{PROBE} = 1", workdir)
    if f"unknown field `{key}`" in answer:
        return False
    if f"unknown field `{PROBE}`" in answer:
        return True
    raise SystemExit(f"probe of documented key `{path}` = {value} got neither answer:\n{answer}")


def check_keys(herald):
    chunks, examples = parse_example()
    documented = set(examples)
    known = code_keys(herald)
    # A field of a struct whose other fields are `#[serde(flatten)]`ed (the DKIM key beside
    # `arc` and `second`) is not listed in the parser's answer for that table: ask the parser
    # about each documented key the walk did not find.
    arrays = {section for section, is_array, _ in chunks if is_array}
    for path in sorted(documented - known):
        if accepted(herald, path, examples[path][0], arrays):
            known.add(path)
    errors = [f"config key `{k}` is in the code but not in herald.example.toml" for k in sorted(known - documented)]
    errors += [f"config key `{k}` is in herald.example.toml but the code does not know it" for k in sorted(documented - known)]
    return errors, len(known)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="regenerate docs/config-reference.md")
    ap.add_argument("--herald", help="the herald binary whose config parser lists every key")
    args = ap.parse_args()
    if args.write:
        REFERENCE.write_text(render_reference(), encoding="utf-8")
        print(f"wrote {REFERENCE.relative_to(ROOT)}")
    errors = check_links() + check_summary()
    if REFERENCE.read_text(encoding="utf-8") != render_reference():
        errors.append(f"{REFERENCE.relative_to(ROOT)} is not what herald.example.toml gives: "
                      "run `python3 .ci/docs.py --write`")
    summary = f"{len(markdown_files())} Markdown files, links and anchors"
    if args.herald:
        herald = Path(args.herald).resolve()
        if not herald.is_file():
            sys.exit(f"docs: no herald binary at {args.herald} (build it first: cargo build)")
        key_errors, count = check_keys(str(herald))
        errors += key_errors
        summary += f"; {count} config keys in the code, herald.example.toml and the reference"
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        sys.exit(f"docs: {len(errors)} problem(s)")
    print(f"docs: ok ({summary})")


if __name__ == "__main__":
    main()
