//! The route table of authorization and audit: for every request, what it needs (public, any
//! signed-in person, a site administrator, an owner or a moderator of one list) and, when it
//! changes something, the audit action word, its list and its target. `auth::guard` asks this
//! one place; no handler checks roles itself.
//!
//! A route not named here needs a site administrator: a new admin route is closed to owners
//! and moderators until someone decides otherwise, here.
//!
//! SECURITY: the path and query are untrusted. Segments are percent-decoded and list
//! addresses parsed with `Address::parse`; one that does not parse needs a site administrator
//! (the handler then answers its own 400 to those allowed). Everything is bounded by the
//! request line's own limits (hyper's).

use axum::http::Method;
use herald_accounts::principal::Need;
use herald_types::Address;
use percent_encoding::percent_decode_str;

/// What a route needs before its held post is looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requires {
    /// No sign-in at all.
    Public,
    /// Decided without looking anything up.
    Now(Need),
    /// A moderator of the list the held post belongs to (found in the spool by the guard).
    HeldPost(u64),
}

/// Where the audit row's target comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    None,
    /// A path segment (a member address, a post id, an account).
    Path(String),
    /// A string field of the JSON body (`address`, `pattern`).
    Body(&'static str),
    /// A field of an HTML form (urlencoded body; every value of it, joined by commas).
    Form(&'static str),
}

/// One request, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub requires: Requires,
    /// The audit action for a state-changing request (`None` for reads).
    pub action: Option<&'static str>,
    /// The list concerned (canonical address), for the audit row.
    pub list: Option<String>,
    pub target: Target,
}

/// True for methods that may change something (CSRF checks and the audit log apply).
pub fn changes(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The canonical text of a list address in a path or query, `None` when it is not one.
fn list_key(raw: &str) -> Option<String> {
    Address::parse(raw).ok().map(|a| herald_accounts::key(&a))
}

fn query_list(query: Option<&str>) -> Option<String> {
    let q = query?;
    form_urlencoded::parse(q.as_bytes())
        .find(|(k, _)| k == "list")
        .map(|(_, v)| v.into_owned())
}

fn public(method: &Method, path: &str) -> bool {
    path == "/healthz"
        // Readiness for load balancers and service managers: no data, only why not ready.
        || path == "/readyz"
        // The versioned API's OpenAPI document: a description of the routes, no data.
        || (path == "/api/v1/openapi.json" && method == Method::GET)
        || path.starts_with("/unsubscribe/")
        || path.starts_with("/confirm/")
        // The public subscribe page (double opt-in: it only ever sends a confirmation).
        || path.starts_with("/subscribe/")
        // A member's own subscriptions: the form mails a link; the pages need its token.
        || path == "/manage"
        || path.starts_with("/manage/")
        || path.starts_with("/assets/")
        // Sign-in: the forms, the mailed link's page and its button (each checks its own
        // credential: password, admin token or link token).
        || path == "/login"
        || path.starts_with("/login/")
        // The web archive: its pages serve public archives only (herald_archive::web).
        || (path.starts_with("/archive/") && method == Method::GET)
}

/// Classifies a request.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> Route {
    let mut r = Route {
        requires: Requires::Now(Need::Site),
        action: None,
        list: None,
        target: Target::None,
    };
    if public(method, path) {
        r.requires = Requires::Public;
        return r;
    }
    let segs: Vec<String> = path
        .trim_start_matches('/')
        .split('/')
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    let mut seg: Vec<&str> = segs.iter().map(String::as_str).collect();
    // `/api/v1/...` is the API (crate::v1); the table below names its routes without the
    // version, so a later `v2` of a route needs the same rights unless said otherwise here.
    if seg.len() > 2 && seg[0] == "api" && seg[1] == "v1" {
        seg.remove(1);
    }
    let write = changes(method);
    let m = method.clone();
    // A list route: the owner's, unless said otherwise.
    let on_list = |r: &mut Route, raw: &str, need_owner: bool| {
        r.list = list_key(raw);
        if let Some(l) = &r.list {
            r.requires = Requires::Now(if need_owner {
                Need::Owner(l.clone())
            } else {
                Need::Moderator(l.clone())
            });
        }
    };
    match seg.as_slice() {
        ["admin"] | ["admin", ""] => r.requires = Requires::Now(Need::Signed),
        ["logout"] => {
            r.requires = Requires::Now(Need::Signed);
            r.action = Some("logout");
        }
        ["api", "me"] => r.requires = Requires::Now(Need::Signed),
        ["api", "lists"] if write => r.action = Some("list.create"),
        ["api", "lists", l] => {
            if m == Method::DELETE {
                // Deleting a list is the site's decision, not its owner's.
                r.list = list_key(l);
                r.action = Some("list.delete");
            } else {
                on_list(&mut r, l, true);
                r.action = write.then_some("list.update");
            }
        }
        ["api", "lists", l, "members"] => {
            on_list(&mut r, l, true);
            if write {
                r.action = Some("member.add");
                r.target = Target::Body("address");
            }
        }
        ["api", "lists", l, "members", member, rest @ ..] => {
            on_list(&mut r, l, true);
            r.target = Target::Path(member.to_string());
            r.action = match (rest, &m) {
                ([], &Method::DELETE) => Some("member.remove"),
                ([], &Method::PATCH) => Some("member.update"),
                (["prefs"], _) if write => Some("member.prefs"),
                (["enable"], _) if write => Some("member.enable"),
                (["reset-bounces"], _) if write => Some("member.reset_bounces"),
                _ if write => Some("member.other"),
                _ => None,
            };
        }
        ["api", "lists", l, what, rest @ ..] => {
            on_list(&mut r, l, true);
            r.action = match (*what, rest) {
                _ if !write => None,
                ("import", []) => Some("member.import"),
                ("posts", []) => Some("post.inject"),
                ("held", []) => Some("held.import"),
                ("subscribe", []) => Some("member.subscribe_request"),
                ("unsubscribe", []) => Some("member.unsubscribe_request"),
                ("digest", ["send-now"]) => Some("digest.send_now"),
                ("texts", _) => Some("list.texts"),
                _ => Some("list.other"),
            };
            if matches!(*what, "subscribe" | "unsubscribe") {
                r.target = Target::Body("address");
            }
        }
        ["api", "held"] => {
            if let Some(l) = query_list(query) {
                on_list(&mut r, &l, false);
            }
        }
        ["api", "held", post, verb] => {
            if let Ok(id) = post.parse::<u64>() {
                r.requires = Requires::HeldPost(id);
            }
            r.target = Target::Path(post.to_string());
            r.action = match *verb {
                _ if !write => None,
                "approve" => Some("held.approve"),
                "reject" => Some("held.reject"),
                _ => Some("held.other"),
            };
        }
        ["api", "bounces"] | ["api", "audit"] => {
            if let Some(l) = query_list(query) {
                on_list(&mut r, &l, true);
            }
        }
        ["api", "bounces", post] => {
            r.target = Target::Path(post.to_string());
            r.action = write.then_some("bounce.dismiss");
        }
        ["api", "accounts"] => {
            r.action = write.then_some("account.add");
            r.target = Target::Body("address");
        }
        ["api", "accounts", who, rest @ ..] => {
            r.target = Target::Path(who.to_string());
            r.action = match (rest, &m) {
                _ if !write => None,
                ([], &Method::DELETE) => Some("account.remove"),
                ([], _) => Some("account.update"),
                (["roles", l], _) => {
                    r.list = list_key(l);
                    Some("account.role")
                }
                _ => Some("account.other"),
            };
        }
        ["api", "people", who] => {
            r.target = Target::Path(who.to_string());
            r.action = write.then_some("person.erase");
        }
        ["api", "bans"] => {
            r.action = match m {
                Method::POST => Some("ban.add"),
                Method::DELETE => Some("ban.remove"),
                _ => None,
            };
            r.target = Target::Body("pattern");
        }
        ["api", "suppressions"] => {
            r.action = match m {
                Method::POST => Some("suppression.add"),
                Method::DELETE => Some("suppression.remove"),
                _ => None,
            };
            r.target = Target::Body("address");
        }
        ["api", "stragglers", verb] if write => {
            r.action = Some(match *verb {
                "retry" => "stragglers.retry",
                "give-up" => "stragglers.give_up",
                "disable" => "stragglers.disable",
                _ => "stragglers.other",
            });
        }
        ["api", "postmaster", post] => {
            r.target = Target::Path(post.to_string());
            r.action = write.then_some("postmaster.delete");
        }
        ["api", "tls-report", "send"] if write => r.action = Some("tls_report.send"),
        ["api", "node", "drain"] if write => r.action = Some("node.drain"),
        ["admin", "lists", rest @ ..] => admin_list_page(&mut r, rest, write, &on_list),
        ["admin", "stragglers", verb] if write => {
            r.action = Some(match *verb {
                "retry" => "stragglers.retry",
                "give-up" => "stragglers.give_up",
                "disable" => "stragglers.disable",
                _ => "stragglers.other",
            });
            r.target = Target::Form("recipient");
        }
        ["admin", "postmaster", post, "delete"] if write => {
            r.target = Target::Path(post.to_string());
            r.action = Some("postmaster.delete");
        }
        ["admin", "audit"] => {
            if let Some(l) = query_list(query) {
                on_list(&mut r, &l, true);
            }
        }
        _ if write => r.action = Some("other"),
        _ => {}
    }
    r
}

/// The web administration pages under `/admin/lists`: the same rights as
/// the JSON routes they stand beside — the lists page for anyone signed in (it shows only
/// their lists), creating a list and giving roles for the site, a list's settings, members,
/// import, export and bounces for its owners, its held posts for its moderators (owners
/// included).
fn admin_list_page(
    r: &mut Route,
    rest: &[&str],
    write: bool,
    on_list: &dyn Fn(&mut Route, &str, bool),
) {
    match rest {
        [] => {
            if write {
                r.action = Some("list.create");
                r.target = Target::Form("address");
            } else {
                r.requires = Requires::Now(Need::Signed);
            }
        }
        [l] => {
            on_list(r, l, true);
            r.action = write.then_some("list.update");
        }
        [l, "roles"] => {
            // Giving roles is the site's decision: only the list is named, for the audit row.
            r.list = list_key(l);
            r.action = write.then_some("account.role");
            r.target = Target::Form("account");
        }
        [l, "members"] => {
            on_list(r, l, true);
            if write {
                r.action = Some("member.add");
                r.target = Target::Form("address");
            }
        }
        [l, "members", member, verb] => {
            on_list(r, l, true);
            r.target = Target::Path(member.to_string());
            r.action = match *verb {
                _ if !write => None,
                "remove" => Some("member.remove"),
                "enable" => Some("member.enable"),
                "disable" => Some("member.disable"),
                "reset-bounces" => Some("member.reset_bounces"),
                "delivery" | "language" => Some("member.update"),
                _ => Some("member.other"),
            };
        }
        [l, "held", rest @ ..] => {
            on_list(r, l, false);
            r.target = Target::Form("post");
            r.action = match rest {
                _ if !write => None,
                ["approve"] => Some("held.approve"),
                ["reject"] => Some("held.reject"),
                ["discard"] => Some("held.discard"),
                _ => Some("held.other"),
            };
        }
        [l, what, ..] => {
            on_list(r, l, true);
            r.action = match *what {
                _ if !write => None,
                "import" => Some("member.import"),
                "texts" => Some("list.texts"),
                _ => Some("list.other"),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(method: Method, path: &str, query: Option<&str>) -> Requires {
        classify(&method, path, query).requires
    }

    fn owner(l: &str) -> Requires {
        Requires::Now(Need::Owner(l.into()))
    }

    #[test]
    fn every_list_route_maps_to_its_list_and_everything_else_to_the_site() {
        let dev = "dev@lists.test";
        assert_eq!(
            need(Method::PATCH, "/api/v1/lists/dev@lists.test", None),
            owner(dev)
        );
        assert_eq!(
            need(Method::PATCH, "/api/v1/lists/DEV%40Lists.Test", None),
            owner(dev)
        );
        assert_eq!(
            need(Method::DELETE, "/api/v1/lists/dev@lists.test", None),
            Requires::Now(Need::Site)
        );
        assert_eq!(
            need(Method::GET, "/api/v1/lists/dev@lists.test/members", None),
            owner(dev)
        );
        assert_eq!(
            need(
                Method::POST,
                "/api/v1/lists/dev@lists.test/members/a@b.test/enable",
                None
            ),
            owner(dev)
        );
        assert_eq!(
            need(Method::GET, "/api/v1/held", Some("list=dev%40lists.test")),
            Requires::Now(Need::Moderator(dev.into()))
        );
        assert_eq!(
            need(Method::GET, "/api/v1/held", None),
            Requires::Now(Need::Site)
        );
        assert_eq!(
            need(Method::POST, "/api/v1/held/42/approve", None),
            Requires::HeldPost(42)
        );
        assert_eq!(
            need(Method::GET, "/api/v1/bounces", Some("list=dev@lists.test")),
            owner(dev)
        );
        for site in [
            "/api/v1/status",
            "/metrics",
            "/",
            "/api/v1/people/a@b.test",
            "/api/v1/accounts",
            "/api/v1/new-thing",
        ] {
            assert_eq!(
                need(Method::GET, site, None),
                Requires::Now(Need::Site),
                "{site}"
            );
        }
        for public in [
            "/healthz",
            "/readyz",
            "/login",
            "/login/abc",
            "/manage",
            "/assets/app.js",
        ] {
            assert_eq!(
                need(Method::GET, public, None),
                Requires::Public,
                "{public}"
            );
        }
        assert_eq!(need(Method::POST, "/login/link", None), Requires::Public);
        assert_eq!(
            need(Method::POST, "/archive/x", None),
            Requires::Now(Need::Site)
        );
    }

    #[test]
    fn writes_get_an_action_list_and_target() {
        let r = classify(
            &Method::DELETE,
            "/api/v1/lists/dev@lists.test/members/Ann%40X.test",
            None,
        );
        assert_eq!(r.action, Some("member.remove"));
        assert_eq!(r.list.as_deref(), Some("dev@lists.test"));
        assert_eq!(r.target, Target::Path("Ann@X.test".into()));
        let r = classify(
            &Method::PUT,
            "/api/v1/accounts/o@x.test/roles/dev@lists.test",
            None,
        );
        assert_eq!(
            (r.action, r.list.as_deref()),
            (Some("account.role"), Some("dev@lists.test"))
        );
        assert_eq!(
            classify(&Method::GET, "/api/v1/lists/dev@lists.test", None).action,
            None
        );
        assert_eq!(
            classify(&Method::POST, "/api/v1/whatever", None).action,
            Some("other")
        );
    }

    /// The web administration pages need what the JSON routes beside them need: owners
    /// their lists' pages, moderators (and owners) the held posts, the site the rest.
    #[test]
    fn admin_pages_map_to_the_same_rights() {
        let dev = "dev@lists.test";
        let mods = Requires::Now(Need::Moderator(dev.into()));
        assert_eq!(
            need(Method::GET, "/admin/lists", None),
            Requires::Now(Need::Signed)
        );
        assert_eq!(
            need(Method::POST, "/admin/lists", None),
            Requires::Now(Need::Site)
        );
        for (m, p) in [
            (Method::GET, "/admin/lists/dev%40lists.test"),
            (Method::POST, "/admin/lists/dev@lists.test"),
            (Method::GET, "/admin/lists/dev@lists.test/members"),
            (
                Method::POST,
                "/admin/lists/dev@lists.test/members/a@b.test/disable",
            ),
            (Method::POST, "/admin/lists/dev@lists.test/import"),
            (Method::GET, "/admin/lists/dev@lists.test/import/3"),
            (Method::GET, "/admin/lists/dev@lists.test/export"),
            (Method::GET, "/admin/lists/dev@lists.test/bounces"),
        ] {
            assert_eq!(need(m.clone(), p, None), owner(dev), "{m} {p}");
        }
        assert_eq!(
            need(Method::GET, "/admin/lists/dev@lists.test/held", None),
            mods
        );
        assert_eq!(
            need(
                Method::POST,
                "/admin/lists/dev@lists.test/held/approve",
                None
            ),
            mods
        );
        assert_eq!(
            need(Method::POST, "/admin/lists/dev@lists.test/roles", None),
            Requires::Now(Need::Site)
        );
        for site in [
            "/admin/stragglers",
            "/admin/postmaster",
            "/admin/audit",
            "/admin/lists/x",
        ] {
            assert_eq!(
                need(Method::GET, site, None),
                Requires::Now(Need::Site),
                "{site}"
            );
        }
        assert_eq!(
            need(Method::GET, "/admin/audit", Some("list=dev@lists.test")),
            owner(dev)
        );
        let r = classify(
            &Method::POST,
            "/admin/lists/dev@lists.test/held/discard",
            None,
        );
        assert_eq!(
            (r.action, r.target),
            (Some("held.discard"), Target::Form("post"))
        );
        let r = classify(
            &Method::POST,
            "/admin/lists/dev@lists.test/members/a%40b.test/enable",
            None,
        );
        assert_eq!(r.action, Some("member.enable"));
        assert_eq!(r.target, Target::Path("a@b.test".into()));
    }

    #[test]
    fn hostile_paths_need_the_site() {
        for path in [
            "/api/v1/lists/not-an-address",
            "/api/v1/lists/%ff%fe",
            "/api/v1/lists/a@b.test%00x/members",
            "/api/v1/held/notanumber/approve",
            "/api/v1/held/99999999999999999999999/approve",
            &format!("/api/v1/lists/{}", "x".repeat(10_000)),
        ] {
            assert_eq!(
                need(Method::POST, path, None),
                Requires::Now(Need::Site),
                "{path:.60}"
            );
        }
        assert_eq!(
            need(
                Method::GET,
                "/api/v1/held",
                Some("list=%ff&list=dev@lists.test")
            ),
            Requires::Now(Need::Site),
            "the first list= decides, and garbage needs the site"
        );
    }
}
