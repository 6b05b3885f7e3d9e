//! A typed client of the versioned admin API (`/api/v1`) for the end-to-end tests: requests are
//! `herald-api-types` values and answers decode into them, so a renamed, moved or retyped field
//! is a compile error or a failure that shows the body, not a silent `null` from a JSON key
//! lookup. An error answer decodes into its [`Problem`] (RFC 9457), which every 4xx and 5xx of
//! the versioned API carries.
//!
//! `support::http` stays for the tests whose subject is the wire itself (the contract goldens,
//! misspelt or mistyped fields, media types).

use herald_api_types::{
    AddMember, CreateList, Injected, ListChanges, ListInfo, ListView, MemberView, PostSummary,
    Problem, Status,
};
use herald_types::ListSettings;
use reqwest::{Method, RequestBuilder};
use serde::de::DeserializeOwned;

/// The admin API of one server. No token: the tests' servers answer local clients
/// (127.0.0.0/8) without one.
#[derive(Clone)]
pub struct Api {
    base: String,
    client: reqwest::Client,
}

/// An error answer: its status and the problem it names.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub problem: Problem,
}

impl Api {
    /// `api`: the server's base URL, as in `TestServer::api` (`http://127.0.0.1:<port>`).
    pub fn new(api: &str) -> Api {
        Api {
            base: format!("{}/api/v1", api.trim_end_matches('/')),
            client: reqwest::Client::new(),
        }
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.client.request(method, format!("{}{path}", self.base))
    }

    /// Sends `req`; `want` is the success status, whose body is returned. Any other status must
    /// be an error answer with a problem body: anything else fails the test.
    async fn send(&self, what: &str, req: RequestBuilder, want: u16) -> Result<String, Refused> {
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        if status == want {
            return Ok(text);
        }
        assert!(status >= 400, "{what}: {status}, wanted {want}: {text}");
        let problem = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{what}: {status} without a problem body ({e}): {text}"));
        Err(Refused { status, problem })
    }

    /// As [`Api::send`], the body decoded into `T`.
    async fn decoded<T: DeserializeOwned>(
        &self,
        what: &str,
        req: RequestBuilder,
        want: u16,
    ) -> Result<T, Refused> {
        let text = self.send(what, req, want).await?;
        Ok(serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{what}: answer does not decode ({e}): {text}")))
    }

    /// `GET /api/v1<path>`: the view, or the error answer.
    pub async fn try_get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Refused> {
        let what = format!("GET {path}");
        self.decoded(&what, self.request(Method::GET, path), 200)
            .await
    }

    /// `GET /api/v1<path>` decoded into its view; anything but 200 fails the test.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> T {
        self.try_get(path)
            .await
            .unwrap_or_else(|r| panic!("GET {path}: {r:?}"))
    }

    /// Creates `address` with `settings`; fails the test unless it is created.
    pub async fn create_list(&self, address: &str, settings: ListSettings) -> ListInfo {
        let req = CreateList {
            address: address.into(),
            settings,
        };
        self.try_create_list(&req)
            .await
            .unwrap_or_else(|r| panic!("create list {address}: {r:?}"))
    }

    pub async fn try_create_list(&self, req: &CreateList) -> Result<ListInfo, Refused> {
        let http = self.request(Method::POST, "/lists").json(req);
        self.decoded("create list", http, 201).await
    }

    pub async fn lists(&self) -> Vec<ListView> {
        self.get("/lists").await
    }

    pub async fn list(&self, address: &str) -> ListView {
        self.get(&format!("/lists/{address}")).await
    }

    /// `PATCH /api/v1/lists/<list>`: the settings named in `changes`, by name; the others
    /// are kept.
    pub async fn change_list(
        &self,
        address: &str,
        changes: &ListChanges,
    ) -> Result<ListInfo, Refused> {
        let path = format!("/lists/{address}");
        let http = self.request(Method::PATCH, &path).json(changes);
        self.decoded(&format!("PATCH {path}"), http, 200).await
    }

    pub async fn delete_list(&self, address: &str) -> Result<(), Refused> {
        let path = format!("/lists/{address}");
        let http = self.request(Method::DELETE, &path);
        self.send(&format!("DELETE {path}"), http, 204)
            .await
            .map(drop)
    }

    /// The first page of `list`'s members (up to 1,000), in id order.
    pub async fn members(&self, list: &str) -> Vec<MemberView> {
        self.get(&format!("/lists/{list}/members")).await
    }

    pub async fn add_member(&self, list: &str, member: &AddMember) -> Result<MemberView, Refused> {
        let path = format!("/lists/{list}/members");
        let http = self.request(Method::POST, &path).json(member);
        self.decoded(&format!("POST {path}"), http, 201).await
    }

    /// Adds `address` (no name, no fields); fails the test unless it is added.
    pub async fn add_address(&self, list: &str, address: &str) -> MemberView {
        let member = AddMember {
            address: address.into(),
            ..AddMember::default()
        };
        self.add_member(list, &member)
            .await
            .unwrap_or_else(|r| panic!("add {address} to {list}: {r:?}"))
    }

    pub async fn member(&self, list: &str, address: &str) -> Result<MemberView, Refused> {
        self.try_get(&format!("/lists/{list}/members/{address}"))
            .await
    }

    pub async fn remove_member(&self, list: &str, address: &str) -> Result<(), Refused> {
        let path = format!("/lists/{list}/members/{address}");
        let http = self.request(Method::DELETE, &path);
        self.send(&format!("DELETE {path}"), http, 204)
            .await
            .map(drop)
    }

    /// Spools `message` for `list` as a post (`202`), bypassing SMTP.
    pub async fn inject(&self, list: &str, message: Vec<u8>) -> Result<Injected, Refused> {
        let path = format!("/lists/{list}/posts");
        let http = self.request(Method::POST, &path).body(message);
        self.decoded(&format!("POST {path}"), http, 202).await
    }

    /// A post's progress; `None` while the server does not know it yet (404).
    pub async fn post(&self, id: &str) -> Option<PostSummary> {
        match self.try_get(&format!("/posts/{id}")).await {
            Ok(p) => Some(p),
            Err(r) if r.status == 404 => None,
            Err(r) => panic!("GET /posts/{id}: {r:?}"),
        }
    }

    pub async fn status(&self) -> Status {
        self.get("/status").await
    }
}

/// A `PATCH` body from a JSON object literal (`json!({"from_rewrite": "never"})`): changes are
/// named settings by design (see [`ListChanges`]), so misspelt names can be sent on purpose.
pub fn changes(object: serde_json::Value) -> ListChanges {
    match object {
        serde_json::Value::Object(map) => map,
        other => panic!("list changes are an object, not {other}"),
    }
}
