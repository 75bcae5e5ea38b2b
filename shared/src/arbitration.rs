//! Booking phases and arbitration between the bookings of one Resource (pure; `now` is a
//! parameter).
//!
//! The admission webhook rejects overlapping bookings, but it can be bypassed (it may be down,
//! or two requests may race), so the controller decides on its own which booking holds a
//! Resource. The rule is static and needs no memory: bookings are taken in creation order
//! (`metadata.creationTimestamp`, then name) and each is *accepted* unless its slot overlaps an
//! already accepted one. Accepted bookings follow the clock (SCHEDULED → IN PROGRESS →
//! FINISHED); a rejected booking is CONFLICT during its slot and names the booking that holds the
//! Resource instead. Because the holder is recomputed from all current bookings, a FINISHED
//! booking can never release a Resource that another booking holds, and deleting a booking
//! releases the Resource without a finalizer.

use chrono::{DateTime, Utc};

use crate::api::{Booking, BookingPhase, BookingSpec};
use crate::overlap::SlotMap;
use crate::time::{Slot, kube_time};

/// What arbitration needs to know of one Booking.
#[derive(Debug, Clone, PartialEq)]
pub struct BookingView {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.creationTimestamp`; `None` sorts last.
    pub created: Option<DateTime<Utc>>,
    /// `spec.user_id`.
    pub user: String,
    /// The slot, or why the spec has none (unparseable timestamps).
    pub slot: Result<Slot, String>,
    /// Whether `metadata.deletionTimestamp` is set; such a booking holds nothing.
    pub deleting: bool,
}

impl BookingView {
    /// The view of a booking's metadata and spec.
    pub fn new(
        name: &str,
        created: Option<DateTime<Utc>>,
        spec: &BookingSpec,
        deleting: bool,
    ) -> Self {
        Self {
            name: name.to_owned(),
            created,
            user: spec.user_id.clone(),
            slot: Slot::of_booking(spec).map_err(|e| e.to_string()),
            deleting,
        }
    }

    /// The view of a stored Booking object.
    pub fn of(b: &Booking) -> Self {
        Self::new(
            b.metadata.name.as_deref().unwrap_or_default(),
            b.metadata.creation_timestamp.as_ref().map(kube_time),
            &b.spec,
            b.metadata.deletion_timestamp.is_some(),
        )
    }

    /// The order in which bookings claim a Resource: the earlier created first, then by name;
    /// a booking not stored yet (no creation time) after every stored one. The one tie-break
    /// rule of the project: the webhook never has to break a tie (a stored booking always holds
    /// against the request that would overlap it).
    pub fn precedence(&self) -> (bool, Option<DateTime<Utc>>, &str) {
        (self.created.is_none(), self.created, self.name.as_str())
    }
}

/// The decision for one booking.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// `metadata.name` of the booking.
    pub name: String,
    /// Phase at `now`; `None` when the spec has no valid slot.
    pub phase: Option<BookingPhase>,
    /// When rejected: the accepted booking it overlaps (the one holding the Resource).
    pub conflicts_with: Option<String>,
    /// Why the spec has no slot, when it has none.
    pub invalid: Option<String>,
    /// The next instant at which the phase changes (start, then end); `None` once finished.
    pub next_boundary: Option<DateTime<Utc>>,
}

/// The booking holding a Resource at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The Booking's name; `None` for the manual `spec.booked_by` booking.
    pub booking: Option<String>,
    /// The user written into `locked-by`.
    pub user: String,
    /// End of the hold, written into `locked-until`.
    pub until: DateTime<Utc>,
}

/// Decides the phase of every booking of one Resource at `now`. The result is in input order.
pub fn arbitrate(bookings: &[BookingView], now: DateTime<Utc>) -> Vec<Verdict> {
    let mut order: Vec<usize> = (0..bookings.len()).collect();
    order.sort_by(|&a, &b| bookings[a].precedence().cmp(&bookings[b].precedence()));
    // The accepted slots, with their rank in precedence order: a booking loses to the
    // first-ranked accepted booking it overlaps. O(log n + k) per booking.
    let mut accepted: SlotMap<usize> = SlotMap::default();
    let mut verdicts: Vec<Option<Verdict>> = vec![None; bookings.len()];
    for (rank, i) in order.into_iter().enumerate() {
        let b = &bookings[i];
        verdicts[i] = Some(match &b.slot {
            Err(reason) => Verdict {
                name: b.name.clone(),
                phase: None,
                conflicts_with: None,
                invalid: Some(reason.clone()),
                next_boundary: None,
            },
            Ok(slot) => {
                let winner = if b.deleting {
                    None
                } else {
                    accepted
                        .overlapping(*slot)
                        .min_by_key(|(_, rank)| **rank)
                        .map(|(name, _)| name.to_owned())
                };
                if winner.is_none() && !b.deleting {
                    accepted.insert(*slot, &b.name, rank);
                }
                let phase = match (&winner, slot.phase_at(now)) {
                    (Some(_), BookingPhase::InProgress) => BookingPhase::Conflict,
                    (_, p) => p,
                };
                Verdict {
                    name: b.name.clone(),
                    phase: Some(phase),
                    conflicts_with: winner,
                    invalid: None,
                    next_boundary: slot.next_boundary(now),
                }
            }
        });
    }
    verdicts.into_iter().flatten().collect()
}

/// The booking holding a Resource at `now` among `bookings` (all of the Resource's).
pub fn holder_at(bookings: &[BookingView], now: DateTime<Utc>) -> Option<Holder> {
    holder(bookings, &arbitrate(bookings, now))
}

/// The accepted booking IN PROGRESS at `now`, if any (at most one exists by construction).
pub fn holder(bookings: &[BookingView], verdicts: &[Verdict]) -> Option<Holder> {
    bookings.iter().zip(verdicts).find_map(|(b, v)| {
        (v.phase == Some(BookingPhase::InProgress) && !b.deleting)
            .then(|| b.slot.as_ref().ok())
            .flatten()
            .map(|slot| Holder {
                booking: Some(b.name.clone()),
                user: b.user.clone(),
                until: slot.end,
            })
    })
}

/// The next booking that will hold a Resource: accepted, not started yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upcoming {
    /// The Booking's name.
    pub booking: String,
    /// Its user.
    pub user: String,
    /// Its start.
    pub start: DateTime<Utc>,
}

/// The accepted booking SCHEDULED with the earliest start among `bookings` (all of the
/// Resource's) and their `verdicts`: the one that will hold the Resource next. A booking that
/// overlaps an accepted one never holds it and is skipped.
pub fn next_holder(bookings: &[BookingView], verdicts: &[Verdict]) -> Option<Upcoming> {
    bookings
        .iter()
        .zip(verdicts)
        .filter(|(b, v)| {
            v.phase == Some(BookingPhase::Scheduled) && v.conflicts_with.is_none() && !b.deleting
        })
        .filter_map(|(b, _)| b.slot.as_ref().ok().map(|slot| (b, slot.start)))
        .min_by_key(|(b, start)| (*start, b.precedence()))
        .map(|(b, start)| Upcoming {
            booking: b.name.clone(),
            user: b.user.clone(),
            start,
        })
}

/// The earliest phase change among `verdicts`, if any.
pub fn next_boundary(verdicts: &[Verdict]) -> Option<DateTime<Utc>> {
    verdicts.iter().filter_map(|v| v.next_boundary).min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2031, 1, 10, h, m, 0).unwrap()
    }

    fn b(name: &str, created: DateTime<Utc>, start: (u32, u32), end: (u32, u32)) -> BookingView {
        BookingView {
            name: name.into(),
            created: Some(created),
            user: format!("user-{name}"),
            slot: Ok(Slot::new(t(start.0, start.1), t(end.0, end.1)).unwrap()),
            deleting: false,
        }
    }

    use BookingPhase::*;

    #[test]
    fn the_next_holder_is_the_earliest_accepted_booking_not_started() {
        let mut rejected = b("rejected", t(8, 0), (11, 0), (11, 30));
        rejected.created = Some(t(9, 30));
        let mut deleting = b("deleting", t(8, 0), (10, 30), (10, 45));
        deleting.deleting = true;
        let bookings = vec![
            b("now", t(8, 0), (9, 0), (10, 0)),
            b("later", t(8, 1), (12, 0), (13, 0)),
            b("next", t(8, 2), (11, 0), (12, 0)),
            rejected,
            deleting,
        ];
        let at = |now| next_holder(&bookings, &arbitrate(&bookings, now));
        let next = at(t(9, 30)).unwrap();
        assert_eq!(
            (next.booking.as_str(), next.user.as_str(), next.start),
            ("next", "user-next", t(11, 0))
        );
        assert_eq!(at(t(11, 30)).unwrap().booking, "later");
        assert_eq!(at(t(12, 0)), None);
    }

    #[test]
    fn phases_follow_the_clock_and_arbitration() {
        struct Case {
            what: &'static str,
            bookings: Vec<BookingView>,
            now: DateTime<Utc>,
            phases: Vec<Option<BookingPhase>>,
            holder: Option<&'static str>,
            next: Option<DateTime<Utc>>,
        }
        let cases = vec![
            Case {
                what: "single booking before its slot",
                bookings: vec![b("a", t(1, 0), (10, 0), (11, 0))],
                now: t(9, 59),
                phases: vec![Some(Scheduled)],
                holder: None,
                next: Some(t(10, 0)),
            },
            Case {
                what: "start instant is inside the slot",
                bookings: vec![b("a", t(1, 0), (10, 0), (11, 0))],
                now: t(10, 0),
                phases: vec![Some(InProgress)],
                holder: Some("a"),
                next: Some(t(11, 0)),
            },
            Case {
                what: "end instant is outside the slot",
                bookings: vec![b("a", t(1, 0), (10, 0), (11, 0))],
                now: t(11, 0),
                phases: vec![Some(Finished)],
                holder: None,
                next: None,
            },
            Case {
                what: "later-created overlapping booking conflicts, whatever its input order",
                bookings: vec![
                    b("late", t(2, 0), (10, 30), (12, 0)),
                    b("early", t(1, 0), (10, 0), (11, 0)),
                ],
                now: t(10, 45),
                phases: vec![Some(Conflict), Some(InProgress)],
                holder: Some("early"),
                next: Some(t(11, 0)),
            },
            Case {
                what: "a finished winner does not hand over to the rejected booking",
                bookings: vec![
                    b("early", t(1, 0), (10, 0), (11, 0)),
                    b("late", t(2, 0), (10, 30), (12, 0)),
                ],
                now: t(11, 30),
                phases: vec![Some(Finished), Some(Conflict)],
                holder: None,
                next: Some(t(12, 0)),
            },
            Case {
                what: "a finished booking never releases a resource another booking holds",
                bookings: vec![
                    b("first", t(1, 0), (9, 0), (10, 0)),
                    b("second", t(2, 0), (10, 0), (12, 0)),
                ],
                now: t(10, 0),
                phases: vec![Some(Finished), Some(InProgress)],
                holder: Some("second"),
                next: Some(t(12, 0)),
            },
            Case {
                what: "equal creation times: name decides",
                bookings: vec![
                    b("b", t(1, 0), (10, 0), (11, 0)),
                    b("a", t(1, 0), (10, 0), (11, 0)),
                ],
                now: t(10, 10),
                phases: vec![Some(Conflict), Some(InProgress)],
                holder: Some("a"),
                next: Some(t(11, 0)),
            },
            Case {
                what: "a rejected booking does not block a third that only overlaps it",
                bookings: vec![
                    b("a", t(1, 0), (10, 0), (11, 0)),
                    b("b", t(2, 0), (10, 30), (11, 30)),
                    b("c", t(3, 0), (11, 15), (12, 0)),
                ],
                now: t(11, 20),
                phases: vec![Some(Finished), Some(Conflict), Some(InProgress)],
                holder: Some("c"),
                next: Some(t(11, 30)),
            },
            Case {
                what: "a rejected booking is SCHEDULED before its slot",
                bookings: vec![
                    b("a", t(1, 0), (10, 0), (11, 0)),
                    b("b", t(2, 0), (10, 30), (11, 30)),
                ],
                now: t(9, 0),
                phases: vec![Some(Scheduled), Some(Scheduled)],
                holder: None,
                next: Some(t(10, 0)),
            },
        ];
        for case in cases {
            let verdicts = arbitrate(&case.bookings, case.now);
            let phases: Vec<_> = verdicts.iter().map(|v| v.phase).collect();
            assert_eq!(phases, case.phases, "{}", case.what);
            let h = holder(&case.bookings, &verdicts);
            assert_eq!(
                h.as_ref().and_then(|h| h.booking.as_deref()),
                case.holder,
                "{}",
                case.what
            );
            assert_eq!(next_boundary(&verdicts), case.next, "{}", case.what);
        }
    }

    #[test]
    fn conflict_names_the_winner() {
        let bookings = vec![
            b("early", t(1, 0), (10, 0), (11, 0)),
            b("late", t(2, 0), (10, 30), (12, 0)),
        ];
        let v = arbitrate(&bookings, t(10, 45));
        assert_eq!(v[1].conflicts_with.as_deref(), Some("early"));
        assert_eq!(v[0].conflicts_with, None);
        let h = holder(&bookings, &v).unwrap();
        assert_eq!(h.user, "user-early");
        assert_eq!(h.until, t(11, 0));
    }

    #[test]
    fn deleting_and_invalid_bookings_hold_nothing() {
        let mut deleting = b("a", t(1, 0), (10, 0), (11, 0));
        deleting.deleting = true;
        let invalid = BookingView {
            name: "bad".into(),
            created: Some(t(0, 0)),
            user: "u".into(),
            slot: Err("spec.start_at: not a timestamp".into()),
            deleting: false,
        };
        let other = b("b", t(2, 0), (10, 0), (11, 0));
        let bookings = vec![deleting, invalid, other];
        let v = arbitrate(&bookings, t(10, 30));
        assert_eq!(v[1].phase, None);
        assert!(v[1].invalid.as_deref().unwrap().contains("start_at"));
        assert_eq!(
            v[2].phase,
            Some(InProgress),
            "the deleting booking blocks nothing"
        );
        assert_eq!(holder(&bookings, &v).unwrap().booking.as_deref(), Some("b"));
    }

    /// The first-created-wins rule, written as its definition: a booking loses to the
    /// earliest-created accepted booking it overlaps, scanning every accepted one.
    fn arbitrate_by_definition(bookings: &[BookingView], now: DateTime<Utc>) -> Vec<Verdict> {
        let mut order: Vec<usize> = (0..bookings.len()).collect();
        order.sort_by_key(|&i| {
            let v = &bookings[i];
            (v.created.is_none(), v.created, v.name.clone())
        });
        let mut accepted: Vec<(Slot, String)> = Vec::new();
        let mut out: Vec<Option<Verdict>> = vec![None; bookings.len()];
        for i in order {
            let b = &bookings[i];
            out[i] = Some(match &b.slot {
                Err(reason) => Verdict {
                    name: b.name.clone(),
                    phase: None,
                    conflicts_with: None,
                    invalid: Some(reason.clone()),
                    next_boundary: None,
                },
                Ok(slot) => {
                    let winner = (!b.deleting)
                        .then(|| accepted.iter().find(|(s, _)| s.overlaps(slot)))
                        .flatten()
                        .map(|(_, n)| n.clone());
                    if winner.is_none() && !b.deleting {
                        accepted.push((*slot, b.name.clone()));
                    }
                    let phase = match (&winner, slot.phase_at(now)) {
                        (Some(_), BookingPhase::InProgress) => BookingPhase::Conflict,
                        (_, p) => p,
                    };
                    Verdict {
                        name: b.name.clone(),
                        phase: Some(phase),
                        conflicts_with: winner,
                        invalid: None,
                        next_boundary: slot.next_boundary(now),
                    }
                }
            });
        }
        out.into_iter().flatten().collect()
    }

    proptest::proptest! {
        /// The indexed arbitration decides exactly as the definition, for many bookings with
        /// overlapping, nested, back-to-back, deleted and invalid slots.
        #[test]
        fn indexed_arbitration_matches_the_definition(
            specs in proptest::collection::vec(
                (0u32..20, 0u32..48, 1u32..12, proptest::bool::weighted(0.1), proptest::bool::weighted(0.05)),
                0..60,
            ),
            now_q in 0u32..60,
        ) {
            let quarter = |q: u32| t(0, 0) + chrono::Duration::minutes(15 * i64::from(q));
            let views: Vec<BookingView> = specs
                .iter()
                .enumerate()
                .map(|(k, &(created, start, len, deleting, invalid))| BookingView {
                    name: format!("b{k:02}"),
                    created: (created > 0).then(|| quarter(created)),
                    user: String::new(),
                    slot: if invalid {
                        Err("no slot".into())
                    } else {
                        Ok(Slot::new(quarter(start), quarter(start + len)).unwrap())
                    },
                    deleting,
                })
                .collect();
            let now = quarter(now_q);
            proptest::prop_assert_eq!(arbitrate(&views, now), arbitrate_by_definition(&views, now));
        }
    }
}
