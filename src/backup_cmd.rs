//! `herald backup <dir>` (from a running server, over its API) and `herald restore <dir>` (into
//! this machine's data directory, offline). The format and its checks are `herald-backup`'s.

use crate::client::Api;
use anyhow::{Context, Result};
use herald_backup::restore::{restore, Targets};
use herald_server::Config;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

/// Longest a backup download may take: big archives over a slow link take a while.
const BACKUP_TIME_LIMIT: Duration = Duration::from_secs(12 * 3600);

pub async fn backup(api: &Api, dir: &Path) -> Result<()> {
    let mut resp = api
        .get_streaming("/api/v1/backup", BACKUP_TIME_LIMIT)
        .await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(8);
    let target = dir.to_path_buf();
    let unpacker = tokio::task::spawn_blocking(move || {
        herald_backup::receive::unpack(ChannelReader::new(rx), &target)
    });
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {bytes} received ({bytes_per_sec})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let mut stream_error = None;
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                bar.inc(chunk.len() as u64);
                if tx.send(chunk).await.is_err() {
                    break; // the unpacker stopped: its error says why
                }
            }
            Ok(None) => break,
            Err(e) => {
                stream_error = Some(e);
                break;
            }
        }
    }
    drop(tx);
    bar.finish_and_clear();
    let unpacked = unpacker.await.context("the unpacking task")?;
    let manifest = match (unpacked, stream_error) {
        (Ok(m), _) => m,
        (Err(e), Some(net)) => {
            return Err(anyhow::anyhow!("{e} (the download broke off: {net})"))
                .context(format!("backup into {}", dir.display()))
        }
        (Err(e), None) => return Err(e).context(format!("backup into {}", dir.display())),
    };
    let bytes: u64 = manifest.files.iter().map(|f| f.bytes).sum();
    outln!(
        "backup of {} taken at {} into {}: {} files, {} bytes, {} journal segment(s), {} key file(s); every file checked against the manifest",
        manifest.hostname,
        manifest.taken_at,
        dir.display(),
        manifest.files.len(),
        bytes,
        manifest.spool_segments,
        manifest.keys.len()
    );
    for skipped in &manifest.skipped {
        outln!("  not included (copy it yourself): {skipped}");
    }
    Ok(())
}

pub fn restore_into(config: &Config, dir: &Path) -> Result<()> {
    // Run as root, the files must end up the service's: `[server] user`, or else whoever owns
    // the data directory prepared for it (the package's unit runs as `herald` without naming
    // it in the config).
    let owner = if nix::unistd::geteuid().is_root() {
        match herald_server::privileges::service_owner(&config.server)? {
            Some((user, gid)) => Some((user.uid.as_raw(), gid.as_raw())),
            None => {
                use std::os::unix::fs::MetadataExt;
                std::fs::metadata(&config.data_dir)
                    .ok()
                    .map(|m| (m.uid(), m.gid()))
                    .filter(|&(uid, _)| uid != 0)
            }
        }
    } else {
        None
    };
    let targets = Targets {
        data_dir: config.data_dir.clone(),
        spool_dir: config.spool_config().dir,
        keys: config.key_files(),
        owner,
        directory_schema_supported: herald_directory::SCHEMA_VERSION,
    };
    let done = restore(dir, &targets).with_context(|| format!("restore from {}", dir.display()))?;
    outln!(
        "restored the backup of {} taken at {} (Herald {}): {} data file(s) into {}, {} journal segment(s) into {}",
        done.manifest.hostname,
        done.manifest.taken_at,
        done.manifest.herald_version,
        done.data_files,
        targets.data_dir.display(),
        done.segments,
        targets.spool_dir.join("journal").display()
    );
    for line in &done.keys {
        outln!("  key {line}");
    }
    outln!("start `herald serve`: it resumes the pending deliveries from the journal");
    Ok(())
}

/// Reads the chunks the download task hands over; the end of the channel is the end of the
/// stream (a broken download therefore reads as a stream without its manifest).
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    chunk: bytes::Bytes,
}

impl ChannelReader {
    fn new(rx: tokio::sync::mpsc::Receiver<bytes::Bytes>) -> ChannelReader {
        ChannelReader {
            rx,
            chunk: bytes::Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rx.blocking_recv() {
                Some(c) => self.chunk = c,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        let _ = self.chunk.split_to(n);
        Ok(n)
    }
}
