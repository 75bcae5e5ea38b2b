//! Who holds each Resource, until when, and what is next (pure; `now` is a parameter).
//!
//! The holder and the next booking are computed here from the Resource's Bookings with the
//! controller's own rules (the shared arbitration at `now`, then the Resource's manual
//! `spec.booked_by` booking), so they are right even while the controller is not running. The
//! state of the machines (`GROUP`: how many run) can only be observed in AWS, so it is what the
//! controller last wrote to the Resource's status. Where the controller's status names another
//! holder or next booking than computed, [`StatusRow::disagreement`] says so.

use booking_controller::plan::manual_holder;
use booking_shared::api::{Booking, Resource};
use booking_shared::arbitration::{BookingView, arbitrate, holder, next_holder};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::output::table;
use crate::when::rfc3339_in;

/// Who holds the Resource.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Held {
    /// The user.
    pub user: String,
    /// The Booking; absent for the manual `spec.booked_by` booking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub booking: Option<String>,
    /// End of the hold, RFC 3339.
    pub until: String,
}

/// The next booking that will hold the Resource.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Next {
    /// The Booking.
    pub booking: String,
    /// Its user.
    pub user: String,
    /// Its start, RFC 3339.
    pub start: String,
}

/// The machines, as the controller last saw them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// `STOPPED`, `RUNNING` or `PENDING`; absent until the controller has reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Members of the group.
    pub instances: u32,
    /// Members running.
    pub running: u32,
}

/// What the controller last wrote about the holder, as it wrote it.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reported {
    /// `status.activeBooking`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_booking: Option<String>,
    /// `status.activeUser`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_user: Option<String>,
    /// `status.nextBooking`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_booking: Option<String>,
}

/// One Resource's line.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRow {
    /// The Resource's namespace.
    pub namespace: String,
    /// The Resource.
    pub name: String,
    /// Who holds it now (computed from the Bookings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<Held>,
    /// The next booking to hold it (computed from the Bookings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<Next>,
    /// The machines (from the controller's status); absent until the controller has reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<Group>,
    /// The controller's own view of the holder (from the Resource's status).
    pub reported: Reported,
}

impl StatusRow {
    /// Why the controller's status differs from what the Bookings say at `now`, if it does:
    /// it has not caught up yet, or is not running.
    pub fn disagreement(&self) -> Option<String> {
        if self.group.is_none() {
            return Some(format!(
                "{}/{}: the controller has not reported on this Resource yet (is it running?); \
                 GROUP is unknown",
                self.namespace, self.name
            ));
        }
        let held = self.held_by.as_ref().and_then(|h| h.booking.clone());
        let next = self.next.as_ref().map(|n| n.booking.clone());
        let r = &self.reported;
        let user = self.held_by.as_ref().map(|h| h.user.clone());
        (r.active_booking != held || r.active_user != user || r.next_booking != next).then(|| {
            format!(
                "{}/{}: the controller's status says held by {} and next {}; it has not caught \
                 up with the Bookings yet, or is not running",
                self.namespace,
                self.name,
                r.active_user.as_deref().unwrap_or("nobody"),
                r.next_booking.as_deref().unwrap_or("none"),
            )
        })
    }
}

/// The line of `resource`, whose Bookings (those naming it in its namespace) are `bookings`.
pub fn status_row(resource: &Resource, bookings: &[&Booking], now: DateTime<Utc>) -> StatusRow {
    let views: Vec<BookingView> = bookings.iter().map(|b| BookingView::of(b)).collect();
    let verdicts = arbitrate(&views, now);
    let utc = chrono_tz::Tz::UTC;
    let held = holder(&views, &verdicts)
        .or_else(|| manual_holder(&resource.spec, now).ok().flatten())
        .map(|h| Held {
            user: h.user,
            booking: h.booking,
            until: rfc3339_in(h.until, utc),
        });
    let next = next_holder(&views, &verdicts).map(|n| Next {
        booking: n.booking,
        user: n.user,
        start: rfc3339_in(n.start, utc),
    });
    let status = resource.status.as_ref();
    StatusRow {
        namespace: resource.metadata.namespace.clone().unwrap_or_default(),
        name: resource.metadata.name.clone().unwrap_or_default(),
        held_by: held,
        next,
        group: status.map(|s| Group {
            state: s.status.map(|st| {
                serde_json::to_value(st)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            }),
            instances: s.instances,
            running: s.running,
        }),
        reported: status
            .map(|s| Reported {
                active_booking: s.active_booking.clone(),
                active_user: s.active_user.clone(),
                next_booking: s.next_booking.clone(),
            })
            .unwrap_or_default(),
    }
}

/// The rows as a table; with `namespaces`, a NAMESPACE column first.
pub fn status_table(rows: &[StatusRow], namespaces: bool) -> String {
    let mut headers = vec![
        "NAME",
        "HELD BY",
        "BOOKING",
        "UNTIL",
        "NEXT",
        "NEXT START",
        "NEXT USER",
        "GROUP",
    ];
    if namespaces {
        headers.insert(0, "NAMESPACE");
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let h = r.held_by.as_ref();
            let n = r.next.as_ref();
            let group = match &r.group {
                None => "unknown".to_owned(),
                Some(g) => format!(
                    "{} {}/{}",
                    g.state.as_deref().unwrap_or("UNKNOWN"),
                    g.running,
                    g.instances
                ),
            };
            let mut row = vec![
                r.name.clone(),
                h.map(|h| h.user.clone()).unwrap_or_default(),
                h.map(|h| h.booking.clone().unwrap_or_else(|| "spec.booked_by".into()))
                    .unwrap_or_default(),
                h.map(|h| h.until.clone()).unwrap_or_default(),
                n.map(|n| n.booking.clone()).unwrap_or_default(),
                n.map(|n| n.start.clone()).unwrap_or_default(),
                n.map(|n| n.user.clone()).unwrap_or_default(),
                group,
            ];
            if namespaces {
                row.insert(0, r.namespace.clone());
            }
            row
        })
        .collect();
    table(&headers, &cells)
}

#[cfg(test)]
mod tests {
    use super::*;
    use booking_shared::api::{BookingSpec, ResourceSpec, ResourceState, ResourceStatus};
    use booking_shared::time::to_kube_time;
    use kube::api::ObjectMeta;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn booking(name: &str, created: &str, start: &str, end: &str) -> Booking {
        Booking {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("team".into()),
                creation_timestamp: Some(to_kube_time(t(created))),
                ..Default::default()
            },
            spec: BookingSpec {
                resource_name: "ec2.web".into(),
                start_at: start.into(),
                end_at: end.into(),
                user_id: format!("user-{name}"),
                notifications: vec![],
            },
            status: None,
        }
    }

    fn resource(status: Option<ResourceStatus>) -> Resource {
        Resource {
            metadata: ObjectMeta {
                name: Some("ec2.web".into()),
                namespace: Some("team".into()),
                ..Default::default()
            },
            spec: ResourceSpec {
                type_: "ec2".into(),
                tag: "web".into(),
                ..Default::default()
            },
            status,
        }
    }

    #[test]
    fn the_holder_and_the_next_booking_come_from_the_bookings_at_now() {
        let bookings = [
            booking(
                "a",
                "2026-12-01T00:00:00Z",
                "2026-12-07T09:00:00Z",
                "2026-12-07T11:00:00Z",
            ),
            // Created later and overlapping a: never holds, is not next.
            booking(
                "late",
                "2026-12-01T01:00:00Z",
                "2026-12-07T10:00:00Z",
                "2026-12-07T12:00:00Z",
            ),
            booking(
                "b",
                "2026-12-01T02:00:00Z",
                "2026-12-08T09:00:00Z",
                "2026-12-08T10:00:00Z",
            ),
        ];
        let refs: Vec<&Booking> = bookings.iter().collect();
        let row = status_row(&resource(row_status()), &refs, t("2026-12-07T10:30:00Z"));
        assert_eq!(row.disagreement(), None);
        assert_eq!(
            status_table(std::slice::from_ref(&row), false),
            "NAME      HELD BY   BOOKING   UNTIL                  NEXT   NEXT START             NEXT USER   GROUP\n\
             ec2.web   user-a    a         2026-12-07T11:00:00Z   b      2026-12-08T09:00:00Z   user-b      RUNNING 2/2\n"
        );
        // After a's end nobody holds it (late lost), and the controller has not caught up.
        let later = status_row(&resource(row_status()), &refs, t("2026-12-07T11:30:00Z"));
        assert_eq!(later.held_by, None);
        assert_eq!(later.next.as_ref().unwrap().booking, "b");
        let note = later.disagreement().unwrap();
        assert!(
            note.contains("team/ec2.web: the controller's status says held by user-a"),
            "{note}"
        );
    }

    fn row_status() -> Option<ResourceStatus> {
        Some(ResourceStatus {
            instances: 2,
            running: 2,
            status: Some(ResourceState::Running),
            active_booking: Some("a".into()),
            active_user: Some("user-a".into()),
            next_booking: Some("b".into()),
            ..Default::default()
        })
    }

    #[test]
    fn the_manual_booking_holds_when_no_booking_does_and_no_status_is_unknown() {
        let mut res = resource(None);
        res.spec.booked_by = Some("carol".into());
        res.spec.booked_until = Some("2026-12-07T12:00:00Z".into());
        let row = status_row(&res, &[], t("2026-12-07T10:00:00Z"));
        assert_eq!(
            status_table(std::slice::from_ref(&row), true),
            "NAMESPACE   NAME      HELD BY   BOOKING          UNTIL                  NEXT   NEXT START   NEXT USER   GROUP\n\
             team        ec2.web   carol     spec.booked_by   2026-12-07T12:00:00Z                                   unknown\n"
        );
        assert!(row.disagreement().unwrap().contains("has not reported"));
        let json = serde_json::to_value(&row).unwrap();
        assert_eq!(json["heldBy"]["user"], "carol");
        assert!(json.get("group").is_none());
    }
}
