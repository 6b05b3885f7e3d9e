//! Herald's shared vocabulary: ids, addresses, SMTP replies, delivery outcomes, why a copy failed
//! for good ([`FailureCause`], handed from the scheduler to the bounce stage) and the list/member
//! model, the scheduler's decision words ([`scheduling`]), how DANE and MTA-STS applied to an
//! attempt ([`tls`]), what a session tells TLS reporting ([`tlsrpt`]), DSN parameters kept for
//! relayed mail ([`dsn`]), which local shortages are never a peer's fault ([`LocalResource`]), and every HMAC token ([`token`]). Every stage depends on this crate; it depends on no
//! other Herald crate and does no I/O.
//!
//! SECURITY: [`Address::parse`] is the single gate through which addresses from the network, CSV
//! files and the HTTP API enter Herald. It refuses control characters, CR/LF and over-long parts (international addresses are
//! normalized there: NFC local parts, A-label domains), so
//! anything downstream may splice an [`Address`] into a header or an SMTP command line.

pub mod address;
pub mod dsn;
pub mod failure;
pub mod guard;
pub mod ids;
pub mod list;
pub mod local_resource;
pub mod notice;
pub mod outcome;
pub mod reply;
pub mod scheduling;
pub mod tls;
pub mod tlsrpt;
pub mod token;
pub mod verp;

pub use address::{Address, AddressError};
pub use dsn::{Dsn, DsnError};
pub use failure::{FailedCopy, FailureCause, NoRoute};
pub use guard::{FilterVerdict, GuardAction, GuardTrip};
pub use ids::{ListId, MemberId, PostId};
pub use list::{
    list_id_label, ComplaintAction, DeliveryMode, DigestSchedule, DigestVolumeFrequency,
    DisabledMember, FromRewrite, List, ListSettings, Member, MemberStatus, PosterDkim,
    PostingPolicy, ReplyToPolicy, SubscriptionPolicy,
};
pub use local_resource::LocalResource;
pub use notice::{NoticeKind, NoticeLimit};
pub use outcome::RcptOutcome;
pub use reply::{EnhancedStatus, Reply, ReplyError};
pub use scheduling::{DeferralKind, HostStateKind, LaneKind};
pub use tls::{DaneNote, MtaStsNote};
pub use tlsrpt::{TlsPolicy, TlsPolicyKind, TlsResultType, TlsSessionRecord};
pub use verp::{ListAddressKind, ListAddressParts};

/// Milliseconds since the Unix epoch: the one clock unit used in spool records, events and logs.
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
