//! The Resource reconciler (level-based): arbitration of the Resource's bookings, the plan over
//! the inventory's view of the group, then the executor; status via merge patch; an Event for
//! every AWS action; requeue at the next instant that matters.

use std::collections::BTreeMap;
use std::sync::Arc;

use booking_shared::api::{Resource, ResourceStatus};
use chrono::Utc;
use kube::api::Api;
use kube::runtime::controller::Action;

use super::{Context, ns_name, patch_status};
use crate::arbitration::{arbitrate, holder, next_boundary};
use crate::aws::executor::{Outcomes, Target};
use crate::conditions::{CondSpec, merge};
use crate::error::Result;
use crate::model::{InventoryKey, Kind, Member};
use crate::plan::{Attempt, Op, Plan, PlanInput, plan};

const CLEARABLE: &[&str] = &[
    "status",
    "locked_by",
    "locked_until",
    "activeBooking",
    "activeUser",
    "activeUntil",
];

/// How soon a group with EC2 members in transit is observed again.
const TRANSITION_RECHECK: chrono::Duration = chrono::Duration::seconds(5);

/// Reconciles one Resource.
#[tracing::instrument(skip_all, fields(namespace, name))]
pub async fn reconcile(res: Arc<Resource>, ctx: Arc<Context>) -> Result<Action> {
    ctx.metrics.reconciled("Resource");
    let (ns, name) = ns_name(res.as_ref())?;
    tracing::Span::current()
        .record("namespace", ns.as_str())
        .record("name", name.as_str());
    let api: Api<Resource> = Api::namespaced(ctx.client.clone(), &ns);
    let owner = format!("{ns}/{name}");

    let Some(kind) = Kind::parse(&res.spec.type_) else {
        let status = ResourceStatus {
            conditions: merge(
                res.status
                    .as_ref()
                    .map(|s| s.conditions.as_slice())
                    .unwrap_or(&[]),
                &[
                    CondSpec::new(
                        "Ready",
                        false,
                        "InvalidSpec",
                        &format!(
                            "spec.type {:?} is not supported; use ec2 or rds",
                            res.spec.type_
                        ),
                    ),
                    CondSpec::new(
                        "Synced",
                        false,
                        "InvalidSpec",
                        "nothing is observed for an unsupported type",
                    ),
                ],
                res.metadata.generation,
                Utc::now(),
            ),
            observed_generation: res.metadata.generation,
            ..Default::default()
        };
        if res.status.as_ref() != Some(&status) {
            let _turn = ctx.api_write_permit().await;
            patch_status(&api, &name, &status, CLEARABLE).await?;
        }
        return Ok(Action::await_change());
    };
    let region = res
        .spec
        .region
        .clone()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| ctx.default_region.clone());
    let key = InventoryKey {
        kind,
        region: region.clone(),
    };
    if let Err(e) = ctx.inventory.ensure(&key).await {
        tracing::warn!(error = %e, "first inventory refresh failed");
    }

    ctx.caches_ready().await?;
    let now = Utc::now();
    let views = ctx.booking_views(&ns, &name);
    let verdicts = arbitrate(&views, now);
    let booking_holder = holder(&views, &verdicts);
    if booking_holder.is_none()
        && let Some(wait) = scheduler_handover(&ctx.client, &ns, &name, &views, now).await
    {
        return Ok(Action::requeue(wait));
    }

    let mut snapshot = ctx.inventory.snapshot(&key);
    let mut members: Option<Vec<Member>> =
        snapshot.as_ref().map(|s| s.group(&ctx.keys, &res.spec.tag));
    let is_new = res.status.as_ref().and_then(|s| s.observed_generation) != res.metadata.generation;
    let wants_members = booking_holder.is_some()
        || crate::plan::manual_holder(&res.spec, now)
            .ok()
            .flatten()
            .is_some()
        || is_new;
    if members.as_ref().is_some_and(|m| m.is_empty())
        && wants_members
        && targeted_allowed(&ctx, &owner, now)
    {
        // A freshly tagged group, or a booking about to run on a group not seen yet: one
        // filtered describe rather than waiting for the next full refresh.
        match ctx.inventory.refresh_group(&key, &res.spec.tag).await {
            Ok(()) => {
                snapshot = ctx.inventory.snapshot(&key);
                members = snapshot.as_ref().map(|s| s.group(&ctx.keys, &res.spec.tag));
            }
            Err(e) => tracing::warn!(error = %e, "targeted refresh failed"),
        }
    }
    // While EC2 members are in transit (`pending`, `stopping`), look again after a few seconds
    // rather than at the next full refresh, so that e.g. back-to-back bookings restart a group
    // as soon as it has stopped. Bounded by actual transitions, not by the number of Resources.
    if kind == Kind::Ec2
        && let (Some(snap), Some(ms)) = (&snapshot, &members)
        && ms
            .iter()
            .any(|m| m.state == "pending" || m.state == "stopping")
        && now - snap.observed_at(&res.spec.tag) >= TRANSITION_RECHECK
    {
        match ctx.inventory.refresh_group(&key, &res.spec.tag).await {
            Ok(()) => {
                snapshot = ctx.inventory.snapshot(&key);
                members = snapshot.as_ref().map(|s| s.group(&ctx.keys, &res.spec.tag));
            }
            Err(e) => tracing::warn!(error = %e, "refresh of a group in transit failed"),
        }
    }
    let observed_at = snapshot
        .as_ref()
        .map(|s| s.observed_at(&res.spec.tag))
        .unwrap_or(now);

    let attempts = group_attempts(&ctx, members.as_deref());
    let input = PlanInput {
        owner: &owner,
        kind,
        spec: &res.spec,
        booking_holder: booking_holder.clone(),
        members: members.as_deref(),
        observed_at,
        attempts: &attempts,
        keys: &ctx.keys,
        backoff: ctx.backoff,
        now,
    };
    let p = plan(&input);
    if !p.stop.is_empty() && ctx.index.is_stale() {
        // The Booking watch failed since its last full list: a booking created meanwhile (the
        // next one of a handover, created while the API server restarted) may be missing from
        // the cache. Stopping is what cannot be taken back: ask the API server first.
        match booked_now(&ctx.client, &ns, &name, now).await {
            Ok(false) => {}
            Ok(true) | Err(_) => {
                tracing::debug!("a stop waits for the Booking watch to catch up");
                return Ok(Action::requeue(std::time::Duration::from_secs(1)));
            }
        }
    }
    // The reads above may have taken a while (an API server coming back): a plan made for an
    // instant before a boundary of this group's bookings is not carried out after it.
    if let Some(boundary) = next_boundary(&verdicts)
        && Utc::now() >= boundary
    {
        return Ok(Action::requeue(std::time::Duration::ZERO));
    }
    let acted = execute(
        &ctx,
        &res,
        kind,
        &region,
        members.as_deref().unwrap_or(&[]),
        &p,
    )
    .await;

    // Re-plan with the attempts just made: the status then reports this reconcile's failures,
    // and no action is repeated (the attempts are newer than the observation).
    let final_plan = if acted {
        ctx.inventory.request_refresh();
        let attempts = group_attempts(&ctx, members.as_deref());
        plan(&PlanInput {
            attempts: &attempts,
            ..input
        })
    } else {
        p
    };

    let status = ResourceStatus {
        instances: final_plan.summary.instances,
        running: final_plan.summary.running,
        status: final_plan.summary.state,
        locked_by: final_plan.summary.locked_by.clone(),
        locked_until: final_plan.summary.locked_until.clone(),
        active_booking: final_plan.summary.active_booking.clone(),
        active_user: final_plan.summary.holder_user.clone(),
        active_until: final_plan.summary.holder_until.clone(),
        conditions: merge(
            res.status
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or(&[]),
            &final_plan.conditions,
            res.metadata.generation,
            now,
        ),
        observed_generation: res.metadata.generation,
    };
    if res.status.as_ref() != Some(&status) {
        let _turn = ctx.api_write_permit().await;
        patch_status(&api, &name, &status, CLEARABLE).await?;
    }

    let recheck = (kind == Kind::Ec2 && final_plan.transitional).then(|| now + TRANSITION_RECHECK);
    let next = [final_plan.requeue_at, next_boundary(&verdicts), recheck]
        .into_iter()
        .flatten()
        .filter(|t| *t > now)
        .min();
    Ok(match next {
        Some(at) => Action::requeue((at - Utc::now()).to_std().unwrap_or_default()),
        None => Action::await_change(),
    })
}

fn targeted_allowed(ctx: &Context, owner: &str, now: chrono::DateTime<Utc>) -> bool {
    let mut map = ctx.targeted.lock().unwrap_or_else(|p| p.into_inner());
    match map.get(owner) {
        Some(last) if now - *last < ctx.targeted_min_interval => false,
        _ => {
            map.insert(owner.to_owned(), now);
            true
        }
    }
}

fn record(ctx: &Context, op: Op, outcomes: &Outcomes) {
    let now = Utc::now();
    let mut attempts = ctx.attempts.lock().unwrap_or_else(|p| p.into_inner());
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

fn split(outcomes: &Outcomes) -> (Vec<&str>, Vec<String>) {
    let ok = outcomes
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(id, _)| id.as_str())
        .collect();
    let failed = outcomes
        .iter()
        .filter_map(|(id, r)| r.as_ref().err().map(|e| format!("{id}: {e}")))
        .collect();
    (ok, failed)
}

/// Performs the plan; returns whether anything was sent to AWS.
async fn execute(
    ctx: &Context,
    res: &Resource,
    kind: Kind,
    region: &str,
    members: &[Member],
    p: &Plan,
) -> bool {
    let why = match (
        &p.summary.active_booking,
        &p.summary.holder_user,
        &p.summary.holder_until,
    ) {
        (Some(b), Some(u), Some(until)) => format!("booking {b} of {u} until {until}"),
        (None, Some(u), Some(until)) => format!("manual booking of {u} until {until}"),
        _ => "no active booking".to_owned(),
    };
    {
        let mut attempts = ctx.attempts.lock().unwrap_or_else(|p| p.into_inner());
        for id in &p.settled {
            attempts.remove(id);
        }
    }
    let target = |id: &str| Target {
        id: id.to_owned(),
        arn: members
            .iter()
            .find(|m| m.id == id)
            .and_then(|m| m.arn.clone()),
    };
    // The lock tags, the start and the stop go out together, before any Event is written: a
    // start joins the executor's batch window at once, with the starts of every other Resource
    // booked for the same instant.
    let lock_targets: Vec<Target> = p.lock.ids.iter().map(|id| target(id)).collect();
    let (locked, started, stopped) = tokio::join!(
        async {
            if lock_targets.is_empty() {
                None
            } else {
                Some(
                    ctx.executor
                        .tag(kind, region, &lock_targets, &p.lock.tags)
                        .await,
                )
            }
        },
        async {
            if p.start.is_empty() {
                None
            } else {
                Some(ctx.executor.start(kind, region, &p.start).await)
            }
        },
        async {
            if p.stop.is_empty() {
                None
            } else {
                Some(ctx.executor.stop(kind, region, &p.stop, p.hibernate).await)
            }
        },
    );
    let mut acted = false;
    for note in &p.notes {
        ctx.event(
            res,
            note.warning,
            note.reason,
            "Observe",
            note.message.clone(),
        )
        .await;
    }
    if let Some(out) = locked {
        acted = true;
        let (ok, failed) = split(&out);
        if !ok.is_empty() {
            ctx.event(
                res,
                false,
                "Locked",
                "Tag",
                format!("lock tags written on {} ({why})", ok.join(", ")),
            )
            .await;
        }
        if !failed.is_empty() {
            ctx.event(
                res,
                true,
                "LockFailed",
                "Tag",
                format!("could not write lock tags: {}", failed.join("; ")),
            )
            .await;
        }
    }
    if let Some(out) = started {
        acted = true;
        record(ctx, Op::Start, &out);
        let (ok, failed) = split(&out);
        if !ok.is_empty() {
            tracing::info!(members = ?ok, %why, "started");
            ctx.event(
                res,
                false,
                "Started",
                "Start",
                format!("started {kind} {} ({why})", ok.join(", ")),
            )
            .await;
        }
        if !failed.is_empty() {
            ctx.event(
                res,
                true,
                "StartFailed",
                "Start",
                format!(
                    "start failed, will retry with backoff: {}",
                    failed.join("; ")
                ),
            )
            .await;
        }
    }
    if let Some(out) = stopped {
        acted = true;
        record(ctx, Op::Stop, &out);
        let (ok, failed) = split(&out);
        if !ok.is_empty() {
            tracing::info!(members = ?ok, %why, "stopped");
            let how = if p.hibernate {
                " (hibernating where supported)"
            } else {
                ""
            };
            ctx.event(
                res,
                false,
                "Stopped",
                "Stop",
                format!("stopped {kind} {}{how} ({why})", ok.join(", ")),
            )
            .await;
        }
        if !failed.is_empty() {
            ctx.event(
                res,
                true,
                "StopFailed",
                "Stop",
                format!(
                    "stop failed, will retry with backoff: {}",
                    failed.join("; ")
                ),
            )
            .await;
        }
    }
    // One Event for the whole group (as for the lock): Events with the same reason are merged
    // into one series, so one per instance would show only the first.
    let mut unlocked = Vec::new();
    let mut failed = Vec::new();
    for (id, keys) in &p.unlock {
        acted = true;
        match ctx.executor.untag(kind, region, &target(id), keys).await {
            Ok(()) => unlocked.push(id.as_str()),
            Err(e) => failed.push(format!("{id}: {e}")),
        }
    }
    if !unlocked.is_empty() {
        ctx.event(
            res,
            false,
            "Unlocked",
            "Untag",
            format!("lock tags removed from {}", unlocked.join(", ")),
        )
        .await;
    }
    if !failed.is_empty() {
        ctx.event(
            res,
            true,
            "UnlockFailed",
            "Untag",
            format!("could not remove lock tags from {}", failed.join("; ")),
        )
        .await;
    }
    acted
}

/// The earlier attempts on `members` (the plan reads only those): a copy of this group's
/// entries, not of every member of every group, which 1,000 Resources reconciling together
/// would each copy.
fn group_attempts(ctx: &Context, members: Option<&[Member]>) -> BTreeMap<String, Attempt> {
    let all = ctx.attempts.lock().unwrap_or_else(|p| p.into_inner());
    members
        .unwrap_or_default()
        .iter()
        .filter_map(|m| all.get(&m.id).map(|a| (m.id.clone(), a.clone())))
        .collect()
}

/// Whether a booking holds Resource `name` at `now`, by the API server's own list (a consistent
/// read), not by the cache.
async fn booked_now(
    client: &kube::Client,
    ns: &str,
    name: &str,
    now: chrono::DateTime<Utc>,
) -> Result<bool> {
    let all = Api::<booking_shared::api::Booking>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await?;
    let views: Vec<_> = all
        .items
        .iter()
        .filter(|b| b.spec.resource_name == name)
        .map(super::view_of)
        .collect();
    let verdicts = arbitrate(&views, now);
    Ok(holder(&views, &verdicts).is_some())
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
    views: &[crate::arbitration::BookingView],
    now: chrono::DateTime<Utc>,
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
