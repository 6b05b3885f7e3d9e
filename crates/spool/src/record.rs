//! Journal record framing and payload codecs. Pure functions: no I/O.
//!
//! Frame: `magic u8 (0xB7) | type u8 | len u32 LE | crc u32 LE | payload[len]`, where the CRC-32
//! covers `type | len | payload` (not just the payload, so a flipped type or length byte is caught
//! too). Payloads, all integers little-endian:
//!
//! | type | record | payload |
//! |---|---|---|
//! | 1 | Post | `post u64 · meta_len u32 · meta (JSON) · body` |
//! | 2 | Outcome | `post u64 · member i64 · state u8` (17 bytes; 27 with the frame) |
//! | 3 | PostDone | `post u64` |
//! | 4 | Checkpoint | `post u64 · delivered u64 · failed u64 · done set (roaring)` |
//!
//! Invariants: the bytes of a Post frame do not depend on where it is written, so compaction
//! copies a verified frame verbatim. A Checkpoint states a post's full final-state set at that
//! point of the log: replay replaces, never merges.
//!
//! SECURITY / robustness: frames are parsed from files that may have been torn by a crash or
//! damaged on disk. Every length is checked against [`MAX_PAYLOAD_BYTES`] and against the bytes
//! actually present before anything is allocated, and every decode failure is a value (with a
//! reason), never a panic. The CRC detects accidental damage, not forgery: the spool directory is
//! trusted as much as the process that owns it.

use crate::model::{DoneSet, FinalState, PostMeta};
use herald_types::{MemberId, PostId};

pub(crate) const FRAME_MAGIC: u8 = 0xB7;
pub(crate) const FRAME_HEADER_LEN: usize = 10;
/// Largest payload a frame may carry; bounds every allocation made while reading the journal.
pub(crate) const MAX_PAYLOAD_BYTES: u32 = 512 << 20;
/// Largest post body `accept` takes: a payload minus room for the id and metadata.
pub(crate) const MAX_BODY_BYTES: u64 = (MAX_PAYLOAD_BYTES as u64) - (1 << 20);
/// Longest encoded `PostMeta` accepted on read (meta is a few hundred bytes in practice).
const MAX_META_BYTES: usize = 64 << 10;

const TYPE_POST: u8 = 1;
const TYPE_OUTCOME: u8 = 2;
const TYPE_POST_DONE: u8 = 3;
const TYPE_CHECKPOINT: u8 = 4;

const OUTCOME_PAYLOAD_LEN: usize = 17;
/// Bytes one Outcome record takes on disk, frame included.
#[cfg(test)]
pub(crate) const OUTCOME_FRAME_LEN: usize = FRAME_HEADER_LEN + OUTCOME_PAYLOAD_LEN;

/// One decoded journal record.
// Records are decoded one at a time while a segment is read and moved out at once, never
// stored in bulk: a `Post` bigger than the others costs nothing worth a box per post.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Record {
    Post {
        id: PostId,
        meta: PostMeta,
        body: bytes::Bytes,
    },
    Outcome {
        post: PostId,
        member: MemberId,
        state: FinalState,
    },
    PostDone {
        post: PostId,
    },
    Checkpoint {
        post: PostId,
        delivered: u64,
        failed: u64,
        done: DoneSet,
    },
}

/// A frame header that passed its structural checks; the CRC is checked against the payload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameHeader {
    pub ty: u8,
    pub len: u32,
    pub crc: u32,
}

impl FrameHeader {
    /// Checks magic, type and length limit. `Err` carries the reason.
    pub(crate) fn parse(h: &[u8; FRAME_HEADER_LEN]) -> Result<FrameHeader, String> {
        if h[0] != FRAME_MAGIC {
            return Err(format!("bad frame magic {:#04x}", h[0]));
        }
        let ty = h[1];
        if !(TYPE_POST..=TYPE_CHECKPOINT).contains(&ty) {
            return Err(format!("unknown record type {ty}"));
        }
        let len = u32::from_le_bytes([h[2], h[3], h[4], h[5]]);
        if len > MAX_PAYLOAD_BYTES {
            return Err(format!("record length {len} exceeds {MAX_PAYLOAD_BYTES}"));
        }
        let crc = u32::from_le_bytes([h[6], h[7], h[8], h[9]]);
        Ok(FrameHeader { ty, len, crc })
    }

    pub(crate) fn verify(&self, payload: &[u8]) -> Result<(), String> {
        let actual = frame_crc(self.ty, self.len, &[payload]);
        if actual == self.crc {
            Ok(())
        } else {
            Err(format!(
                "crc mismatch (stored {:#010x}, computed {actual:#010x})",
                self.crc
            ))
        }
    }

    /// Frame length on disk, header included.
    pub(crate) fn frame_len(&self) -> u64 {
        FRAME_HEADER_LEN as u64 + u64::from(self.len)
    }
}

fn frame_crc(ty: u8, len: u32, parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&[ty]);
    h.update(&len.to_le_bytes());
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

/// Appends a frame whose payload is the concatenation of `parts`.
fn push_frame(out: &mut Vec<u8>, ty: u8, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    // Callers bound every payload below MAX_PAYLOAD_BYTES (accept checks the body size).
    let len = len as u32;
    out.reserve(FRAME_HEADER_LEN + len as usize);
    out.push(FRAME_MAGIC);
    out.push(ty);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&frame_crc(ty, len, parts).to_le_bytes());
    for p in parts {
        out.extend_from_slice(p);
    }
}

/// Encodes everything of a Post frame except the body bytes, which follow it on disk. The CRC
/// covers the body, so this runs in the caller's task and the writer thread only copies bytes.
pub(crate) fn encode_post_head(
    id: PostId,
    meta: &PostMeta,
    body: &[u8],
) -> Result<Vec<u8>, serde_json::Error> {
    let meta_json = serde_json::to_vec(meta)?;
    let mut prefix = Vec::with_capacity(12 + meta_json.len());
    prefix.extend_from_slice(&id.0.to_le_bytes());
    prefix.extend_from_slice(&(meta_json.len() as u32).to_le_bytes());
    prefix.extend_from_slice(&meta_json);
    let len = (prefix.len() + body.len()) as u32;
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + prefix.len());
    out.push(FRAME_MAGIC);
    out.push(TYPE_POST);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&frame_crc(TYPE_POST, len, &[&prefix, body]).to_le_bytes());
    out.extend_from_slice(&prefix);
    Ok(out)
}

pub(crate) fn encode_outcome(out: &mut Vec<u8>, post: PostId, member: MemberId, state: FinalState) {
    let mut p = [0u8; OUTCOME_PAYLOAD_LEN];
    p[..8].copy_from_slice(&post.0.to_le_bytes());
    p[8..16].copy_from_slice(&member.0.to_le_bytes());
    p[16] = match state {
        FinalState::Delivered => 1,
        FinalState::Failed => 2,
    };
    push_frame(out, TYPE_OUTCOME, &[&p]);
}

pub(crate) fn encode_post_done(out: &mut Vec<u8>, post: PostId) {
    push_frame(out, TYPE_POST_DONE, &[&post.0.to_le_bytes()]);
}

pub(crate) fn encode_checkpoint(
    out: &mut Vec<u8>,
    post: PostId,
    delivered: u64,
    failed: u64,
    done: &DoneSet,
) {
    let mut p = Vec::with_capacity(24);
    p.extend_from_slice(&post.0.to_le_bytes());
    p.extend_from_slice(&delivered.to_le_bytes());
    p.extend_from_slice(&failed.to_le_bytes());
    done.encode_into(&mut p);
    push_frame(out, TYPE_CHECKPOINT, &[&p]);
}

fn u64_at(p: &[u8], at: usize) -> Result<u64, String> {
    p.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| format!("payload too short for field at byte {at}"))
}

/// Decodes a payload whose CRC has already been verified.
pub(crate) fn decode(header: &FrameHeader, payload: Vec<u8>) -> Result<Record, String> {
    match header.ty {
        TYPE_POST => decode_post(payload),
        TYPE_OUTCOME => {
            if payload.len() != OUTCOME_PAYLOAD_LEN {
                return Err(format!("outcome payload of {} bytes", payload.len()));
            }
            let state = match payload[16] {
                1 => FinalState::Delivered,
                2 => FinalState::Failed,
                s => return Err(format!("unknown final state {s}")),
            };
            Ok(Record::Outcome {
                post: PostId(u64_at(&payload, 0)?),
                member: MemberId(u64_at(&payload, 8)? as i64),
                state,
            })
        }
        TYPE_POST_DONE if payload.len() == 8 => Ok(Record::PostDone {
            post: PostId(u64_at(&payload, 0)?),
        }),
        TYPE_POST_DONE => Err(format!("post-done payload of {} bytes", payload.len())),
        TYPE_CHECKPOINT => Ok(Record::Checkpoint {
            post: PostId(u64_at(&payload, 0)?),
            delivered: u64_at(&payload, 8)?,
            failed: u64_at(&payload, 16)?,
            done: DoneSet::decode(payload.get(24..).unwrap_or_default())?,
        }),
        ty => Err(format!("unknown record type {ty}")),
    }
}

fn decode_post(payload: Vec<u8>) -> Result<Record, String> {
    let id = PostId(u64_at(&payload, 0)?);
    let meta_len = payload
        .get(8..12)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or("post payload too short")? as usize;
    if meta_len > MAX_META_BYTES || 12 + meta_len > payload.len() {
        return Err(format!("post meta length {meta_len} out of range"));
    }
    let meta: PostMeta = serde_json::from_slice(&payload[12..12 + meta_len])
        .map_err(|e| format!("post meta does not parse: {e}"))?;
    // The body shares the payload's allocation: no copy of a possibly large message.
    let body = bytes::Bytes::from(payload).slice(12 + meta_len..);
    Ok(Record::Post { id, meta, body })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PostKind;
    use herald_types::{Address, ListId};

    pub(crate) fn meta() -> PostMeta {
        PostMeta {
            kind: PostKind::ListPost,
            list_id: ListId(7),
            list_address: Address::parse("list@example.org").unwrap(),
            envelope_from: Some(Address::parse("alice@example.com").unwrap()),
            received_at_ms: 1_700_000_000_000,
            max_member_id: MemberId(42),
            message_id: Some("<m1@example.com>".into()),
            recipients: Vec::new(),
            hold_reason: None,
            null_sender: false,
            audience: Default::default(),
            dsn: None,
            member_range: None,
        }
    }

    fn parse_one(frame: &[u8]) -> Result<Record, String> {
        let h: [u8; FRAME_HEADER_LEN] = frame[..FRAME_HEADER_LEN].try_into().unwrap();
        let h = FrameHeader::parse(&h)?;
        let payload = frame[FRAME_HEADER_LEN..].to_vec();
        if payload.len() != h.len as usize {
            return Err("length".into());
        }
        h.verify(&payload)?;
        decode(&h, payload)
    }

    fn post_frame() -> Vec<u8> {
        let body = b"Subject: hi\r\n\r\nhello\r\n";
        let mut f = encode_post_head(PostId(9), &meta(), body).unwrap();
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn every_record_type_round_trips() {
        match parse_one(&post_frame()).unwrap() {
            Record::Post { id, meta: m, body } => {
                assert_eq!(id, PostId(9));
                assert_eq!(m, meta());
                assert_eq!(&body[..], b"Subject: hi\r\n\r\nhello\r\n");
            }
            r => panic!("{r:?}"),
        }
        let mut buf = Vec::new();
        encode_outcome(&mut buf, PostId(3), MemberId(77), FinalState::Failed);
        assert_eq!(buf.len(), OUTCOME_FRAME_LEN);
        assert!(matches!(
            parse_one(&buf).unwrap(),
            Record::Outcome {
                post: PostId(3),
                member: MemberId(77),
                state: FinalState::Failed
            }
        ));
        buf.clear();
        encode_post_done(&mut buf, PostId(4));
        assert!(matches!(
            parse_one(&buf).unwrap(),
            Record::PostDone { post: PostId(4) }
        ));
        buf.clear();
        let mut done = DoneSet::new();
        done.insert(MemberId(5));
        encode_checkpoint(&mut buf, PostId(6), 1, 0, &done);
        match parse_one(&buf).unwrap() {
            Record::Checkpoint {
                post,
                delivered,
                failed,
                done: d,
            } => {
                assert_eq!((post, delivered, failed), (PostId(6), 1, 0));
                assert_eq!(d, done);
            }
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn any_single_byte_flip_is_detected() {
        let frame = post_frame();
        for i in 0..frame.len() {
            let mut bad = frame.clone();
            bad[i] ^= 0x20;
            assert!(parse_one(&bad).is_err(), "flip at byte {i} went unnoticed");
        }
    }

    #[test]
    fn header_limits_are_enforced() {
        let mut h = [FRAME_MAGIC, TYPE_OUTCOME, 0, 0, 0, 0, 0, 0, 0, 0];
        h[2..6].copy_from_slice(&(MAX_PAYLOAD_BYTES + 1).to_le_bytes());
        assert!(FrameHeader::parse(&h).is_err());
        h[1] = 9;
        assert!(FrameHeader::parse(&h).is_err());
    }
}
