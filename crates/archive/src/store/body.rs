//! How a message's bytes are kept: raw deflate, one compressor reused per thread. Its own
//! module because the format is the store's contract with every reader (the pages, IMAP, the
//! mbox downloads, a backup) and the compressor's reuse is a measured hot spot.

use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use flate2::{Compress, Compression, FlushCompress, Status};
use std::cell::RefCell;
use std::io::{Read, Write};

/// Raw deflate at level 6. The compressor is kept per thread and reset for each body: a new
/// one allocates and zeroes its dictionary and hash tables (hundreds of KB), which cost more
/// than compressing a typical 2 KB post (the archive writer's top symbol in the intake bench).
pub(super) fn deflate(raw: &[u8]) -> Vec<u8> {
    thread_local! {
        static COMPRESSOR: RefCell<Compress> = RefCell::new(Compress::new(Compression::new(6), false));
    }
    COMPRESSOR.with_borrow_mut(|c| {
        c.reset();
        let mut out = Vec::with_capacity(raw.len() / 2 + 64);
        // Each pass fills the spare capacity; a bound on passes keeps a compressor bug from
        // looping forever (the output of deflate is never more than ~1.001 × the input + 64).
        for _ in 0..64 {
            let read = usize::try_from(c.total_in())
                .unwrap_or(raw.len())
                .min(raw.len());
            match c.compress_vec(&raw[read..], &mut out, FlushCompress::Finish) {
                Ok(Status::StreamEnd) => return out,
                Ok(_) => out.reserve(out.capacity().max(64)),
                Err(_) => break,
            }
        }
        // Not reached in practice; the encoder of old is the fallback.
        let mut e = DeflateEncoder::new(Vec::with_capacity(raw.len() / 2), Compression::new(6));
        let _ = e.write_all(raw);
        e.finish().unwrap_or_default()
    })
}

pub(crate) fn inflate(body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len() * 3);
    DeflateDecoder::new(body).read_to_end(&mut out).ok()?;
    Some(out)
}
