//! The command/reply primitives every step of a session is made of: write a command within a
//! deadline, read its reply within the same deadline, and the EHLO/HELO greeting exchange.
//! A leaf under `connection`, `starttls` and `transaction`, so that they share these without
//! importing one another.
//!
//! SECURITY: replies are read by [`ReplyReader`], which bounds their size and cleans their text;
//! the HELO name written here was validated by [`ClientConfig::validate`].

use crate::config::ClientConfig;
use crate::error::{ProtocolError, SessionErrorKind, Stage};
use crate::extensions::Extensions;
use crate::reply_reader::{is_closed, ReadError, ReplyReader};
use herald_types::Reply;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// EHLO, falling back to HELO when the server does not know EHLO (RFC 5321 §3.2).
pub(crate) async fn hello<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    reader: &mut ReplyReader,
    cfg: &ClientConfig,
) -> Result<Extensions, (Stage, SessionErrorKind)> {
    let ehlo = format!("EHLO {}\r\n", cfg.helo_name);
    let reply = exchange(stream, reader, ehlo.as_bytes(), cfg)
        .await
        .map_err(|k| (Stage::Ehlo, k))?;
    match reply.code {
        200..=299 => return Ok(Extensions::from_ehlo(&reply)),
        500 | 501 | 502 | 504 | 550 => {}
        _ => return Err((Stage::Ehlo, refusal(reply))),
    }
    let helo = format!("HELO {}\r\n", cfg.helo_name);
    let reply = exchange(stream, reader, helo.as_bytes(), cfg)
        .await
        .map_err(|k| (Stage::Helo, k))?;
    match reply.code {
        200..=299 => Ok(Extensions::helo_only()),
        _ => Err((Stage::Helo, refusal(reply))),
    }
}

/// A reply that refuses the session (4xx/5xx), or one that makes no sense here.
fn refusal(reply: Reply) -> SessionErrorKind {
    if reply.is_transient() || reply.is_permanent() {
        SessionErrorKind::Rejected(reply)
    } else {
        ProtocolError::Unexpected(reply).into()
    }
}

/// Writes one command and reads its reply, both within the command timeout (the reply also
/// within the config's patience with replies that trickle).
pub(crate) async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    reader: &mut ReplyReader,
    command: &[u8],
    cfg: &ClientConfig,
) -> Result<Reply, SessionErrorKind> {
    let deadline = Instant::now() + cfg.command_timeout;
    write_all(stream, command, deadline).await?;
    reader
        .read_reply(stream, cfg.patience().deadline(deadline))
        .await
        .map_err(read_error)
}

/// Writes and flushes `bytes`, all of it before `deadline`.
pub(crate) async fn write_all<S: AsyncWrite + Unpin>(
    stream: &mut S,
    bytes: &[u8],
    deadline: Instant,
) -> Result<(), SessionErrorKind> {
    let write = async {
        stream.write_all(bytes).await?;
        stream.flush().await
    };
    match tokio::time::timeout_at(deadline, write).await {
        Err(_elapsed) => Err(SessionErrorKind::Timeout),
        Ok(Err(e)) if is_closed(&e) => Err(SessionErrorKind::ServerClosed),
        Ok(Err(e)) => Err(SessionErrorKind::Io(e)),
        Ok(Ok(())) => Ok(()),
    }
}

pub(crate) fn read_error(e: ReadError) -> SessionErrorKind {
    match e {
        ReadError::Timeout => SessionErrorKind::Timeout,
        ReadError::TooSlow => SessionErrorKind::TooSlow,
        ReadError::Closed => SessionErrorKind::ServerClosed,
        ReadError::Io(e) => SessionErrorKind::Io(e),
        ReadError::Protocol(p) => SessionErrorKind::Protocol(p),
    }
}
