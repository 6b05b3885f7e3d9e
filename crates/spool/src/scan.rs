//! Reading one segment file front to back during recovery, and deciding what a bad record means.
//!
//! A record that fails its checks is either a *torn tail* — the end of an interrupted write, which
//! can only be in the last segment and only after the last fsync, so nothing acknowledged is in it —
//! or *corruption*, which must not be silently dropped. The rule:
//!
//! - in any segment but the last, a bad record (or a short file) is corruption;
//! - in the last segment, a bad record is a torn tail unless a valid frame can be found anywhere
//!   after it: fdatasync persists a file's data as a whole, so an intact record *behind* a bad one
//!   means the bad one was damaged after it was made durable.
//!
//! When in doubt the scan says "corrupt": quarantining an interrupted write loses nothing extra
//! (recovery keeps every record before the damage either way), it only adds a `.corrupt` file and
//! an error in the log, whereas truncating real corruption would hide it.
//!
//! SECURITY / robustness: input is whatever is on disk. Lengths are checked against the file size
//! before any allocation; the resynchronization search after a bad record reads at most
//! [`MAX_RESYNC_BYTES`] and spends at most [`RESYNC_CRC_BUDGET`] bytes of CRC work, so hostile
//! files (e.g. random bytes, or a long run of fake frame headers) cannot make it quadratic.

use crate::error::SpoolError;
use crate::record::{self, FrameHeader, Record, FRAME_HEADER_LEN, FRAME_MAGIC};
use crate::segment::{decode_header, other_format, SEGMENT_HEADER_LEN, SEGMENT_MAGIC};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// Longest tail searched for intact frames after a bad record; a longer tail is called corrupt.
const MAX_RESYNC_BYTES: u64 = 64 << 20;
/// Most payload bytes checksummed while searching for intact frames.
const RESYNC_CRC_BUDGET: u64 = 256 << 20;

/// How a segment scan ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ScanEnd {
    /// Every byte verified.
    Clean,
    /// Interrupted write in the last segment: bytes from `valid_len` on are to be cut away.
    Torn { valid_len: u64, reason: String },
    /// Damage: nothing from `offset` on can be trusted; the segment must be quarantined.
    Corrupt { offset: u64, reason: String },
}

/// Where a frame lies in its segment (compaction reads Post frames back from here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameLoc {
    pub offset: u64,
    pub frame_len: u64,
}

/// The result of scanning one segment.
#[derive(Debug)]
pub(crate) struct Scan {
    /// From the segment header; `None` if the header itself was torn or damaged.
    pub id_floor: Option<u64>,
    pub end: ScanEnd,
    pub file_len: u64,
}

/// Reads every verifiable record of a segment in order, handing each to `apply`.
pub(crate) fn scan(
    path: &Path,
    seq: u64,
    is_last: bool,
    apply: &mut dyn FnMut(Record, FrameLoc),
) -> Result<Scan, SpoolError> {
    let file = File::open(path).map_err(SpoolError::io("open segment", path))?;
    let file_len = file
        .metadata()
        .map_err(SpoolError::io("stat segment", path))?
        .len();
    let mut reader = BufReader::with_capacity(256 << 10, file);
    if file_len < SEGMENT_HEADER_LEN {
        // A crash between creating a segment and writing its header leaves a short file; it can
        // hold no records, so for the last segment this is an (empty) torn tail.
        let reason = format!("file of {file_len} bytes is shorter than a segment header");
        let end = if is_last {
            ScanEnd::Torn {
                valid_len: 0,
                reason,
            }
        } else {
            ScanEnd::Corrupt { offset: 0, reason }
        };
        return Ok(Scan {
            id_floor: None,
            end,
            file_len,
        });
    }
    let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
    reader
        .read_exact(&mut h)
        .map_err(SpoolError::io("read segment", path))?;
    if let Some(found) = other_format(&h) {
        return Err(SpoolError::FormatTooNew {
            path: path.to_path_buf(),
            found,
            supported: SEGMENT_MAGIC[7] as char,
        });
    }
    let id_floor = match decode_header(&h, seq) {
        Ok(floor) => floor,
        Err(reason) => {
            let end = ScanEnd::Corrupt { offset: 0, reason };
            return Ok(Scan {
                id_floor: None,
                end,
                file_len,
            });
        }
    };
    let end = scan_frames(&mut reader, path, file_len, is_last, apply)?;
    Ok(Scan {
        id_floor: Some(id_floor),
        end,
        file_len,
    })
}

/// Reads frames from just after the segment header to the end of the file.
fn scan_frames(
    reader: &mut BufReader<File>,
    path: &Path,
    file_len: u64,
    is_last: bool,
    apply: &mut dyn FnMut(Record, FrameLoc),
) -> Result<ScanEnd, SpoolError> {
    let mut offset = SEGMENT_HEADER_LEN;
    while offset < file_len {
        match read_frame(reader, path, file_len - offset)? {
            Ok((rec, frame_len)) => {
                apply(rec, FrameLoc { offset, frame_len });
                offset += frame_len;
            }
            Err(reason) => return classify_bad(path, offset, file_len, is_last, reason),
        }
    }
    Ok(ScanEnd::Clean)
}

/// One frame: `Ok(Err(reason))` for a bad record, `Err` only for I/O failures.
fn read_frame(
    reader: &mut BufReader<File>,
    path: &Path,
    remaining: u64,
) -> Result<Result<(Record, u64), String>, SpoolError> {
    if remaining < FRAME_HEADER_LEN as u64 {
        return Ok(Err(format!(
            "{remaining} trailing bytes: truncated frame header"
        )));
    }
    let mut h = [0u8; FRAME_HEADER_LEN];
    reader
        .read_exact(&mut h)
        .map_err(SpoolError::io("read segment", path))?;
    let header = match FrameHeader::parse(&h) {
        Ok(header) => header,
        Err(reason) => return Ok(Err(reason)),
    };
    if header.frame_len() > remaining {
        return Ok(Err(format!(
            "frame of {} bytes runs past the end of the file ({remaining} left)",
            header.frame_len()
        )));
    }
    // Bounded: len <= MAX_PAYLOAD_BYTES and the bytes exist on disk.
    let mut payload = vec![0u8; header.len as usize];
    reader
        .read_exact(&mut payload)
        .map_err(SpoolError::io("read segment", path))?;
    if let Err(reason) = header.verify(&payload) {
        return Ok(Err(reason));
    }
    Ok(record::decode(&header, payload).map(|rec| (rec, header.frame_len())))
}

fn classify_bad(
    path: &Path,
    offset: u64,
    file_len: u64,
    is_last: bool,
    reason: String,
) -> Result<ScanEnd, SpoolError> {
    if !is_last {
        return Ok(ScanEnd::Corrupt { offset, reason });
    }
    if intact_frame_after(path, offset + 1, file_len)? {
        let reason = format!("{reason}; intact records follow, so this is not a torn write");
        return Ok(ScanEnd::Corrupt { offset, reason });
    }
    Ok(ScanEnd::Torn {
        valid_len: offset,
        reason,
    })
}

/// True if a frame that verifies starts anywhere in `[from, file_len)` (or if the tail is too long
/// to search, which errs on the side of calling the segment corrupt).
fn intact_frame_after(path: &Path, from: u64, file_len: u64) -> Result<bool, SpoolError> {
    let tail_len = file_len.saturating_sub(from);
    if tail_len > MAX_RESYNC_BYTES {
        return Ok(true);
    }
    let mut file = File::open(path).map_err(SpoolError::io("open segment", path))?;
    file.seek(SeekFrom::Start(from))
        .map_err(SpoolError::io("seek segment", path))?;
    let mut tail = Vec::with_capacity(tail_len as usize);
    file.take(tail_len)
        .read_to_end(&mut tail)
        .map_err(SpoolError::io("read segment", path))?;
    Ok(find_intact_frame(&tail))
}

fn find_intact_frame(tail: &[u8]) -> bool {
    let mut budget = RESYNC_CRC_BUDGET;
    for i in 0..tail.len().saturating_sub(FRAME_HEADER_LEN - 1) {
        if tail[i] != FRAME_MAGIC {
            continue;
        }
        let mut h = [0u8; FRAME_HEADER_LEN];
        h.copy_from_slice(&tail[i..i + FRAME_HEADER_LEN]);
        let Ok(header) = FrameHeader::parse(&h) else {
            continue;
        };
        let end = i as u64 + header.frame_len();
        if end > tail.len() as u64 {
            continue;
        }
        if budget < u64::from(header.len) {
            return true;
        }
        budget -= u64::from(header.len);
        if header
            .verify(&tail[i + FRAME_HEADER_LEN..end as usize])
            .is_ok()
        {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FinalState;
    use crate::record::{encode_outcome, OUTCOME_FRAME_LEN};
    use crate::segment::encode_header;
    use herald_types::{MemberId, PostId};

    fn write_segment(dir: &Path, frames: usize, tail: &[u8]) -> std::path::PathBuf {
        let path = dir.join("seg");
        let mut bytes = encode_header(1, 0).to_vec();
        for m in 0..frames {
            encode_outcome(
                &mut bytes,
                PostId(1),
                MemberId(m as i64),
                FinalState::Delivered,
            );
        }
        bytes.extend_from_slice(tail);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn run(path: &Path, is_last: bool) -> (usize, ScanEnd) {
        let mut n = 0;
        let s = scan(path, 1, is_last, &mut |_, _| n += 1).unwrap();
        (n, s.end)
    }

    #[test]
    fn clean_segment() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_segment(dir.path(), 5, b"");
        assert_eq!(run(&p, true), (5, ScanEnd::Clean));
    }

    #[test]
    fn garbage_or_zeros_after_the_last_record_is_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let valid = SEGMENT_HEADER_LEN + 5 * OUTCOME_FRAME_LEN as u64;
        for tail in [&[0u8; 4096][..], b"\xb7\x02garbage-garbage", &[0xB7; 3]] {
            let p = write_segment(dir.path(), 5, tail);
            let (n, end) = run(&p, true);
            assert_eq!(n, 5);
            assert!(matches!(end, ScanEnd::Torn { valid_len, .. } if valid_len == valid));
            // The same bytes in a segment that is not the last one are corruption.
            assert!(matches!(run(&p, false).1, ScanEnd::Corrupt { offset, .. } if offset == valid));
        }
    }

    #[test]
    fn damage_followed_by_intact_records_is_corruption_even_in_the_last_segment() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_segment(dir.path(), 6, b"");
        let mut bytes = std::fs::read(&p).unwrap();
        let at = SEGMENT_HEADER_LEN as usize + 2 * OUTCOME_FRAME_LEN + 12;
        bytes[at] ^= 0xff;
        std::fs::write(&p, bytes).unwrap();
        let (n, end) = run(&p, true);
        assert_eq!(n, 2);
        assert!(matches!(end, ScanEnd::Corrupt { .. }), "{end:?}");
    }

    #[test]
    fn short_or_foreign_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("seg");
        std::fs::write(&p, b"HRLD").unwrap();
        assert!(matches!(
            run(&p, true).1,
            ScanEnd::Torn { valid_len: 0, .. }
        ));
        assert!(matches!(
            run(&p, false).1,
            ScanEnd::Corrupt { offset: 0, .. }
        ));
        std::fs::write(&p, [0x5a; 100]).unwrap();
        assert!(matches!(
            run(&p, true).1,
            ScanEnd::Corrupt { offset: 0, .. }
        ));
    }
}
