//! Watches: newline-delimited `{"type", "object"}` events streamed from the store's history and
//! live feed, with selector transitions, bookmarks, timeouts, `sendInitialEvents` and 410 Gone.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::registry::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::server::{Body, Shared};
use crate::status::ApiError;
use crate::store::{StoredEvent, to_served};
use crate::table::{self, IncludeObject};

/// How watched objects are rendered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Render {
    /// The object.
    Object,
    /// `PartialObjectMetadata`.
    Metadata,
    /// A one-row Table.
    Table(IncludeObject),
}

/// What one watch asks for.
pub struct WatchRequest {
    /// The served type.
    pub t: Arc<ResourceType>,
    /// The served version.
    pub version: String,
    /// Namespace filter (`None` = all namespaces).
    pub namespace: Option<String>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `resourceVersion` (empty or `0` = start with the current state).
    pub resource_version: String,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// `sendInitialEvents=true`.
    pub send_initial: bool,
    /// Rendering.
    pub render: Render,
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn gone(message: String) -> Bytes {
    line("ERROR", &ApiError::gone(message).to_status())
}

struct Filter {
    t: Arc<ResourceType>,
    version: String,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    render: Render,
}

impl Filter {
    fn matches(&self, served: &Value) -> bool {
        self.labels.matches_object(served) && self.fields.matches(served)
    }

    fn render(&self, obj: Value) -> Value {
        match self.render {
            Render::Object => obj,
            Render::Metadata => table::partial_metadata(&obj),
            Render::Table(inc) => {
                let rv = obj["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                table::render(&self.t, &self.version, &[obj], &rv, inc)
            }
        }
    }

    /// The event a stored change produces for this watch, if any.
    fn event(&self, ev: &StoredEvent) -> Option<Bytes> {
        if ev.storage != self.t.storage {
            return None;
        }
        if let Some(ns) = &self.namespace
            && *ns != ev.namespace
        {
            return None;
        }
        let obj = to_served(&self.t, &self.version, &ev.object);
        let now = self.matches(&obj);
        let kind = match ev.kind {
            "MODIFIED" => {
                let before = ev
                    .prev
                    .as_ref()
                    .map(|p| self.matches(&to_served(&self.t, &self.version, p)))
                    .unwrap_or(false);
                match (before, now) {
                    (true, true) => "MODIFIED",
                    (false, true) => "ADDED",
                    (true, false) => "DELETED",
                    (false, false) => return None,
                }
            }
            other if now => other,
            _ => return None,
        };
        Some(line(kind, &self.render(obj)))
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        line(
            "BOOKMARK",
            &json!({"kind": self.t.kind, "apiVersion": self.t.api_version(&self.version), "metadata": meta}),
        )
    }
}

/// Start a watch and return its streaming response.
pub fn start(shared: Arc<Shared>, w: WatchRequest) -> Response<Body> {
    let filter = Filter {
        t: w.t.clone(),
        version: w.version.clone(),
        namespace: w.namespace.clone(),
        labels: w.labels,
        fields: w.fields,
        render: w.render,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(512);
    let expire = {
        let mut f = shared.faults();
        if f.expire_watches > 0 {
            f.expire_watches -= 1;
            true
        } else {
            false
        }
    };
    let mut first: Vec<Bytes> = Vec::new();
    let mut live: Option<(broadcast::Receiver<Arc<StoredEvent>>, u64)> = None;
    {
        let st = shared.lock();
        let rv_param = w.resource_version.as_str();
        if expire {
            first.push(gone(format!(
                "too old resource version: {} ({})",
                rv_param, st.rv
            )));
        } else if rv_param.is_empty() || rv_param == "0" || w.send_initial {
            for obj in st.list(&w.t.storage, w.namespace.as_deref()) {
                let served = to_served(&w.t, &w.version, &obj);
                if filter.matches(&served) {
                    first.push(line("ADDED", &filter.render(served)));
                }
            }
            if w.send_initial && w.bookmarks {
                first.push(filter.bookmark(st.rv, true));
            }
            live = Some((st.tx.subscribe(), st.rv));
        } else {
            match rv_param.parse::<u64>() {
                Err(_) => first.push(line(
                    "ERROR",
                    &ApiError::bad_request(format!("invalid resource version: {rv_param}"))
                        .to_status(),
                )),
                Ok(n) if n + 1 < st.oldest_watchable => {
                    first.push(gone(format!(
                        "too old resource version: {n} ({})",
                        st.oldest_watchable
                    )));
                }
                Ok(n) => {
                    for ev in st.history.iter().filter(|e| e.rv > n) {
                        if let Some(b) = filter.event(ev) {
                            first.push(b);
                        }
                    }
                    live = Some((st.tx.subscribe(), st.rv.max(n)));
                }
            }
        }
    }
    let mut closed = shared.close_watches.subscribe();
    closed.mark_unchanged();
    let interval = shared.bookmark_interval;
    tokio::spawn(async move {
        for b in first {
            if tx.send(b).await.is_err() {
                return;
            }
        }
        let Some((mut events, mut last_rv)) = live else {
            return;
        };
        let deadline = w.timeout.map(|d| tokio::time::Instant::now() + d);
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => futures::future::pending().await,
                }
            };
            tokio::select! {
                ev = events.recv() => match ev {
                    Ok(ev) => {
                        if ev.rv <= last_rv { continue; }
                        last_rv = ev.rv;
                        if let Some(b) = filter.event(&ev)
                            && tx.send(b).await.is_err()
                        {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let _ = tx.send(gone(format!("too old resource version: {last_rv}"))).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = ticker.tick(), if w.bookmarks => {
                    if tx.send(filter.bookmark(last_rv, false)).await.is_err() { return; }
                }
                _ = sleep => return,
                _ = closed.changed() => return,
                _ = tx.closed() => return,
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(Frame::data(b)), rx))
    })
    .boxed();
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .header("cache-control", "no-cache, private")
        .body(StreamBody::new(stream).boxed_unsync())
        .unwrap_or_else(|_| Response::new(http_body_util::Full::new(Bytes::new()).boxed_unsync()))
}
