//! Which notifications of a booking are due, per event (pure; the clock is a parameter).
//!
//! - `reminder`: `leadMinutes` (default 20) before the end, never before the start and never
//!   after the end.
//! - `started`: while the booking lasts, once its Resource's status names it as the holder
//!   (`activeBooking`) and `Ready` says every managed member runs. After the end it is never sent.
//! - `stopped`: after the end, for a booking that held its group (`status.heldAt`), once the
//!   Resource no longer names it: its `Ready` says no managed member runs, or the group went
//!   straight to the following booking (named in the message; its instances were not stopped).
//! - `failed`: while the booking holds the group, a start that did not take (the Resource's
//!   `Synced` is `AwsError`, or `Degraded` says a member fell back to stopped); after the end,
//!   for a booking that held the group and while no other booking holds it, a stop that did not
//!   take (`Synced` is `AwsError`). The message names the members and AWS's error as the
//!   Resource's condition reports them.
//!
//! `stopped` and a stop's `failed` are sent only within [`AFTER_END_WINDOW`] after the end: after
//! a longer downtime they are not sent any more.

use booking_shared::{
    api::{Notification, NotificationEvent, Resource},
    scheduling::{lead_time, notification_due_at, notification_should_send},
    time::Slot,
};
use chrono::{DateTime, Utc};

use crate::notify::event_key;

/// How long after a booking's end its `stopped` notification (and the `failed` of its stop) may
/// still be sent: a stop takes minutes (an RDS database longer), a controller restart seconds.
pub const AFTER_END_WINDOW: chrono::Duration = chrono::Duration::hours(1);

/// What a Resource's status shows of its group, as the notifications read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupState {
    /// The booking holding the Resource (`status.activeBooking`).
    pub holder: Option<String>,
    /// `Ready` is true with reason `Running`: every managed member runs.
    pub running: bool,
    /// `Ready` is true with reason `Stopped`: no managed member runs.
    pub stopped: bool,
    /// A start or stop that did not take, with the members and AWS's errors: the message of
    /// `Synced` (reason `AwsError`) or of `Degraded` (true).
    pub failure: Option<String>,
}

impl GroupState {
    /// The state the status of `res` reports (nothing before its first status).
    pub fn of(res: &Resource) -> Self {
        let Some(s) = &res.status else {
            return Self::default();
        };
        let cond = |t: &str| s.conditions.iter().find(|c| c.type_ == t);
        let ready = cond("Ready").filter(|c| c.status == "True");
        let failure = match (cond("Synced"), cond("Degraded")) {
            (Some(c), _) if c.status == "False" && c.reason == "AwsError" => {
                let m = c.message.strip_prefix("failed: ").unwrap_or(&c.message);
                Some(
                    m.strip_suffix("; retrying with backoff")
                        .unwrap_or(m)
                        .to_owned(),
                )
            }
            (_, Some(c)) if c.status == "True" => Some(c.message.clone()),
            _ => None,
        };
        Self {
            holder: s.active_booking.clone(),
            running: ready.is_some_and(|c| c.reason == "Running"),
            stopped: ready.is_some_and(|c| c.reason == "Stopped"),
            failure,
        }
    }
}

/// What the notifications of one booking look at besides the clock.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The booking's name.
    pub booking: &'a str,
    /// Whether the booking is known to have held its group (`status.heldAt`, or the group's
    /// status naming it now).
    pub held: bool,
    /// The state of its Resource's group; `None` when the Resource is unknown.
    pub group: Option<&'a GroupState>,
}

impl Seen<'_> {
    fn holds(&self) -> bool {
        self.group
            .is_some_and(|g| g.holder.as_deref() == Some(self.booking))
    }
}

/// A notification to send now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueNow {
    /// Index of the notification in `spec.notifications`.
    pub index: usize,
    /// What it is sent for.
    pub event: NotificationEvent,
    /// The key recording it in `status.notificationsSent`.
    pub key: String,
    /// For `failed` the failure, for a `stopped` after a hand-over the next holder.
    pub detail: Option<String>,
}

/// The notifications of a booking to send now, and when the next one falls due by the clock
/// (changes of the group wake the reconciler through the Resource watch).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Due {
    /// The notifications due and not recorded in `sent`.
    pub now: Vec<DueNow>,
    /// When the earliest notification not due yet may fall due.
    pub next: Option<DateTime<Utc>>,
}

/// The last instant at which any event of `notifications` may be sent for a booking with
/// `slot`: its end, or [`AFTER_END_WINDOW`] after it when one asks for `stopped` or `failed`.
pub fn last_instant(notifications: &[Notification], slot: &Slot) -> DateTime<Utc> {
    if notifications.iter().any(wants_after_end) {
        slot.end + AFTER_END_WINDOW
    } else {
        slot.end
    }
}

/// Whether `n` asks for an event that may be sent after the booking's end (and so needs to know
/// whether the booking held its group).
pub fn wants_after_end(n: &Notification) -> bool {
    n.wants(NotificationEvent::Stopped) || n.wants(NotificationEvent::Failed)
}

/// The last instant at which a notification for `event` may be sent.
pub fn deadline(event: NotificationEvent, slot: &Slot) -> DateTime<Utc> {
    match event {
        NotificationEvent::Reminder | NotificationEvent::Started => slot.end,
        NotificationEvent::Stopped | NotificationEvent::Failed => slot.end + AFTER_END_WINDOW,
    }
}

/// Which events of `notifications` are due at `now` for a booking with `slot` that sees `seen`,
/// given the keys already recorded as `sent` (in their current form).
pub fn due(
    notifications: &[Notification],
    sent: &[String],
    slot: &Slot,
    seen: &Seen<'_>,
    now: DateTime<Utc>,
) -> Due {
    let mut out = Due::default();
    for (index, n) in notifications.iter().enumerate() {
        for event in n.wanted_events() {
            let key = event_key(index, n, event);
            if sent.contains(&key) {
                continue;
            }
            match event_due(event, n, slot, seen, now) {
                Ok(detail) => out.now.push(DueNow {
                    index,
                    event,
                    key,
                    detail,
                }),
                Err(Some(at)) => out.next = Some(out.next.map_or(at, |d| d.min(at))),
                Err(None) => {}
            }
        }
    }
    out
}

/// `Ok(detail)` when `event` of `n` is due at `now`; else when it may fall due by the clock.
fn event_due(
    event: NotificationEvent,
    n: &Notification,
    slot: &Slot,
    seen: &Seen<'_>,
    now: DateTime<Utc>,
) -> Result<Option<String>, Option<DateTime<Utc>>> {
    let during = slot.start <= now && now < slot.end;
    let after = slot.end <= now && now < slot.end + AFTER_END_WINDOW;
    let group = seen.group.cloned().unwrap_or_default();
    // The clock's part: a start is seen from the start on, an end from the end on.
    let wake = |at: DateTime<Utc>| if now < at { Err(Some(at)) } else { Err(None) };
    match event {
        NotificationEvent::Reminder => {
            let lead = lead_time(n);
            if notification_should_send(slot, lead, now) {
                Ok(None)
            } else {
                wake(notification_due_at(slot, lead))
            }
        }
        NotificationEvent::Started if during && seen.holds() && group.running => Ok(None),
        NotificationEvent::Started => wake(slot.start),
        NotificationEvent::Stopped if after && seen.held && !seen.holds() => match &group.holder {
            Some(next) => Ok(Some(format!(
                "its instances were handed straight to booking {next}, which keeps them running"
            ))),
            None if group.stopped => Ok(None),
            None => Err(None),
        },
        NotificationEvent::Stopped => wake(slot.end),
        NotificationEvent::Failed => match &group.failure {
            Some(f) if during && seen.holds() => Ok(Some(format!("a start did not take: {f}"))),
            Some(f) if after && seen.held && group.holder.is_none() => {
                Ok(Some(format!("a stop did not take: {f}")))
            }
            _ => wake(slot.end),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::notification_key;
    use NotificationEvent::{Failed, Started, Stopped};
    use booking_shared::time::parse_rfc3339;

    fn at(s: &str) -> DateTime<Utc> {
        parse_rfc3339("t", s).unwrap()
    }

    fn notification(recipient: &str, lead: Option<u32>, events: &[&str]) -> Notification {
        serde_json::from_value(serde_json::json!({
            "type": "email", "recipient": recipient, "leadMinutes": lead, "events": events,
        }))
        .unwrap()
    }

    fn slot() -> Slot {
        Slot::new(at("2031-01-10T10:00:00Z"), at("2031-01-10T12:00:00Z")).unwrap()
    }

    fn nobody() -> Seen<'static> {
        Seen {
            booking: "b",
            held: false,
            group: None,
        }
    }

    fn events(d: &Due) -> Vec<(usize, NotificationEvent)> {
        d.now.iter().map(|d| (d.index, d.event)).collect()
    }

    #[test]
    fn reminders_fall_due_lead_minutes_before_the_end_and_keep_their_keys() {
        let slot = slot();
        let ns = [
            notification("a@example.com", None, &[]),
            notification("b@example.com", Some(60), &["reminder"]),
        ];
        let keys: Vec<String> = ns
            .iter()
            .enumerate()
            .map(|(i, n)| notification_key(i, n))
            .collect();
        assert_eq!(
            keys[0], "0:email:a@example.com",
            "the key of earlier versions"
        );
        let seen = nobody();
        // Before the start: nothing due; the earliest is 60 min before the end.
        let d = due(&ns, &[], &slot, &seen, at("2031-01-10T09:00:00Z"));
        assert!(d.now.is_empty());
        assert_eq!(d.next, Some(at("2031-01-10T11:00:00Z")));
        // 30 min before the end only the 60-minute one is due; 15 min before, both (the
        // default lead is 20 minutes); recorded ones are not.
        let d = due(&ns, &[], &slot, &seen, at("2031-01-10T11:30:00Z"));
        assert_eq!(events(&d), [(1, NotificationEvent::Reminder)]);
        assert_eq!(d.now[0].key, keys[1]);
        assert_eq!(d.next, Some(at("2031-01-10T11:40:00Z")));
        let d = due(&ns, &[], &slot, &seen, at("2031-01-10T11:45:00Z"));
        assert_eq!(d.now.len(), 2);
        let d = due(&ns, &keys[1..], &slot, &seen, at("2031-01-10T11:45:00Z"));
        assert_eq!(events(&d), [(0, NotificationEvent::Reminder)]);
        // From the end on: nothing, ever.
        let d = due(&ns, &[], &slot, &seen, at("2031-01-10T12:00:00Z"));
        assert!(d.now.is_empty());
        assert_eq!(last_instant(&ns, &slot), slot.end);
    }

    #[test]
    fn started_is_due_once_the_booking_holds_a_running_group_and_never_after_the_end() {
        let slot = slot();
        let ns = [notification("a@example.com", None, &["started"])];
        let starting = GroupState {
            holder: Some("b".into()),
            ..Default::default()
        };
        let running = GroupState {
            running: true,
            ..starting.clone()
        };
        let others = GroupState {
            holder: Some("other".into()),
            ..running.clone()
        };
        let seen = |g| Seen {
            booking: "b",
            held: true,
            group: Some(g),
        };
        let during = at("2031-01-10T10:01:00Z");
        // Before the start the clock wakes it at the start; no reminder is asked for.
        let d = due(&ns, &[], &slot, &seen(&running), at("2031-01-10T09:00:00Z"));
        assert!(d.now.is_empty());
        assert_eq!(d.next, Some(slot.start));
        assert!(
            due(&ns, &[], &slot, &seen(&starting), during)
                .now
                .is_empty()
        );
        assert!(due(&ns, &[], &slot, &seen(&others), during).now.is_empty());
        let d = due(&ns, &[], &slot, &seen(&running), during);
        assert_eq!(events(&d), [(0, Started)]);
        assert_eq!(d.now[0].key, "started:0:email:a@example.com");
        assert!(
            due(&ns, &[d.now[0].key.clone()], &slot, &seen(&running), during)
                .now
                .is_empty(),
            "at most once"
        );
        // After downtime: a booking that has ended gets no `started`.
        assert!(
            due(&ns, &[], &slot, &seen(&running), slot.end)
                .now
                .is_empty()
        );
    }

    #[test]
    fn stopped_is_due_after_the_end_for_a_booking_that_held_the_group_within_the_window() {
        let slot = slot();
        let ns = [notification("a@example.com", None, &["stopped"])];
        assert_eq!(last_instant(&ns, &slot), slot.end + AFTER_END_WINDOW);
        let stopped = GroupState {
            stopped: true,
            ..Default::default()
        };
        let stopping = GroupState::default();
        let still_ours = GroupState {
            holder: Some("b".into()),
            running: true,
            ..Default::default()
        };
        let handed = GroupState {
            holder: Some("next".into()),
            running: true,
            ..Default::default()
        };
        let seen = |held, g| Seen {
            booking: "b",
            held,
            group: Some(g),
        };
        let after = slot.end + chrono::Duration::minutes(2);
        let d = due(
            &ns,
            &[],
            &slot,
            &seen(true, &stopped),
            at("2031-01-10T11:00:00Z"),
        );
        assert!(d.now.is_empty(), "not during the booking");
        assert_eq!(d.next, Some(slot.end));
        let d = due(&ns, &[], &slot, &seen(true, &stopped), after);
        assert_eq!(events(&d), [(0, Stopped)]);
        assert_eq!(d.now[0].key, "stopped:0:email:a@example.com");
        assert_eq!(d.now[0].detail, None);
        for g in [&stopping, &still_ours] {
            assert!(due(&ns, &[], &slot, &seen(true, g), after).now.is_empty());
        }
        // Handed straight to the next booking: sent, naming it.
        let d = due(&ns, &[], &slot, &seen(true, &handed), after);
        assert_eq!(events(&d), [(0, Stopped)]);
        assert!(d.now[0].detail.as_deref().unwrap().contains("booking next"));
        // Never for a booking that never held the group.
        assert!(
            due(&ns, &[], &slot, &seen(false, &stopped), after)
                .now
                .is_empty()
        );
        assert!(
            due(&ns, &[], &slot, &seen(false, &handed), after)
                .now
                .is_empty()
        );
        // Not after the window (a long downtime).
        let late = slot.end + AFTER_END_WINDOW;
        assert!(
            due(&ns, &[], &slot, &seen(true, &stopped), late)
                .now
                .is_empty()
        );
    }

    #[test]
    fn failed_is_due_for_a_start_while_holding_and_for_a_stop_after_the_end() {
        let slot = slot();
        let ns = [notification("a@example.com", None, &["failed"])];
        let failure = Some("i-0abc (IncorrectInstanceState: not now)".to_owned());
        let start_failed = GroupState {
            holder: Some("b".into()),
            failure: failure.clone(),
            ..Default::default()
        };
        let others_failed = GroupState {
            holder: Some("other".into()),
            failure: failure.clone(),
            ..Default::default()
        };
        let stop_failed = GroupState {
            failure,
            ..Default::default()
        };
        let fine = GroupState {
            holder: Some("b".into()),
            running: true,
            ..Default::default()
        };
        let seen = |held, g| Seen {
            booking: "b",
            held,
            group: Some(g),
        };
        let during = at("2031-01-10T10:01:00Z");
        assert!(
            due(&ns, &[], &slot, &seen(true, &fine), during)
                .now
                .is_empty()
        );
        assert!(
            due(&ns, &[], &slot, &seen(true, &others_failed), during)
                .now
                .is_empty()
        );
        let d = due(&ns, &[], &slot, &seen(true, &start_failed), during);
        assert_eq!(events(&d), [(0, Failed)]);
        let detail = d.now[0].detail.clone().unwrap();
        assert!(
            detail.contains("start")
                && detail.contains("i-0abc")
                && detail.contains("IncorrectInstanceState"),
            "{detail}"
        );
        assert_eq!(d.now[0].key, "failed:0:email:a@example.com");
        let after = slot.end + chrono::Duration::minutes(1);
        let d = due(&ns, &[], &slot, &seen(true, &stop_failed), after);
        assert!(d.now[0].detail.as_deref().unwrap().starts_with("a stop"));
        assert!(
            due(&ns, &[], &slot, &seen(false, &stop_failed), after)
                .now
                .is_empty()
        );
        assert!(
            due(&ns, &[], &slot, &seen(true, &others_failed), after)
                .now
                .is_empty()
        );
    }

    #[test]
    fn the_group_state_is_read_from_the_resource_status() {
        use booking_shared::api::{ResourceSpec, ResourceStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        let cond = |t: &str, s: &str, reason: &str, message: &str| Condition {
            type_: t.into(),
            status: s.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Default::default(),
            ),
            observed_generation: None,
        };
        let mut r = Resource::new("ec2.x", ResourceSpec::default());
        assert_eq!(GroupState::of(&r), GroupState::default());
        r.status = Some(ResourceStatus {
            active_booking: Some("b".into()),
            conditions: vec![
                cond("Ready", "False", "Starting", "members are being started"),
                cond(
                    "Synced",
                    "False",
                    "AwsError",
                    "failed: i-1 (IncorrectInstanceState: no); retrying with backoff",
                ),
            ],
            ..Default::default()
        });
        let g = GroupState::of(&r);
        assert_eq!(g.holder.as_deref(), Some("b"));
        assert!(!g.running && !g.stopped);
        assert_eq!(
            g.failure.as_deref(),
            Some("i-1 (IncorrectInstanceState: no)")
        );
        r.status.as_mut().unwrap().conditions = vec![
            cond(
                "Ready",
                "True",
                "Running",
                "all 2 managed members are running",
            ),
            cond("Synced", "True", "Observed", "observed 2 member(s)"),
            cond(
                "Degraded",
                "False",
                "AsExpected",
                "every started member stayed up",
            ),
        ];
        let g = GroupState::of(&r);
        assert!(g.running && g.failure.is_none());
        r.status.as_mut().unwrap().conditions = vec![
            cond("Ready", "True", "Stopped", "no managed member is running"),
            cond(
                "Degraded",
                "True",
                "StartFellBack",
                "i-2 fell back to stopped after a start (x)",
            ),
        ];
        let g = GroupState::of(&r);
        assert!(g.stopped);
        assert!(g.failure.unwrap().contains("i-2"));
    }
}
