//! Reading a Python pickle that must never run code: Mailman 2's `config.pck`.
//!
//! serde-pickle decodes the data (it is Rust and cannot call Python; it turns globals it does
//! not know into opaque placeholders). Before it runs, [`check`] walks the opcodes once and
//! refuses, with a message naming the reason, what a hostile file would use:
//! - a class or function other than the few data types pickles of plain data name
//!   ([`ALLOWED_GLOBALS`]): `os.system` through GLOBAL + REDUCE or INST is refused by name;
//! - a string or number declaring more bytes than the file has left (no allocation is made
//!   from a declared size);
//! - nesting deeper than [`MAX_DEPTH`] (serde-pickle's conversion recurses per level);
//! - a memo larger than [`MAX_MEMO`] entries, opcodes of protocols above 3 that name globals
//!   from the stack (STACK_GLOBAL), persistent ids and extension codes, and a file that ends
//!   before its STOP or has bytes after it;
//! - a file larger than [`MAX_PICKLE_BYTES`].
//!
//! Hand-written because no crate offers an opcode check with limits; it mirrors the opcode
//! table of CPython's `pickletools` for protocols 0–3 (names below are CPython's).
//!
//! SECURITY: the whole module exists because the input is untrusted: every length is checked
//! against the bytes that remain before it is used, and the walk holds only a depth per stack
//! item, so memory is bounded by the file's size.

use std::collections::HashMap;

/// Largest pickle read. A Mailman 2 list of 100,000 members is about 30 MB.
pub const MAX_PICKLE_BYTES: usize = 512 * 1024 * 1024;
/// Deepest nesting of containers accepted (Mailman's dicts nest 4 deep).
pub const MAX_DEPTH: u32 = 100;
/// Most memo entries accepted.
pub const MAX_MEMO: usize = 50_000_000;

/// The globals a pickle of Mailman 2 data may name: builtin containers, the two ways Python
/// pickles bytes and new-style objects, and Mailman's own `_BounceInfo` record (a plain class
/// whose instances carry only data). None of them is ever called: serde-pickle knows the
/// builtins and keeps the rest as opaque data.
pub const ALLOWED_GLOBALS: &[(&str, &str)] = &[
    ("__builtin__", "set"),
    ("__builtin__", "frozenset"),
    ("__builtin__", "object"),
    ("__builtin__", "list"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "object"),
    ("builtins", "list"),
    ("_codecs", "encode"),
    ("copy_reg", "_reconstructor"),
    ("copyreg", "_reconstructor"),
    ("Mailman.Bouncer", "_BounceInfo"),
];

/// Why a pickle was refused.
pub type Refusal = String;

struct Walk<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Walk<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Refusal> {
        let left = self.b.len() - self.pos;
        if n > left {
            return Err(format!(
                "{what} at byte {} declares {n} bytes but only {left} remain (truncated or forged)",
                self.pos
            ));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn line(&mut self, what: &str) -> Result<&'a [u8], Refusal> {
        let rest = &self.b[self.pos..];
        match rest.iter().position(|&c| c == b'\n') {
            Some(i) => {
                self.pos += i + 1;
                Ok(&rest[..i])
            }
            None => Err(format!(
                "{what} at byte {} has no end of line (truncated)",
                self.pos
            )),
        }
    }

    fn len_le(&mut self, width: usize, what: &str) -> Result<usize, Refusal> {
        let raw = self.take(width, what)?;
        let mut v: u64 = 0;
        for (i, byte) in raw.iter().enumerate() {
            v |= u64::from(*byte) << (8 * i);
        }
        if width == 4 && v > i32::MAX as u64 {
            return Err(format!("{what} declares a negative or huge length {v}"));
        }
        usize::try_from(v).map_err(|_| format!("{what} declares a length of {v} bytes"))
    }
}

/// The depth stack: one entry per item on the unpickler's stack.
#[derive(Default)]
struct Depths {
    stack: Vec<u32>,
    marks: Vec<usize>,
    memo: HashMap<u64, u32>,
}

impl Depths {
    fn push(&mut self, d: u32) -> Result<(), Refusal> {
        if d > MAX_DEPTH {
            return Err(format!("nested more than {MAX_DEPTH} levels deep"));
        }
        self.stack.push(d);
        Ok(())
    }

    fn pop(&mut self) -> Result<u32, Refusal> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err("pops an empty stack (not a pickle of data)".into());
        }
        self.stack.pop().ok_or_else(|| "pops an empty stack".into())
    }

    fn pop_mark(&mut self) -> Result<u32, Refusal> {
        let at = self.marks.pop().ok_or("uses a MARK that was never set")?;
        let deepest = self.stack.drain(at..).max().unwrap_or(0);
        Ok(deepest)
    }

    /// The top item now contains something `inner` deep.
    fn grow_top(&mut self, inner: u32) -> Result<(), Refusal> {
        let top = self.stack.last_mut().ok_or("adds to an empty stack")?;
        *top = (*top).max(inner + 1);
        if *top > MAX_DEPTH {
            return Err(format!("nested more than {MAX_DEPTH} levels deep"));
        }
        Ok(())
    }

    fn memo_put(&mut self, key: u64) -> Result<(), Refusal> {
        let top = *self.stack.last().ok_or("memoizes an empty stack")?;
        if self.memo.len() >= MAX_MEMO && !self.memo.contains_key(&key) {
            return Err(format!("more than {MAX_MEMO} memo entries"));
        }
        self.memo.insert(key, top);
        Ok(())
    }

    fn memo_get(&mut self, key: u64) -> Result<(), Refusal> {
        let d = *self
            .memo
            .get(&key)
            .ok_or_else(|| format!("refers to memo entry {key} that was never stored"))?;
        self.push(d)
    }
}

fn global(module: &[u8], name: &[u8]) -> Result<(), Refusal> {
    let (m, n) = (
        String::from_utf8_lossy(module),
        String::from_utf8_lossy(name),
    );
    if ALLOWED_GLOBALS.iter().any(|(am, an)| *am == m && *an == n) {
        return Ok(());
    }
    Err(format!(
        "it names the Python callable {m}.{n}, which unpickling would call; a Mailman list's \
         settings never do, and Herald never runs code from a pickle"
    ))
}

/// Walks every opcode of `b` (see the module doc); `Ok` when serde-pickle may decode it, with
/// the byte ranges of old-style instances (`MARK GLOBAL OBJ`, how Python 2's cPickle writes an
/// instance of a classic class such as `_BounceInfo`) that [`load`] replaces by an empty dict:
/// serde-pickle 1.2 pops one item too many for OBJ (it takes the class from below the mark,
/// where the format puts it above), which would eat the dict key before the instance. BUILD
/// then replaces the empty dict with the instance's attributes, as serde-pickle intends.
pub fn check(b: &[u8]) -> Result<Vec<(usize, usize)>, Refusal> {
    let mut instances = Vec::new();
    if b.len() > MAX_PICKLE_BYTES {
        return Err(format!("larger than {MAX_PICKLE_BYTES} bytes"));
    }
    let mut w = Walk { b, pos: 0 };
    let mut d = Depths::default();
    loop {
        let at = w.pos;
        let op = *w
            .take(1, "opcode")
            .map_err(|_| "ends before its STOP opcode (truncated)".to_string())?
            .first()
            .unwrap_or(&0);
        match op {
            b'.' => break,
            b'\x80' => {
                let proto = w.take(1, "PROTO")?[0];
                if proto > 3 {
                    return Err(format!(
                        "pickle protocol {proto}; Mailman 2 writes protocol 1 or 2"
                    ));
                }
            }
            // Scalars.
            b'N' | b'\x88' | b'\x89' => d.push(0)?,
            b'I' | b'L' | b'F' | b'S' | b'V' => {
                w.line("a text argument")?;
                d.push(0)?;
            }
            b'J' => {
                w.take(4, "BININT")?;
                d.push(0)?;
            }
            b'K' => {
                w.take(1, "BININT1")?;
                d.push(0)?;
            }
            b'M' => {
                w.take(2, "BININT2")?;
                d.push(0)?;
            }
            b'G' => {
                w.take(8, "BINFLOAT")?;
                d.push(0)?;
            }
            b'\x8a' => {
                let n = w.len_le(1, "LONG1")?;
                w.take(n, "LONG1")?;
                d.push(0)?;
            }
            b'\x8b' => {
                let n = w.len_le(4, "LONG4")?;
                w.take(n, "LONG4")?;
                d.push(0)?;
            }
            b'T' | b'X' | b'B' => {
                let n = w.len_le(4, "a string")?;
                w.take(n, "a string")?;
                d.push(0)?;
            }
            b'U' | b'C' | b'\x8c' => {
                let n = w.len_le(1, "a short string")?;
                w.take(n, "a short string")?;
                d.push(0)?;
            }
            // Containers.
            b']' | b'}' | b')' | b'\x8f' => d.push(1)?,
            b'(' => {
                if let Some(end) = classic_instance(b, w.pos)? {
                    instances.push((at, end));
                    w.pos = end;
                    d.push(1)?;
                } else {
                    d.marks.push(d.stack.len());
                }
            }
            b'a' => {
                let v = d.pop()?;
                d.grow_top(v)?;
            }
            b's' => {
                let v = d.pop()?;
                let k = d.pop()?;
                d.grow_top(v.max(k))?;
            }
            b'e' | b'u' | b'\x90' => {
                let inner = d.pop_mark()?;
                d.grow_top(inner)?;
            }
            b'l' | b't' | b'd' | b'\x91' => {
                let inner = d.pop_mark()?;
                d.push(inner + 1)?;
            }
            b'\x85' | b'\x86' | b'\x87' => {
                let n = usize::from(op - b'\x84');
                let mut inner = 0;
                for _ in 0..n {
                    inner = inner.max(d.pop()?);
                }
                d.push(inner + 1)?;
            }
            b'0' => {
                d.pop()?;
            }
            b'1' => {
                d.pop_mark()?;
            }
            b'2' => {
                let top = d.pop()?;
                d.push(top)?;
                d.push(top)?;
            }
            // Memo.
            b'p' => {
                let l = w.line("PUT")?;
                d.memo_put(parse_index(l)?)?;
            }
            b'q' => {
                let n = w.len_le(1, "BINPUT")?;
                d.memo_put(n as u64)?;
            }
            b'r' => {
                let n = w.len_le(4, "LONG_BINPUT")?;
                d.memo_put(n as u64)?;
            }
            b'g' => {
                let l = w.line("GET")?;
                d.memo_get(parse_index(l)?)?;
            }
            b'h' => {
                let n = w.len_le(1, "BINGET")?;
                d.memo_get(n as u64)?;
            }
            b'j' => {
                let n = w.len_le(4, "LONG_BINGET")?;
                d.memo_get(n as u64)?;
            }
            // Objects: the names are checked; nothing is ever called.
            b'c' => {
                let m = w.line("GLOBAL")?;
                let n = w.line("GLOBAL")?;
                global(m, n)?;
                d.push(0)?;
            }
            b'i' => {
                let m = w.line("INST")?;
                let n = w.line("INST")?;
                global(m, n)?;
                let inner = d.pop_mark()?;
                d.push(inner + 1)?;
            }
            b'o' => {
                let inner = d.pop_mark()?;
                d.push(inner + 1)?;
            }
            b'R' | b'\x81' => {
                let args = d.pop()?;
                let f = d.pop()?;
                d.push(args.max(f) + 1)?;
            }
            b'b' => {
                let state = d.pop()?;
                d.grow_top(state)?;
            }
            other => {
                return Err(format!(
                    "opcode {other:#04x} at byte {at} is not one a pickle of Mailman 2 data uses"
                ))
            }
        }
    }
    if d.stack.len() != 1 || !d.marks.is_empty() {
        return Err("does not end with exactly one value".into());
    }
    if w.pos != b.len() {
        return Err(format!("{} bytes after the STOP opcode", b.len() - w.pos));
    }
    Ok(instances)
}

/// At `pos` (just after a MARK): `GLOBAL module\nname\n OBJ`? Its end, when it is one whose
/// class is allowed; a refusal when the class is not.
fn classic_instance(b: &[u8], pos: usize) -> Result<Option<usize>, Refusal> {
    if b.get(pos) != Some(&b'c') {
        return Ok(None);
    }
    let mut w = Walk { b, pos: pos + 1 };
    let (Ok(m), Ok(n)) = (w.line("GLOBAL"), w.line("GLOBAL")) else {
        return Ok(None);
    };
    if b.get(w.pos) != Some(&b'o') {
        return Ok(None);
    }
    global(m, n)?;
    Ok(Some(w.pos + 1))
}

fn parse_index(line: &[u8]) -> Result<u64, Refusal> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| "a memo index that is not a number".to_string())
}

/// Checks `b`, then decodes it.
pub fn load(b: &[u8]) -> Result<serde_pickle::Value, Refusal> {
    let instances = check(b)?;
    let rewritten;
    let b = if instances.is_empty() {
        b
    } else {
        let mut out = Vec::with_capacity(b.len());
        let mut from = 0;
        for (start, end) in instances {
            out.extend_from_slice(&b[from..start]);
            out.push(b'}');
            from = end;
        }
        out.extend_from_slice(&b[from..]);
        rewritten = out;
        &rewritten
    };
    serde_pickle::value_from_slice(b, serde_pickle::DeOptions::new())
        .map_err(|e| format!("not a pickle serde-pickle can read: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_callable_passes() {
        // cos\nsystem\n(S'id'\ntR.  — pickle.loads would run `id`.
        let evil = b"cos\nsystem\n(S'id'\ntR.";
        let why = check(evil).unwrap_err();
        assert!(why.contains("os.system"), "{why}");
        let evil = b"c__builtin__\neval\n(S'1'\ntR.";
        assert!(check(evil).unwrap_err().contains("__builtin__.eval"));
    }

    #[test]
    fn lengths_depth_and_truncation_are_bounded() {
        assert!(check(b"\x80\x02T\xff\xff\xff\x7fabc.")
            .unwrap_err()
            .contains("declares"));
        assert!(check(b"\x80\x02}q\x00(").unwrap_err().contains("truncated"));
        let mut deep = b"\x80\x02".to_vec();
        deep.extend(std::iter::repeat_n(b']', 500));
        deep.extend(std::iter::repeat_n(b'a', 499));
        deep.push(b'.');
        assert!(check(&deep).unwrap_err().contains("levels deep"));
        assert!(check(b"\x80\x02h\x05.")
            .unwrap_err()
            .contains("never stored"));
        assert!(check(b"\x80\x02N.junk")
            .unwrap_err()
            .contains("after the STOP"));
        assert!(check(b"\x80\x05N.").unwrap_err().contains("protocol 5"));
    }

    #[test]
    fn plain_data_loads() {
        // {'a': [1, (2, 'x')]} at protocol 2.
        let ok =
            b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01]q\x02(K\x01K\x02X\x01\x00\x00\x00x\x86q\x03es.";
        let v = load(ok).unwrap();
        assert!(matches!(v, serde_pickle::Value::Dict(_)));
    }
}
