//! The kill campaign: a seeded workload of booking transitions (bookings starting and ending,
//! back-to-back handovers, reminders, a per-minute scheduler, bookings deleted while active)
//! runs against the real controller binary, a private control plane and moto, while the
//! campaign kills the controller at random moments (SIGKILL and SIGTERM) and restarts it, and
//! restarts the kube-apiserver after compacting etcd (so watches resume from a compacted
//! resourceVersion, get `410 Gone` and relist). With two replicas it kills the leader.
//!
//! Everything is observed from outside — samples of the Bookings and of the instances, the AWS
//! requests of each replica (through a recording proxy each), the Lease, the mails received —
//! and the invariants are checked afterwards by pure functions:
//!
//! - every group's state and lock equal what its bookings say, and every booking's phase is the
//!   clock's, within [`Options::bound`] of the controller being back;
//! - no `StopInstances` of a group that a booking holds;
//! - one booking per scheduler fire while a leader ran, never one for a fire whose slot had ended;
//! - at most one mail per notification (Message-ID), none after its booking's end, and every
//!   reminder due while a leader ran is sent;
//! - no AWS write from a replica that does not hold the Lease.
//!
//! The seed is printed first; `CAMPAIGN_SEED=<seed>` replays the same workload and fault
//! schedule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use booking_harness::TestDir;
use booking_harness::control_plane::{ControlPlane, ControlPlaneOptions, TestCluster};
use booking_harness::moto::{self, MotoServer};
use booking_harness::process::{ManagedProcess, ProcessBuilder};
use booking_harness::proxy::{FaultProxy, ProxiedRequest};
use booking_harness::smtp::{SmtpOptions, SmtpServer};
use booking_shared::api::{
    Booking, BookingPhase, BookingScheduler, BookingSpec, Notification, Resource,
};
use booking_shared::scheduling::SCHEDULER_LABEL;
use booking_shared::time::format_rfc3339;
use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};

use crate::e2e::{controller_binary, leads, resource};

/// The tag key of the lock holder.
const LOCKED_BY: &str = "resource-booking/locked-by";
/// The group the per-minute scheduler books.
const SCHEDULER_GROUP: &str = "sched";
/// The scheduler's name.
const SCHEDULER: &str = "every-minute";
/// Time a boundary may take to show (a phase written, an instance started) while the
/// controller runs: its reconciles are due at the boundary itself.
const GRACE: chrono::TimeDelta = chrono::TimeDelta::seconds(5);
/// Lead time of every reminder (minutes): longer than most bookings, so most are due at their
/// start.
const LEAD_MINUTES: u32 = 1;
/// How long every period up is checked at least (after its bound) before the next fault.
const CHECKED: chrono::TimeDelta = chrono::TimeDelta::seconds(8);
/// How long a leader must run within a scheduler fire's slot for that fire to be owed a booking.
const FIRE_UPTIME: chrono::TimeDelta = chrono::TimeDelta::seconds(8);

/// What one campaign runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// A label for folders and the namespace.
    pub label: String,
    /// The seed of the workload and of the fault schedule.
    pub seed: u64,
    /// How long bookings keep starting and ending.
    pub window: Duration,
    /// EC2 groups booked by the workload (one instance each), besides the scheduler's.
    pub groups: usize,
    /// Controller replicas (leader election is on; with 2 the leader is what gets killed).
    pub replicas: usize,
    /// How many times the kube-apiserver is restarted after compacting etcd.
    pub apiserver_restarts: usize,
    /// Within this long after the controller (or the API server) is back, everything must be
    /// right again.
    pub bound: Duration,
    /// The `booking-controller` binary; `None`: the one beside the test executable
    /// ([`controller_binary`]).
    pub controller: Option<PathBuf>,
}

impl Options {
    /// Options with the seed of `CAMPAIGN_SEED` when set, else a fresh one.
    pub fn new(label: &str, window: Duration, replicas: usize) -> Options {
        let seed = std::env::var("CAMPAIGN_SEED")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    // Twelve digits: short to type, and exact in the benchmarks' JSON.
                    .map(|d| (d.as_nanos() % 1_000_000_000_000) as u64)
                    .unwrap_or(1)
            });
        Options {
            label: label.to_owned(),
            seed,
            window,
            groups: 8,
            replicas,
            apiserver_restarts: 1,
            bound: Duration::from_secs(20),
            controller: None,
        }
    }
}

// === The plan (pure) ===

/// One booking of the workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    /// Its name.
    pub name: String,
    /// Its group's tag (the Resource is `ec2.<tag>`).
    pub group: String,
    /// Its slot.
    pub start: DateTime<Utc>,
    /// Its end.
    pub end: DateTime<Utc>,
    /// When the campaign creates it.
    pub create_at: DateTime<Utc>,
    /// When the campaign deletes it (while it is active), if it does.
    pub delete_at: Option<DateTime<Utc>>,
    /// Whether it asks for a reminder by email (to `<name>@example.com`).
    pub remind: bool,
}

/// What happens to the controller (or the API server) at one moment.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultKind {
    /// SIGKILL the controller (the leader, with two replicas), restart it after `down`.
    Kill {
        /// SIGKILL rather than SIGTERM.
        sigkill: bool,
        /// How long it stays down.
        down: Duration,
    },
    /// Compact etcd, then restart the kube-apiserver.
    RestartApiserver,
}

/// A fault at a moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    /// When.
    pub at: DateTime<Utc>,
    /// What.
    pub kind: FaultKind,
}

/// The whole plan of a campaign: bookings and faults, from the seed alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The bookings.
    pub bookings: Vec<Planned>,
    /// The faults, in time order.
    pub faults: Vec<Fault>,
}

fn secs(rng: &mut fastrand::Rng, range: std::ops::RangeInclusive<i64>) -> chrono::TimeDelta {
    chrono::TimeDelta::seconds(rng.i64(range))
}

/// The plan of a campaign starting at `t0`: per group a chain of bookings (a third of them
/// back-to-back), some created up front and some shortly before they start, some with a
/// reminder, two deleted while active; faults spaced so that each restart has `bound` to
/// converge before the next.
pub fn plan(options: &Options, t0: DateTime<Utc>) -> Plan {
    let mut rng = fastrand::Rng::with_seed(options.seed);
    let window_end = t0 + chrono::TimeDelta::from_std(options.window).unwrap_or_default();
    let mut bookings = Vec::new();
    for g in 0..options.groups {
        let group = format!("g{g}");
        // The first booking of some groups has already started when the campaign begins.
        let mut t = t0 + secs(&mut rng, -20..=12);
        let mut n = 0;
        while t + chrono::TimeDelta::seconds(10) < window_end {
            let end = t + secs(&mut rng, 10..=35);
            let early = t - secs(&mut rng, 3..=30);
            let create_at = if rng.bool() || early <= t0 { t0 } else { early };
            bookings.push(Planned {
                name: format!("{group}-{n}"),
                group: group.clone(),
                start: t,
                end,
                create_at,
                delete_at: None,
                remind: rng.u8(0..10) < 4,
            });
            n += 1;
            t = if rng.u8(0..3) == 0 {
                end
            } else {
                end + secs(&mut rng, 4..=15)
            };
        }
    }
    // Two bookings deleted halfway through their slot.
    let mut long: Vec<usize> = (0..bookings.len())
        .filter(|&i| bookings[i].end - bookings[i].start >= chrono::TimeDelta::seconds(16))
        .filter(|&i| bookings[i].start > t0)
        .collect();
    rng.shuffle(&mut long);
    for &i in long.iter().take(2) {
        let b = &mut bookings[i];
        b.delete_at = Some(b.start + (b.end - b.start) / 2);
    }

    let bound = chrono::TimeDelta::from_std(options.bound).unwrap_or_default();
    let mut faults = Vec::new();
    let mut t = t0 + secs(&mut rng, 8..=15);
    let mut apiserver_left = options.apiserver_restarts;
    let mut k = 0usize;
    while t + bound < window_end {
        // An API server restart once in a while, between kills.
        let kind = if apiserver_left > 0 && k % 3 == 1 {
            apiserver_left -= 1;
            FaultKind::RestartApiserver
        } else {
            FaultKind::Kill {
                sigkill: rng.bool(),
                down: Duration::from_secs(rng.u64(0..=12)),
            }
        };
        let down = match &kind {
            FaultKind::Kill { down, .. } => chrono::TimeDelta::from_std(*down).unwrap_or_default(),
            FaultKind::RestartApiserver => chrono::TimeDelta::seconds(5),
        };
        faults.push(Fault { at: t, kind });
        k += 1;
        t = t + down + bound + secs(&mut rng, 0..=8);
    }
    Plan { bookings, faults }
}

// === What was observed ===

/// A booking as one sample saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct SeenBooking {
    /// Name.
    pub name: String,
    /// Group tag.
    pub group: String,
    /// Slot start.
    pub start: DateTime<Utc>,
    /// Slot end.
    pub end: DateTime<Utc>,
    /// `user_id`.
    pub user: String,
    /// Phase shown.
    pub phase: Option<BookingPhase>,
    /// Its creationTimestamp (whole seconds): a boundary too, as a booking is judged when it
    /// appears.
    pub created: DateTime<Utc>,
}

/// A group as one sample saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct SeenGroup {
    /// Whether every member is `pending` or `running`.
    pub running: bool,
    /// Whether every member is `stopping` or `stopped`.
    pub stopped: bool,
    /// The lock tag (`locked-by`) of the first member.
    pub locked_by: Option<String>,
}

/// One look at everything.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// When (the middle of the reads).
    pub at: DateTime<Utc>,
    /// The bookings.
    pub bookings: Vec<SeenBooking>,
    /// The groups, by tag.
    pub groups: BTreeMap<String, SeenGroup>,
}

/// A period during which some replica led (from its leader gauge) and the API server served.
#[derive(Clone, Debug, PartialEq)]
pub struct Up {
    /// When it began.
    pub from: DateTime<Utc>,
    /// When it ended (`None`: still at the end).
    pub until: Option<DateTime<Utc>>,
}

/// A mail received.
#[derive(Clone, Debug, PartialEq)]
pub struct Mail {
    /// Its Message-ID.
    pub message_id: String,
    /// Its envelope recipients.
    pub to: Vec<String>,
    /// When the SMTP server stored it.
    pub received: DateTime<Utc>,
}

/// A write to AWS by one replica.
#[derive(Clone, Debug, PartialEq)]
pub struct Write {
    /// Replica index.
    pub replica: usize,
    /// When the proxy received it.
    pub at: DateTime<Utc>,
    /// The action.
    pub action: String,
    /// The instances it names.
    pub ids: Vec<String>,
}

/// One tenure of the Lease: `holder` from `from` (its acquireTime) until the next tenure.
#[derive(Clone, Debug, PartialEq)]
pub struct Tenure {
    /// The holder's identity.
    pub holder: String,
    /// Its acquireTime.
    pub from: DateTime<Utc>,
}

/// Everything a campaign observed.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The samples, in time order.
    pub samples: Vec<Sample>,
    /// The periods with a leader and a serving API server.
    pub up: Vec<Up>,
    /// Every booking the scheduler made: (start, end, creationTimestamp).
    pub scheduled: Vec<(DateTime<Utc>, DateTime<Utc>, DateTime<Utc>)>,
    /// Deletions made: booking name → when.
    pub deleted: BTreeMap<String, DateTime<Utc>>,
    /// Creations made: booking name → when the API server's answer arrived (a create retried
    /// through an API server restart can be answered after the booking's start).
    pub created: BTreeMap<String, DateTime<Utc>>,
    /// Instance ID → group tag.
    pub members: BTreeMap<String, String>,
    /// AWS writes, of every replica.
    pub writes: Vec<Write>,
    /// Lease tenures, in time order.
    pub tenures: Vec<Tenure>,
    /// Identity of each replica.
    pub identities: Vec<String>,
    /// Mails received.
    pub mails: Vec<Mail>,
    /// When the scheduler was created.
    pub scheduler_created: Option<DateTime<Utc>>,
    /// When the workload ended (no more bookings were due to start).
    pub window_end: Option<DateTime<Utc>>,
    /// When a controller was SIGKILLed.
    pub sigkills: Vec<DateTime<Utc>>,
}

// === The invariants (pure) ===

/// What a campaign found.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// Every broken invariant, each naming what, when and what was seen.
    pub violations: Vec<String>,
    /// For each period up, how long until the first sample where everything was right.
    pub converged_in: Vec<Duration>,
}

/// Which booking holds `group` at `t` in a sample's bookings (the clock's rule; the workload
/// never overlaps two bookings of a group).
fn holder_at<'a>(
    bookings: &'a [SeenBooking],
    group: &str,
    t: DateTime<Utc>,
) -> Option<&'a SeenBooking> {
    bookings
        .iter()
        .find(|b| b.group == group && b.start <= t && t < b.end)
}

fn clock_phase(b: &SeenBooking, t: DateTime<Utc>) -> BookingPhase {
    if t < b.start {
        BookingPhase::Scheduled
    } else if t < b.end {
        BookingPhase::InProgress
    } else {
        BookingPhase::Finished
    }
}

/// The last boundary at or before `t` of anything that decides `group`'s state: starts and ends
/// of its bookings (deleted ones too, as listed in `all`) and deletions.
fn last_group_boundary(
    all: &[SeenBooking],
    deleted: &BTreeMap<String, DateTime<Utc>>,
    group: &str,
    t: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    all.iter()
        .filter(|b| b.group == group)
        .flat_map(|b| {
            [
                Some(b.created),
                Some(b.start),
                Some(b.end),
                deleted.get(&b.name).copied(),
            ]
        })
        .flatten()
        .filter(|x| *x <= t)
        .max()
}

/// The problems of one sample: what is not as the clock says, among what had time to settle
/// (a boundary more than [`GRACE`] ago). `all` holds every booking ever seen, for the
/// boundaries of deleted ones.
fn sample_problems(
    s: &Sample,
    all: &[SeenBooking],
    deleted: &BTreeMap<String, DateTime<Utc>>,
) -> Vec<String> {
    let mut out = Vec::new();
    let settled = |last: Option<DateTime<Utc>>| last.is_none_or(|x| s.at - x >= GRACE);
    for b in &s.bookings {
        let want = clock_phase(b, s.at);
        let last = [b.created, b.start, b.end]
            .into_iter()
            .filter(|x| *x <= s.at)
            .max();
        if settled(last) && b.phase != Some(want) {
            out.push(format!(
                "booking {} shows {} but is due {want} ({} .. {})",
                b.name,
                b.phase.map_or("no phase".into(), |p| p.to_string()),
                format_rfc3339(b.start),
                format_rfc3339(b.end)
            ));
        }
    }
    for (group, seen) in &s.groups {
        if !settled(last_group_boundary(all, deleted, group, s.at)) {
            continue;
        }
        match holder_at(&s.bookings, group, s.at) {
            Some(h) => {
                if !seen.running {
                    out.push(format!(
                        "group {group} is not running though {} holds it",
                        h.name
                    ));
                }
                if seen.locked_by.as_deref() != Some(h.user.as_str()) {
                    out.push(format!(
                        "group {group} is locked by {:?}, not by {}'s user {}",
                        seen.locked_by, h.name, h.user
                    ));
                }
            }
            None => {
                if !seen.stopped {
                    out.push(format!(
                        "group {group} is not stopped though no booking holds it"
                    ));
                }
                if let Some(l) = &seen.locked_by {
                    out.push(format!(
                        "group {group} is still locked by {l} with no booking"
                    ));
                }
            }
        }
    }
    out
}

/// Phases and groups: every sample taken at least `bound` into a period up must be right;
/// each period's time to converge is the first right sample's distance from its start.
pub fn check_samples(o: &Observed, bound: Duration) -> Verdict {
    let bound = chrono::TimeDelta::from_std(bound).unwrap_or_default();
    let mut all: Vec<SeenBooking> = Vec::new();
    let mut names = BTreeSet::new();
    for s in &o.samples {
        for b in &s.bookings {
            if names.insert(b.name.clone()) {
                all.push(b.clone());
            }
        }
    }
    let mut v = Verdict::default();
    for u in &o.up {
        let mut converged = None;
        for s in o
            .samples
            .iter()
            .filter(|s| s.at >= u.from && u.until.is_none_or(|e| s.at < e))
        {
            let problems = sample_problems(s, &all, &o.deleted);
            if problems.is_empty() {
                converged.get_or_insert(s.at - u.from);
            } else if s.at - u.from >= bound {
                v.violations.push(format!(
                    "{} ({:.1} s after the controller was back): {}",
                    format_rfc3339(s.at),
                    (s.at - u.from).as_seconds_f64(),
                    problems.join("; ")
                ));
            }
        }
        if let Some(c) = converged {
            v.converged_in.push(c.to_std().unwrap_or_default());
        } else if u.until.is_none_or(|e| e - u.from >= bound) {
            v.violations.push(format!(
                "the period up from {} never converged",
                format_rfc3339(u.from)
            ));
        }
    }
    v
}

/// Every booking any sample saw, with the workload's creations and deletions: (name, group,
/// from, until). A booking holds its group from its start, or from when its create was
/// answered when that came later (a booking that does not exist yet holds nothing), until its
/// end or deletion.
fn holds(o: &Observed) -> Vec<(String, String, DateTime<Utc>, DateTime<Utc>)> {
    let mut seen = BTreeMap::new();
    for s in &o.samples {
        for b in &s.bookings {
            seen.entry(b.name.clone()).or_insert_with(|| b.clone());
        }
    }
    seen.into_values()
        .map(|b| {
            let from = o
                .created
                .get(&b.name)
                .copied()
                .map_or(b.start, |c| c.max(b.start));
            let until = o
                .deleted
                .get(&b.name)
                .copied()
                .map_or(b.end, |d| d.min(b.end));
            (b.name, b.group, from, until)
        })
        .collect()
}

/// No `StopInstances` names a member of a group while a booking holds it (a second of slack
/// after a start that is not a handover — nor a booking created after its start —: a stop
/// decided just before may land just after).
pub fn check_stops(o: &Observed) -> Vec<String> {
    let holds = holds(o);
    let slack = chrono::TimeDelta::seconds(1);
    let mut out = Vec::new();
    for w in o.writes.iter().filter(|w| w.action == "StopInstances") {
        for id in &w.ids {
            let Some(group) = o.members.get(id) else {
                continue;
            };
            for (name, g, start, until) in &holds {
                // A handover (a booking of the group ends where this one starts) has no reason
                // to stop at all: no slack.
                let handover = holds
                    .iter()
                    .any(|(n, g2, _, u2)| n != name && g2 == g && u2 == start);
                let slack = if handover {
                    chrono::TimeDelta::zero()
                } else {
                    slack
                };
                if g == group && *start + slack <= w.at && w.at < *until {
                    out.push(format!(
                        "StopInstances of {id} (group {group}) at {} by replica {} while {name} held it ({} .. {})",
                        format_rfc3339(w.at),
                        w.replica,
                        format_rfc3339(*start),
                        format_rfc3339(*until)
                    ));
                }
            }
        }
    }
    out
}

/// One booking per fire of the per-minute scheduler while a leader ran long enough within the
/// fire's slot, none for a slot that had ended when it was created, never two for one fire.
pub fn check_scheduler(o: &Observed) -> Vec<String> {
    let mut out = Vec::new();
    let mut by_start: BTreeMap<DateTime<Utc>, usize> = BTreeMap::new();
    for (start, end, created) in &o.scheduled {
        *by_start.entry(*start).or_default() += 1;
        // creationTimestamp has whole seconds: a creation in the slot's last second shows as
        // before its end.
        if created >= end {
            out.push(format!(
                "scheduler booking for {} created at {}, after its slot ended at {}",
                format_rfc3339(*start),
                format_rfc3339(*created),
                format_rfc3339(*end)
            ));
        }
    }
    for (start, n) in &by_start {
        if *n > 1 {
            out.push(format!(
                "{n} scheduler bookings for the fire at {}",
                format_rfc3339(*start)
            ));
        }
    }
    let (Some(created), Some(end)) = (o.scheduler_created, o.window_end) else {
        return out;
    };
    let minute = |t: DateTime<Utc>| {
        DateTime::from_timestamp(t.timestamp() - t.timestamp().rem_euclid(60), 0).unwrap_or(t)
    };
    let mut f = minute(created) + chrono::TimeDelta::minutes(1);
    while f + chrono::TimeDelta::minutes(1) <= end {
        let slot_end = f + chrono::TimeDelta::minutes(1);
        // Up for FIRE_UPTIME within [f, slot_end - 2 s): the fire (or its catch-up) was due.
        let last = slot_end - chrono::TimeDelta::seconds(2);
        let owed = o.up.iter().any(|u| {
            let a = u.from.max(f);
            let b = u.until.unwrap_or(last).min(last);
            b - a >= FIRE_UPTIME
        });
        if owed && !by_start.contains_key(&f) {
            out.push(format!(
                "no scheduler booking for the fire at {} though a leader ran during its slot",
                format_rfc3339(f)
            ));
        }
        f = slot_end;
    }
    out
}

/// Mails: at most one per Message-ID, none after its booking's end (a second of slack for the
/// delivery), and one for every reminder due while a leader ran long enough before its end.
pub fn check_mails(
    o: &Observed,
    reminders: &[(String, DateTime<Utc>, DateTime<Utc>)],
) -> Vec<String> {
    let mut out = Vec::new();
    let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
    for m in &o.mails {
        *ids.entry(&m.message_id).or_default() += 1;
    }
    for (id, n) in ids {
        if n > 1 {
            out.push(format!("{n} mails with Message-ID {id}"));
        }
    }
    let slack = chrono::TimeDelta::seconds(1);
    for (name, due, end) in reminders {
        let addr = format!("{name}@example.com");
        let got: Vec<&Mail> = o
            .mails
            .iter()
            .filter(|m| m.to.iter().any(|t| t == &addr))
            .collect();
        let until = o.deleted.get(name).copied().map_or(*end, |d| d.min(*end));
        for m in &got {
            if m.received > until + slack {
                out.push(format!(
                    "reminder of {name} received at {}, after its booking ended at {}",
                    format_rfc3339(m.received),
                    format_rfc3339(until)
                ));
            }
        }
        let owed = o.up.iter().any(|u| {
            let a = u.from.max(*due);
            let b = u.until.unwrap_or(until).min(until);
            b - a >= GRACE * 2
        });
        // At most once: a SIGKILL between recording a reminder and sending it loses it.
        let killed = o.sigkills.iter().any(|k| *due <= *k && *k <= until);
        if owed && got.is_empty() && !killed {
            out.push(format!(
                "no reminder for {name} (due {}, ended {}) though a leader ran meanwhile",
                format_rfc3339(*due),
                format_rfc3339(until)
            ));
        }
    }
    out
}

/// Every AWS write comes from the replica holding the Lease at that moment.
pub fn check_leadership(o: &Observed) -> Vec<String> {
    let mut out = Vec::new();
    for w in &o.writes {
        let holder = o
            .tenures
            .iter()
            .rev()
            .find(|t| t.from <= w.at)
            .map(|t| t.holder.as_str());
        let me = o.identities.get(w.replica).map(String::as_str);
        if holder != me {
            out.push(format!(
                "{} of {:?} at {} by replica {} ({:?}) while the Lease was held by {holder:?}",
                w.action,
                w.ids,
                format_rfc3339(w.at),
                w.replica,
                me
            ));
        }
    }
    out
}

// === The run ===

/// The figures of one campaign.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Booking starts, ends and deletions within the campaign (the scheduler's included).
    pub transitions: usize,
    /// Bookings made (the scheduler's included).
    pub bookings: usize,
    /// SIGKILLs of the controller.
    pub sigkills: usize,
    /// SIGTERMs of the controller.
    pub sigterms: usize,
    /// Restarts of the controller.
    pub controller_restarts: usize,
    /// Restarts of the kube-apiserver (each after an etcd compaction).
    pub apiserver_restarts: usize,
    /// Exits of a replica by itself (a lost Lease), each followed by a restart.
    pub self_exits: usize,
    /// Watches of a running controller that were told `410 Gone` (their resourceVersion was
    /// compacted away) and relisted, per the controllers' logs.
    pub gone_relists: usize,
    /// Mails received.
    pub mails: usize,
    /// AWS writes.
    pub writes: usize,
    /// The longest time to converge after a restart.
    pub longest_converge: Duration,
    /// The broken invariants (none, when the campaign passes).
    pub violations: Vec<String>,
}

impl Report {
    /// Panics, listing every broken invariant, unless there is none and the controller was
    /// killed at least `kills` times.
    pub fn assert_clean(&self, kills: usize) {
        assert!(
            self.violations.is_empty(),
            "{self}\n{}",
            self.violations.join("\n")
        );
        assert!(self.sigkills + self.sigterms >= kills, "{self}");
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {}: {} transitions of {} bookings, {} SIGKILL + {} SIGTERM, {} controller restarts, \
             {} exits on a lost Lease, {} API server restarts after etcd compaction ({} watches relisted \
             after 410 Gone), {} AWS writes, {} mails; longest time to \
             converge {:.1} s; {} violations",
            self.seed,
            self.transitions,
            self.bookings,
            self.sigkills,
            self.sigterms,
            self.controller_restarts,
            self.self_exits,
            self.apiserver_restarts,
            self.gone_relists,
            self.writes,
            self.mails,
            self.longest_converge.as_secs_f64(),
            self.violations.len()
        )
    }
}

fn utc(t: SystemTime) -> DateTime<Utc> {
    DateTime::<Utc>::from(t)
}

fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

struct Replica {
    identity: String,
    admin_port: u16,
    proxy: FaultProxy,
    process: Option<ManagedProcess>,
}

struct World {
    controller: PathBuf,
    dir: TestDir,
    moto: MotoServer,
    plane: ControlPlane,
    cluster: TestCluster,
    client: kube::Client,
    smtp: SmtpServer,
    replicas: Vec<Replica>,
}

impl World {
    fn spawn(&mut self, i: usize) {
        let smtp_port = self.smtp.port().to_string();
        let r = &mut self.replicas[i];
        let p = ProcessBuilder::new(format!("controller-{}", r.identity), &self.controller)
            .envs(r.proxy.env())
            .env("KUBECONFIG", self.cluster.kubeconfig_path())
            .env("NAMESPACE", self.cluster.namespace())
            .env("ADMIN_ADDRESS", format!("127.0.0.1:{}", r.admin_port))
            .env("INVENTORY_INTERVAL_SECONDS", "2")
            // A renew deadline long enough to outlast an API server restart on a loaded
            // machine, so that a running controller keeps leading and its watches resume from a
            // compacted resourceVersion (410 Gone) and relist.
            .env("LEASE_DURATION_SECONDS", "20")
            .env("LEASE_RENEW_DEADLINE_SECONDS", "15")
            .env("LEASE_RENEW_SECONDS", "2")
            .env("POD_NAME", &r.identity)
            .env("SMTP_HOST", "127.0.0.1")
            .env("SMTP_PORT", &smtp_port)
            .env("SMTP_SENDER", "booking@example.com")
            .env("SMTP_SECURITY", "none")
            .env(
                "RUST_LOG",
                std::env::var("CAMPAIGN_CONTROLLER_LOG")
                    .unwrap_or_else(|_| "info,booking_controller=debug".to_owned()),
            )
            .spawn(&self.dir)
            .expect("controller starts");
        r.process = Some(p);
    }

    /// The replica that leads now, by its leader gauge.
    async fn leader(&self) -> Option<usize> {
        for (i, r) in self.replicas.iter().enumerate() {
            if r.process.is_some() && leads(&format!("127.0.0.1:{}", r.admin_port)).await {
                return Some(i);
            }
        }
        None
    }
}

async fn sample(client: &kube::Client, ns: &str, ec2: &aws_sdk_ec2::Client) -> Option<Sample> {
    let before = Utc::now();
    let api: Api<Booking> = Api::namespaced(client.clone(), ns);
    let list = tokio::time::timeout(Duration::from_secs(3), api.list(&ListParams::default()))
        .await
        .ok()?
        .ok()?;
    let out = ec2.describe_instances().send().await.ok()?;
    let after = Utc::now();
    let bookings = list
        .items
        .iter()
        .filter_map(|b| {
            Some(SeenBooking {
                name: b.metadata.name.clone()?,
                group: b.spec.resource_name.strip_prefix("ec2.")?.to_owned(),
                start: parse_time(&b.spec.start_at)?,
                end: parse_time(&b.spec.end_at)?,
                user: b.spec.user_id.clone(),
                phase: b.status.as_ref().and_then(|s| s.status),
                created: DateTime::<Utc>::from_timestamp(
                    b.metadata.creation_timestamp.as_ref()?.0.as_second(),
                    0,
                )?,
            })
        })
        .collect();
    let mut groups: BTreeMap<String, SeenGroup> = BTreeMap::new();
    for i in out.reservations().iter().flat_map(|r| r.instances()) {
        let tag = |k: &str| {
            i.tags()
                .iter()
                .find(|t| t.key() == Some(k))
                .and_then(|t| t.value())
                .map(str::to_owned)
        };
        let Some(group) = tag("resource-booking/application") else {
            continue;
        };
        let state = i
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_owned());
        let running = matches!(state.as_deref(), Some("pending" | "running"));
        let stopped = matches!(state.as_deref(), Some("stopping" | "stopped"));
        let e = groups.entry(group).or_insert(SeenGroup {
            running: true,
            stopped: true,
            locked_by: tag(LOCKED_BY),
        });
        e.running &= running;
        e.stopped &= stopped;
    }
    Some(Sample {
        at: before + (after - before) / 2,
        bookings,
        groups,
    })
}

fn booking_object(p: &Planned) -> Booking {
    Booking {
        metadata: ObjectMeta {
            name: Some(p.name.clone()),
            ..Default::default()
        },
        spec: BookingSpec {
            resource_name: format!("ec2.{}", p.group),
            start_at: format_rfc3339(p.start),
            end_at: format_rfc3339(p.end),
            user_id: format!("user-{}", p.name),
            notifications: if p.remind {
                vec![Notification {
                    type_: "email".into(),
                    recipient: format!("{}@example.com", p.name),
                    lead_minutes: Some(LEAD_MINUTES),
                    events: vec![],
                    recipient_from: None,
                }]
            } else {
                Vec::new()
            },
        },
        status: None,
    }
}

async fn sleep_until(t: DateTime<Utc>) {
    if let Ok(d) = (t - Utc::now()).to_std() {
        tokio::time::sleep(d).await;
    }
}

/// Runs a campaign and checks its invariants; the report lists what broke (nothing, when it
/// passes). Prints the seed first.
pub async fn run(options: &Options) -> Report {
    eprintln!(
        "kill campaign {}: seed {} (replay with CAMPAIGN_SEED={})",
        options.label, options.seed, options.seed
    );
    let dir = TestDir::new(&options.label).expect("test dir");
    let moto = MotoServer::start(&dir).await.expect("moto");
    let plane = ControlPlane::start(&dir, ControlPlaneOptions::default())
        .await
        .expect("control plane");
    let cluster = TestCluster::attach(plane.kubeconfig_path(), &options.label)
        .await
        .expect("namespace");
    cluster.apply_shipped_crds().expect("CRDs applied");
    let client = cluster.client().await.expect("client");
    let smtp = SmtpServer::start(&dir, SmtpOptions::default())
        .await
        .expect("SMTP server");
    let mut replicas = Vec::new();
    for i in 0..options.replicas {
        replicas.push(Replica {
            identity: format!("replica-{i}"),
            admin_port: booking_harness::free_port().expect("port"),
            proxy: FaultProxy::start(&moto.endpoint_url())
                .await
                .expect("proxy"),
            process: None,
        });
    }
    let mut w = World {
        controller: options.controller.clone().unwrap_or_else(controller_binary),
        dir,
        moto,
        plane,
        cluster,
        client,
        smtp,
        replicas,
    };
    let ns = w.cluster.namespace().to_owned();
    let ec2 = w.moto.ec2();

    // The groups: one stopped instance each.
    let mut members = BTreeMap::new();
    let tags: Vec<String> = (0..options.groups)
        .map(|g| format!("g{g}"))
        .chain([SCHEDULER_GROUP.to_owned()])
        .collect();
    let resources: Api<Resource> = Api::namespaced(w.client.clone(), &ns);
    for tag in &tags {
        let ids = moto::seed_ec2_instances(
            &ec2,
            1,
            &[
                ("resource-booking/managed", "true"),
                ("resource-booking/application", tag),
            ],
        )
        .await
        .expect("instances");
        ec2.stop_instances()
            .set_instance_ids(Some(ids.clone()))
            .send()
            .await
            .expect("stopped");
        for id in ids {
            members.insert(id, tag.clone());
        }
        resources
            .create(
                &PostParams::default(),
                &resource(&format!("ec2.{tag}"), "ec2", tag, None),
            )
            .await
            .expect("Resource");
    }

    let t0 = Utc::now() + chrono::TimeDelta::seconds(2);
    let the_plan = plan(options, t0);
    let window_end = t0 + chrono::TimeDelta::from_std(options.window).unwrap_or_default();
    let observed = Arc::new(Mutex::new(Observed {
        members,
        identities: w.replicas.iter().map(|r| r.identity.clone()).collect(),
        window_end: Some(window_end),
        ..Observed::default()
    }));

    for i in 0..options.replicas {
        w.spawn(i);
    }
    let schedulers: Api<BookingScheduler> = Api::namespaced(w.client.clone(), &ns);
    let scheduler: BookingScheduler = serde_json::from_value(serde_json::json!({
        "apiVersion": "manager.kotaico.de/v1",
        "kind": "BookingScheduler",
        "metadata": {"name": SCHEDULER, "namespace": ns},
        "spec": {
            "schedule": "* * * * *",
            "duration": 1,
            "bookingTemplate": {"resource_name": format!("ec2.{SCHEDULER_GROUP}"), "user_id": "cron"},
        },
    }))
    .expect("scheduler");
    schedulers
        .create(&PostParams::default(), &scheduler)
        .await
        .expect("scheduler created");
    observed.lock().unwrap().scheduler_created = Some(Utc::now());

    // The workload: creations and deletions at their moments.
    let workload = {
        let api: Api<Booking> = Api::namespaced(w.client.clone(), &ns);
        let observed = observed.clone();
        let mut actions: Vec<(DateTime<Utc>, bool, Planned)> = Vec::new();
        for b in &the_plan.bookings {
            actions.push((b.create_at, true, b.clone()));
            if let Some(d) = b.delete_at {
                actions.push((d, false, b.clone()));
            }
        }
        actions.sort_by_key(|a| a.0);
        tokio::spawn(async move {
            for (at, create, b) in actions {
                sleep_until(at).await;
                // The API server may be restarting: retry until it answers. A deletion counts
                // from its first request (a stop may land before the answer).
                let asked = Utc::now();
                for attempt in 0.. {
                    let done = if create {
                        match api
                            .create(&PostParams::default(), &booking_object(&b))
                            .await
                        {
                            Ok(_) => true,
                            Err(kube::Error::Api(e)) if e.code == 409 => true,
                            Err(_) => false,
                        }
                    } else {
                        match api.delete(&b.name, &DeleteParams::default()).await {
                            Ok(_) => true,
                            Err(kube::Error::Api(e)) if e.code == 404 => true,
                            Err(_) => false,
                        }
                    };
                    if done {
                        if create {
                            observed
                                .lock()
                                .unwrap()
                                .created
                                .insert(b.name.clone(), Utc::now());
                        }
                        if !create {
                            observed
                                .lock()
                                .unwrap()
                                .deleted
                                .insert(b.name.clone(), asked);
                        }
                        break;
                    }
                    assert!(
                        attempt < 200,
                        "the API server did not come back for {}",
                        b.name
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        })
    };

    // The sampler and the Lease watcher, until told to stop.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let sampler = {
        let client = w.client.clone();
        let ns = ns.clone();
        let ec2 = ec2.clone();
        let observed = observed.clone();
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            while !*stop.borrow() {
                if let Some(s) = sample(&client, &ns, &ec2).await {
                    observed.lock().unwrap().samples.push(s);
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(400)) => {}
                    _ = stop.changed() => {}
                }
            }
        })
    };
    let lease_watch = {
        let leases: Api<Lease> = Api::namespaced(w.client.clone(), &ns);
        let observed = observed.clone();
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            while !*stop.borrow() {
                if let Ok(Some(l)) = leases.get_opt("booking-controller").await
                    && let Some(spec) = l.spec
                    && let (Some(holder), Some(acquired)) =
                        (spec.holder_identity, spec.acquire_time)
                {
                    let from = DateTime::<Utc>::from_timestamp_micros(acquired.0.as_microsecond())
                        .unwrap_or_default();
                    let mut o = observed.lock().unwrap();
                    if o.tenures
                        .last()
                        .is_none_or(|t| t.holder != holder || t.from != from)
                    {
                        o.tenures.push(Tenure { holder, from });
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = stop.changed() => {}
                }
            }
        })
    };

    // Periods up: a replica leads and the API server serves. Tracked by the fault loop itself,
    // polling the leader gauges between faults.
    let mut report = Report {
        seed: options.seed,
        ..Report::default()
    };
    let mut current_up: Option<DateTime<Utc>> = None;
    let mut pending_restarts: Vec<(DateTime<Utc>, usize)> = Vec::new();
    let mut faults = the_plan.faults.clone().into_iter().peekable();
    let bound = chrono::TimeDelta::from_std(options.bound).unwrap_or_default();
    let end = window_end + bound;
    loop {
        let now = Utc::now();
        if now >= end {
            break;
        }
        // Restarts due.
        let due: Vec<usize> = pending_restarts
            .iter()
            .filter(|(t, _)| *t <= now)
            .map(|(_, i)| *i)
            .collect();
        pending_restarts.retain(|(t, _)| *t > now);
        for i in due {
            w.spawn(i);
            report.controller_restarts += 1;
        }
        // A replica that exited by itself (leadership lost while the API server was away) is
        // started again, as the kubelet restarts a container.
        for i in 0..w.replicas.len() {
            let exited = w.replicas[i]
                .process
                .as_mut()
                .is_some_and(|p| p.try_exit_status().ok().flatten().is_some());
            if exited && !pending_restarts.iter().any(|(_, j)| *j == i) {
                eprintln!(
                    "campaign: {} exited by itself at {}; restarting it in 1 s",
                    w.replicas[i].identity,
                    format_rfc3339(Utc::now())
                );
                w.replicas[i].process = None;
                report.self_exits += 1;
                pending_restarts.push((Utc::now() + chrono::TimeDelta::seconds(1), i));
            }
        }
        // Leadership.
        let leading = w.leader().await.is_some();
        match (leading, current_up) {
            (true, None) => current_up = Some(Utc::now()),
            (false, Some(from)) => {
                observed.lock().unwrap().up.push(Up {
                    from,
                    until: Some(Utc::now()),
                });
                current_up = None;
            }
            _ => {}
        }
        // A fault is due at its time, but never before the current period up has been checked
        // for CHECKED after its bound: every restart gets its convergence checked.
        let checked = current_up.is_some_and(|from| Utc::now() - from >= bound + CHECKED);
        if let Some(f) = faults.next_if(|f| checked && f.at <= Utc::now()) {
            match f.kind {
                FaultKind::Kill { sigkill, down } => {
                    let Some(i) = w
                        .leader()
                        .await
                        .or_else(|| w.replicas.iter().position(|r| r.process.is_some()))
                    else {
                        eprintln!("campaign: no replica runs to be killed; fault skipped");
                        continue;
                    };
                    if let Some(mut p) = w.replicas[i].process.take() {
                        let close = |o: &Mutex<Observed>, from: Option<DateTime<Utc>>| {
                            if let Some(from) = from {
                                o.lock().unwrap().up.push(Up {
                                    from,
                                    until: Some(Utc::now()),
                                });
                            }
                        };
                        // With one replica, nothing leads from the signal on.
                        if options.replicas == 1 {
                            close(&observed, current_up.take());
                        }
                        if sigkill {
                            p.kill().expect("SIGKILL");
                            observed.lock().unwrap().sigkills.push(Utc::now());
                            report.sigkills += 1;
                        } else {
                            tokio::task::block_in_place(|| p.stop()).expect("SIGTERM");
                            report.sigterms += 1;
                        }
                        if options.replicas > 1 {
                            close(&observed, current_up.take());
                        }
                        eprintln!(
                            "campaign: {} {} at {}, back in {down:?}",
                            if sigkill { "SIGKILL" } else { "SIGTERM" },
                            w.replicas[i].identity,
                            format_rfc3339(Utc::now())
                        );
                        pending_restarts.push((
                            Utc::now() + chrono::TimeDelta::from_std(down).unwrap_or_default(),
                            i,
                        ));
                    }
                }
                FaultKind::RestartApiserver => {
                    if let Some(from) = current_up.take() {
                        observed.lock().unwrap().up.push(Up {
                            from,
                            until: Some(Utc::now()),
                        });
                    }
                    let rev = w.plane.compact_etcd().await.expect("etcd compaction");
                    w.plane
                        .restart_apiserver()
                        .await
                        .expect("kube-apiserver restart");
                    report.apiserver_restarts += 1;
                    eprintln!(
                        "campaign: kube-apiserver restarted after compacting etcd at revision {rev}, back at {}",
                        format_rfc3339(Utc::now())
                    );
                }
            }
            continue;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The last period up ends with the campaign: one that began too shortly before the end to
    // converge is not a violation (`check_samples` judges periods shorter than the bound only
    // by their samples).
    if let Some(from) = current_up {
        observed.lock().unwrap().up.push(Up {
            from,
            until: Some(Utc::now()),
        });
    }
    let _ = stop_tx.send(true);
    sampler.await.expect("sampler");
    lease_watch.await.expect("lease watcher");
    workload.await.expect("workload");

    // What only the end tells: the scheduler's bookings, the mails, the AWS writes.
    let bookings: Api<Booking> = Api::namespaced(w.client.clone(), &ns);
    let scheduled = bookings
        .list(&ListParams::default().labels(&format!("{SCHEDULER_LABEL}={SCHEDULER}")))
        .await
        .expect("scheduler bookings");
    let mails = w.smtp.messages().expect("mails");
    {
        let mut o = observed.lock().unwrap();
        o.scheduled = scheduled
            .items
            .iter()
            .filter_map(|b| {
                let created = b.metadata.creation_timestamp.as_ref()?;
                Some((
                    parse_time(&b.spec.start_at)?,
                    parse_time(&b.spec.end_at)?,
                    DateTime::<Utc>::from_timestamp(created.0.as_second(), 0)?,
                ))
            })
            .collect();
        o.mails = mails
            .iter()
            .map(|m| Mail {
                message_id: m.header("Message-ID").unwrap_or_default(),
                to: m.rcpt_tos.clone(),
                received: std::fs::metadata(&m.path)
                    .and_then(|x| x.modified())
                    .map(utc)
                    .unwrap_or_else(|_| Utc::now()),
            })
            .collect();
        for (i, r) in w.replicas.iter().enumerate() {
            o.writes.extend(
                r.proxy
                    .requests()
                    .into_iter()
                    .filter(is_write)
                    .map(|q| Write {
                        replica: i,
                        at: utc(q.at),
                        action: q.action.unwrap_or_default(),
                        ids: q.resource_ids,
                    }),
            );
        }
        o.writes.sort_by_key(|x| x.at);
    }
    for r in &mut w.replicas {
        if let Some(mut p) = r.process.take() {
            tokio::task::block_in_place(|| p.stop()).expect("stop");
        }
    }

    let o = observed.lock().unwrap().clone();
    let reminders: Vec<(String, DateTime<Utc>, DateTime<Utc>)> = the_plan
        .bookings
        .iter()
        .filter(|b| b.remind)
        .map(|b| {
            let due = (b.end - chrono::TimeDelta::minutes(i64::from(LEAD_MINUTES))).max(b.start);
            (b.name.clone(), due, b.end)
        })
        .collect();
    let verdict = check_samples(&o, options.bound);
    report.violations = verdict.violations;
    report.violations.extend(check_stops(&o));
    report.violations.extend(check_scheduler(&o));
    report.violations.extend(check_mails(&o, &reminders));
    if options.replicas > 1 {
        report.violations.extend(check_leadership(&o));
    }
    report.longest_converge = verdict
        .converged_in
        .iter()
        .max()
        .copied()
        .unwrap_or_default();
    report.bookings = the_plan.bookings.len() + o.scheduled.len();
    report.transitions = the_plan
        .bookings
        .iter()
        .map(|b| (b.start, b.delete_at.unwrap_or(b.end)))
        .chain(o.scheduled.iter().map(|(s, e, _)| (*s, *e)))
        .map(|(s, e)| usize::from(s >= t0 && s < end) + usize::from(e >= t0 && e < end))
        .sum();
    report.gone_relists = gone_relists(&w.dir.join("logs"));
    report.mails = o.mails.len();
    report.writes = o.writes.len();
    eprintln!("kill campaign {}: {report}", options.label);
    if !report.violations.is_empty() {
        w.dir.keep();
    }
    report
}

/// Lines of the controllers' logs reporting a watch error for an expired resourceVersion (after
/// which kube's watcher relists).
fn gone_relists(logs: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(logs) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("controller-"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|text| {
            text.lines()
                .filter(|l| {
                    l.contains("watch error") && (l.contains("410") || l.contains("too old"))
                })
                .count()
        })
        .sum()
}

fn is_write(q: &ProxiedRequest) -> bool {
    matches!(
        q.action.as_deref(),
        Some(
            "StartInstances"
                | "StopInstances"
                | "CreateTags"
                | "DeleteTags"
                | "StartDBInstance"
                | "StopDBInstance"
                | "AddTagsToResource"
                | "RemoveTagsFromResource"
        )
    ) && q.injected.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn options(seed: u64) -> Options {
        Options {
            label: "t".into(),
            seed,
            window: Duration::from_secs(150),
            groups: 8,
            replicas: 1,
            apiserver_restarts: 1,
            bound: Duration::from_secs(20),
            controller: None,
        }
    }

    #[test]
    fn a_seed_gives_the_same_plan_and_plans_never_overlap_a_group() {
        let a = plan(&options(7), t(0));
        assert_eq!(a, plan(&options(7), t(0)));
        assert_ne!(a, plan(&options(8), t(0)));
        for seed in 0..50 {
            let p = plan(&options(seed), t(0));
            for x in &p.bookings {
                assert!(x.create_at <= x.start || x.create_at == t(0), "{x:?}");
                for y in &p.bookings {
                    if x.name != y.name && x.group == y.group {
                        assert!(x.end <= y.start || y.end <= x.start, "{x:?} overlaps {y:?}");
                    }
                }
            }
            assert_eq!(
                p.bookings.iter().filter(|b| b.delete_at.is_some()).count(),
                2
            );
            assert!(
                p.bookings.len() * 2 >= 60,
                "enough transitions: {}",
                p.bookings.len()
            );
            assert!(p.faults.len() >= 3, "{:?}", p.faults);
            assert!(
                p.faults
                    .iter()
                    .any(|f| f.kind == FaultKind::RestartApiserver)
            );
            assert!(p.faults.windows(2).all(|w| w[0].at < w[1].at));
        }
    }

    fn seen(name: &str, group: &str, start: i64, end: i64, phase: BookingPhase) -> SeenBooking {
        SeenBooking {
            name: name.into(),
            group: group.into(),
            start: t(start),
            end: t(end),
            user: format!("user-{name}"),
            phase: Some(phase),
            created: t(start.min(0) - 100),
        }
    }

    fn group(running: bool, locked_by: Option<&str>) -> SeenGroup {
        SeenGroup {
            running,
            stopped: !running,
            locked_by: locked_by.map(str::to_owned),
        }
    }

    #[test]
    fn a_frozen_phase_after_the_bound_is_a_violation_and_a_settling_one_is_not() {
        let frozen = Sample {
            at: t(60),
            bookings: vec![seen("a", "g0", 0, 30, BookingPhase::InProgress)],
            groups: [("g0".to_owned(), group(false, None))].into(),
        };
        let o = Observed {
            samples: vec![frozen.clone()],
            up: vec![Up {
                from: t(30),
                until: None,
            }],
            ..Observed::default()
        };
        let v = check_samples(&o, Duration::from_secs(20));
        assert_eq!(v.violations.len(), 2, "{:?}", v.violations);
        assert!(v.violations[0].contains("booking a shows IN PROGRESS but is due FINISHED"));
        assert!(v.violations[1].contains("never converged"));
        // 2 s after the boundary: still settling, not a violation.
        let settling = Sample {
            at: t(32),
            ..frozen
        };
        let o = Observed {
            samples: vec![settling],
            up: vec![Up {
                from: t(0),
                until: None,
            }],
            ..Observed::default()
        };
        assert!(
            check_samples(&o, Duration::from_secs(20))
                .violations
                .is_empty()
        );
    }

    #[test]
    fn a_held_group_must_run_locked_by_its_holder_and_a_free_one_be_stopped_unlocked() {
        let s = Sample {
            at: t(20),
            bookings: vec![
                seen("a", "g0", 0, 30, BookingPhase::InProgress),
                seen("b", "g1", 0, 10, BookingPhase::Finished),
            ],
            groups: [
                ("g0".to_owned(), group(true, Some("someone-else"))),
                ("g1".to_owned(), group(true, Some("user-b"))),
            ]
            .into(),
        };
        let p = sample_problems(&s, &s.bookings, &BTreeMap::new());
        assert_eq!(p.len(), 3, "{p:?}");
        // Deleted at 12: the boundary is the deletion.
        let s = Sample {
            at: t(14),
            bookings: vec![],
            groups: [("g0".to_owned(), group(true, Some("user-a")))].into(),
        };
        let all = vec![seen("a", "g0", 0, 30, BookingPhase::InProgress)];
        let deleted = [("a".to_owned(), t(12))].into();
        assert!(sample_problems(&s, &all, &deleted).is_empty());
        let later = Sample { at: t(18), ..s };
        assert_eq!(sample_problems(&later, &all, &deleted).len(), 2);
    }

    /// Bookings `a` [0, 10) and `b` [10, 20) of group g0 (member i-1), seen at 5, and a
    /// StopInstances of i-1 by each (replica, second) of `stops`.
    fn handover_of_g0(stops: &[(usize, i64)]) -> Observed {
        Observed {
            samples: vec![Sample {
                at: t(5),
                bookings: vec![
                    seen("a", "g0", 0, 10, BookingPhase::InProgress),
                    seen("b", "g0", 10, 20, BookingPhase::Scheduled),
                ],
                groups: BTreeMap::new(),
            }],
            members: [("i-1".to_owned(), "g0".to_owned())].into(),
            writes: stops
                .iter()
                .map(|&(replica, at)| Write {
                    replica,
                    at: t(at),
                    action: "StopInstances".into(),
                    ids: vec!["i-1".into()],
                })
                .collect(),
            ..Observed::default()
        }
    }

    #[test]
    fn a_booking_holds_from_its_start_or_from_its_creation_when_created_late() {
        let observed = |created: i64, stop_at: i64| Observed {
            created: [("b".to_owned(), t(created))].into(),
            ..handover_of_g0(&[(0, stop_at)])
        };
        // Created in time: a handover, a stop at its start is a violation.
        assert_eq!(check_stops(&observed(3, 10)).len(), 1);
        // Created 3 s after its start (its create retried through an API server restart): a
        // stop before it existed is right, one more than a second after it existed is not.
        assert!(check_stops(&observed(13, 10)).is_empty());
        assert!(check_stops(&observed(13, 13)).is_empty());
        let late = check_stops(&observed(13, 15));
        assert_eq!(late.len(), 1, "{late:?}");
        assert!(late[0].contains("while b held it"), "{late:?}");
    }

    #[test]
    fn a_stop_while_held_and_a_write_by_a_follower_are_violations() {
        let o = Observed {
            tenures: vec![
                Tenure {
                    holder: "r0".into(),
                    from: t(0),
                },
                Tenure {
                    holder: "r1".into(),
                    from: t(30),
                },
            ],
            identities: vec!["r0".into(), "r1".into()],
            ..handover_of_g0(&[(0, 10), (1, 25)])
        };
        // At 10, b holds the group (back-to-back): a stop is a violation; at 25 nobody does.
        let stops = check_stops(&o);
        assert_eq!(stops.len(), 1, "{stops:?}");
        assert!(stops[0].contains("while b held it"));
        // At 25 the Lease is still r0's: replica 1 must not write.
        let l = check_leadership(&o);
        assert_eq!(l.len(), 1, "{l:?}");
        assert!(l[0].contains("by replica 1"));
    }

    #[test]
    fn scheduler_fires_are_owed_once_while_a_leader_ran_and_never_after_their_slot() {
        let m = |n: i64| DateTime::from_timestamp(1_800_000_000 + 60 * n, 0).unwrap();
        let o = Observed {
            scheduler_created: Some(m(0) + chrono::TimeDelta::seconds(5)),
            window_end: Some(m(4)),
            up: vec![Up {
                from: m(0),
                until: Some(m(1) + chrono::TimeDelta::seconds(30)),
            }],
            scheduled: vec![
                (m(1), m(2), m(1)),
                (m(1), m(2), m(1) + chrono::TimeDelta::seconds(1)),
                (m(3), m(4), m(4)),
            ],
            ..Observed::default()
        };
        let v = check_scheduler(&o);
        // Two for the fire at m(1); one for m(3) created when its slot had ended; m(2) and m(3)
        // had no leader, so none is owed.
        assert_eq!(v.len(), 2, "{v:?}");
    }

    #[test]
    fn a_second_mail_a_late_mail_and_a_missing_reminder_are_violations() {
        let mail = |at: i64| Mail {
            message_id: "<x@y>".into(),
            to: vec!["a@example.com".into()],
            received: t(at),
        };
        let o = Observed {
            up: vec![Up {
                from: t(0),
                until: None,
            }],
            mails: vec![mail(5), mail(40)],
            ..Observed::default()
        };
        let reminders = vec![("a".to_owned(), t(0), t(30)), ("b".to_owned(), t(0), t(30))];
        let v = check_mails(&o, &reminders);
        assert_eq!(v.len(), 3, "{v:?}");
    }
}
