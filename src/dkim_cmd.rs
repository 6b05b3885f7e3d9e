//! `herald dkim keygen <domain>`: writes a DKIM private key (PEM, mode 0600, never
//! overwritten) and prints the DNS TXT record to publish and the `[dkim]` config lines.
//!
//! SECURITY: the private key goes only to the file; nothing prints it.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use herald_auth::dkim::generate;
use herald_auth::DkimAlgorithm;
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum DkimCommand {
    /// Generate a key pair for a list domain and print the DNS record to publish.
    Keygen(KeygenArgs),
}

#[derive(Args)]
pub struct KeygenArgs {
    /// The list domain, e.g. lists.example.org
    domain: String,
    /// DNS selector (the record goes at <selector>._domainkey.<domain>).
    #[arg(long, default_value = "herald")]
    selector: String,
    /// rsa (2048-bit rsa-sha256, verified everywhere) or ed25519 (RFC 8463, much cheaper).
    #[arg(long, value_enum, default_value_t = Algorithm::Rsa)]
    algorithm: Algorithm,
    /// Directory for the key file (<domain>.<selector>.pem).
    #[arg(long, default_value = ".")]
    out_dir: PathBuf,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Algorithm {
    Rsa,
    Ed25519,
}

pub fn run(cmd: DkimCommand) -> Result<()> {
    let DkimCommand::Keygen(args) = cmd;
    let algorithm = match args.algorithm {
        Algorithm::Rsa => DkimAlgorithm::Rsa,
        Algorithm::Ed25519 => DkimAlgorithm::Ed25519,
    };
    let path = keygen(&args.domain, &args.selector, algorithm, &args.out_dir)?;
    let record = std::fs::read_to_string(path.with_extension("txt"))?;
    outln!("private key written to {} (mode 0600)\n", path.display());
    outln!("publish this DNS TXT record:\n");
    outln!(
        "{}._domainkey.{}. IN TXT ( {} )\n",
        args.selector,
        args.domain,
        quoted(&record)
    );
    outln!("and add to the configuration:\n");
    outln!(
        "[dkim.\"{}\"]\nselector = \"{}\"\nkey_file = \"{}\"\nalgorithm = \"{}\"",
        args.domain,
        args.selector,
        path.display(),
        algorithm.key_type()
    );
    Ok(())
}

/// Generates a key for `domain` into `dir`; returns the key path (the record is saved next to
/// it with a `.txt` extension). Used by the demo too.
pub fn keygen(
    domain: &str,
    selector: &str,
    algorithm: DkimAlgorithm,
    dir: &Path,
) -> Result<PathBuf> {
    let valid = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    };
    anyhow::ensure!(
        valid(domain) && valid(selector),
        "domain and selector must be DNS names"
    );
    let key = generate(algorithm).context("generating the key")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{domain}.{selector}.pem"));
    herald_server::write_private(&path, key.private_pem.as_bytes())
        .with_context(|| format!("writing {} (it must not exist yet)", path.display()))?;
    std::fs::write(path.with_extension("txt"), &key.dns_txt)?;
    Ok(path)
}

/// A TXT value as 255-octet quoted strings (zone-file form).
fn quoted(record: &str) -> String {
    record
        .as_bytes()
        .chunks(255)
        .map(|c| format!("\"{}\"", String::from_utf8_lossy(c)))
        .collect::<Vec<_>>()
        .join(" ")
}
