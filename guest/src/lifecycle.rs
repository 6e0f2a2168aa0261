//! Client of the OpenSandbox lifecycle API (`…/v1/sandboxes`, `…/v1/snapshots`,
//! and the server's `/version`).

use crate::config;
use crate::error::{self, Error, Result, invalid};
use crate::http::{Request, Response, Timeouts, Transport, Url, encode};
use crate::models::{
    CreateSandboxRequest, Endpoint, NewSnapshot, Pagination, RenewRequest, RenewResponse, Sandbox,
    SandboxList, ServerVersion, Snapshot, SnapshotList,
};
use crate::retry::Retry;
use opensandbox_settings::API_KEY_HEADER;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::time::Duration;

/// Largest JSON answer accepted from the server.
const MAX_ANSWER: usize = 16 << 20;
/// Items per page of the server's lists (its maximum).
const PAGE_SIZE: u32 = 200;
/// Pages read at most of one list (two million items).
const MAX_PAGES: u32 = 10_000;
/// Whole reads of one list at most: the first, and three more when the list
/// changed while it was read.
const MAX_READS: u32 = 4;

/// Every item of a paged list, each once (`id_of` tells them apart):
/// `page(n)` answers page `n`, from 1, and its pagination; pages are read
/// until the server says there is no next one.
///
/// The server pages by offset over a list it sorts again for each request
/// (newest first), so an item made or removed between two page reads moves
/// every later item by one: the next page repeats the last item read, or
/// skips one. When a read shows a change (an id twice, or a `totalItems`
/// other than the first page's), the whole list is read again, up to
/// [`MAX_READS`] reads. What cannot be seen so: changes that keep the count
/// and repeat nothing (one item made and one removed on pages already read
/// leaves the later pages where they were, so nothing is lost). A last read
/// that still changed is answered with each id once, and may lack an item.
pub fn all_pages<T>(
    id_of: impl Fn(&T) -> &str,
    mut page: impl FnMut(u32) -> Result<(Vec<T>, Option<Pagination>)>,
) -> Result<Vec<T>> {
    for _ in 1..MAX_READS {
        if let Some(items) = read_pages(&id_of, &mut page, false)? {
            return Ok(items);
        }
    }
    Ok(read_pages(&id_of, &mut page, true)?.unwrap_or_default())
}

/// One read of all pages: the items, each once, or `None` when the list
/// changed while it was read (unless `to_the_end`: then what was read).
fn read_pages<T>(
    id_of: &impl Fn(&T) -> &str,
    page: &mut impl FnMut(u32) -> Result<(Vec<T>, Option<Pagination>)>,
    to_the_end: bool,
) -> Result<Option<Vec<T>>> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut total = None;
    for n in 1..=MAX_PAGES {
        let (items, pagination) = page(n)?;
        let more = pagination.as_ref().is_some_and(|p| p.has_next_page) && !items.is_empty();
        let this_total = pagination.and_then(|p| p.total_items);
        let mut changed = n > 1 && this_total != total;
        total = this_total;
        for item in items {
            if seen.insert(id_of(&item).to_string()) {
                out.push(item);
            } else {
                changed = true;
            }
        }
        if changed && !to_the_end {
            return Ok(None);
        }
        if !more {
            break;
        }
    }
    Ok(Some(out))
}

/// Rejects ids that could change the meaning of a URL.
pub fn check_id(kind: &str, id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 256
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "`{id}` is not a valid {kind} id (letters, digits, `-`, `_` and `.` only)"
        )))
    }
}

/// A `POST /sandboxes` that failed, and whether the server may still have
/// made the sandbox (the request went out but no usable answer came back: a
/// broken connection, a timeout, 502/504, or a 2xx that could not be read).
#[derive(Debug)]
pub struct CreateFailed {
    pub error: Error,
    pub may_exist: bool,
}

pub struct Lifecycle {
    /// The server's root (`scheme://host:port[/prefix]`), where `/version` is.
    root: String,
    /// Its API, `root/v1`.
    base: String,
    target: String,
    headers: Vec<(String, String)>,
}

impl Lifecycle {
    pub fn new() -> Result<Lifecycle> {
        let settings = config::settings()?;
        let mut headers = vec![(
            "user-agent".to_string(),
            concat!("abx-epp-opensandbox/", env!("CARGO_PKG_VERSION")).to_string(),
        )];
        // Under epp-host the key is withheld from us and the host adds it; other
        // hosts may hand it over, and then we send it ourselves.
        if let Some(key) = &settings.api_key {
            headers.push((API_KEY_HEADER.to_string(), key.clone()));
        }
        Ok(Lifecycle {
            root: settings.origin.to_string(),
            base: settings.origin.api_base(),
            target: format!("the OpenSandbox server at {}", settings.origin),
            headers,
        })
    }

    /// The server's description of where it is, for messages.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Where `path` of the API is (`root/v1/…`).
    fn api(&self, path: &str) -> Result<Url> {
        self.url(&self.base, path)
    }

    /// Where `path` at the server's root is, outside the API (`/version`).
    fn at_root(&self, path: &str) -> Result<Url> {
        self.url(&self.root, path)
    }

    fn url(&self, base: &str, path: &str) -> Result<Url> {
        Url::parse(&format!("{base}{path}")).map_err(|t| error::transport(t, &self.target))
    }

    /// Sends `method url` (with a JSON body when given) until an answer arrives
    /// or the retry rule (`crate::retry`) says stop; returns the last outcome.
    fn exchange(
        &self,
        method: &'static str,
        url: &Url,
        body: Option<&[u8]>,
        timeouts: Option<Timeouts>,
    ) -> std::result::Result<Response, Transport> {
        let mut retry = Retry::new(method);
        loop {
            let mut req = Request::new(method, url.clone()).headers(&self.headers);
            if let Some(t) = timeouts {
                req = req.timeouts(t);
            }
            if body.is_some() {
                req = req.header("content-type", "application/json");
            }
            let outcome = req.send(body.unwrap_or_default());
            if !retry.again(&outcome) {
                return outcome;
            }
        }
    }

    /// A 2xx answer, or the EPP error for what the server said about `subject`.
    fn answer(&self, resp: Response, subject: &str) -> Result<Response> {
        if (200..300).contains(&resp.status) {
            return Ok(resp);
        }
        let status = resp.status;
        let body = resp.read_all(64 * 1024).unwrap_or_default();
        Err(error::status(status, &body, &self.target, subject))
    }

    /// `method path` of the API, answered with 2xx.
    fn send(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Vec<u8>>,
        subject: &str,
    ) -> Result<Response> {
        self.send_to(method, &self.api(path)?, body, subject)
    }

    fn send_to(
        &self,
        method: &'static str,
        url: &Url,
        body: Option<Vec<u8>>,
        subject: &str,
    ) -> Result<Response> {
        let resp = self
            .exchange(method, url, body.as_deref(), None)
            .map_err(|t| error::transport(t, &self.target))?;
        self.answer(resp, subject)
    }

    fn json<T: DeserializeOwned>(&self, resp: Response, subject: &str) -> Result<T> {
        let body = resp
            .read_all(MAX_ANSWER)
            .map_err(|t| error::broken_body(t, &self.target))?;
        serde_json::from_slice(&body).map_err(|e| {
            error::upstream(format!(
                "{} sent an answer about {subject} that is not what OpenSandbox sends ({e})",
                self.target
            ))
        })
    }

    fn body(value: &impl Serialize) -> Option<Vec<u8>> {
        Some(serde_json::to_vec(value).expect("request bodies serialise"))
    }

    /// `POST /sandboxes`. Creation is synchronous on the server (it pulls the
    /// image first), so the answer may take minutes. Never retried: when the
    /// answer is lost after the request went out, the sandbox may exist, which
    /// the failure says (`may_exist`), so that the caller can say how to find it.
    pub fn create(
        &self,
        req: &CreateSandboxRequest,
        wait: Duration,
    ) -> std::result::Result<Sandbox, CreateFailed> {
        self.post_once("/sandboxes", Self::body(req), wait, "the new sandbox")
    }

    /// `POST /sandboxes/{id}/snapshots`: the server answers once it has
    /// recorded the snapshot (`Creating`; Docker commits it afterwards), and
    /// is given `wait` for it. Never retried, like `create`: a lost answer
    /// may have made one.
    pub fn snapshot(
        &self,
        sandbox_id: &str,
        name: &str,
        wait: Duration,
    ) -> std::result::Result<Snapshot, CreateFailed> {
        check_id("sandbox", sandbox_id).map_err(|error| CreateFailed {
            error,
            may_exist: false,
        })?;
        self.post_once(
            &format!("/sandboxes/{sandbox_id}/snapshots"),
            Self::body(&NewSnapshot { name }),
            wait,
            &format!("a snapshot of sandbox {sandbox_id}"),
        )
    }

    /// A `POST` that makes something, sent once; its failure says whether
    /// the thing may exist all the same.
    fn post_once<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Option<Vec<u8>>,
        wait: Duration,
        subject: &str,
    ) -> std::result::Result<T, CreateFailed> {
        let url = self.api(path).map_err(|error| CreateFailed {
            error,
            may_exist: false,
        })?;
        let outcome = self.exchange(
            "POST",
            &url,
            body.as_deref(),
            Some(Timeouts::API.first_byte(wait)),
        );
        let may_exist = match &outcome {
            Err(Transport::Broken(_) | Transport::Timeout(_)) => true,
            Ok(resp) => matches!(resp.status, 200..=299 | 502 | 504),
            Err(_) => false,
        };
        outcome
            .map_err(|t| error::transport(t, &self.target))
            .and_then(|resp| self.answer(resp, subject))
            .and_then(|resp| self.json(resp, subject))
            .map_err(|error| CreateFailed { error, may_exist })
    }

    pub fn get(&self, id: &str) -> Result<Sandbox> {
        check_id("sandbox", id)?;
        self.get_json(&format!("/sandboxes/{id}"), &format!("sandbox {id}"))
    }

    /// Every sandbox with these states and metadata (all pages of `GET /sandboxes`).
    pub fn list(&self, states: &[String], metadata: &[(String, String)]) -> Result<Vec<Sandbox>> {
        let mut filter = String::new();
        for s in states {
            filter.push_str(&format!("&state={}", encode(s)));
        }
        if !metadata.is_empty() {
            let pairs: Vec<String> = metadata
                .iter()
                .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
                .collect();
            filter.push_str(&format!("&metadata={}", encode(&pairs.join("&"))));
        }
        all_pages(
            |s: &Sandbox| &s.id,
            |page| {
                let path = format!("/sandboxes?page={page}&pageSize={PAGE_SIZE}{filter}");
                let list: SandboxList = self.get_json(&path, "the sandbox list")?;
                Ok((list.items, list.pagination))
            },
        )
    }

    /// A `GET` answered with JSON.
    fn get_json<T: DeserializeOwned>(&self, path: &str, subject: &str) -> Result<T> {
        let resp = self.send("GET", path, None, subject)?;
        self.json(resp, subject)
    }

    /// `PATCH /sandboxes/{id}/metadata`: a JSON merge patch (a `None` value
    /// removes its key); answers the sandbox as it is now.
    pub fn patch_metadata(
        &self,
        id: &str,
        patch: &BTreeMap<String, Option<String>>,
    ) -> Result<Sandbox> {
        check_id("sandbox", id)?;
        let subject = format!("sandbox {id}");
        let resp = self.send(
            "PATCH",
            &format!("/sandboxes/{id}/metadata"),
            Self::body(patch),
            &subject,
        )?;
        self.json(resp, &subject)
    }

    /// Every snapshot, or those named `name` exactly, or of sandbox `sandbox_id`.
    pub fn snapshots(&self, name: Option<&str>, sandbox_id: Option<&str>) -> Result<Vec<Snapshot>> {
        let mut filter = String::new();
        if let Some(name) = name {
            filter.push_str(&format!("&name={}", encode(name)));
        }
        if let Some(id) = sandbox_id {
            filter.push_str(&format!("&sandboxId={}", encode(id)));
        }
        all_pages(
            |s: &Snapshot| &s.id,
            |page| {
                let path = format!("/snapshots?page={page}&pageSize={PAGE_SIZE}{filter}");
                let list: SnapshotList = self.get_json(&path, "the snapshot list")?;
                Ok((list.items, list.pagination))
            },
        )
    }

    pub fn get_snapshot(&self, id: &str) -> Result<Snapshot> {
        check_id("snapshot", id)?;
        self.get_json(&format!("/snapshots/{id}"), &format!("snapshot {id}"))
    }

    pub fn delete_snapshot(&self, id: &str) -> Result<()> {
        check_id("snapshot", id)?;
        self.send(
            "DELETE",
            &format!("/snapshots/{id}"),
            None,
            &format!("snapshot {id}"),
        )
        .map(drop)
    }

    /// The server's release (`GET /version`, outside the API; no key needed).
    pub fn version(&self) -> Result<String> {
        let subject = "the server's version";
        let resp = self.send_to("GET", &self.at_root("/version")?, None, subject)?;
        self.json::<ServerVersion>(resp, subject).map(|v| v.version)
    }

    pub fn delete(&self, id: &str) -> Result<()> {
        check_id("sandbox", id)?;
        self.send(
            "DELETE",
            &format!("/sandboxes/{id}"),
            None,
            &format!("sandbox {id}"),
        )
        .map(drop)
    }

    pub fn pause(&self, id: &str) -> Result<()> {
        check_id("sandbox", id)?;
        self.send(
            "POST",
            &format!("/sandboxes/{id}/pause"),
            None,
            &format!("sandbox {id}"),
        )
        .map(drop)
    }

    pub fn resume(&self, id: &str) -> Result<()> {
        check_id("sandbox", id)?;
        self.send(
            "POST",
            &format!("/sandboxes/{id}/resume"),
            None,
            &format!("sandbox {id}"),
        )
        .map(drop)
    }

    pub fn renew(&self, id: &str, expires_at: String) -> Result<String> {
        check_id("sandbox", id)?;
        let subject = format!("sandbox {id}");
        let resp = self.send(
            "POST",
            &format!("/sandboxes/{id}/renew-expiration"),
            Self::body(&RenewRequest { expires_at }),
            &subject,
        )?;
        self.json::<RenewResponse>(resp, &subject)
            .map(|r| r.expires_at)
    }

    pub fn endpoint(&self, id: &str, port: u16, use_server_proxy: bool) -> Result<Endpoint> {
        check_id("sandbox", id)?;
        let subject = format!("sandbox {id}");
        let path = format!("/sandboxes/{id}/endpoints/{port}?use_server_proxy={use_server_proxy}");
        let resp = self.send("GET", &path, None, &subject)?;
        self.json(resp, &subject)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's paged list: newest first, sorted again for every page
    /// request; `change(read, page)` runs before page `page` of whole read
    /// `read` (both from 1) is answered.
    struct Server<F> {
        items: Vec<String>,
        page_size: usize,
        reads: u32,
        change: F,
    }

    impl<F: FnMut(&mut Vec<String>, u32, u32)> Server<F> {
        fn new(n: usize, change: F) -> Server<F> {
            Server {
                items: (0..n).rev().map(|i| format!("s{i:03}")).collect(),
                page_size: 2,
                reads: 0,
                change,
            }
        }

        fn page(&mut self, n: u32) -> Result<(Vec<String>, Option<Pagination>)> {
            if n == 1 {
                self.reads += 1;
            }
            (self.change)(&mut self.items, self.reads, n);
            let from = (n as usize - 1) * self.page_size;
            let items: Vec<String> = self
                .items
                .iter()
                .skip(from)
                .take(self.page_size)
                .cloned()
                .collect();
            let pagination = Pagination {
                has_next_page: from + self.page_size < self.items.len(),
                total_items: Some(self.items.len() as u64),
            };
            Ok((items, Some(pagination)))
        }

        fn read(&mut self) -> Vec<String> {
            let mut all = all_pages(|s: &String| s, |n| self.page(n)).unwrap();
            all.sort();
            all
        }
    }

    fn ids(range: std::ops::Range<usize>) -> Vec<String> {
        range.map(|i| format!("s{i:03}")).collect()
    }

    #[test]
    fn a_list_that_does_not_change_is_read_once() {
        let mut server = Server::new(7, |_, _, _| {});
        assert_eq!(server.read(), ids(0..7));
        assert_eq!(server.reads, 1);
        let mut empty = Server::new(0, |_, _, _| {});
        assert_eq!(empty.read(), Vec::<String>::new());
    }

    #[test]
    fn a_list_that_changed_between_pages_is_read_again() {
        // Made before page 2 of the first read: page 2 repeats the last item
        // of page 1 (the offset moved), so the list is read again, whole.
        let mut made = Server::new(7, |items, read, page| {
            if (read, page) == (1, 2) {
                items.insert(0, "s100".into());
            }
        });
        let mut want = ids(0..7);
        want.push("s100".into());
        assert_eq!(made.read(), want);
        assert_eq!(made.reads, 2);

        // Killed before page 3 (one already read): page 3 would skip the item
        // after the killed one, and `totalItems` shows it.
        let mut killed = Server::new(7, |items, read, page| {
            if (read, page) == (1, 3) {
                items.retain(|i| i != "s006");
            }
        });
        assert_eq!(killed.read(), ids(0..6));
        assert_eq!(killed.reads, 2);

        // A list that keeps changing: four reads, then each id once.
        let mut busy = Server::new(7, |items, _, page| {
            if page == 2 {
                let next = format!("s{:03}", 100 + items.len());
                items.insert(0, next);
            }
        });
        let got = busy.read();
        assert_eq!(busy.reads, MAX_READS);
        let mut unique = got.clone();
        unique.dedup();
        assert_eq!(got, unique, "repeated ids");
        assert!(ids(0..7).iter().all(|i| got.contains(i)), "{got:?}");
    }
}
