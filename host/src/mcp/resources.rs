//! Resources (docs/mcp.md, Resources): every method with a `resource=`
//! template that the provider serves is a resource template
//! (`resources/templates/list`); `resources/read` of a URI of one runs the
//! method with the URI's variables and the tag's `resource.` params, and
//! answers text (valid UTF-8) or a blob, with a MIME type from the name. A
//! method that `watches=` it backs subscriptions: each of its events is a
//! `notifications/resources/updated` of the subscribed URI (legacy
//! `resources/subscribe`, or a 2026-07-28 `subscriptions/listen` stream).
//! Nothing here names a method: the contract's tags say it all.

use super::requests::Requests;
use super::template::Template;
use crate::contract::table::{METHODS, Method};
use crate::contract::tools::{TOOLS, Tool};
use crate::rpc::errors::RpcError;
use crate::rpc::server::run_request;
use base64::Engine as _;
use epp_protocol::EppCode;
use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::model::{
    ContentBlock, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
    ResourceUpdatedNotificationParam, SubscriptionFilter,
};
use rmcp::service::{Peer, SubscriptionContext};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Subscriptions one session may hold at once (each is a watch: an
/// instance and a poll of the sandbox every interval).
pub const SUBSCRIPTIONS: usize = 64;

/// One method that reads resources, as this server serves it.
#[derive(Clone)]
struct Served {
    method: &'static Method,
    tool: Option<&'static Tool>,
    template: Template,
    /// Its `resource.` params.
    fixed: Map<String, Value>,
    /// The method whose events are changes of its resources, if served.
    watcher: Option<&'static Method>,
}

/// The resources of one server, and the subscriptions of one session.
#[derive(Default)]
pub struct Resources {
    served: Vec<Served>,
    subscriptions: Mutex<HashMap<String, Arc<CancellationToken>>>,
    /// Cancelled when the session ends: every watch of its subscriptions stops.
    session: CancellationToken,
}

impl Resources {
    /// The resource methods `listed` says yes to (those of the listed
    /// tools), watched by methods `serves` says yes to.
    pub fn new(listed: &dyn Fn(&Method) -> bool, serves: &dyn Fn(&Method) -> bool) -> Resources {
        let served = METHODS
            .iter()
            .filter(|m| listed(m))
            .filter_map(|method| {
                let resource = method.resource?;
                let fixed = resource
                    .params
                    .iter()
                    .filter_map(|(k, json)| Some((k.to_string(), serde_json::from_str(json).ok()?)))
                    .collect();
                let watcher = METHODS
                    .iter()
                    .find(|w| w.watches == Some(method.name) && serves(w));
                Some(Served {
                    method,
                    tool: TOOLS.iter().find(|t| t.method == method.name),
                    template: Template::new(resource.template),
                    fixed,
                    watcher,
                })
            })
            .collect();
        Resources {
            served,
            ..Resources::default()
        }
    }

    /// The same resources for another session (over HTTP), with no
    /// subscriptions: each session's are its own, and end with it.
    pub fn for_session(&self) -> Resources {
        Resources {
            served: self.served.clone(),
            ..Resources::default()
        }
    }

    /// Stops every watch of this session's subscriptions.
    pub fn end_session(&self) {
        self.session.cancel();
    }

    /// Whether it serves any resource; whether any can be subscribed to.
    pub fn any(&self) -> (bool, bool) {
        (
            !self.served.is_empty(),
            self.served.iter().any(|s| s.watcher.is_some()),
        )
    }

    pub fn templates(&self) -> Vec<ResourceTemplate> {
        self.served
            .iter()
            .map(|s| {
                let name = s.tool.map_or(s.method.name, |t| t.name);
                let mut t = ResourceTemplate::new(s.template.text, name);
                if let Some(tool) = s.tool {
                    t = t.with_title(tool.title).with_description(tool.description);
                }
                t
            })
            .collect()
    }

    /// The served method of `uri` and the URI's variables.
    fn find(&self, uri: &str) -> Option<(&Served, Map<String, Value>)> {
        self.served
            .iter()
            .find_map(|s| Some((s, s.template.matches(uri)?)))
    }

    /// The link to the resource a call of `method` with `params` reads, for
    /// a result whose content is too large to carry (`size` bytes).
    pub fn link(
        &self,
        method: &Method,
        params: &Map<String, Value>,
        size: Option<u64>,
    ) -> Option<(String, ContentBlock)> {
        let served = self.served.iter().find(|s| s.method.name == method.name)?;
        let uri = served.template.expand(params)?;
        let name = uri.rsplit('/').next().unwrap_or(&uri).to_string();
        let mut link = Resource::new(uri.clone(), name);
        if let Some(mime) = mime_guess::from_path(&uri).first() {
            link = link.with_mime_type(mime.essence_str());
        }
        if let Some(size) = size {
            link = link.with_size(size);
        }
        Some((uri, ContentBlock::resource_link(link)))
    }

    /// The subscriptions a `subscriptions/listen` may hold of `requested`.
    pub fn accepted(&self, requested: &SubscriptionFilter) -> SubscriptionFilter {
        let uris: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| self.find(uri).is_some_and(|(s, _)| s.watcher.is_some()))
            .take(SUBSCRIPTIONS)
            .cloned()
            .collect();
        let mut filter = SubscriptionFilter::default();
        filter.resource_subscriptions = (!uris.is_empty()).then_some(uris);
        filter
    }
}

/// An EPP error as the JSON-RPC error of a resource request.
fn resource_error(uri: &str, e: &RpcError) -> McpError {
    let message = format!("{} {}", e.code.as_str(), e.wire_message());
    let data = Some(serde_json::json!({"uri": uri, "code": e.code.as_str()}));
    match e.code {
        EppCode::NotFound => McpError::resource_not_found(message, data),
        EppCode::InvalidArgument => McpError::invalid_params(message, data),
        _ => McpError::internal_error(message, data),
    }
}

fn unknown(uri: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "{uri}: not a URI of this server's resources (resources/templates/list gives their templates)"
        ),
        None,
    )
}

/// The contents of `uri` from a read's answer: its `content` (base64, by the
/// `resource.` params) as text when it is UTF-8, else as a blob.
fn contents(uri: &str, answer: &Value) -> Result<ResourceContents, McpError> {
    let encoded = answer.get("content").and_then(Value::as_str).unwrap_or("");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| {
            McpError::internal_error(
                format!("{uri}: the provider's content is not base64 ({e})"),
                None,
            )
        })?;
    let guessed = mime_guess::from_path(uri).first();
    Ok(match String::from_utf8(bytes) {
        Ok(text) => ResourceContents::text(text, uri).with_mime_type(
            guessed.map_or("text/plain".to_string(), |m| m.essence_str().to_string()),
        ),
        Err(_) => ResourceContents::blob(encoded, uri).with_mime_type(
            guessed.map_or("application/octet-stream".to_string(), |m| {
                m.essence_str().to_string()
            }),
        ),
    })
}

impl Resources {
    /// `resources/read`: the resource at `uri`, within `--max-output-bytes`.
    pub async fn read(
        &self,
        requests: &Requests,
        uri: &str,
        cancelled: impl Future<Output = ()>,
    ) -> Result<ReadResourceResult, McpError> {
        let (served, mut params) = self.find(uri).ok_or_else(|| unknown(uri))?;
        params.extend(served.fixed.clone());
        let _slot = requests.slot().map_err(|e| resource_error(uri, &e))?;
        let (ctx, _notes) = requests.ctx(requests.opts.serve.max_output_bytes);
        let timeout = requests.opts.serve.call_timeout;
        match run_request(&ctx, served.method.name, params, timeout, cancelled).await {
            Ok(answer) => Ok(ReadResourceResult::new(vec![contents(uri, &answer)?])),
            Err(e) => Err(resource_error(uri, &e)),
        }
    }

    /// `resources/subscribe` (2025-11-25): watches `uri` until unsubscribed
    /// or the session ends; each change is a `notifications/resources/updated`.
    pub fn subscribe(
        self: &Arc<Self>,
        requests: &Arc<Requests>,
        uri: String,
        peer: Peer<RoleServer>,
    ) -> Result<(), McpError> {
        let stop = {
            let mut subscriptions = self.subscriptions.lock().expect("lock");
            if subscriptions.contains_key(&uri) {
                return Ok(());
            }
            if subscriptions.len() >= SUBSCRIPTIONS {
                return Err(McpError::invalid_params(
                    format!(
                        "{SUBSCRIPTIONS} subscriptions at once at most: unsubscribe from one first"
                    ),
                    None,
                ));
            }
            let stop = Arc::new(self.session.child_token());
            subscriptions.insert(uri.clone(), stop.clone());
            stop
        };
        let watch = match self.watch(requests, &uri, (*stop).clone()) {
            Ok(watch) => watch,
            Err(e) => {
                self.subscriptions.lock().expect("lock").remove(&uri);
                return Err(e);
            }
        };
        let resources = self.clone();
        requests.background.lock().expect("lock").spawn(async move {
            let deliver = |uri: String| {
                let peer = peer.clone();
                async move {
                    let param = ResourceUpdatedNotificationParam::new(uri);
                    peer.notify_resource_updated(param).await.is_ok()
                }
            };
            watch.run(deliver).await;
            // Unless it was unsubscribed and subscribed again meanwhile.
            let mut subscriptions = resources.subscriptions.lock().expect("lock");
            if subscriptions
                .get(&watch.uri)
                .is_some_and(|s| Arc::ptr_eq(s, &stop))
            {
                subscriptions.remove(&watch.uri);
            }
        });
        Ok(())
    }

    /// `resources/unsubscribe`: stops the watch of `uri`.
    pub fn unsubscribe(&self, uri: &str) {
        if let Some(stop) = self.subscriptions.lock().expect("lock").remove(uri) {
            stop.cancel();
        }
    }

    /// A `subscriptions/listen` stream (2026-07-28): watches every accepted
    /// URI until the client cancels the stream.
    pub async fn listen(&self, requests: &Arc<Requests>, subscription: SubscriptionContext) {
        let uris = subscription
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let stop = self.session.child_token();
        let (tx, mut changed) = mpsc::channel::<String>(64);
        let mut watches = tokio::task::JoinSet::new();
        for uri in uris {
            match self.watch(requests, &uri, stop.clone()) {
                Ok(watch) => {
                    let tx = tx.clone();
                    watches.spawn(async move {
                        let deliver = |uri: String| {
                            let tx = tx.clone();
                            async move { tx.send(uri).await.is_ok() }
                        };
                        watch.run(deliver).await;
                    });
                }
                Err(e) => tracing::warn!(%uri, error = %e.message, "not watched"),
            }
        }
        drop(tx);
        loop {
            tokio::select! {
                () = subscription.cancelled() => break,
                () = stop.cancelled() => break,
                uri = changed.recv() => match uri {
                    Some(uri) => {
                        if subscription.sink().notify_resource_updated(uri).await.is_err() {
                            break;
                        }
                    }
                    None => break,
                },
            }
        }
        stop.cancel();
        // Each watch ends at `stop` (its request is cancelled); wait for them
        // so no instance outlives the stream.
        while watches.join_next().await.is_some() {}
    }

    /// The watch of `uri`, ready to run.
    fn watch(
        &self,
        requests: &Arc<Requests>,
        uri: &str,
        stop: CancellationToken,
    ) -> Result<Watch, McpError> {
        let (served, vars) = self.find(uri).ok_or_else(|| unknown(uri))?;
        let watcher = served.watcher.ok_or_else(|| {
            McpError::invalid_params(format!("{uri}: this provider cannot watch it"), None)
        })?;
        let params = vars
            .into_iter()
            .filter(|(k, _)| watcher.params.contains(&k.as_str()))
            .collect();
        let slot = requests.slot().map_err(|e| resource_error(uri, &e))?;
        Ok(Watch {
            _slot: slot,
            requests: requests.clone(),
            method: watcher,
            params,
            uri: uri.to_string(),
            stop,
        })
    }
}

/// One subscription's watch: the watcher method's request, each of its
/// events a change of `uri`.
struct Watch {
    /// Its room among `--max-concurrent`, held while it runs.
    _slot: tokio::sync::OwnedSemaphorePermit,
    requests: Arc<Requests>,
    method: &'static Method,
    params: Map<String, Value>,
    uri: String,
    stop: CancellationToken,
}

impl Watch {
    /// Runs until stopped, the watch ends, or `deliver` says the client is gone.
    async fn run<F, Fut>(&self, deliver: F)
    where
        F: Fn(String) -> Fut,
        Fut: Future<Output = bool>,
    {
        let (ctx, mut notes) = self.requests.ctx(self.requests.opts.inline_bytes);
        let timeout = self.requests.opts.serve.call_timeout;
        let work = run_request(
            &ctx,
            self.method.name,
            self.params.clone(),
            timeout,
            self.stop.clone().cancelled_owned(),
        );
        tokio::pin!(work);
        let result = loop {
            tokio::select! {
                biased;
                Some(_) = notes.recv() => {
                    if !deliver(self.uri.clone()).await {
                        self.stop.cancel();
                    }
                }
                result = &mut work => break result,
            }
        };
        match result {
            Err(e) if e.code != EppCode::Cancelled => {
                tracing::warn!(uri = %self.uri, error = %e.wire_message(), "the subscription's watch ended")
            }
            _ => tracing::debug!(uri = %self.uri, "the subscription's watch ended"),
        }
    }
}
