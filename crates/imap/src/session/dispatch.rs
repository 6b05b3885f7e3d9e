//! Which handler answers a decoded command, by the session's state (RFC 9051 §6): commands
//! valid in any state, then those of the authenticated state, then those that need a selected
//! mailbox. Each level is its own `match`, so the order of the checks ("log in first",
//! "select a mailbox first") reads from the code as the RFC lists the states. The archive is
//! read-only: every command that would change it is answered `NO [CANNOT]`.
//!
//! SECURITY: the command was parsed by imap-codec; nothing past the first level runs before
//! the client has logged in.

use super::decode::Extras;
use super::{commands, other_code, tagged, Io, Next, Session, Step};
use imap_codec::imap_types::command::CommandBody;
use imap_codec::imap_types::core::{IString, QuotedChar, Tag, Vec1};
use imap_codec::imap_types::extensions::enable::CapabilityEnable;
use imap_codec::imap_types::extensions::namespace::Namespace;
use imap_codec::imap_types::fetch::MacroOrMessageDataItemNames;
use imap_codec::imap_types::response::{
    Code, CommandContinuationRequest, Data, Response, StatusKind,
};
use imap_codec::imap_types::search::SearchKey;

impl Session {
    /// Commands valid in any state: CAPABILITY, NOOP, LOGOUT, STARTTLS, LOGIN, AUTHENTICATE.
    pub(super) async fn dispatch(
        &mut self,
        io: &mut (dyn Io + '_),
        tag: Tag<'static>,
        body: CommandBody<'static>,
        ext: Extras,
    ) -> Step<Next> {
        use CommandBody as C;
        match body {
            C::Capability => {
                self.push(&Response::Data(Data::Capability(self.capabilities())));
                self.ok(&tag, "CAPABILITY done")
            }
            C::Noop | C::Check => {
                self.poll_updates().await?;
                self.ok(&tag, "NOOP done")
            }
            C::Logout => {
                self.bye("logging out").await?;
                self.ok(&tag, "LOGOUT done")?;
                Ok(Next::Close)
            }
            C::StartTLS => {
                // RFC 9051 §6.2.1: only before authentication, only once.
                if self.tls || self.shared.tls.is_none() || self.who.is_some() {
                    self.push(&tagged(
                        &tag,
                        StatusKind::Bad,
                        None,
                        "TLS not available here",
                    ));
                    return Ok(Next::Continue);
                }
                self.push(&tagged(
                    &tag,
                    StatusKind::Ok,
                    None,
                    "begin TLS negotiation now",
                ));
                Ok(Next::StartTls)
            }
            C::Login { username, password } => {
                let user = String::from_utf8_lossy(username.as_ref()).into_owned();
                let pass = String::from_utf8_lossy(password.declassify().as_ref()).into_owned();
                self.login(tag, user, pass, false).await
            }
            C::Authenticate {
                mechanism,
                initial_response,
            } => {
                let initial = initial_response.map(|d| d.declassify().to_vec());
                self.authenticate(tag, mechanism, initial).await
            }
            _ if self.who.is_none() => {
                self.bad(&tag, "log in first").await?;
                Ok(Next::Continue)
            }
            body => self.dispatch_authenticated(io, tag, body, ext).await,
        }
    }

    /// Commands of the authenticated state (RFC 9051 §6.3): ENABLE, NAMESPACE, LIST, LSUB,
    /// STATUS, SELECT, EXAMINE, IDLE; the mailbox-changing ones are refused.
    async fn dispatch_authenticated(
        &mut self,
        io: &mut (dyn Io + '_),
        tag: Tag<'static>,
        body: CommandBody<'static>,
        ext: Extras,
    ) -> Step<Next> {
        use CommandBody as C;
        match body {
            C::Enable { capabilities } => self.enable(&tag, &capabilities),
            C::Namespace => {
                let ns = Namespace {
                    prefix: IString::try_from("").unwrap_or_else(|_| unreachable!("empty quoted")),
                    delimiter: QuotedChar::try_from('/').ok(),
                    extensions: Vec::new(),
                };
                self.push(&Response::Data(Data::Namespace {
                    personal: Vec::new(),
                    other: Vec::new(),
                    shared: vec![ns],
                }));
                self.ok(&tag, "NAMESPACE done")
            }
            C::List {
                reference,
                mailbox_wildcard,
            } => {
                self.list(tag, reference, mailbox_wildcard, false, ext.list)
                    .await
            }
            // Every readable list counts as subscribed (nothing is stored per user).
            C::Lsub {
                reference,
                mailbox_wildcard,
            } => {
                self.list(tag, reference, mailbox_wildcard, true, None)
                    .await
            }
            C::Status {
                mailbox,
                item_names,
            } => self.status(tag, mailbox, item_names.to_vec()).await,
            C::Select { mailbox, .. } | C::Examine { mailbox, .. } => {
                self.select(tag, mailbox).await
            }
            C::Idle => {
                if let Ok(c) = CommandContinuationRequest::basic(None, "idling") {
                    self.push(&Response::CommandContinuationRequest(c));
                }
                Ok(Next::Idle { tag })
            }
            C::Create { .. }
            | C::Delete { .. }
            | C::Rename { .. }
            | C::Subscribe { .. }
            | C::Unsubscribe { .. }
            | C::Append { .. } => self.read_only(&tag),
            _ if self.selected.is_none() => {
                self.bad(&tag, "select a mailbox first").await?;
                Ok(Next::Continue)
            }
            body => self.dispatch_selected(io, tag, body, ext).await,
        }
    }

    /// Commands of the selected state (RFC 9051 §6.4): CLOSE, UNSELECT, FETCH, SEARCH; the
    /// message-changing ones are refused.
    async fn dispatch_selected(
        &mut self,
        io: &mut (dyn Io + '_),
        tag: Tag<'static>,
        body: CommandBody<'static>,
        ext: Extras,
    ) -> Step<Next> {
        use CommandBody as C;
        match body {
            C::Close | C::Unselect => {
                // Read-only: CLOSE expunges nothing.
                self.selected = None;
                self.saved.clear();
                self.ok(&tag, "closed")
            }
            C::Fetch {
                sequence_set,
                macro_or_item_names,
                uid,
            } => {
                let names = match macro_or_item_names {
                    MacroOrMessageDataItemNames::Macro(m) => commands::macro_items(m),
                    MacroOrMessageDataItemNames::MessageDataItemNames(n) => n,
                };
                let target = match ext.saved_set {
                    true => commands::Target::Saved,
                    false => commands::Target::Set(sequence_set),
                };
                self.fetch(io, tag, target, names, uid).await
            }
            C::Search {
                charset,
                criteria,
                uid,
            } => {
                let charset = charset.map(|c| c.as_ref().to_ascii_uppercase());
                if charset.is_some_and(|cs| cs != "UTF-8" && cs != "US-ASCII") {
                    return self.bad_charset(&tag, &ext);
                }
                let key = match criteria.as_ref().len() {
                    1 => criteria.as_ref()[0].clone(),
                    _ => SearchKey::And(criteria),
                };
                self.search(tag, key, uid, ext.search_return).await
            }
            C::Store { .. }
            | C::Copy { .. }
            | C::Move { .. }
            | C::Expunge
            | C::ExpungeUid { .. } => self.read_only(&tag),
            _ => {
                self.bad(&tag, "command not supported").await?;
                Ok(Next::Continue)
            }
        }
    }

    /// `tag OK msg`, and the session goes on.
    fn ok(&mut self, tag: &Tag<'_>, msg: &str) -> Step<Next> {
        self.push(&tagged(tag, StatusKind::Ok, None, msg));
        Ok(Next::Continue)
    }

    /// A command that would change the archive: `NO [CANNOT]`.
    fn read_only(&mut self, tag: &Tag<'_>) -> Step<Next> {
        self.push(&tagged(
            tag,
            StatusKind::No,
            Some(other_code("CANNOT")),
            "the archive is read-only",
        ));
        Ok(Next::Continue)
    }

    /// ENABLE: IMAP4rev2 is the one extension that can be enabled; RFC 5161 §3.2: ENABLED
    /// names only what this command enabled (unknown names are ignored).
    fn enable(
        &mut self,
        tag: &Tag<'_>,
        capabilities: &Vec1<CapabilityEnable<'static>>,
    ) -> Step<Next> {
        let mut enabled = Vec::new();
        let asked_rev2 = capabilities
            .as_ref()
            .iter()
            .any(|c| c.to_string().eq_ignore_ascii_case("IMAP4rev2"));
        if asked_rev2 && !self.rev2 {
            self.rev2 = true;
            if let Ok(c) = CapabilityEnable::try_from("IMAP4rev2") {
                enabled.push(c);
            }
        }
        self.push(&Response::Data(Data::Enabled {
            capabilities: enabled,
        }));
        self.ok(tag, "ENABLE done")
    }

    /// A SEARCH in a charset other than UTF-8 and US-ASCII: `NO [BADCHARSET]`.
    fn bad_charset(&mut self, tag: &Tag<'_>, ext: &Extras) -> Step<Next> {
        if ext.search_return.as_ref().is_some_and(|r| r.save) {
            // RFC 5182 §2.1: a SEARCH SAVE that fails leaves `$` empty.
            self.saved.clear();
        }
        let code = Code::BadCharset {
            allowed: Vec::new(),
        };
        self.push(&tagged(
            tag,
            StatusKind::No,
            Some(code),
            "UTF-8 or US-ASCII only",
        ));
        Ok(Next::Continue)
    }
}
