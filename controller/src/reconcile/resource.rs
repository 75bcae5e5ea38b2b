//! The Resource reconciler (level-based): arbitration of the Resource's bookings, the plan over
//! the inventory's view of the group, then the executor; status through the status writer; an
//! Event for every AWS action; requeue at the next instant that matters.
//!
//! One reconcile: `observe` the group (with a targeted refresh when worth it), decide the
//! holder and the [`plan`], make sure a stop is safe (`safety`), act and report the outcomes
//! (`actions`), write [`status_of`] the final plan and requeue at [`next_wake`].

use std::sync::Arc;

use booking_shared::api::{ProviderType, Resource, ResourceStatus, unsupported_type_message};
use booking_shared::arbitration::{
    Upcoming, Verdict, arbitrate, holder, next_boundary, next_holder,
};
use booking_shared::time::format_rfc3339;
use chrono::{DateTime, Utc};

use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::{ns_name, write_status};
use crate::aws::executor::Preparing;
use crate::conditions::{CondSpec, merge};
use crate::context::Context;
use crate::error::Result;
use crate::model::{InventoryKey, Member};
use crate::plan::{Plan, PlanInput, manual_holder, plan};

mod actions;
pub mod claim;
mod safety;

use actions::{act, forget_settled, group_attempts, report};
use safety::{scheduler_handover, stop_is_safe};

/// How soon a group with EC2 members in transit is observed again.
const TRANSITION_RECHECK: chrono::Duration = chrono::Duration::seconds(5);

/// Reconciles one Resource. A reconcile woken by the Resources' timer (a boundary of its
/// bookings: a start or stop may be due) holds the turn to prepare starts and stops that the
/// timer reserved for it when it woke it (see [`crate::aws::executor::Turns`]): every Resource
/// woken at the same instant holds one before the first of their reconciles sends its start,
/// which the executor then holds for the others'. A reconcile woken by a change holds none, so
/// that it never holds back a start.
pub fn reconcile(
    res: Arc<Resource>,
    ctx: Arc<Context>,
) -> impl std::future::Future<Output = Result<Action>> + Send + 'static {
    let preparing = ctx.caches.resource_wakeups.take_fired(res.as_ref());
    reconcile_prepared(res, ctx, preparing)
}

#[tracing::instrument(skip_all, fields(namespace, name))]
async fn reconcile_prepared(
    res: Arc<Resource>,
    ctx: Arc<Context>,
    preparing: Option<Preparing>,
) -> Result<Action> {
    let (ns, name) = ns_name(res.as_ref())?;
    let key = match inventory_key(&res, &ctx) {
        Ok(key) => key,
        Err(status) => {
            write_status(&ctx, res.as_ref(), &status, None).await?;
            return Ok(Action::await_change());
        }
    };
    let (provider, region) = (key.kind, key.region.clone());
    if let Err(e) = ctx.groups.inventory.ensure(&key).await {
        tracing::warn!(error = %e, "first inventory refresh failed");
    }
    ctx.caches_ready().await;
    let other = claim::claimed_elsewhere(
        &res,
        ctx.caches.resources.state().iter().map(|r| r.as_ref()),
        &ctx.groups.default_region,
    );
    if let Some(refusal) = other {
        // Woken again when the claimer is deleted or leaves the group (see `feeds`).
        claim::refuse(&ctx, &res, &refusal).await?;
        return Ok(Action::await_change());
    }
    let now = ctx.now();
    let views = ctx
        .caches
        .index
        .views_of(&ObjectRef::new(&name).within(&ns));
    let verdicts = arbitrate(&views, now);
    let booking_holder = holder(&views, &verdicts);
    if booking_holder.is_none()
        && let Some(wait) = scheduler_handover(&ctx.caches.schedulers, &ns, &name, &views, now)
    {
        return Ok(Action::requeue(wait));
    }
    let owner = format!("{ns}/{name}");
    let wants_members = booking_holder.is_some()
        || manual_holder(&res.spec, now).ok().flatten().is_some()
        || res.status.as_ref().and_then(|s| s.observed_generation) != res.metadata.generation;
    let seen = observe(&ctx, &res, &key, &owner, wants_members, now).await;
    if let Some(refusal) = seen.members.as_deref().and_then(|members| {
        claim::namespace_refusal(
            &ns,
            members,
            &ctx.groups.keys,
            &ctx.groups.untagged_claim_namespaces,
        )
    }) {
        claim::refuse(&ctx, &res, &refusal).await?;
        return Ok(Action::await_change());
    }
    let attempts = group_attempts(&ctx, seen.members.as_deref());
    let input = PlanInput {
        owner: &owner,
        kind: provider,
        spec: &res.spec,
        booking_holder: booking_holder.clone(),
        members: seen.members.as_deref(),
        observed_at: seen.observed_at,
        attempts: &attempts,
        keys: &ctx.groups.keys,
        backoff: ctx.groups.backoff,
        now,
    };
    let p = plan(&input);
    let dry_plan = simulated_plan(&ctx, &input);
    let acting = dry_plan.as_ref().unwrap_or(&p);
    if !acting.stop.is_empty() && !stop_is_safe(&ctx, &ns, &name, now).await {
        tracing::debug!("a stop waits for the Booking watch to catch up");
        return Ok(Action::requeue(std::time::Duration::from_secs(1)));
    }
    // The reads above may have taken a while (an API server coming back): a plan made for an
    // instant before a boundary of this group's bookings is not carried out after it.
    if next_boundary(&verdicts).is_some_and(|boundary| ctx.now() >= boundary) {
        return Ok(Action::requeue(std::time::Duration::ZERO));
    }
    let members = seen.members.as_deref().unwrap_or(&[]);
    forget_settled(&ctx, &p);
    let done = act(&ctx, (&res, provider, &region), members, acting, preparing).await;
    report(&ctx, &res, provider, acting, &done).await;
    let mut final_plan = replanned(&ctx, &done, input, p, (&key, &res.spec.tag));
    if let Some(dry) = &dry_plan {
        dry_run_outcome(provider, &mut final_plan, dry);
    }
    final_plan.conditions.push(claim::held());
    let upcoming = next_holder(&views, &verdicts);
    let status = status_of(&res, &final_plan, upcoming.as_ref(), now);
    write_status(&ctx, res.as_ref(), &status, None).await?;
    let wake = next_wake(&final_plan, &verdicts, provider, now);
    Ok(ctx.caches.resource_wakeups.requeue(res.as_ref(), wake))
}

/// The plan `p` made again with the attempts just made, when any AWS call was made: the status
/// then reports this reconcile's failures, and no action is repeated (the attempts are newer
/// than the observation).
///
/// The members are read again from the inventory, which shows the lock tags just written or
/// removed: the status names the lock at once, not one reconcile later.
fn replanned(
    ctx: &Context,
    done: &actions::Done,
    input: PlanInput<'_>,
    p: Plan,
    (key, tag): (&InventoryKey, &str),
) -> Plan {
    if !done.acted() {
        return p;
    }
    ctx.groups.inventory.request_refresh();
    let amended = ctx.groups.inventory.snapshot(key).map(|s| s.group(tag));
    let members = amended.as_deref().or(input.members);
    let attempts = group_attempts(ctx, members);
    plan(&PlanInput {
        attempts: &attempts,
        members,
        ..input
    })
}

/// In dry-run mode, the plan the reconcile acts on: made from the simulated group (see
/// `crate::dry_run`), so that a would-be action is reported once; `None` out of dry-run mode.
fn simulated_plan(ctx: &Context, input: &PlanInput<'_>) -> Option<Plan> {
    let dry = ctx.dry_run.as_ref()?;
    let simulated = input.members.map(|m| dry.simulated(m));
    Some(plan(&PlanInput {
        members: simulated.as_deref(),
        ..input.clone()
    }))
}

/// In dry-run mode, the final plan (made from AWS's real state, which the status shows) gets
/// the condition saying what would be done to it now, and wakes at the simulated plan's
/// instants too. Pure.
fn dry_run_outcome(provider: ProviderType, final_plan: &mut Plan, simulated: &Plan) {
    let condition = crate::dry_run::condition(provider, final_plan);
    final_plan.conditions.push(condition);
    final_plan.requeue_at = final_plan
        .requeue_at
        .into_iter()
        .chain(simulated.requeue_at)
        .min();
}

/// The status of a Resource whose `spec.type` names no provider type. Pure.
/// The inventory that holds `res`'s group (its type, and its region or the controller's), or
/// the status refusing it: an unknown type, or a region outside the operator's allow-list
/// (never called).
fn inventory_key(
    res: &Resource,
    ctx: &Context,
) -> std::result::Result<InventoryKey, Box<ResourceStatus>> {
    let Some(kind) = res.spec.provider_type() else {
        return Err(Box::new(invalid_type_status(res, ctx.now())));
    };
    let region = res
        .spec
        .region
        .clone()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| ctx.groups.default_region.clone());
    if let Err(message) = ctx.groups.allowed_regions.check("spec.region", &region) {
        return Err(Box::new(refused_spec_status(
            res,
            "RegionNotAllowed",
            &message,
            ctx.now(),
        )));
    }
    Ok(InventoryKey { kind, region })
}

pub fn invalid_type_status(res: &Resource, now: DateTime<Utc>) -> ResourceStatus {
    refused_spec_status(
        res,
        "InvalidSpec",
        &unsupported_type_message("spec.type", &res.spec.type_),
        now,
    )
}

/// The status of a Resource whose spec cannot be acted on (`reason`, `message`): Ready and
/// Synced false, nothing observed. Pure.
pub fn refused_spec_status(
    res: &Resource,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) -> ResourceStatus {
    unobserved_status(
        res,
        &[
            CondSpec::new("Ready", false, reason, message),
            CondSpec::new("Synced", false, reason, "nothing is observed for this spec"),
        ],
        now,
    )
}

/// The status of a Resource that does not act (its spec refused, its group not its own):
/// nothing observed or held, `conditions` merged into the stored ones. Pure.
pub fn unobserved_status(
    res: &Resource,
    conditions: &[CondSpec],
    now: DateTime<Utc>,
) -> ResourceStatus {
    ResourceStatus {
        conditions: merge(
            stored_conditions(res),
            conditions,
            res.metadata.generation,
            now,
        ),
        observed_generation: res.metadata.generation,
        ..Default::default()
    }
}

fn stored_conditions(
    res: &Resource,
) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
    res.status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or(&[])
}

/// The status from the final plan of a reconcile and the next booking that will hold the
/// Resource (`upcoming`, from arbitration). Pure.
pub fn status_of(
    res: &Resource,
    p: &Plan,
    upcoming: Option<&Upcoming>,
    now: DateTime<Utc>,
) -> ResourceStatus {
    let old = stored_conditions(res);
    let s = &p.summary;
    let rds = res.spec.provider_type() == Some(ProviderType::Rds);
    ResourceStatus {
        instances: s.instances,
        running: s.running,
        status: s.state,
        locked_by: s.locked_by.clone(),
        locked_until: s.locked_until.clone(),
        active_booking: s.active_booking.clone(),
        active_user: s.holder_user.clone(),
        active_until: s.holder_until.clone(),
        next_booking: upcoming.map(|u| u.booking.clone()),
        next_booking_start: upcoming.map(|u| format_rfc3339(u.start)),
        next_booking_user: upcoming.map(|u| u.user.clone()),
        conditions: merge(old, &p.conditions, res.metadata.generation, now),
        clusters: rds.then_some(s.clusters),
        clusters_running: rds.then_some(s.clusters_running),
        observed_generation: res.metadata.generation,
    }
}

/// When to reconcile again: the plan's own instant (lock expiry, retry, end of a hold), the next
/// boundary of the bookings, or soon while EC2 members are in transit. Pure.
pub fn next_wake(
    p: &Plan,
    verdicts: &[Verdict],
    provider: ProviderType,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let recheck =
        (provider == ProviderType::Ec2 && p.transitional).then(|| now + TRANSITION_RECHECK);
    [p.requeue_at, next_boundary(verdicts), recheck]
        .into_iter()
        .flatten()
        .filter(|t| *t > now)
        .min()
}

/// What the inventory shows of a group.
struct Seen {
    members: Option<Vec<Member>>,
    observed_at: DateTime<Utc>,
}

/// The group's members from the inventory, refreshed with one filtered describe when that is
/// worth it: a freshly tagged group, or a booking about to run on a group not seen yet; and,
/// while EC2 members are in transit (`pending`, `stopping`), a few seconds after the last look
/// rather than at the next full refresh, so that e.g. back-to-back bookings restart a group as
/// soon as it has stopped (bounded by actual transitions, not by the number of Resources).
async fn observe(
    ctx: &Context,
    res: &Resource,
    key: &InventoryKey,
    owner: &str,
    wants_members: bool,
    now: DateTime<Utc>,
) -> Seen {
    let inventory = &ctx.groups.inventory;
    let tag = &res.spec.tag;
    let read = || {
        let snap = inventory.snapshot(key);
        let members = snap.as_ref().map(|s| s.group(tag));
        (snap, members)
    };
    let (mut snap, mut members) = read();
    let empty_and_wanted = members.as_ref().is_some_and(|m| m.is_empty())
        && wants_members
        && targeted_allowed(ctx, owner, now);
    let in_transit = key.kind == ProviderType::Ec2
        && members.as_ref().is_some_and(|ms| {
            ms.iter()
                .any(|m| m.state == "pending" || m.state == "stopping")
        })
        && snap
            .as_ref()
            .is_some_and(|s| now - s.observed_at(tag) >= TRANSITION_RECHECK);
    if empty_and_wanted || in_transit {
        match inventory.refresh_group(key, tag).await {
            Ok(()) => (snap, members) = read(),
            Err(e) => tracing::warn!(error = %e, "targeted refresh failed"),
        }
    }
    Seen {
        observed_at: snap.as_ref().map(|s| s.observed_at(tag)).unwrap_or(now),
        members,
    }
}

fn targeted_allowed(ctx: &Context, owner: &str, now: DateTime<Utc>) -> bool {
    let mut map = ctx
        .groups
        .targeted
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    match map.get(owner) {
        Some(last) if now - *last < ctx.groups.targeted_min_interval => false,
        _ => {
            map.insert(owner.to_owned(), now);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::actions::why;
    use super::*;
    use crate::plan::Summary;
    use booking_shared::api::ResourceSpec;
    use booking_shared::time::parse_rfc3339;

    fn at(s: &str) -> DateTime<Utc> {
        parse_rfc3339("t", s).unwrap()
    }

    fn resource(type_: &str) -> Resource {
        let mut r = Resource::new(
            "ec2.x",
            ResourceSpec {
                type_: type_.into(),
                tag: "x".into(),
                ..Default::default()
            },
        );
        r.metadata.generation = Some(3);
        r
    }

    #[test]
    fn an_unsupported_type_is_reported_by_its_field() {
        let s = invalid_type_status(&resource("s3"), at("2031-01-10T10:00:00Z"));
        assert_eq!(s.observed_generation, Some(3));
        let ready = &s.conditions[0];
        assert_eq!(
            (ready.type_.as_str(), ready.reason.as_str()),
            ("Ready", "InvalidSpec")
        );
        assert!(
            ready.message.starts_with("spec.type: \"s3\""),
            "{}",
            ready.message
        );
    }

    #[test]
    fn the_next_wake_is_the_earliest_future_instant() {
        let now = at("2031-01-10T10:00:00Z");
        let verdict = |next: &str| Verdict {
            name: "b".into(),
            phase: None,
            conflicts_with: None,
            invalid: None,
            next_boundary: Some(at(next)),
        };
        let mut p = Plan {
            requeue_at: Some(at("2031-01-10T10:30:00Z")),
            ..Default::default()
        };
        let v = [verdict("2031-01-10T10:10:00Z")];
        assert_eq!(
            next_wake(&p, &v, ProviderType::Ec2, now),
            Some(at("2031-01-10T10:10:00Z"))
        );
        p.transitional = true;
        assert_eq!(
            next_wake(&p, &v, ProviderType::Ec2, now),
            Some(now + TRANSITION_RECHECK)
        );
        // RDS members in transit are seen at the next inventory refresh.
        assert_eq!(
            next_wake(&p, &v, ProviderType::Rds, now),
            Some(at("2031-01-10T10:10:00Z"))
        );
        // Instants already past do not count.
        let past = [verdict("2031-01-10T09:00:00Z")];
        p.transitional = false;
        p.requeue_at = None;
        assert_eq!(next_wake(&p, &past, ProviderType::Ec2, now), None);
    }

    #[test]
    fn the_status_reports_the_plan_and_the_reason_for_acting() {
        let now = at("2031-01-10T10:00:00Z");
        let summary = Summary {
            instances: 2,
            running: 1,
            active_booking: Some("b1".into()),
            holder_user: Some("ann".into()),
            holder_until: Some("2031-01-10T11:00:00Z".into()),
            ..Default::default()
        };
        let p = Plan {
            summary: summary.clone(),
            conditions: vec![CondSpec::new(
                "Ready",
                false,
                "Starting",
                "members are being started",
            )],
            ..Default::default()
        };
        let next = Upcoming {
            booking: "b2".into(),
            user: "bob".into(),
            start: at("2031-01-10T12:00:00Z"),
        };
        let s = status_of(&resource("ec2"), &p, Some(&next), now);
        assert_eq!((s.instances, s.running), (2, 1));
        assert_eq!((s.clusters, s.clusters_running), (None, None), "rds only");
        let aurora = Plan {
            summary: Summary {
                clusters: 2,
                clusters_running: 1,
                ..summary.clone()
            },
            ..p.clone()
        };
        let of_aurora = status_of(&resource("rds"), &aurora, None, now);
        assert_eq!(
            (of_aurora.clusters, of_aurora.clusters_running),
            (Some(2), Some(1))
        );
        assert_eq!(s.active_user.as_deref(), Some("ann"));
        assert_eq!(
            (
                s.next_booking.as_deref(),
                s.next_booking_start.as_deref(),
                s.next_booking_user.as_deref()
            ),
            (Some("b2"), Some("2031-01-10T12:00:00Z"), Some("bob"))
        );
        assert_eq!(
            status_of(&resource("ec2"), &p, None, now).next_booking,
            None
        );
        assert_eq!(s.conditions[0].reason, "Starting");
        assert_eq!(
            why(&summary),
            "booking b1 of ann until 2031-01-10T11:00:00Z"
        );
        let manual = Summary {
            active_booking: None,
            ..summary
        };
        assert_eq!(
            why(&manual),
            "manual booking of ann until 2031-01-10T11:00:00Z"
        );
    }
}
