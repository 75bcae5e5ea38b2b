//! The Booking reconciler: the phase from the clock and arbitration, conditions and Events on
//! every change, requeue exactly at the next boundary. FINISHED bookings are left alone.

use std::sync::Arc;

use booking_shared::api::{Booking, BookingPhase, BookingStatus, Resource};
use chrono::Utc;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::{Context, ns_name, patch_status, view_of};
use crate::arbitration::arbitrate;
use crate::conditions::{CondSpec, merge};
use crate::error::Result;

/// Reconciles one Booking.
#[tracing::instrument(skip_all, fields(namespace, name))]
pub async fn reconcile(b: Arc<Booking>, ctx: Arc<Context>) -> Result<Action> {
    ctx.metrics.reconciled("Booking");
    let (ns, name) = ns_name(b.as_ref())?;
    tracing::Span::current()
        .record("namespace", ns.as_str())
        .record("name", name.as_str());
    let old = b.status.clone().unwrap_or_default();
    if old.status == Some(BookingPhase::Finished)
        && old.observed_generation == b.metadata.generation
    {
        return Ok(Action::await_change());
    }
    tracing::debug!("waiting for the caches");
    ctx.caches_ready().await?;
    let now = Utc::now();
    // The cache may not hold this very version yet: use the object given.
    let mut views: Vec<_> = ctx
        .booking_views(&ns, &b.spec.resource_name)
        .into_iter()
        .filter(|v| v.name != name)
        .collect();
    views.push(view_of(&b));
    let verdicts = arbitrate(&views, now);
    let verdict = verdicts
        .iter()
        .find(|v| v.name == name)
        .cloned()
        .expect("the booking is among its own resource's bookings");
    tracing::debug!(phase = ?verdict.phase, next = ?verdict.next_boundary, "judged");
    let resource_exists = ctx
        .resources
        .get(&ObjectRef::<Resource>::new(&b.spec.resource_name).within(&ns))
        .is_some()
        // The cache may lag behind the Resource's creation that triggered this reconcile.
        || Api::<Resource>::namespaced(ctx.client.clone(), &ns)
            .get_opt(&b.spec.resource_name)
            .await?
            .is_some();

    let mut conds = Vec::new();
    let (ready, reason, message) = match (&verdict.invalid, verdict.phase) {
        (Some(why), _) => (false, "InvalidSpec", why.clone()),
        (None, Some(BookingPhase::Conflict)) => (
            false,
            "Conflict",
            format!(
                "overlaps booking {} of the same resource, created earlier, which holds {} instead",
                verdict.conflicts_with.as_deref().unwrap_or("?"),
                b.spec.resource_name
            ),
        ),
        (None, Some(BookingPhase::InProgress)) if !resource_exists => (
            false,
            "ResourceNotFound",
            format!(
                "Resource {} does not exist in namespace {ns}; the booking proceeds when it appears",
                b.spec.resource_name
            ),
        ),
        (None, Some(phase)) => (
            phase != BookingPhase::Finished,
            match phase {
                BookingPhase::Scheduled => "Scheduled",
                BookingPhase::InProgress => "InProgress",
                _ => "Finished",
            },
            format!("{} is {}", name, phase),
        ),
        (None, None) => (false, "InvalidSpec", "no slot".to_owned()),
    };
    conds.push(CondSpec::new("Ready", ready, reason, &message));
    conds.push(match &verdict.conflicts_with {
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
    });
    conds.push(if resource_exists {
        CondSpec::new(
            "ResourceFound",
            true,
            "Found",
            &format!("Resource {} exists", b.spec.resource_name),
        )
    } else {
        CondSpec::new(
            "ResourceFound",
            false,
            "ResourceNotFound",
            &format!(
                "Resource {} does not exist in namespace {ns}",
                b.spec.resource_name
            ),
        )
    });

    let status = BookingStatus {
        status: verdict.phase,
        notification_sent: old.notification_sent,
        notifications_sent: old.notifications_sent.clone(),
        // The notification reconciler owns its own condition type; keep it as it wrote it.
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
    };
    if b.status.as_ref() != Some(&status) {
        let api: Api<Booking> = Api::namespaced(ctx.client.clone(), &ns);
        // Notification bookkeeping belongs to the notification reconciler: never write it
        // back from this (possibly older) read.
        let mut body = serde_json::to_value(&status)
            .map_err(|e| crate::error::Error::Malformed(e.to_string()))?;
        if let Some(map) = body.as_object_mut() {
            map.remove("notification_sent");
            map.remove("notificationsSent");
        }
        patch_status(&api, &name, &body, &["status"]).await?;
        tracing::debug!(phase = ?status.status, "status written");
        // Every change of phase is an Event, except a new booking's first phase SCHEDULED:
        // that is the common case, its status says so, and thousands of bookings created
        // together (a GitOps sync, a scheduler's history) would each cost an Event write and
        // a place in the event recorder's cache.
        let first_scheduled =
            old.observed_generation.is_none() && status.status == Some(BookingPhase::Scheduled);
        if old.status != status.status && !first_scheduled {
            let (warning, ev_reason) = match status.status {
                Some(BookingPhase::Conflict) => (true, "Conflict"),
                Some(BookingPhase::InProgress) => (false, "Started"),
                Some(BookingPhase::Finished) => (false, "Finished"),
                Some(BookingPhase::Scheduled) => (false, "Scheduled"),
                None => (true, "InvalidSpec"),
            };
            ctx.event(b.as_ref(), warning, ev_reason, "Phase", message.clone())
                .await;
        }
        if !resource_exists
            && old
                .conditions
                .iter()
                .all(|c| c.reason != "ResourceNotFound")
        {
            ctx.event(
                b.as_ref(),
                true,
                "ResourceNotFound",
                "Lookup",
                format!(
                    "Resource {} does not exist in namespace {ns}",
                    b.spec.resource_name
                ),
            )
            .await;
        }
    }

    Ok(match verdict.next_boundary {
        Some(at) => Action::requeue((at - Utc::now()).to_std().unwrap_or_default()),
        None => Action::await_change(),
    })
}
