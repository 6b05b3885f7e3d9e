//! What backup offers the HTTP API (`herald_stage::offers`): a consistent copy of the running
//! server as a tar stream (`GET /api/v1/backup`, `herald backup`).

use crate::take::{stage, stream, Source};
use herald_stage::offers::{self, BackupStream, OfferError, Offered};

impl offers::Backup for Source {
    fn take(&self) -> Offered<'_, Result<BackupStream, OfferError>> {
        Box::pin(async move {
            let staged = stage(self)
                .await
                .map_err(|e| OfferError::Unavailable(format!("cannot take a backup: {e}")))?;
            Ok(stream(staged))
        })
    }
}
