//! The crate's error types: [`SimError`] for starting and running the world, [`ConfigError`] for
//! world configurations.
//!
//! Invariant: a [`ConfigError`] always names the offending key with its full path
//! (`domains[3].profile.delay_ms`) so that a person editing a world file can find it at once.
//!
//! SECURITY: errors are for the operator; nothing here is sent to a network peer.

use std::io;
use std::net::{IpAddr, SocketAddr};

/// Everything that can go wrong while building or starting the simulated Internet.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A socket could not be bound (address in use, or not a local address).
    #[error("cannot bind {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// The simulated Internet only ever binds or answers with 127.0.0.0/8 addresses.
    #[error("{addr} is not in 127.0.0.0/8: the simulated Internet stays on loopback")]
    NotLoopback { addr: IpAddr },
    /// A name given to [`crate::dns::Zone`] is not a valid DNS name.
    #[error("zone: {name:?} is not a valid DNS name: {reason}")]
    BadName { name: String, reason: String },
    /// The world configuration is invalid.
    #[error("world config: {0}")]
    Config(#[from] ConfigError),
    /// The world configuration file could not be read.
    #[error("cannot read world config {path}: {source}")]
    ReadConfig {
        path: String,
        #[source]
        source: io::Error,
    },
    /// The self-signed certificate or the TLS server configuration could not be built.
    #[error("TLS setup failed: {0}")]
    Tls(String),
}

/// A world configuration that does not parse or does not make sense. The key is the full path
/// of the offending entry; the message says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The text is not valid TOML (the message carries line and column).
    #[error("not valid TOML: {0}")]
    Syntax(String),
    /// A key has the wrong type or value, is unknown, or is missing.
    #[error("{key}: {message}")]
    Key { key: String, message: String },
}

impl ConfigError {
    /// Builds a [`ConfigError::Key`].
    pub fn key(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Key {
            key: key.into(),
            message: message.into(),
        }
    }

    /// The offending key's path, if the error is about one key.
    pub fn key_path(&self) -> Option<&str> {
        match self {
            ConfigError::Syntax(_) => None,
            ConfigError::Key { key, .. } => Some(key),
        }
    }
}
