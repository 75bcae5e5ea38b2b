//! The AWS calls of one Resource reconcile, the memory of their attempts, and the Events that
//! report them.

use std::collections::BTreeMap;

use booking_shared::api::{ProviderType, Resource};
use chrono::{DateTime, Utc};

use crate::aws::executor::{Outcomes, Preparing, Target};
use crate::context::Context;
use crate::dry_run::{DryRun, WouldAction, tag_list};
use crate::model::{InventoryKey, Member};
use crate::plan::{Attempt, Op, Plan};

pub(super) fn forget_settled(ctx: &Context, p: &Plan) {
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
pub(super) struct Done {
    locked: Option<Outcomes>,
    started: Option<Outcomes>,
    stopped: Option<Outcomes>,
    unlocked: Outcomes,
}

impl Done {
    pub(super) fn acted(&self) -> bool {
        self.locked.is_some()
            || self.started.is_some()
            || self.stopped.is_some()
            || !self.unlocked.is_empty()
    }
}

/// Sends the plan's AWS calls. The lock tags, the start and the stop go out together, before any
/// Event is written: a start joins the executor's queue at once, with the starts of every other
/// Resource booked for the same instant. Records the attempts of starts and stops.
///
/// `preparing` is the reconcile's turn if it holds one (see [`Preparing`]), released as soon as the start's and
/// the stop's requests are queued.
///
/// In dry-run mode nothing is sent: [`would_act`] reports the calls instead.
pub(super) async fn act(
    ctx: &Context,
    (res, provider, region): (&Resource, ProviderType, &str),
    members: &[Member],
    p: &Plan,
    preparing: Option<Preparing>,
) -> Done {
    if let Some(dry) = &ctx.dry_run {
        drop(preparing);
        would_act(ctx, dry, res, provider, p).await;
        return Done::default();
    }
    let exec = &ctx.groups.executor;
    let target = |id: &str| Target {
        id: id.to_owned(),
        arn: members
            .iter()
            .find(|m| m.id == id)
            .and_then(|m| m.arn.clone()),
    };
    let lock_targets: Vec<Target> = p.lock.ids.iter().map(|id| target(id)).collect();
    // Polled in this order: the start's and the stop's requests join the executor's queue
    // before the tag call is prepared.
    let (started, stopped, locked) = tokio::join!(
        biased;
        timed(start_or_stop(
            ctx, provider, region, members, &p.start, None
        )),
        timed(start_or_stop(
            ctx,
            provider,
            region,
            members,
            &p.stop,
            Some(p.hibernate)
        )),
        async {
            // Polled after the start's and the stop's requests are queued: the executor need
            // not wait for this reconcile any more.
            drop(preparing);
            if lock_targets.is_empty() {
                None
            } else {
                // One yield first: the other reconciles woken at the same instant (tasks
                // spawned together by their controller, queued behind this one) send their
                // starts and stops to the executor before this one spends time preparing a
                // tag call, so that they join one batch.
                tokio::task::yield_now().await;
                Some(
                    exec.tag(provider, region, &lock_targets, &p.lock.tags)
                        .await,
                )
            }
        },
    );
    let now = ctx.now();
    let started = started.map(|(out, seconds)| {
        record(ctx, Op::Start, &out, now, seconds);
        out
    });
    let stopped = stopped.map(|(out, seconds)| {
        record(ctx, Op::Stop, &out, now, seconds);
        out
    });
    let mut unlocked = Vec::new();
    for (id, keys) in &p.unlock {
        let outcome = exec.untag(provider, region, &target(id), keys).await;
        unlocked.push((id.clone(), outcome));
    }
    // The inventory shows the tags as written until its next listing: the reconciles before
    // it (woken by this one's status) do not write them again.
    let inventory = &ctx.groups.inventory;
    let key = InventoryKey {
        kind: provider,
        region: region.to_owned(),
    };
    for (id, _) in locked.iter().flatten().filter(|(_, r)| r.is_ok()) {
        inventory.amend_tags(&key, id, &p.lock.tags, &[]);
    }
    for (id, keys) in p.unlock.iter().filter(|(id, _)| {
        unlocked
            .iter()
            .any(|(done, r): &(String, _)| done == id && r.is_ok())
    }) {
        inventory.amend_tags(&key, id, &[], keys);
    }
    Done {
        locked,
        started,
        stopped,
        unlocked,
    }
}

/// Dry-run mode: the Events `WouldStart`, `WouldStop` (naming the lock tags that would be
/// written or removed with them), `WouldLock` and `WouldUnlock` for the calls of `p`, which was
/// made from the simulated group, and the metric; then the calls are remembered as made, so
/// that each is reported once, not at every reconcile.
async fn would_act(ctx: &Context, dry: &DryRun, res: &Resource, provider: ProviderType, p: &Plan) {
    let why = why(&p.summary);
    let lock = (!p.lock.ids.is_empty()).then(|| {
        format!(
            "write the lock tags {} on {}",
            tag_list(&p.lock.tags),
            p.lock.ids.join(", ")
        )
    });
    let unlock = (!p.unlock.is_empty()).then(|| {
        let each: Vec<String> = p
            .unlock
            .iter()
            .map(|(id, keys)| format!("{} from {id}", keys.join(", ")))
            .collect();
        format!("remove the lock tags {}", each.join("; "))
    });
    let with = |extra: &Option<String>| {
        extra
            .as_ref()
            .map_or(String::new(), |e| format!(" and {e}"))
    };
    let mut events = Vec::new();
    if !p.start.is_empty() {
        let what = format!("start {provider} {}{}", p.start.join(", "), with(&lock));
        events.push(("WouldStart", "Start", what));
    } else if let Some(lock) = &lock {
        events.push(("WouldLock", "Tag", lock.clone()));
    }
    if !p.stop.is_empty() {
        let how = if p.hibernate {
            " (hibernating where supported)"
        } else {
            ""
        };
        let what = format!(
            "stop {provider} {}{how}{}",
            p.stop.join(", "),
            with(&unlock)
        );
        events.push(("WouldStop", "Stop", what));
    } else if let Some(unlock) = &unlock {
        events.push(("WouldUnlock", "Untag", unlock.clone()));
    }
    for (action, n) in [
        (WouldAction::Start, p.start.len()),
        (WouldAction::Stop, p.stop.len()),
        (WouldAction::Tag, p.lock.ids.len()),
        (WouldAction::Untag, p.unlock.len()),
    ] {
        if n > 0 {
            ctx.metrics.would(action, n);
        }
    }
    dry.record(provider, p);
    for (reason, action, what) in events {
        tracing::info!(reason, %what, %why, "dry-run mode: not sent to AWS");
        let note = format!("dry-run mode: would {what} ({why}); nothing was sent to AWS");
        ctx.events.publish(res, false, reason, action, note).await;
    }
}

/// Starts (`hibernate` `None`) or stops `ids`: Aurora DB clusters with one
/// StartDBCluster/StopDBCluster each, the other members through the executor's start or stop.
/// `None` when there is nothing to do.
async fn start_or_stop(
    ctx: &Context,
    provider: ProviderType,
    region: &str,
    members: &[Member],
    ids: &[String],
    hibernate: Option<bool>,
) -> Option<Outcomes> {
    if ids.is_empty() {
        return None;
    }
    let exec = &ctx.groups.executor;
    let is_cluster = |id: &String| members.iter().any(|m| m.is_cluster && &m.id == id);
    let (clusters, others): (Vec<String>, Vec<String>) = ids.iter().cloned().partition(is_cluster);
    let (mut out, of_clusters) = match hibernate {
        None => tokio::join!(
            exec.start(provider, region, &others),
            exec.start_clusters(region, &clusters)
        ),
        Some(h) => tokio::join!(
            exec.stop(provider, region, &others, h),
            exec.stop_clusters(region, &clusters)
        ),
    };
    out.extend(of_clusters);
    Some(out)
}

/// The outcomes of `calls`, when any call was made, with the seconds they took.
async fn timed(
    calls: impl std::future::Future<Output = Option<Outcomes>>,
) -> Option<(Outcomes, f64)> {
    let began = std::time::Instant::now();
    let out = calls.await?;
    Some((out, began.elapsed().as_secs_f64()))
}

/// Remembers the attempts of `op` on the members in `outcomes` and counts them.
fn record(ctx: &Context, op: Op, outcomes: &Outcomes, now: DateTime<Utc>, seconds: f64) {
    let failed = outcomes.iter().filter(|(_, r)| r.is_err()).count();
    ctx.metrics
        .member_actions(op, outcomes.len() - failed, failed, seconds);
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
pub(super) async fn report(
    ctx: &Context,
    res: &Resource,
    provider: ProviderType,
    p: &Plan,
    done: &Done,
) {
    for note in &p.notes {
        ctx.events
            .publish(
                res,
                note.warning,
                note.reason,
                "Observe",
                note.text(ctx.dry_run.is_some()),
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
pub(super) fn why(s: &crate::plan::Summary) -> String {
    match (&s.active_booking, &s.holder_user, &s.holder_until) {
        (Some(b), Some(u), Some(until)) => format!("booking {b} of {u} until {until}"),
        (None, Some(u), Some(until)) => format!("manual booking of {u} until {until}"),
        _ => "no active booking".to_owned(),
    }
}

/// The earlier attempts on `members` (the plan reads only those): a copy of this group's
/// entries, not of every member of every group, which 1,000 Resources reconciling together
/// would each copy.
pub(super) fn group_attempts(
    ctx: &Context,
    members: Option<&[Member]>,
) -> BTreeMap<String, Attempt> {
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
