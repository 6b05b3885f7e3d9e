//! Test servers: scripted SMTP receivers.

pub mod smtp;

use herald_routing::TlsMode;
use herald_smtp_client::ClientConfig;
use std::time::Duration;

/// Short timeouts so failures show up fast; plaintext unless a test asks for TLS.
pub fn client_config() -> ClientConfig {
    ClientConfig {
        helo_name: "herald.test".into(),
        connect_timeout: Duration::from_secs(2),
        banner_timeout: Duration::from_secs(2),
        command_timeout: Duration::from_secs(2),
        data_timeout: Duration::from_secs(2),
        tls: TlsMode::Disabled,
        ..ClientConfig::default()
    }
}
