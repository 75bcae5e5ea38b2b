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
//! a 40-byte entry of one table, nothing allocated apart: its key as a 128-bit digest, and of its
//! Event the instant it was named by (the name is the object's name and that instant, as
//! client-go names Events), its count and its last occurrence. Every new booking publishes
//! one, so 10,000 bookings created in one go hold 10,000 series for the window. The window is
//! swept at most once a minute, and the table is shrunk once what it holds has expired.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use booking_shared::time::{Clock, to_kube_time};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use sha2::{Digest, Sha256};
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
        let key = series_key(&regarding, related.as_ref(), warning, reason, action, &note);
        let now = (self.clock)();
        let next = self.lock().next(&key, now);
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let _turn = self.writes.acquire().await.ok();
        let continued = match next {
            Next::Continue { named_at, count } => {
                let name = event_name(&regarding, named_at);
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
                        named_at,
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
                let named_at = now.timestamp_nanos_opt().unwrap_or_default();
                let event = self.event(
                    &regarding,
                    related,
                    warning,
                    reason,
                    action,
                    truncate(note, MAX_NOTE),
                    now,
                    named_at,
                );
                match api.create(&PostParams::default(), &event).await {
                    Ok(_) => Open {
                        named_at,
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

    /// A new Event at `now`, named by `named_at` ([`event_name`]).
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
        named_at: i64,
    ) -> Event {
        Event {
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(event_name(regarding, named_at)),
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

/// The name of the Event about `regarding` named at `named_at` (nanoseconds since the epoch), as
/// client-go names Events: the object's name and the instant in hex.
fn event_name(regarding: &ObjectReference, named_at: i64) -> String {
    format!(
        "{}.{named_at:x}",
        regarding.name.as_deref().unwrap_or(FIELD_MANAGER)
    )
}

/// What identifies a series ([`series_key`]).
type SeriesKey = [u8; 16];

/// The key of a series, as the first 128 bits of a SHA-256 digest: the object (by uid, else by
/// API version, kind, namespace and name), the type, reason and action, the related object, and
/// for a Normal Event its note. A Normal Event's note says what happened (which booking a
/// Resource was locked for), and a series shows only its first Event's note: the same reason with
/// another note is another Event. A Warning's note carries the error, which may differ at each
/// retry (request IDs): those occurrences are counted in one series.
/// Each part is written with its length, so no two different keys write the same bytes.
fn series_key(
    regarding: &ObjectReference,
    related: Option<&ObjectReference>,
    warning: bool,
    reason: &str,
    action: &str,
    note: &str,
) -> SeriesKey {
    let mut h = Sha256::new();
    hash_ref(&mut h, regarding);
    h.update([u8::from(warning)]);
    hash_part(&mut h, reason);
    hash_part(&mut h, action);
    if let Some(r) = related {
        h.update([1]);
        hash_ref(&mut h, r);
    } else {
        h.update([0]);
    }
    if !warning {
        hash_part(&mut h, note);
    }
    let digest = h.finalize();
    let mut key = [0; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

fn hash_part(h: &mut Sha256, part: &str) {
    h.update((part.len() as u64).to_le_bytes());
    h.update(part.as_bytes());
}

fn hash_ref(h: &mut Sha256, r: &ObjectReference) {
    match r.uid.as_deref() {
        Some(uid) if !uid.is_empty() => {
            h.update([0]);
            hash_part(h, uid);
        }
        _ => {
            h.update([1]);
            for part in [&r.api_version, &r.kind, &r.namespace, &r.name] {
                hash_part(h, part.as_deref().unwrap_or_default());
            }
        }
    }
}

/// The Event an occurrence continues, or none.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// A new Event.
    Create,
    /// Patch the Event named at `named_at` ([`event_name`]) to `count` occurrences.
    Continue { named_at: i64, count: i32 },
}

/// An open series: the instant its Event was named by, the occurrences counted and the last
/// one's instant.
#[derive(Debug)]
struct Open {
    named_at: i64,
    count: i32,
    last: DateTime<Utc>,
}

/// The series still open, by key.
#[derive(Default)]
struct Series {
    open: HashMap<SeriesKey, Open>,
    next_sweep: Option<DateTime<Utc>>,
}

impl Series {
    /// What an occurrence of `key` at `now` writes. Sweeps the expired series first, at most
    /// once per [`SWEEP_EVERY`].
    fn next(&mut self, key: &SeriesKey, now: DateTime<Utc>) -> Next {
        if self.next_sweep.is_none_or(|at| now >= at) {
            self.sweep(now);
        }
        match self.open.get(key) {
            Some(open) if now - open.last < SERIES_TTL => Next::Continue {
                named_at: open.named_at,
                count: open.count.saturating_add(1),
            },
            _ => Next::Create,
        }
    }

    /// Records the Event an occurrence of `key` wrote.
    fn record(&mut self, key: SeriesKey, open: Open) {
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

    fn open(named_at: i64, count: i32, last: DateTime<Utc>) -> Open {
        Open {
            named_at,
            count,
            last,
        }
    }

    #[test]
    fn a_series_continues_the_event_its_first_occurrence_named() {
        // Named as client-go names Events: the object's name and the instant in hex.
        assert_eq!(event_name(&reference("u1"), 0x2a), "ec2.analytics.2a");
        let mut unnamed = reference("u1");
        unnamed.name = None;
        assert_eq!(event_name(&unnamed, 255), format!("{FIELD_MANAGER}.ff"));
        // An open series is one entry of its table, nothing allocated apart.
        assert_eq!(std::mem::size_of::<(SeriesKey, Open)>(), 40);
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
        let key = series_key(&reference("u1"), None, false, "Started", "Start", "n");
        let mut series = Series::default();
        assert_eq!(series.next(&key, t0), Next::Create);
        series.record(key, open(17, 1, t0));
        let t1 = t0 + chrono::Duration::minutes(5);
        assert_eq!(
            series.next(&key, t1),
            Next::Continue {
                named_at: 17,
                count: 2
            }
        );
        series.record(key, open(17, 2, t1));
        // The window runs from the last occurrence.
        let t2 = t1 + SERIES_TTL - chrono::Duration::seconds(1);
        assert_eq!(
            series.next(&key, t2),
            Next::Continue {
                named_at: 17,
                count: 3
            }
        );
        assert_eq!(series.next(&key, t1 + SERIES_TTL), Next::Create);
    }

    #[test]
    fn series_are_told_apart_by_object_type_reason_action_related_and_normal_note() {
        let base = series_key(&reference("u1"), None, false, "Started", "Start", "n");
        let others = [
            series_key(&reference("u2"), None, false, "Started", "Start", "n"),
            series_key(&reference("u1"), None, true, "Started", "Start", "n"),
            series_key(&reference("u1"), None, false, "Stopped", "Start", "n"),
            series_key(&reference("u1"), None, false, "Started", "Stop", "n"),
            series_key(
                &reference("u1"),
                Some(&reference("u3")),
                false,
                "Started",
                "Start",
                "n",
            ),
            series_key(&reference("u1"), None, false, "Started", "Start", "m"),
        ];
        for other in others {
            assert_ne!(base, other);
        }
        // The parts are told apart where they meet.
        assert_ne!(
            series_key(&reference("u1"), None, false, "StartedStart", "", "n"),
            series_key(&reference("u1"), None, false, "Started", "Start", "n")
        );
        // A Warning's note is not part of its key: its retries are one series.
        let failed = |note| series_key(&reference("u1"), None, true, "StartFailed", "Start", note);
        assert_eq!(failed("request a"), failed("request b"));
        // The same occurrence has the same key.
        assert_eq!(
            base,
            series_key(&reference("u1"), None, false, "Started", "Start", "n")
        );
        // Without a uid, an object is told by its kind, namespace and name.
        let mut no_uid = reference("");
        no_uid.uid = None;
        let mut other_name = no_uid.clone();
        other_name.name = Some("rds.orders".into());
        assert_ne!(
            series_key(&no_uid, None, false, "Started", "Start", "n"),
            series_key(&other_name, None, false, "Started", "Start", "n")
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
                "n",
            );
            assert_eq!(series.next(&key, t0), Next::Create);
            series.record(key, open(i, 1, t0));
        }
        let full = series.open.capacity();
        assert!(full >= 5_000);
        // A minute later nothing has expired yet.
        let late = series_key(&reference("late"), None, false, "Started", "Start", "n");
        series.next(&late, t0 + SWEEP_EVERY);
        series.record(late, open(-1, 1, t0 + SWEEP_EVERY));
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
