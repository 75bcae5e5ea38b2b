//! The one Event sink of the controller: `events.k8s.io/v1` Events, a repeated one continued as
//! a series.
//!
//! An Event repeated for the same object, type, reason, action and related object within
//! [`SERIES_TTL`] (the window client-go and kube's recorder use) is not created again: the
//! Event first created for it is patched with `series.count` and `series.lastObservedTime`,
//! and keeps its first note. kube's `Recorder` does the same, but keeps a whole copy of every
//! Event it published in the window (about 1.4 KiB each, in a table that never shrinks: after
//! the thousands of Events of 1,000 simultaneous starts the controller held 5.6 MiB of table
//! for the rest of its life) and walks the whole copy on every publish. Here an open series is
//! its key and the name of its Event, the window is swept at most once a minute, and the table
//! is shrunk once what it holds has expired.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use booking_shared::time::{Clock, to_kube_time};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::Semaphore;

use crate::context::FIELD_MANAGER;

/// How long after its last occurrence an Event is continued as a series rather than created
/// anew.
pub const SERIES_TTL: chrono::Duration = chrono::Duration::minutes(6);

/// How often at most the open series are swept for expired ones.
const SWEEP_EVERY: chrono::Duration = chrono::Duration::minutes(1);

/// Longest Event note the API server stores.
const MAX_NOTE: usize = 1000;

/// The Event sink: Events of the controller's reporting instance, each write taking a turn of
/// the context's API-write bound.
pub struct Events {
    client: kube::Client,
    clock: Clock,
    /// `reportingInstance`: this replica's identity.
    instance: String,
    writes: Arc<Semaphore>,
    series: Mutex<Series>,
}

impl Events {
    /// A sink writing with `client`, reporting as `instance`, bounded by `writes`.
    pub fn new(
        client: kube::Client,
        clock: Clock,
        instance: String,
        writes: Arc<Semaphore>,
    ) -> Self {
        Self {
            client,
            clock,
            instance,
            writes,
            series: Mutex::default(),
        }
    }

    /// Publishes an Event about `obj`; a failure to publish is logged (the action it reports
    /// already happened and its outcome is in the status).
    pub async fn publish<K>(&self, obj: &K, warning: bool, reason: &str, action: &str, note: String)
    where
        K: kube::Resource<DynamicType = ()>,
    {
        self.publish_related(obj, None, warning, reason, action, note)
            .await;
    }

    /// [`Events::publish`] with a `related` object (the Event's second object, e.g. the Booking
    /// a scheduler's fire created). Events of one object, reason and action are merged into one
    /// series that keeps the first note, so what differs from one occurrence to the next (each
    /// fire's booking) is given as `related`, and each gets an Event of its own.
    pub async fn publish_related<K>(
        &self,
        obj: &K,
        related: Option<ObjectReference>,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) where
        K: kube::Resource<DynamicType = ()>,
    {
        let regarding = obj.object_ref(&());
        let key = series_key(&regarding, related.as_ref(), warning, reason, action);
        let now = (self.clock)();
        let next = self.lock().next(&key, now);
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let _turn = self.writes.acquire().await.ok();
        let continued = match next {
            Next::Continue { name, count } => {
                let patch = serde_json::json!({
                    "series": EventSeries {
                        count,
                        last_observed_time: micro(now),
                    }
                });
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => Some(Open {
                        name: name.into(),
                        count,
                        last: now,
                    }),
                    // The Event is gone (the API server keeps Events for an hour by default,
                    // and anyone may delete one): the occurrence starts a new one.
                    Err(kube::Error::Api(e)) if e.code == 404 => None,
                    Err(e) => {
                        tracing::warn!(error = %e, reason, "could not publish event");
                        return;
                    }
                }
            }
            Next::Create => None,
        };
        let open = match continued {
            Some(open) => open,
            None => {
                let event = self.event(
                    &regarding,
                    related,
                    warning,
                    reason,
                    action,
                    truncate(note, MAX_NOTE),
                    now,
                );
                match api.create(&PostParams::default(), &event).await {
                    Ok(created) => Open {
                        name: created.metadata.name.unwrap_or_default().into(),
                        count: 1,
                        last: now,
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, reason, "could not publish event");
                        return;
                    }
                }
            }
        };
        self.lock().record(key, open);
    }

    /// Open series (for tests).
    pub fn open_series(&self) -> usize {
        self.lock().open.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Series> {
        self.series.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new Event, named as client-go names them (the object's name and the time in hex).
    #[allow(clippy::too_many_arguments)]
    fn event(
        &self,
        regarding: &ObjectReference,
        related: Option<ObjectReference>,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
        now: DateTime<Utc>,
    ) -> Event {
        let nanos = now.timestamp_nanos_opt().unwrap_or_default();
        Event {
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{nanos:x}",
                    regarding.name.as_deref().unwrap_or(FIELD_MANAGER)
                )),
                ..Default::default()
            },
            event_time: Some(micro(now)),
            type_: Some(if warning { "Warning" } else { "Normal" }.to_owned()),
            reason: Some(reason.to_owned()),
            action: Some(action.to_owned()),
            note: Some(note),
            regarding: Some(regarding.clone()),
            related,
            reporting_controller: Some(FIELD_MANAGER.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        }
    }
}

fn micro(t: DateTime<Utc>) -> MicroTime {
    MicroTime(to_kube_time(t).0)
}

/// What identifies a series: the object (by uid, else by kind, namespace and name), the type,
/// reason and action, and the related object.
fn series_key(
    regarding: &ObjectReference,
    related: Option<&ObjectReference>,
    warning: bool,
    reason: &str,
    action: &str,
) -> Box<str> {
    let mut key = String::with_capacity(96);
    push_ref(&mut key, regarding);
    let _ = write!(key, "\n{}\n{reason}\n{action}\n", u8::from(warning));
    if let Some(r) = related {
        push_ref(&mut key, r);
    }
    key.into_boxed_str()
}

fn push_ref(key: &mut String, r: &ObjectReference) {
    match r.uid.as_deref() {
        Some(uid) if !uid.is_empty() => key.push_str(uid),
        _ => {
            let _ = write!(
                key,
                "{}/{}/{}/{}",
                r.api_version.as_deref().unwrap_or_default(),
                r.kind.as_deref().unwrap_or_default(),
                r.namespace.as_deref().unwrap_or_default(),
                r.name.as_deref().unwrap_or_default()
            );
        }
    }
}

/// The Event an occurrence continues, or none.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// A new Event.
    Create,
    /// Patch Event `name` to `count` occurrences.
    Continue { name: String, count: i32 },
}

/// An open series: its Event's name, the occurrences counted and the last one's instant.
#[derive(Debug)]
struct Open {
    name: Box<str>,
    count: i32,
    last: DateTime<Utc>,
}

/// The series still open, by key.
#[derive(Default)]
struct Series {
    open: HashMap<Box<str>, Open>,
    next_sweep: Option<DateTime<Utc>>,
}

impl Series {
    /// What an occurrence of `key` at `now` writes. Sweeps the expired series first, at most
    /// once per [`SWEEP_EVERY`].
    fn next(&mut self, key: &str, now: DateTime<Utc>) -> Next {
        if self.next_sweep.is_none_or(|at| now >= at) {
            self.sweep(now);
        }
        match self.open.get(key) {
            Some(open) if now - open.last < SERIES_TTL => Next::Continue {
                name: open.name.to_string(),
                count: open.count.saturating_add(1),
            },
            _ => Next::Create,
        }
    }

    /// Records the Event an occurrence of `key` wrote.
    fn record(&mut self, key: Box<str>, open: Open) {
        self.open.insert(key, open);
    }

    /// Drops the series whose last occurrence is older than [`SERIES_TTL`], and gives back the
    /// table's room when most of it is empty.
    fn sweep(&mut self, now: DateTime<Utc>) {
        self.open.retain(|_, open| now - open.last < SERIES_TTL);
        if self.open.capacity() > 2 * self.open.len() + 64 {
            self.open.shrink_to_fit();
        }
        self.next_sweep = Some(now + SWEEP_EVERY);
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn reference(uid: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("manager.kotaico.de/v1".into()),
            kind: Some("Resource".into()),
            namespace: Some("team-a".into()),
            name: Some("ec2.analytics".into()),
            uid: Some(uid.into()),
            ..Default::default()
        }
    }

    fn open(name: &str, count: i32, last: DateTime<Utc>) -> Open {
        Open {
            name: name.into(),
            count,
            last,
        }
    }

    #[test]
    fn notes_are_cut_on_a_character_boundary() {
        assert_eq!(truncate("abc".into(), 10), "abc");
        assert_eq!(truncate("äöü".into(), 3), "ä");
        assert_eq!(truncate("x".repeat(2000), 1000).len(), 1000);
    }

    #[test]
    fn a_repeat_within_the_window_continues_the_first_event() {
        let t0 = Utc.with_ymd_and_hms(2031, 1, 1, 8, 0, 0).unwrap();
        let key = series_key(&reference("u1"), None, false, "Started", "Start");
        let mut series = Series::default();
        assert_eq!(series.next(&key, t0), Next::Create);
        series.record(key.clone(), open("ec2.analytics.1", 1, t0));
        let t1 = t0 + chrono::Duration::minutes(5);
        assert_eq!(
            series.next(&key, t1),
            Next::Continue {
                name: "ec2.analytics.1".into(),
                count: 2
            }
        );
        series.record(key.clone(), open("ec2.analytics.1", 2, t1));
        // The window runs from the last occurrence.
        let t2 = t1 + SERIES_TTL - chrono::Duration::seconds(1);
        assert_eq!(
            series.next(&key, t2),
            Next::Continue {
                name: "ec2.analytics.1".into(),
                count: 3
            }
        );
        assert_eq!(series.next(&key, t1 + SERIES_TTL), Next::Create);
    }

    #[test]
    fn series_are_told_apart_by_object_type_reason_action_and_related() {
        let base = series_key(&reference("u1"), None, false, "Started", "Start");
        let others = [
            series_key(&reference("u2"), None, false, "Started", "Start"),
            series_key(&reference("u1"), None, true, "Started", "Start"),
            series_key(&reference("u1"), None, false, "Stopped", "Start"),
            series_key(&reference("u1"), None, false, "Started", "Stop"),
            series_key(
                &reference("u1"),
                Some(&reference("u3")),
                false,
                "Started",
                "Start",
            ),
        ];
        for other in others {
            assert_ne!(base, other);
        }
        // Without a uid, an object is told by its kind, namespace and name.
        let mut no_uid = reference("");
        no_uid.uid = None;
        let mut other_name = no_uid.clone();
        other_name.name = Some("rds.orders".into());
        assert_ne!(
            series_key(&no_uid, None, false, "Started", "Start"),
            series_key(&other_name, None, false, "Started", "Start")
        );
    }

    #[test]
    fn expired_series_are_swept_and_their_room_given_back() {
        let t0 = Utc.with_ymd_and_hms(2031, 1, 1, 8, 0, 0).unwrap();
        let mut series = Series::default();
        for i in 0..5_000 {
            let key = series_key(
                &reference(&format!("u{i}")),
                None,
                false,
                "Started",
                "Start",
            );
            assert_eq!(series.next(&key, t0), Next::Create);
            series.record(key, open(&format!("e{i}"), 1, t0));
        }
        let full = series.open.capacity();
        assert!(full >= 5_000);
        // A minute later nothing has expired yet.
        let late = series_key(&reference("late"), None, false, "Started", "Start");
        series.next(&late, t0 + SWEEP_EVERY);
        series.record(late.clone(), open("late", 1, t0 + SWEEP_EVERY));
        assert_eq!(series.open.len(), 5_001);
        // Past the window, one occurrence sweeps the 5,000 and the table shrinks.
        let t1 = t0 + SERIES_TTL + chrono::Duration::seconds(1);
        series.next(&late, t1);
        assert_eq!(series.open.len(), 1);
        assert!(
            series.open.capacity() < full / 10,
            "{}",
            series.open.capacity()
        );
        // No sweep again within the minute.
        assert_eq!(series.next_sweep, Some(t1 + SWEEP_EVERY));
    }
}
