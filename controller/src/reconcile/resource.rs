//! The Resource reconciler (level-based): arbitration of the Resource's bookings, the plan over
//! the inventory's view of the group, then the executor; status through the status writer; an
//! Event for every AWS action; requeue at the next instant that matters.
//!
//! One reconcile: [`observe`] the group (with a targeted refresh when worth it), decide the
//! holder and the [`plan`], make sure a stop is safe ([`stop_is_safe`]), [`act`], then
//! [`report`] the outcomes, write [`status_of`] the final plan and requeue at [`next_wake`].

use std::collections::BTreeMap;
use std::sync::Arc;

use booking_shared::api::{ProviderType, Resource, ResourceStatus, unsupported_type_message};
use booking_shared::arbitration::{
    BookingView, Verdict, arbitrate, holder, holder_at, next_boundary,
};
use chrono::{DateTime, Utc};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::{ns_name, write_status};
use crate::aws::executor::{Outcomes, Target};
use crate::conditions::{CondSpec, merge};
use crate::context::Context;
use crate::error::Result;
use crate::model::{InventoryKey, Member};
use crate::plan::{Attempt, Op, Plan, PlanInput, manual_holder, plan};

/// How soon a group with EC2 members in transit is observed again.
const TRANSITION_RECHECK: chrono::Duration = chrono::Duration::seconds(5);

/// Reconciles one Resource.
#[tracing::instrument(skip_all, fields(namespace, name))]
pub async fn reconcile(res: Arc<Resource>, ctx: Arc<Context>) -> Result<Action> {
    let (ns, name) = ns_name(res.as_ref())?;
    let Some(provider) = res.spec.provider_type() else {
        let status = invalid_type_status(&res, ctx.now());
        write_status(&ctx, res.as_ref(), &status, None).await?;
        return Ok(Action::await_change());
    };
    let region = res
        .spec
        .region
        .clone()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| ctx.groups.default_region.clone());
    let key = InventoryKey {
        kind: provider,
        region: region.clone(),
    };
    if let Err(e) = ctx.groups.inventory.ensure(&key).await {
        tracing::warn!(error = %e, "first inventory refresh failed");
    }
    ctx.caches_ready().await;
    let now = ctx.now();
    let views = ctx
        .caches
        .index
        .views_of(&ObjectRef::new(&name).within(&ns));
    let verdicts = arbitrate(&views, now);
    let booking_holder = holder(&views, &verdicts);
    if booking_holder.is_none()
        && let Some(wait) = scheduler_handover(&ctx.client, &ns, &name, &views, now).await
    {
        return Ok(Action::requeue(wait));
    }
    let owner = format!("{ns}/{name}");
    let wants_members = booking_holder.is_some()
        || manual_holder(&res.spec, now).ok().flatten().is_some()
        || res.status.as_ref().and_then(|s| s.observed_generation) != res.metadata.generation;
    let seen = observe(&ctx, &res, &key, &owner, wants_members, now).await;
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
    if !p.stop.is_empty() && !stop_is_safe(&ctx, &ns, &name, now).await {
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
    let done = act(&ctx, provider, &region, members, &p).await;
    report(&ctx, &res, provider, &p, &done).await;
    // Re-plan with the attempts just made: the status then reports this reconcile's failures,
    // and no action is repeated (the attempts are newer than the observation).
    let final_plan = if done.acted() {
        ctx.groups.inventory.request_refresh();
        let attempts = group_attempts(&ctx, seen.members.as_deref());
        plan(&PlanInput {
            attempts: &attempts,
            ..input
        })
    } else {
        p
    };
    write_status(&ctx, res.as_ref(), &status_of(&res, &final_plan, now), None).await?;
    Ok(match next_wake(&final_plan, &verdicts, provider, now) {
        Some(at) => Action::requeue(ctx.until(at)),
        None => Action::await_change(),
    })
}

/// The status of a Resource whose `spec.type` names no provider type. Pure.
pub fn invalid_type_status(res: &Resource, now: DateTime<Utc>) -> ResourceStatus {
    let old = res
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or(&[]);
    let conditions = [
        CondSpec::new(
            "Ready",
            false,
            "InvalidSpec",
            &unsupported_type_message("spec.type", &res.spec.type_),
        ),
        CondSpec::new(
            "Synced",
            false,
            "InvalidSpec",
            "nothing is observed for an unsupported type",
        ),
    ];
    ResourceStatus {
        conditions: merge(old, &conditions, res.metadata.generation, now),
        observed_generation: res.metadata.generation,
        ..Default::default()
    }
}

/// The status from the final plan of a reconcile. Pure.
pub fn status_of(res: &Resource, p: &Plan, now: DateTime<Utc>) -> ResourceStatus {
    let old = res
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or(&[]);
    let s = &p.summary;
    ResourceStatus {
        instances: s.instances,
        running: s.running,
        status: s.state,
        locked_by: s.locked_by.clone(),
        locked_until: s.locked_until.clone(),
        active_booking: s.active_booking.clone(),
        active_user: s.holder_user.clone(),
        active_until: s.holder_until.clone(),
        conditions: merge(old, &p.conditions, res.metadata.generation, now),
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
        let members = snap.as_ref().map(|s| s.group(&ctx.groups.keys, tag));
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

/// Whether a planned stop may go out. While the Booking watch has failed since its last full
/// list, a booking created meanwhile (the next one of a handover, created while the API server
/// restarted) may be missing from the cache; stopping is what cannot be taken back, so the API
/// server is asked first (a consistent list).
async fn stop_is_safe(ctx: &Context, ns: &str, name: &str, now: DateTime<Utc>) -> bool {
    if !ctx.caches.index.is_stale() {
        return true;
    }
    let listed = Api::<booking_shared::api::Booking>::namespaced(ctx.client.clone(), ns)
        .list(&Default::default())
        .await;
    match listed {
        Ok(all) => {
            let views: Vec<BookingView> = all
                .items
                .iter()
                .filter(|b| b.spec.resource_name == name)
                .map(BookingView::of)
                .collect();
            holder_at(&views, now).is_none()
        }
        Err(_) => false,
    }
}

fn forget_settled(ctx: &Context, p: &Plan) {
    let mut attempts = ctx
        .groups
        .attempts
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    for id in &p.settled {
        attempts.remove(id);
    }
}

/// The outcomes of one reconcile's AWS calls (`None`: not called).
#[derive(Default)]
struct Done {
    locked: Option<Outcomes>,
    started: Option<Outcomes>,
    stopped: Option<Outcomes>,
    unlocked: Outcomes,
}

impl Done {
    fn acted(&self) -> bool {
        self.locked.is_some()
            || self.started.is_some()
            || self.stopped.is_some()
            || !self.unlocked.is_empty()
    }
}

/// Sends the plan's AWS calls. The lock tags, the start and the stop go out together, before any
/// Event is written: a start joins the executor's batch window at once, with the starts of every
/// other Resource booked for the same instant. Records the attempts of starts and stops.
async fn act(
    ctx: &Context,
    provider: ProviderType,
    region: &str,
    members: &[Member],
    p: &Plan,
) -> Done {
    let exec = &ctx.groups.executor;
    let target = |id: &str| Target {
        id: id.to_owned(),
        arn: members
            .iter()
            .find(|m| m.id == id)
            .and_then(|m| m.arn.clone()),
    };
    let lock_targets: Vec<Target> = p.lock.ids.iter().map(|id| target(id)).collect();
    let (locked, started, stopped) = tokio::join!(
        async {
            if lock_targets.is_empty() {
                None
            } else {
                Some(
                    exec.tag(provider, region, &lock_targets, &p.lock.tags)
                        .await,
                )
            }
        },
        async {
            if p.start.is_empty() {
                None
            } else {
                Some(exec.start(provider, region, &p.start).await)
            }
        },
        async {
            if p.stop.is_empty() {
                None
            } else {
                Some(exec.stop(provider, region, &p.stop, p.hibernate).await)
            }
        },
    );
    let now = ctx.now();
    if let Some(out) = &started {
        record(ctx, Op::Start, out, now);
    }
    if let Some(out) = &stopped {
        record(ctx, Op::Stop, out, now);
    }
    let mut unlocked = Vec::new();
    for (id, keys) in &p.unlock {
        let outcome = exec.untag(provider, region, &target(id), keys).await;
        unlocked.push((id.clone(), outcome));
    }
    Done {
        locked,
        started,
        stopped,
        unlocked,
    }
}

fn record(ctx: &Context, op: Op, outcomes: &Outcomes, now: DateTime<Utc>) {
    let mut attempts = ctx
        .groups
        .attempts
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    for (id, r) in outcomes {
        let count = attempts
            .get(id)
            .filter(|a| a.op == op)
            .map_or(1, |a| a.count.saturating_add(1));
        attempts.insert(
            id.clone(),
            Attempt {
                op,
                count,
                at: now,
                error: r.as_ref().err().map(ToString::to_string),
            },
        );
    }
}

/// The Events of one reconcile: the plan's notes, then one Event per kind of call and outcome
/// for the whole group (Events with the same reason are merged into one series, so one per
/// instance would show only the first).
async fn report(ctx: &Context, res: &Resource, provider: ProviderType, p: &Plan, done: &Done) {
    for note in &p.notes {
        ctx.events
            .publish(
                res,
                note.warning,
                note.reason,
                "Observe",
                note.message.clone(),
            )
            .await;
    }
    let why = why(&p.summary);
    if let Some(out) = &done.locked {
        publish_outcomes(
            ctx,
            res,
            out,
            ("Tag", "Locked", "LockFailed"),
            |ids| format!("lock tags written on {ids} ({why})"),
            |errors| format!("could not write lock tags: {errors}"),
        )
        .await;
    }
    if let Some(out) = &done.started {
        let ok = publish_outcomes(
            ctx,
            res,
            out,
            ("Start", "Started", "StartFailed"),
            |ids| format!("started {provider} {ids} ({why})"),
            |errors| format!("start failed, will retry with backoff: {errors}"),
        )
        .await;
        if !ok.is_empty() {
            tracing::info!(members = ?ok, %why, "started");
        }
    }
    if let Some(out) = &done.stopped {
        let how = if p.hibernate {
            " (hibernating where supported)"
        } else {
            ""
        };
        let ok = publish_outcomes(
            ctx,
            res,
            out,
            ("Stop", "Stopped", "StopFailed"),
            |ids| format!("stopped {provider} {ids}{how} ({why})"),
            |errors| format!("stop failed, will retry with backoff: {errors}"),
        )
        .await;
        if !ok.is_empty() {
            tracing::info!(members = ?ok, %why, "stopped");
        }
    }
    if !done.unlocked.is_empty() {
        publish_outcomes(
            ctx,
            res,
            &done.unlocked,
            ("Untag", "Unlocked", "UnlockFailed"),
            |ids| format!("lock tags removed from {ids}"),
            |errors| format!("could not remove lock tags from {errors}"),
        )
        .await;
    }
}

/// Publishes, for one kind of call (`action`), one Event `ok_reason` naming the members that
/// succeeded and one Warning `failed_reason` naming those that failed with their errors.
/// Returns the members that succeeded.
async fn publish_outcomes<'a>(
    ctx: &Context,
    res: &Resource,
    outcomes: &'a Outcomes,
    (action, ok_reason, failed_reason): (&str, &str, &str),
    ok_note: impl Fn(&str) -> String,
    failed_note: impl Fn(&str) -> String,
) -> Vec<&'a str> {
    let ok: Vec<&str> = outcomes
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(id, _)| id.as_str())
        .collect();
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|(id, r)| r.as_ref().err().map(|e| format!("{id}: {e}")))
        .collect();
    if !ok.is_empty() {
        let note = ok_note(&ok.join(", "));
        ctx.events
            .publish(res, false, ok_reason, action, note)
            .await;
    }
    if !failed.is_empty() {
        let note = failed_note(&failed.join("; "));
        ctx.events
            .publish(res, true, failed_reason, action, note)
            .await;
    }
    ok
}

/// Why the group is acted on, for the Events.
fn why(s: &crate::plan::Summary) -> String {
    match (&s.active_booking, &s.holder_user, &s.holder_until) {
        (Some(b), Some(u), Some(until)) => format!("booking {b} of {u} until {until}"),
        (None, Some(u), Some(until)) => format!("manual booking of {u} until {until}"),
        _ => "no active booking".to_owned(),
    }
}

/// The earlier attempts on `members` (the plan reads only those): a copy of this group's
/// entries, not of every member of every group, which 1,000 Resources reconciling together
/// would each copy.
fn group_attempts(ctx: &Context, members: Option<&[Member]>) -> BTreeMap<String, Attempt> {
    let all = ctx
        .groups
        .attempts
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    members
        .unwrap_or_default()
        .iter()
        .filter_map(|m| all.get(&m.id).map(|a| (m.id.clone(), a.clone())))
        .collect()
}

/// How long a booking ending at a fire time of a BookingScheduler of the same Resource waits
/// for the scheduler's next booking before the group is stopped: long enough for the scheduler
/// to create it after an API server restart.
const HANDOVER_GRACE: chrono::Duration = chrono::Duration::seconds(30);

/// Schedulers create their bookings at the fire time, never before; when one booking of a
/// scheduler ends exactly as the next fires, the next booking appears some milliseconds after the
/// boundary. Instead of stopping the group and starting it again at once, wait (briefly) for it.
/// Returns the delay before looking again, or `None` to proceed.
async fn scheduler_handover(
    client: &kube::Client,
    ns: &str,
    resource: &str,
    views: &[BookingView],
    now: DateTime<Utc>,
) -> Option<std::time::Duration> {
    use booking_shared::{api::BookingScheduler, schedule::CronSchedule};
    let just_ended = views
        .iter()
        .filter_map(|v| v.slot.as_ref().ok())
        .map(|s| s.end)
        .filter(|end| *end <= now && now - *end < HANDOVER_GRACE)
        .max()?;
    let schedulers: Api<BookingScheduler> = Api::namespaced(client.clone(), ns);
    let Ok(list) = schedulers.list(&Default::default()).await else {
        // Whether a scheduler fires now cannot be told: wait rather than stop.
        return Some(std::time::Duration::from_millis(500));
    };
    let fires_then = list.items.iter().any(|s| {
        s.spec.booking_template.resource_name == resource
            && CronSchedule::parse_in(&s.spec.schedule, s.spec.time_zone.as_deref())
                .ok()
                .and_then(|c| c.next_after(just_ended - chrono::Duration::milliseconds(1)))
                == Some(just_ended)
    });
    fires_then.then(|| {
        tracing::debug!(%just_ended, "waiting for the scheduler's next booking before stopping");
        std::time::Duration::from_millis(250)
    })
}

#[cfg(test)]
mod tests {
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
        let s = status_of(&resource("ec2"), &p, now);
        assert_eq!((s.instances, s.running), (2, 1));
        assert_eq!(s.active_user.as_deref(), Some("ann"));
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
