//! Logging in to the archive over IMAP: the capabilities a session announces (which depend
//! on TLS and on whether it has logged in), LOGIN, and AUTHENTICATE with PLAIN or ANONYMOUS,
//! with the initial response (SASL-IR) or after a continuation. Apart from the command loop
//! because it is the one place a secret is read.
//!
//! SECURITY: user names and passwords are untrusted and checked by [`crate::access`] on a
//! blocking thread. LOGIN and PLAIN are refused on a plaintext connection when TLS is
//! available (`LOGINDISABLED`, `PRIVACYREQUIRED`); ANONYMOUS is allowed there (no secret
//! crosses). A failed login costs the client [`LOGIN_FAILURE_DELAY`], so guessing is slow.

use super::{other_code, tagged, Next, Session, Step};
use crate::access::Who;
use imap_codec::fragmentizer::Fragmentizer;
use imap_codec::imap_types::auth::{AuthMechanism, AuthenticateData};
use imap_codec::imap_types::core::{Tag, Vec1};
use imap_codec::imap_types::response::{
    Capability, Code, CommandContinuationRequest, Response, StatusKind,
};
use imap_codec::AuthenticateDataCodec;
use std::time::Duration;

/// What a failed login costs the client.
const LOGIN_FAILURE_DELAY: Duration = Duration::from_secs(1);

impl Session {
    fn login_allowed(&self) -> bool {
        self.tls || self.shared.tls.is_none()
    }

    pub(super) fn capabilities(&self) -> Vec1<Capability<'static>> {
        let mut caps = vec![Capability::Imap4Rev1];
        if self.who.is_none() {
            if !self.tls && self.shared.tls.is_some() {
                caps.push(Capability::StartTls);
                caps.push(Capability::LoginDisabled);
            } else {
                caps.push(Capability::Auth(AuthMechanism::Plain));
            }
            if let Ok(anon) = "ANONYMOUS".parse::<AuthMechanism<'static>>() {
                caps.push(Capability::Auth(anon));
            }
            caps.push(Capability::SaslIr);
        }
        caps.extend([
            Capability::Idle,
            Capability::Namespace,
            Capability::Unselect,
            Capability::Enable,
            Capability::LiteralMinus,
            Capability::Binary,
            Capability::StatusSize,
        ]);
        // IMAP4rev2 and the extensions it includes that imap-codec cannot parse (ESEARCH,
        // SEARCHRES, LIST-EXTENDED, LIST-STATUS: `rev2.rs` reads them), after IMAP4rev1.
        for (at, other) in [
            "IMAP4rev2",
            "ESEARCH",
            "SEARCHRES",
            "LIST-EXTENDED",
            "LIST-STATUS",
            "SPECIAL-USE",
        ]
        .iter()
        .enumerate()
        {
            if let Ok(c) = Capability::try_from(*other) {
                caps.insert(1 + at, c);
            }
        }
        Vec1::try_from(caps).unwrap_or_else(|_| Vec1::from(Capability::Imap4Rev1))
    }

    /// AUTHENTICATE: PLAIN or ANONYMOUS, with the initial response (SASL-IR) or after a
    /// continuation.
    pub(super) async fn authenticate(
        &mut self,
        tag: Tag<'static>,
        mechanism: AuthMechanism<'static>,
        initial: Option<Vec<u8>>,
    ) -> Step<Next> {
        if self.who.is_some() {
            self.push(&tagged(&tag, StatusKind::Bad, None, "already logged in"));
            return Ok(Next::Continue);
        }
        let plain = match mechanism {
            AuthMechanism::Plain => true,
            m if m.as_ref().eq_ignore_ascii_case("ANONYMOUS") => false,
            _ => {
                self.push(&tagged(
                    &tag,
                    StatusKind::No,
                    None,
                    "mechanism not supported",
                ));
                return Ok(Next::Continue);
            }
        };
        match initial {
            Some(data) => self.sasl(tag, plain, data).await,
            None => {
                if let Ok(c) = CommandContinuationRequest::basic(None, " ") {
                    self.push(&Response::CommandContinuationRequest(c));
                }
                Ok(Next::Authenticate { tag, plain })
            }
        }
    }

    pub(super) async fn on_auth_data(
        &mut self,
        frag: &Fragmentizer,
        tag: Tag<'static>,
        plain: bool,
    ) -> Step<Next> {
        match frag.decode_message(&AuthenticateDataCodec::default()) {
            Ok(AuthenticateData::Continue(data)) => {
                let data = data.declassify().to_vec();
                self.sasl(tag, plain, data).await
            }
            Ok(AuthenticateData::Cancel) => {
                self.push(&tagged(
                    &tag,
                    StatusKind::Bad,
                    None,
                    "authentication cancelled",
                ));
                Ok(Next::Continue)
            }
            Err(_) => self
                .bad(&tag, "bad authentication data")
                .await
                .map(|_| Next::Continue),
        }
    }

    /// One SASL exchange: PLAIN (RFC 4616: `authzid NUL authcid NUL passwd`, split here by
    /// hand — three fields, no grammar worth a crate) or ANONYMOUS (RFC 4505: the trace
    /// string is ignored).
    async fn sasl(&mut self, tag: Tag<'static>, plain: bool, data: Vec<u8>) -> Step<Next> {
        if !plain {
            self.who = Some(Who::Anonymous);
            self.push(&tagged(
                &tag,
                StatusKind::Ok,
                Some(Code::Capability(self.capabilities())),
                "anonymous read access",
            ));
            return Ok(Next::Continue);
        }
        let mut parts = data.split(|b| *b == 0);
        let (_authz, user, pass) = (parts.next(), parts.next(), parts.next());
        match (user, pass, parts.next()) {
            (Some(user), Some(pass), None) => {
                let user = String::from_utf8_lossy(user).into_owned();
                let pass = String::from_utf8_lossy(pass).into_owned();
                self.login(tag, user, pass, true).await
            }
            _ => {
                self.push(&tagged(
                    &tag,
                    StatusKind::No,
                    Some(other_code("AUTHENTICATIONFAILED")),
                    "malformed PLAIN response",
                ));
                Ok(Next::Continue)
            }
        }
    }

    pub(super) async fn login(
        &mut self,
        tag: Tag<'static>,
        user: String,
        pass: String,
        sasl: bool,
    ) -> Step<Next> {
        if self.who.is_some() {
            self.push(&tagged(&tag, StatusKind::Bad, None, "already logged in"));
            return Ok(Next::Continue);
        }
        let anonymous = user.eq_ignore_ascii_case(crate::access::ANONYMOUS_USER);
        if !self.login_allowed() && !anonymous {
            let what = if sasl { "PLAIN" } else { "LOGIN" };
            self.push(&tagged(
                &tag,
                StatusKind::No,
                Some(other_code("PRIVACYREQUIRED")),
                &format!("{what} needs TLS: STARTTLS first"),
            ));
            return Ok(Next::Continue);
        }
        let auth = self.shared.auth.clone();
        let who = tokio::task::spawn_blocking(move || auth.login(&user, &pass))
            .await
            .ok()
            .flatten();
        match who {
            Some(who) => {
                tracing::debug!(peer = %self.peer, who = %who.describe(), "IMAP login");
                self.who = Some(who);
                self.push(&tagged(
                    &tag,
                    StatusKind::Ok,
                    Some(Code::Capability(self.capabilities())),
                    "logged in",
                ));
            }
            None => {
                tokio::time::sleep(LOGIN_FAILURE_DELAY).await;
                self.push(&tagged(
                    &tag,
                    StatusKind::No,
                    Some(other_code("AUTHENTICATIONFAILED")),
                    "login failed",
                ));
            }
        }
        Ok(Next::Continue)
    }
}
