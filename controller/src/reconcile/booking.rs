//! The Booking reconciler: the phase from the clock and arbitration, conditions and Events on
//! every change, requeue exactly at the next boundary. FINISHED bookings are left alone.
//!
//! [`judge`] decides (pure); [`reconcile`] reads the caches, writes what it decided.

use std::sync::Arc;

use booking_shared::api::{Booking, BookingPhase, BookingStatus, Resource};
use booking_shared::arbitration::{BookingView, Verdict, arbitrate};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::{ns_name, write_status};
use crate::conditions::{CondSpec, merge};
use crate::context::Context;
use crate::error::Result;

/// An Event to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// Warning rather than Normal.
    pub warning: bool,
    /// PascalCase reason.
    pub reason: &'static str,
    /// The action it reports.
    pub action: &'static str,
    /// The note.
    pub message: String,
    /// Whether the note ends by naming who created the booking (its requested-by annotation).
    /// The name is read from the booking as the status write returned it (see [`Self::note`]):
    /// the cache keeps no annotations.
    pub names_creator: bool,
}

impl EventSpec {
    /// The Event's note about the booking whose metadata is `meta`: the message, followed by
    /// who created the booking when the Event names the creator and the booking records one.
    pub fn note(&self, meta: &ObjectMeta) -> String {
        match booking_shared::validation::requested_by(meta).filter(|_| self.names_creator) {
            Some(by) => format!("{} (booking created by {by})", self.message),
            None => self.message.clone(),
        }
    }
}

/// What the reconciler decided for one booking.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// The status to write.
    pub status: BookingStatus,
    /// The Events to publish when the status is written.
    pub events: Vec<EventSpec>,
    /// When the phase changes next.
    pub next_boundary: Option<DateTime<Utc>>,
}

/// The phase, conditions and Events of booking `b` among `others` (the other bookings of its
/// Resource), at `now`. Pure.
pub fn judge(
    b: &Booking,
    others: &[BookingView],
    resource_exists: bool,
    now: DateTime<Utc>,
) -> Judgement {
    let name = b.metadata.name.clone().unwrap_or_default();
    let ns = b.metadata.namespace.clone().unwrap_or_default();
    let resource = &b.spec.resource_name;
    // The cache may not hold this very version yet: use the object given.
    let mut views: Vec<BookingView> = others.iter().filter(|v| v.name != name).cloned().collect();
    views.push(BookingView::of(b));
    let verdicts = arbitrate(&views, now);
    let verdict = verdicts
        .into_iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| Verdict {
            name: name.clone(),
            phase: None,
            conflicts_with: None,
            invalid: Some("no slot".into()),
            next_boundary: None,
        });
    let (ready, reason, message) = ready_condition(&verdict, &name, &ns, resource, resource_exists);
    let conds = [
        CondSpec::new("Ready", ready, reason, &message),
        conflict_condition(&verdict),
        resource_condition(&ns, resource, resource_exists),
    ];
    let old = b.status.clone().unwrap_or_default();
    let status = BookingStatus {
        status: verdict.phase,
        // The notification reconciler owns its own condition type and fields; keep them.
        conditions: merge(&old.conditions, &conds, b.metadata.generation, now)
            .into_iter()
            .chain(
                old.conditions
                    .iter()
                    .filter(|c| c.type_ == super::notification::CONDITION)
                    .cloned(),
            )
            .collect(),
        observed_generation: b.metadata.generation,
        ..old.clone()
    };
    let mut events = Vec::new();
    // Every change of phase is an Event, except a new booking's first phase SCHEDULED: that is
    // the common case, its status says so, and thousands of bookings created together (a GitOps
    // sync, a scheduler's history) would each cost an Event write.
    let first_scheduled =
        old.observed_generation.is_none() && status.status == Some(BookingPhase::Scheduled);
    if old.status != status.status && !first_scheduled {
        let (warning, reason) = match status.status {
            Some(BookingPhase::Conflict) => (true, "Conflict"),
            Some(BookingPhase::InProgress) => (false, "Started"),
            Some(BookingPhase::Finished) => (false, "Finished"),
            Some(BookingPhase::Scheduled) => (false, "Scheduled"),
            None => (true, "InvalidSpec"),
        };
        events.push(EventSpec {
            warning,
            reason,
            action: "Phase",
            message,
            names_creator: true,
        });
    }
    if !resource_exists
        && old
            .conditions
            .iter()
            .all(|c| c.reason != "ResourceNotFound")
    {
        events.push(EventSpec {
            warning: true,
            reason: "ResourceNotFound",
            action: "Lookup",
            message: format!("Resource {resource} does not exist in namespace {ns}"),
            names_creator: false,
        });
    }
    Judgement {
        status,
        events,
        next_boundary: verdict.next_boundary,
    }
}

fn ready_condition(
    verdict: &Verdict,
    name: &str,
    ns: &str,
    resource: &str,
    resource_exists: bool,
) -> (bool, &'static str, String) {
    match (&verdict.invalid, verdict.phase) {
        (Some(why), _) => (false, "InvalidSpec", why.clone()),
        (None, Some(BookingPhase::Conflict)) => (
            false,
            "Conflict",
            format!(
                "overlaps booking {} of the same resource, created earlier, which holds {resource} instead",
                verdict.conflicts_with.as_deref().unwrap_or("?"),
            ),
        ),
        (None, Some(BookingPhase::InProgress)) if !resource_exists => (
            false,
            "ResourceNotFound",
            format!(
                "Resource {resource} does not exist in namespace {ns}; the booking proceeds when it appears"
            ),
        ),
        (None, Some(phase)) => (
            phase != BookingPhase::Finished,
            match phase {
                BookingPhase::Scheduled => "Scheduled",
                BookingPhase::InProgress => "InProgress",
                _ => "Finished",
            },
            format!("{name} is {phase}"),
        ),
        (None, None) => (false, "InvalidSpec", "no slot".to_owned()),
    }
}

fn conflict_condition(verdict: &Verdict) -> CondSpec {
    match &verdict.conflicts_with {
        Some(w) => CondSpec::new(
            "Conflict",
            true,
            "OverlapsEarlierBooking",
            &format!("overlaps booking {w}, which was created first and holds the resource"),
        ),
        None => CondSpec::new(
            "Conflict",
            false,
            "NoOverlap",
            "no earlier booking of the resource overlaps this one",
        ),
    }
}

fn resource_condition(ns: &str, resource: &str, exists: bool) -> CondSpec {
    if exists {
        CondSpec::new(
            "ResourceFound",
            true,
            "Found",
            &format!("Resource {resource} exists"),
        )
    } else {
        CondSpec::new(
            "ResourceFound",
            false,
            "ResourceNotFound",
            &format!("Resource {resource} does not exist in namespace {ns}"),
        )
    }
}

/// Reconciles one Booking.
#[tracing::instrument(skip_all, fields(namespace, name))]
pub async fn reconcile(b: Arc<Booking>, ctx: Arc<Context>) -> Result<Action> {
    let (ns, _) = ns_name(b.as_ref())?;
    let old = b.status.clone().unwrap_or_default();
    if old.status == Some(BookingPhase::Finished)
        && old.observed_generation == b.metadata.generation
    {
        return Ok(ctx.caches.booking_wakeups.requeue(b.as_ref(), None));
    }
    tracing::debug!("waiting for the caches");
    ctx.caches_ready().await;
    let resource = &b.spec.resource_name;
    let resource_exists = ctx
        .caches
        .resources
        .get(&ObjectRef::<Resource>::new(resource).within(&ns))
        .is_some()
        // The cache may lag behind the Resource's creation that triggered this reconcile.
        || Api::<Resource>::namespaced(ctx.client.clone(), &ns)
            .get_opt(resource)
            .await?
            .is_some();
    let others = ctx
        .caches
        .index
        .views_of(&ObjectRef::new(resource).within(&ns));
    let judgement = judge(&b, &others, resource_exists, ctx.now());
    tracing::debug!(phase = ?judgement.status.status, next = ?judgement.next_boundary, "judged");
    // Guarded by the version judged: the notification reconciler writes this status too, and a
    // merge patch replaces `conditions` whole, so a write from a stale read would drop its
    // condition; a conflict judges the newer version at once (see `drive`).
    let version = b.metadata.resource_version.as_deref();
    if let Some(written) = write_status(&ctx, b.as_ref(), &judgement.status, version).await? {
        tracing::debug!(phase = ?judgement.status.status, "status written");
        for e in judgement.events {
            let note = e.note(&written.metadata);
            ctx.events
                .publish(b.as_ref(), e.warning, e.reason, e.action, note)
                .await;
        }
    }
    Ok(ctx
        .caches
        .booking_wakeups
        .requeue(b.as_ref(), judgement.next_boundary))
}

#[cfg(test)]
mod tests {
    use super::*;
    use booking_shared::api::BookingSpec;
    use booking_shared::time::parse_rfc3339;

    fn at(s: &str) -> DateTime<Utc> {
        parse_rfc3339("t", s).unwrap()
    }

    fn booking(name: &str, created: &str, start: &str, end: &str) -> Booking {
        let mut b = Booking::new(
            name,
            BookingSpec {
                resource_name: "ec2.x".into(),
                start_at: start.into(),
                end_at: end.into(),
                user_id: "ann".into(),
                notifications: vec![],
            },
        );
        b.metadata.namespace = Some("team".into());
        b.metadata.generation = Some(1);
        b.metadata.creation_timestamp = Some(booking_shared::time::to_kube_time(at(created)));
        b
    }

    fn reasons(j: &Judgement) -> Vec<&str> {
        j.events.iter().map(|e| e.reason).collect()
    }

    #[test]
    fn phase_events_name_the_user_who_created_the_booking() {
        let mut b = booking(
            "b",
            "2031-01-01T00:00:00Z",
            "2031-01-10T10:00:00Z",
            "2031-01-10T12:00:00Z",
        );
        b.metadata.annotations = Some(
            [(
                booking_shared::validation::REQUESTED_BY_ANNOTATION.to_owned(),
                "system:serviceaccount:ci:deployer".to_owned(),
            )]
            .into(),
        );
        let j = judge(&b, &[], true, at("2031-01-10T10:30:00Z"));
        assert_eq!(reasons(&j), ["Started"]);
        let note = j.events[0].note(&b.metadata);
        assert!(
            note.ends_with("(booking created by system:serviceaccount:ci:deployer)"),
            "{note}"
        );
        // Without the annotation the note is the message alone.
        assert_eq!(j.events[0].note(&Default::default()), j.events[0].message);
        // The Resource's absence names no creator.
        let j = judge(&b, &[], false, at("2031-01-10T10:30:00Z"));
        let missing = j.events.iter().find(|e| e.reason == "ResourceNotFound");
        assert!(!missing.unwrap().note(&b.metadata).contains("created by"));
    }

    #[test]
    fn phases_conditions_and_events_at_a_fixed_instant() {
        let early = booking(
            "early",
            "2031-01-01T00:00:00Z",
            "2031-01-10T10:00:00Z",
            "2031-01-10T12:00:00Z",
        );
        let late = booking(
            "late",
            "2031-01-02T00:00:00Z",
            "2031-01-10T11:00:00Z",
            "2031-01-10T13:00:00Z",
        );
        let views = [BookingView::of(&early), BookingView::of(&late)];
        struct Case {
            what: &'static str,
            b: Booking,
            exists: bool,
            now: &'static str,
            phase: Option<BookingPhase>,
            ready: &'static str,
            events: Vec<&'static str>,
            next: Option<&'static str>,
        }
        let cases = [
            Case {
                what: "new and ahead: SCHEDULED without an Event",
                b: early.clone(),
                exists: true,
                now: "2031-01-10T09:00:00Z",
                phase: Some(BookingPhase::Scheduled),
                ready: "Scheduled",
                events: vec![],
                next: Some("2031-01-10T10:00:00Z"),
            },
            Case {
                what: "new and running: an Event",
                b: early.clone(),
                exists: true,
                now: "2031-01-10T10:30:00Z",
                phase: Some(BookingPhase::InProgress),
                ready: "InProgress",
                events: vec!["Started"],
                next: Some("2031-01-10T12:00:00Z"),
            },
            Case {
                what: "the later overlapping booking loses",
                b: late.clone(),
                exists: true,
                now: "2031-01-10T11:30:00Z",
                phase: Some(BookingPhase::Conflict),
                ready: "Conflict",
                events: vec!["Conflict"],
                next: Some("2031-01-10T13:00:00Z"),
            },
            Case {
                what: "a missing Resource is reported once",
                b: early.clone(),
                exists: false,
                now: "2031-01-10T10:30:00Z",
                phase: Some(BookingPhase::InProgress),
                ready: "ResourceNotFound",
                events: vec!["Started", "ResourceNotFound"],
                next: Some("2031-01-10T12:00:00Z"),
            },
            Case {
                what: "finished",
                b: early.clone(),
                exists: true,
                now: "2031-01-10T12:00:00Z",
                phase: Some(BookingPhase::Finished),
                ready: "Finished",
                events: vec!["Finished"],
                next: None,
            },
        ];
        for c in cases {
            let j = judge(&c.b, &views, c.exists, at(c.now));
            assert_eq!(j.status.status, c.phase, "{}", c.what);
            let ready = j
                .status
                .conditions
                .iter()
                .find(|x| x.type_ == "Ready")
                .unwrap();
            assert_eq!(ready.reason, c.ready, "{}", c.what);
            assert_eq!(reasons(&j), c.events, "{}", c.what);
            assert_eq!(j.next_boundary, c.next.map(at), "{}", c.what);
        }
    }

    #[test]
    fn the_notification_fields_and_condition_are_kept_as_they_are() {
        let mut b = booking(
            "b",
            "2031-01-01T00:00:00Z",
            "2031-01-10T10:00:00Z",
            "2031-01-10T12:00:00Z",
        );
        let mut old = BookingStatus {
            notifications_sent: vec!["0:email:ann@example.com".into()],
            notification_sent: true,
            ..Default::default()
        };
        old.conditions = crate::conditions::merge(
            &[],
            &[CondSpec::new(
                super::super::notification::CONDITION,
                true,
                "SendFailed",
                "x",
            )],
            Some(1),
            at("2031-01-10T09:00:00Z"),
        );
        b.status = Some(old.clone());
        let j = judge(&b, &[], true, at("2031-01-10T10:30:00Z"));
        assert_eq!(j.status.notifications_sent, old.notifications_sent);
        assert!(j.status.notification_sent);
        assert!(
            j.status
                .conditions
                .iter()
                .any(|c| c.type_ == super::super::notification::CONDITION)
        );
        // A status already as judged is judged again the same: nothing to write.
        let mut again = b.clone();
        again.status = Some(j.status.clone());
        let k = judge(&again, &[], true, at("2031-01-10T10:31:00Z"));
        assert_eq!(k.status, j.status);
        assert!(k.events.is_empty());
    }
}
