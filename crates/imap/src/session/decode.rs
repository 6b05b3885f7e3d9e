//! From the framed bytes of one command to the codec's `Command` plus what the codec cannot
//! carry: the IMAP4rev2 pieces [`crate::rev2::prepare`] reads first (SEARCH RETURN options,
//! `$`, LIST's extended options), `$` written out as the session's saved result, and an
//! extended LIST's further patterns and STATUS items decoded one by one.
//!
//! Limits: the command with every `$` written out stays under [`MAX_SUBSTITUTED_BYTES`].
//!
//! SECURITY: the bytes are the client's; the codec decodes them (or our plain rewrites of
//! them); `$` expands only to this session's own saved UIDs of the selected mailbox.

use super::{commands, Session};
use crate::mailbox::Selected;
use crate::rev2;
use imap_codec::decode::Decoder;
use imap_codec::imap_types::command::{Command, CommandBody};
use imap_codec::imap_types::IntoStatic;
use imap_codec::CommandCodec;

/// A command with its `$` written out is at most this long (bytes).
pub const MAX_SUBSTITUTED_BYTES: usize = 4 << 20;

/// An extended LIST's further patterns and STATUS items, each decoded by the codec from the
/// plain command [`rev2::prepare`] made of it; `None` if the codec refuses one.
fn list_extras(opts: &rev2::ListOptions) -> Option<commands::ListExtras> {
    let decode = |bytes: &[u8]| match CommandCodec::default().decode(bytes) {
        Ok(([], c)) => Some(c.into_static().body),
        _ => None,
    };
    let mut more_patterns = Vec::new();
    for p in opts.patterns.iter().skip(1) {
        match decode(p)? {
            CommandBody::List {
                mailbox_wildcard, ..
            } => more_patterns.push(mailbox_wildcard),
            _ => return None,
        }
    }
    let status = match &opts.status {
        Some(c) => match decode(c)? {
            CommandBody::Status { item_names, .. } => Some(item_names.into_owned()),
            _ => return None,
        },
        None => None,
    };
    Some(commands::ListExtras {
        opts: opts.clone(),
        more_patterns,
        status,
    })
}

/// What [`rev2::prepare`] took out of a command before the codec saw it.
#[derive(Debug, Default, Clone)]
pub(super) struct Extras {
    /// SEARCH `RETURN (…)`.
    pub search_return: Option<rev2::SearchReturn>,
    /// The FETCH's set was `$`: the saved result, not the decoded placeholder.
    pub saved_set: bool,
    /// An extended LIST's options, patterns and STATUS items.
    pub list: Option<commands::ListExtras>,
}

impl Session {
    /// One framed command through [`rev2::prepare`] (RETURN options and `$`, which the codec
    /// lacks) and then the codec. `Err(None)`: the codec refused it.
    pub(super) fn decode(
        &self,
        raw: &[u8],
    ) -> Result<(Command<'static>, Extras), Option<rev2::Malformed>> {
        let prepared = rev2::prepare(raw).map_err(Some)?;
        let list = match &prepared.list {
            Some(opts) => Some(list_extras(opts).ok_or(None)?),
            None => None,
        };
        let ext = Extras {
            search_return: prepared.search_return,
            saved_set: prepared.dollar_set,
            list,
        };
        let substituted;
        let bytes: &[u8] = match prepared.dollar_keys.is_empty() {
            true => &prepared.bytes,
            false => {
                substituted = prepared
                    .substituted(&self.saved_key(), MAX_SUBSTITUTED_BYTES)
                    .map_err(Some)?;
                &substituted
            }
        };
        match CommandCodec::default().decode(bytes) {
            Ok(([], c)) => Ok((c.into_static(), ext)),
            _ => Err(None),
        }
    }

    /// The saved SEARCH result as a search key (`UID …`, or `NOT ALL` when empty or when
    /// nothing is selected), for `$` in a SEARCH.
    fn saved_key(&self) -> Vec<u8> {
        match &self.selected {
            Some(sel) => rev2::uid_key(&sel.uids, &self.saved_indexes(sel)),
            None => b"NOT ALL".to_vec(),
        }
    }

    /// Where the saved UIDs are in the selected mailbox now (those removed since are gone).
    pub(super) fn saved_indexes(&self, sel: &Selected) -> Vec<usize> {
        self.saved
            .iter()
            .filter_map(|u| sel.uids.binary_search(u).ok())
            .collect()
    }
}
