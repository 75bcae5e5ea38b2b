//! The five reconcilers, one shape: `reconcile(obj, ctx) -> Result<Action, Error>` over a pure
//! decision, run by [`drive`] (counted, timed, retried with per-object exponential backoff), and
//! writing status through the one status writer [`write_status`].
//!
//! - [`resource`]: a Resource's group of instances against its bookings (start, stop, lock tags).
//! - [`booking`]: a Booking's phase and conditions.
//! - [`monitor`]: a ResourceMonitor's Resources, one per tag group.
//! - [`scheduler`]: a BookingScheduler's bookings, one per fire time.
//! - [`notification`]: a Booking's notifications, each sent at most once.

pub mod booking;
pub mod monitor;
pub mod notification;
pub mod resource;
pub mod scheduler;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use booking_shared::api::{Booking, BookingScheduler, Resource, ResourceMonitor};
use futures::StreamExt;
use kube::api::{Api, Patch};
use kube::runtime::controller::{Action, Controller};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::{Context, patch_params};
use crate::error::{Error, Result};

/// Runs `controller` with `reconcile` until `shutdown` resolves. Every reconcile is counted and
/// timed under `kind` (the metric label); a failed one is counted by its error's label and
/// retried after the context's backoff for that object (1 s doubling to 5 min), which a success
/// resets.
pub async fn drive<K, F, Fut>(
    kind: &'static str,
    controller: Controller<K>,
    reconcile: F,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    K: Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action>> + Send + 'static,
{
    let reconcile = Arc::new(reconcile);
    controller
        .graceful_shutdown_on(shutdown)
        .run(
            move |obj: Arc<K>, ctx: Arc<Context>| {
                // Called when the controller takes the object from its queue, before any of the
                // reconciles taken with it runs: what a reconciler does before its first await
                // (the Resource reconciler's turn to prepare a start) is done for all of them.
                counted(
                    kind,
                    retry_key(kind, obj.as_ref()),
                    reconcile(obj, ctx.clone()),
                    ctx,
                )
            },
            move |obj: Arc<K>, err: &Error, ctx: Arc<Context>| {
                Action::requeue(after_failure(
                    kind,
                    &retry_key(kind, obj.as_ref()),
                    err,
                    &ctx,
                ))
            },
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

/// A reconcile of the object known to the backoff as `key`, counted and timed under `kind`; a
/// success resets the object's backoff. Every controller's reconciles run through it.
pub async fn counted(
    kind: &'static str,
    key: String,
    reconciling: impl Future<Output = Result<Action>>,
    ctx: Arc<Context>,
) -> Result<Action> {
    let began = Instant::now();
    let result = reconciling.await;
    ctx.metrics.reconciled(kind, began.elapsed().as_secs_f64());
    if result.is_ok() {
        ctx.reconciled_ok(&key);
    }
    result
}

/// How soon the object known to the backoff as `key` is reconciled again after `err`: a write
/// from a stale read at once (the watch brings the newer version), anything else after the
/// context's backoff for that object. The failure is counted by its error's label.
pub fn after_failure(
    kind: &'static str,
    key: &str,
    err: &Error,
    ctx: &Context,
) -> std::time::Duration {
    ctx.metrics.failed(kind, err.metric_label());
    if err.is_conflict() {
        // Written from a read a newer version overtook: the watch brings that version, and the
        // reconcile runs again on it without a backoff.
        tracing::debug!(kind, error = %err, "status written from a stale read; again");
        return RETRY_SOON;
    }
    let delay = ctx.retry_after_failure(key);
    tracing::warn!(kind, error = %err, retry_in = ?delay, "reconcile failed; retrying");
    delay
}

/// How soon a reconcile that met a newer version of its object than it read (a write refused
/// as a conflict, a fresh read that differs) runs again, should the watch not bring it first.
pub const RETRY_SOON: std::time::Duration = std::time::Duration::from_millis(200);

/// The key of `obj` in the context's backoff.
pub fn retry_key<K: kube::Resource>(kind: &str, obj: &K) -> String {
    let meta = obj.meta();
    format!(
        "{kind}/{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// Namespace and name of a namespaced object, recorded on the current tracing span.
pub fn ns_name<K: kube::Resource>(obj: &K) -> Result<(String, String)> {
    let ns = obj
        .meta()
        .namespace
        .clone()
        .ok_or_else(|| Error::Malformed("object has no namespace".into()))?;
    let name = obj
        .meta()
        .name
        .clone()
        .ok_or_else(|| Error::Malformed("object has no name".into()))?;
    tracing::Span::current()
        .record("namespace", ns.as_str())
        .record("name", name.as_str());
    Ok((ns, name))
}

/// A kind with a status subresource the controller writes.
pub trait HasStatus:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
{
    /// The status type.
    type Status: Serialize + Default + PartialEq;
    /// Whether one reconciler alone writes this kind's status: then [`write_status`] remembers
    /// what it wrote until the cache shows it (see [`StatusMemo`]).
    const ONE_WRITER: bool;
    /// The object's status, if any.
    fn status(&self) -> Option<&Self::Status>;
}

macro_rules! has_status {
    ($($kind:ty => $status:ty, $one:expr),* $(,)?) => {$(
        impl HasStatus for $kind {
            type Status = $status;
            const ONE_WRITER: bool = $one;
            fn status(&self) -> Option<&$status> {
                self.status.as_ref()
            }
        }
    )*};
}

has_status!(
    Resource => booking_shared::api::ResourceStatus, true,
    // The booking reconciler (phase, conditions) and the notification reconciler (what was sent).
    Booking => booking_shared::api::BookingStatus, false,
    ResourceMonitor => booking_shared::api::ResourceMonitorStatus, true,
    BookingScheduler => booking_shared::api::BookingSchedulerStatus, true,
);

/// The statuses just written, until the cache shows them. A reconcile that runs again before the
/// watch has delivered its own last write (woken by that write's neighbours: a booking's phase,
/// an inventory tick) reads the object as it was before that write; diffed against that, its
/// status would be sent again. With the memo it is diffed against what was written instead.
///
/// An entry holds the resourceVersion the write was diffed against: it applies only while the
/// cached object still has exactly that version (equality only: resourceVersions are opaque).
/// Once the cache has moved on (to this write, or to anyone else's), the cache is the truth
/// again. Entries expire after [`StatusMemo::TTL`], so the memo holds only the last seconds'
/// writes.
#[derive(Default)]
pub struct StatusMemo {
    entries: std::sync::Mutex<MemoEntries>,
}

#[derive(Default)]
struct MemoEntries {
    by_object: std::collections::HashMap<String, Memo>,
    /// Write instants in order, for expiry.
    order: std::collections::VecDeque<(Instant, String)>,
}

struct Memo {
    uid: String,
    diffed_against: String,
    /// The status written, as JSON text: a few hundred bytes, where the same status as a
    /// `Value` tree is several times that (1,024 Resources' memos held 1.9 MiB as values).
    written: Box<str>,
    at: Instant,
}

impl MemoEntries {
    /// Drops the entries older than [`StatusMemo::TTL`] at `now`, and gives back the room of a
    /// burst of writes once it has expired (the tables keep their largest size otherwise).
    fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front()
            && now.duration_since(*at) >= StatusMemo::TTL
        {
            let Some((_, old)) = self.order.pop_front() else {
                break;
            };
            if self
                .by_object
                .get(&old)
                .is_some_and(|m| now.duration_since(m.at) >= StatusMemo::TTL)
            {
                self.by_object.remove(&old);
            }
        }
        if self.by_object.capacity() > 2 * self.by_object.len() + 64 {
            self.by_object.shrink_to_fit();
            self.order.shrink_to_fit();
        }
    }
}

impl StatusMemo {
    /// How long an entry may wait for the watch.
    pub const TTL: std::time::Duration = std::time::Duration::from_secs(30);

    fn key<K: HasStatus>(obj: &K) -> Option<String> {
        let meta = obj.meta();
        Some(format!(
            "{}/{}/{}",
            K::kind(&()),
            meta.namespace.as_deref()?,
            meta.name.as_deref()?
        ))
    }

    /// What was last written to `obj`'s status, while the cached `obj` is the version that
    /// write was diffed against.
    fn written<K: HasStatus>(&self, obj: &K) -> Option<Value> {
        let key = Self::key(obj)?;
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.expire(Instant::now());
        let memo = entries.by_object.get(&key)?;
        let meta = obj.meta();
        if meta.uid.as_deref() == Some(memo.uid.as_str())
            && meta.resource_version.as_deref() == Some(memo.diffed_against.as_str())
        {
            // Written by this process from a `Value`: it reads back.
            return serde_json::from_str(&memo.written).ok();
        }
        entries.by_object.remove(&key);
        None
    }

    fn remember<K: HasStatus>(&self, obj: &K, written: &Value) {
        let meta = obj.meta();
        let (Some(key), Some(uid), Some(version)) = (
            Self::key(obj),
            meta.uid.clone(),
            meta.resource_version.clone(),
        ) else {
            return;
        };
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.expire(now);
        entries.order.push_back((now, key.clone()));
        entries.by_object.insert(
            key,
            Memo {
                uid,
                diffed_against: version,
                written: written.to_string().into_boxed_str(),
                at: now,
            },
        );
    }

    /// Entries held (for tests).
    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_object
            .len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The one status writer: brings `obj`'s status from what the object holds to `new`, with a
/// JSON merge patch of the status subresource (never the spec) computed from the two typed
/// values. Only what changed is sent; a field `new` leaves out is sent as `null` and so removed.
/// With `guard`, the patch carries that resourceVersion and fails with a conflict when the
/// object changed since. Returns the object as the API server stored it when anything was
/// written (whole: what the caches drop, such as annotations, is in it), `None` otherwise.
pub async fn write_status<K: HasStatus>(
    ctx: &Context,
    obj: &K,
    new: &K::Status,
    guard: Option<&str>,
) -> Result<Option<K>> {
    // A guarded write follows a fresh read: the memo is not needed.
    let memo = (K::ONE_WRITER && guard.is_none())
        .then(|| ctx.status_memo.written(obj))
        .flatten();
    let new_value = serde_json::to_value(new)?;
    let old_value = match memo {
        Some(written) => written,
        None => status_value(obj)?,
    };
    let Some(patch) = patch_between(&old_value, &new_value, guard) else {
        return Ok(None);
    };
    let _turn = ctx.api_write_permit().await;
    let written = send_status_patch(&ctx.client, obj, &patch).await?;
    if K::ONE_WRITER {
        ctx.status_memo.remember(obj, &new_value);
    }
    Ok(Some(written))
}

/// [`write_status`] with `client`, outside a reconcile (no API-write bound, no guard).
pub async fn write_status_with<K: HasStatus>(
    client: &kube::Client,
    obj: &K,
    new: &K::Status,
) -> Result<bool> {
    let Some(patch) = status_patch(obj, new, None)? else {
        return Ok(false);
    };
    send_status_patch(client, obj, &patch).await?;
    Ok(true)
}

/// The merge patch taking `obj`'s status to `new`; `None` when nothing changes.
fn status_patch<K: HasStatus>(
    obj: &K,
    new: &K::Status,
    guard: Option<&str>,
) -> Result<Option<Value>> {
    Ok(patch_between(
        &status_value(obj)?,
        &serde_json::to_value(new)?,
        guard,
    ))
}

/// `obj`'s status as JSON (the default status when it has none).
fn status_value<K: HasStatus>(obj: &K) -> Result<Value> {
    let default = K::Status::default();
    Ok(serde_json::to_value(obj.status().unwrap_or(&default))?)
}

/// The status patch taking `old` to `new`, with `guard` as its resourceVersion; `None` when
/// nothing changes.
fn patch_between(old: &Value, new: &Value, guard: Option<&str>) -> Option<Value> {
    // Both sides serialize to JSON objects, so the patch is one: empty when nothing changed.
    let changes = merge_patch(old, new);
    if changes.as_object().is_some_and(|m| m.is_empty()) {
        return None;
    }
    let mut patch = serde_json::json!({ "status": changes });
    if let Some(version) = guard {
        patch["metadata"] = serde_json::json!({ "resourceVersion": version });
    }
    Some(patch)
}

async fn send_status_patch<K: HasStatus>(
    client: &kube::Client,
    obj: &K,
    patch: &Value,
) -> Result<K> {
    let meta = obj.meta();
    let (Some(ns), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return Err(Error::Malformed("object has no namespace or name".into()));
    };
    Ok(Api::<K>::namespaced(client.clone(), ns)
        .patch_status(name, &patch_params(), &Patch::Merge(patch))
        .await?)
}

/// The JSON merge patch (RFC 7386) taking `old` to `new`: changed members, `null` for removed
/// ones, objects recursively, anything else (arrays included) replaced whole.
fn merge_patch(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut out = serde_json::Map::new();
            for (k, v) in n {
                match o.get(k) {
                    Some(ov) if ov == v => {}
                    Some(ov @ Value::Object(_)) if v.is_object() => {
                        out.insert(k.clone(), merge_patch(ov, v));
                    }
                    _ => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                out.insert(k.clone(), Value::Null);
            }
            Value::Object(out)
        }
        _ => new.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::merge_patch;
    use booking_shared::api::{BookingPhase, BookingStatus, ResourceState, ResourceStatus};
    use serde_json::json;

    fn resource(version: &str, uid: &str) -> booking_shared::api::Resource {
        serde_json::from_value(json!({
            "apiVersion": "manager.kotaico.de/v1",
            "kind": "Resource",
            "metadata": {"name": "ec2.a", "namespace": "ns", "uid": uid, "resourceVersion": version},
            "spec": {"type": "ec2", "tag": "a"},
        }))
        .unwrap()
    }

    #[test]
    fn the_memo_holds_a_write_while_the_cache_shows_the_version_it_was_diffed_against() {
        let memo = super::StatusMemo::default();
        let written = json!({"status": "RUNNING"});
        memo.remember(&resource("5", "u1"), &written);
        assert_eq!(memo.len(), 1);
        // The cache has not caught up: the reconcile diffs against what was written.
        assert_eq!(memo.written(&resource("5", "u1")), Some(written.clone()));
        // Another object of the same name (deleted and created again) is not this one.
        assert_eq!(memo.written(&resource("5", "u2")), None);
        // The entry was dropped with that.
        assert_eq!(memo.written(&resource("5", "u1")), None);
        memo.remember(&resource("5", "u1"), &written);
        // The cache moved on (to this write or anyone else's): it is the truth again.
        assert_eq!(memo.written(&resource("6", "u1")), None);
        assert!(memo.is_empty());
        assert_eq!(memo.written(&resource("5", "u1")), None);
    }

    #[test]
    fn expired_memos_go_and_give_back_the_room_of_their_burst() {
        let memo = super::StatusMemo::default();
        let written = json!({"status": "RUNNING", "conditions": [{"type": "Ready"}]});
        for i in 0..2_000 {
            let mut r = resource("5", "u1");
            r.metadata.name = Some(format!("ec2.{i}"));
            memo.remember(&r, &written);
        }
        assert_eq!(memo.len(), 2_000);
        let mut entries = memo.entries.lock().unwrap();
        let full = entries.by_object.capacity();
        entries.expire(std::time::Instant::now() + super::StatusMemo::TTL);
        assert!(entries.by_object.is_empty() && entries.order.is_empty());
        assert!(
            entries.by_object.capacity() < full / 10,
            "{}",
            entries.by_object.capacity()
        );
    }

    fn patch<S: serde::Serialize>(old: &S, new: &S) -> serde_json::Value {
        merge_patch(
            &serde_json::to_value(old).unwrap(),
            &serde_json::to_value(new).unwrap(),
        )
    }

    #[test]
    fn a_typed_status_change_sends_what_changed_and_clears_what_went() {
        let old = ResourceStatus {
            status: Some(ResourceState::Running),
            locked_by: Some("ann".into()),
            locked_until: Some("2031-01-10T11:00:00Z".into()),
            active_booking: Some("b1".into()),
            instances: 2,
            running: 2,
            ..Default::default()
        };
        let new = ResourceStatus {
            status: Some(ResourceState::Stopped),
            instances: 2,
            ..Default::default()
        };
        // Every field that the new status leaves out is cleared, by its serde name, whatever
        // it is renamed to; unchanged fields are not sent.
        let p = patch(&old, &new);
        let cleared: Vec<&str> = p
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, v)| v.is_null())
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(cleared.len(), 3, "{p}");
        assert!(p.get("instances").is_none(), "{p}");
        assert_eq!(p["status"], json!("STOPPED"));
        assert_eq!(p["running"], json!(0));
        // Applying the patch gives the new status.
        let mut applied = serde_json::to_value(&old).unwrap();
        json_patch::merge(&mut applied, &p);
        assert_eq!(applied, serde_json::to_value(&new).unwrap());
    }

    #[test]
    fn fields_copied_from_the_old_status_are_not_written() {
        let old = BookingStatus {
            status: Some(BookingPhase::Scheduled),
            notifications_sent: vec!["0:email:ann@example.com".into()],
            ..Default::default()
        };
        let new = BookingStatus {
            status: Some(BookingPhase::InProgress),
            ..old.clone()
        };
        assert_eq!(patch(&old, &new), json!({"status": "IN PROGRESS"}));
        assert_eq!(patch(&new, &new), json!({}));
    }
}
