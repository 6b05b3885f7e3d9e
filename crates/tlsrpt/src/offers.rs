//! What TLS reporting offers the HTTP API (`herald_stage::offers`): an operator's (re-)send of
//! one day's reports (`herald tls-report send`), in the API's terms.

use crate::stage::{yesterday, TlsReportError, TlsReporting};
use herald_api_types::TlsReportSent;
use herald_stage::offers::{self, OfferError, Offered};

impl offers::TlsReports for TlsReporting {
    fn send_day<'a>(
        &'a self,
        day: Option<&'a str>,
    ) -> Offered<'a, Result<Vec<TlsReportSent>, OfferError>> {
        Box::pin(async move {
            let day = day.map_or_else(yesterday, str::to_string);
            match TlsReporting::send_day(self, &day).await {
                Ok(sent) => Ok(sent
                    .into_iter()
                    .map(|r| TlsReportSent {
                        day: r.day,
                        domain: r.domain,
                        report_id: r.report_id,
                        state: r.state,
                        detail: r.detail,
                        successful: r.successful,
                        failed: r.failed,
                    })
                    .collect()),
                Err(TlsReportError::BadDay(d)) => {
                    Err(OfferError::BadRequest(format!("day: not YYYY-MM-DD: {d}")))
                }
                Err(e) => Err(OfferError::Internal(e.to_string())),
            }
        })
    }
}
