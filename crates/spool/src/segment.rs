//! Segment files: naming, the segment header, and the few file-system operations the journal
//! needs (create durably, read one frame back, quarantine, delete durably).
//!
//! A segment is `<dir>/journal/<seq as 16 hex digits>.log`: a 28-byte header
//! (`"HRLDJNL1" · seq u64 · id_floor u64 · crc32 u32`, little-endian) followed by frames (see
//! [`crate::record`]). `id_floor` is the next post id at the time the segment was created, so ids
//! stay monotonic even after every segment holding the highest id has been compacted away.
//!
//! Invariants: a segment and its directory entry are fsync'd before any record in it is
//! acknowledged; segments are deleted oldest first, each deletion made durable (directory fsync)
//! before the next, so a crash can only leave a prefix deleted — never a newer segment gone while
//! an older one (whose records the newer one supersedes) survives.
//!
//! SECURITY / robustness: file names that do not parse as a segment are ignored; headers are
//! checked (magic, seq matches the name, CRC) before any frame is trusted.

use crate::error::SpoolError;
use crate::record::{FrameHeader, FRAME_HEADER_LEN};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub(crate) const SEGMENT_MAGIC: [u8; 8] = *b"HRLDJNL1";
pub(crate) const SEGMENT_HEADER_LEN: u64 = 28;
const SEGMENT_SUFFIX: &str = ".log";
const QUARANTINE_SUFFIX: &str = ".corrupt";

pub(crate) fn segment_path(journal: &Path, seq: u64) -> PathBuf {
    journal.join(format!("{seq:016x}{SEGMENT_SUFFIX}"))
}

/// The seq of a segment file name, or of a quarantined one (`…log.corrupt`).
fn parse_name(name: &str) -> Option<(u64, bool)> {
    let (stem, quarantined) = match name.strip_suffix(QUARANTINE_SUFFIX) {
        Some(s) => (s, true),
        None => (name, false),
    };
    let hex = stem.strip_suffix(SEGMENT_SUFFIX)?;
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16)
        .ok()
        .map(|seq| (seq, quarantined))
}

/// What the journal directory holds.
pub(crate) struct Listing {
    /// Segments in ascending seq order.
    pub segments: Vec<(u64, PathBuf)>,
    /// Highest seq among quarantined files, so a new segment never reuses a quarantined seq.
    pub max_quarantined: Option<u64>,
}

pub(crate) fn list(journal: &Path) -> Result<Listing, SpoolError> {
    let mut segments = Vec::new();
    let mut max_quarantined = None;
    for entry in std::fs::read_dir(journal).map_err(SpoolError::io("read_dir", journal))? {
        let entry = entry.map_err(SpoolError::io("read_dir", journal))?;
        let name = entry.file_name();
        match name.to_str().and_then(parse_name) {
            Some((seq, false)) => segments.push((seq, entry.path())),
            Some((seq, true)) => max_quarantined = max_quarantined.max(Some(seq)),
            None => {}
        }
    }
    segments.sort_unstable_by_key(|(seq, _)| *seq);
    Ok(Listing {
        segments,
        max_quarantined,
    })
}

pub(crate) fn encode_header(seq: u64, id_floor: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
    h[..8].copy_from_slice(&SEGMENT_MAGIC);
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..24].copy_from_slice(&id_floor.to_le_bytes());
    let crc = crc32fast::hash(&h[..24]);
    h[24..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The format version a header's magic names when it is a Herald journal of another version
/// than this one (`HRLDJNL` + a version digit), so recovery can refuse a newer journal instead
/// of quarantining it as damage.
pub(crate) fn other_format(h: &[u8; SEGMENT_HEADER_LEN as usize]) -> Option<char> {
    (h[..7] == SEGMENT_MAGIC[..7] && h[7] != SEGMENT_MAGIC[7] && h[7].is_ascii_alphanumeric())
        .then_some(h[7] as char)
}

/// Checks a header against the seq from the file name; returns its id floor.
pub(crate) fn decode_header(
    h: &[u8; SEGMENT_HEADER_LEN as usize],
    seq: u64,
) -> Result<u64, String> {
    if h[..8] != SEGMENT_MAGIC {
        return Err("not a Herald journal segment (bad magic)".into());
    }
    let crc = u32::from_le_bytes([h[24], h[25], h[26], h[27]]);
    if crc32fast::hash(&h[..24]) != crc {
        return Err("segment header crc mismatch".into());
    }
    let stored = u64::from_le_bytes(h[8..16].try_into().unwrap_or_default());
    if stored != seq {
        return Err(format!(
            "header says seq {stored:#x}, file name says {seq:#x}"
        ));
    }
    Ok(u64::from_le_bytes(h[16..24].try_into().unwrap_or_default()))
}

/// Creates a new segment, writes its header and makes both file and directory entry durable.
pub(crate) fn create(
    journal: &Path,
    seq: u64,
    id_floor: u64,
) -> Result<(File, PathBuf), SpoolError> {
    let path = segment_path(journal, seq);
    let mut file = OpenOptions::new()
        .append(true)
        .create_new(true)
        .open(&path)
        .map_err(SpoolError::io("create segment", &path))?;
    file.write_all(&encode_header(seq, id_floor))
        .map_err(SpoolError::io("write segment header", &path))?;
    file.sync_all().map_err(SpoolError::io("fsync", &path))?;
    sync_dir(journal)?;
    Ok((file, path))
}

/// Opens an existing segment for appending (recovery has already cut any torn tail).
pub(crate) fn open_append(path: &Path) -> Result<File, SpoolError> {
    OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(SpoolError::io("open segment", path))
}

/// fsync of a directory: makes creations, renames and deletions in it durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), SpoolError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(SpoolError::io("fsync directory", dir))
}

/// Reads the frame at `offset` back and verifies it. Used to copy a live post forward.
pub(crate) fn read_frame_at(
    path: &Path,
    offset: u64,
    frame_len: u64,
) -> Result<Vec<u8>, SpoolError> {
    let corrupt = |reason: String| SpoolError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason,
    };
    let len = usize::try_from(frame_len)
        .ok()
        .filter(|l| *l >= FRAME_HEADER_LEN)
        .ok_or_else(|| corrupt(format!("frame length {frame_len} out of range")))?;
    let mut file = File::open(path).map_err(SpoolError::io("open segment", path))?;
    file.seek(SeekFrom::Start(offset))
        .map_err(SpoolError::io("seek segment", path))?;
    let mut frame = vec![0u8; len];
    file.read_exact(&mut frame)
        .map_err(SpoolError::io("read segment", path))?;
    let mut h = [0u8; FRAME_HEADER_LEN];
    h.copy_from_slice(&frame[..FRAME_HEADER_LEN]);
    let header = FrameHeader::parse(&h).map_err(corrupt)?;
    if header.frame_len() != frame_len {
        return Err(corrupt("frame length changed on disk".into()));
    }
    header.verify(&frame[FRAME_HEADER_LEN..]).map_err(corrupt)?;
    Ok(frame)
}

/// Renames a damaged segment to `<name>.corrupt` (kept for the operator, never read again).
pub(crate) fn quarantine(journal: &Path, path: &Path) -> Result<PathBuf, SpoolError> {
    let mut target = path.as_os_str().to_owned();
    target.push(QUARANTINE_SUFFIX);
    let target = PathBuf::from(target);
    std::fs::rename(path, &target).map_err(SpoolError::io("rename", path))?;
    sync_dir(journal)?;
    Ok(target)
}

/// Deletes a segment durably (see the module invariant on deletion order).
pub(crate) fn remove(journal: &Path, path: &Path) -> Result<(), SpoolError> {
    std::fs::remove_file(path).map_err(SpoolError::io("remove segment", path))?;
    sync_dir(journal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_strangers_are_ignored() {
        let p = segment_path(Path::new("/j"), 0xab);
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(name, "00000000000000ab.log");
        assert_eq!(parse_name(name), Some((0xab, false)));
        assert_eq!(
            parse_name("00000000000000ab.log.corrupt"),
            Some((0xab, true))
        );
        for bad in [
            "ab.log",
            "00000000000000zz.log",
            "00000000000000ab.txt",
            "x",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn header_checks() {
        let h = encode_header(5, 1234);
        assert_eq!(decode_header(&h, 5), Ok(1234));
        assert!(decode_header(&h, 6).is_err());
        let mut bad = h;
        bad[17] ^= 1;
        assert!(decode_header(&bad, 5).is_err());
        let mut bad = h;
        bad[0] = b'X';
        assert!(decode_header(&bad, 5).is_err());
    }
}
