//! `status`, `timeline`, `book`, `extend`, `release`: the Bookings of Resources.
//!
//! Thin I/O around pure rules: reads the Resources and Bookings, decides with [`crate::status`],
//! [`crate::timeline`] and [`crate::when`] at the current time, and writes Bookings; the
//! admission webhook decides what may be booked (its denial is printed as the API server
//! returns it). Changes of an existing Booking are merge patches that carry the
//! `resourceVersion` read, so a concurrent change is refused by the API server rather than lost.

use std::io::Write;

use booking_shared::api::{Booking, BookingSpec, Notification, Resource};
use booking_shared::arbitration::{BookingView, arbitrate};
use booking_shared::time::{Slot, format_rfc3339};
use chrono::{DateTime, Datelike, Days, Duration, DurationRound, Utc};
use chrono_tz::Tz;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::cli::{BookArgs, ExtendArgs, Global, ReleaseArgs, StatusArgs, TimelineArgs};
use crate::error::{Error, Result};
use crate::kubeconn::Conn;
use crate::output::{print, table};
use crate::status::{status_row, status_table};
use crate::timeline::{
    Window, entries, free_rows, free_slots, free_table, render, timeline as timeline_of,
};
use crate::when::{checked_add, parse_date, parse_duration, parse_time, parse_zone, rfc3339_in};

/// The field manager of the plugin's writes.
const FIELD_MANAGER: &str = "kubectl-booking";

/// `status`.
pub async fn status(
    conn: &Conn,
    global: &Global,
    args: &StatusArgs,
    out: &mut dyn Write,
) -> Result<()> {
    let (resources, bookings) = match &args.resource {
        Some(name) if conn.all_namespaces => return Err(by_name_everywhere(name)),
        Some(name) => (
            vec![resource(conn, name).await?],
            list::<Booking>(conn, false, "Bookings").await?,
        ),
        None => (
            list::<Resource>(conn, conn.all_namespaces, "Resources").await?,
            list::<Booking>(conn, conn.all_namespaces, "Bookings").await?,
        ),
    };
    let now = Utc::now();
    let rows: Vec<_> = resources
        .iter()
        .map(|r| {
            let ns = r.metadata.namespace.as_deref();
            let name = r.metadata.name.as_deref().unwrap_or_default();
            let mine: Vec<&Booking> = bookings
                .iter()
                .filter(|b| b.metadata.namespace.as_deref() == ns && b.spec.resource_name == name)
                .collect();
            status_row(r, &mine, now)
        })
        .collect();
    for note in rows.iter().filter_map(|r| r.disagreement()) {
        eprintln!("note: {note}");
    }
    if rows.is_empty() && global.output == crate::cli::Output::Table {
        eprintln!("{}", no_resources(conn));
        return Ok(());
    }
    print(out, global.output, &rows, || {
        status_table(&rows, conn.all_namespaces)
    })
}

/// `timeline`.
pub async fn timeline(
    conn: &Conn,
    global: &Global,
    args: &TimelineArgs,
    out: &mut dyn Write,
) -> Result<()> {
    if conn.all_namespaces {
        return Err(by_name_everywhere(&args.resource));
    }
    let tz = parse_zone("--tz", &args.tz)?;
    let min = args
        .for_
        .as_deref()
        .map(|d| parse_duration("--for", d, false))
        .transpose()?;
    let now = Utc::now();
    let from = match &args.from {
        Some(d) => parse_date("--from", d)?,
        None => now.with_timezone(&tz).date_naive(),
    };
    if from
        .checked_add_days(Days::new(u64::from(args.days)))
        .is_none_or(|end| end.year() > 9999)
    {
        return Err(Error::Usage(format!(
            "--from {from} with --days {}: the days shown would end after the year 9999; give \
             an earlier --from",
            args.days
        )));
    }
    let window = Window {
        from,
        days: args.days,
        tz,
    };
    resource(conn, &args.resource).await?;
    let bookings = bookings_of(conn, &args.resource).await?;
    let views: Vec<BookingView> = bookings.iter().map(BookingView::of).collect();
    let entries = entries(&views, &arbitrate(&views, now));
    if args.free {
        let now = now.duration_trunc(Duration::seconds(1)).unwrap_or(now);
        let slots = free_slots(&entries, &window, now, min.unwrap_or_else(Duration::zero));
        return print(out, global.output, &free_rows(&slots, tz), || {
            free_table(&slots, tz)
        });
    }
    let data = timeline_of(&conn.namespace, &args.resource, &entries, &window);
    print(out, global.output, &data, || {
        render(&conn.namespace, &args.resource, &entries, &window, now)
    })
}

/// `book`.
pub async fn book(
    conn: &Conn,
    global: &Global,
    args: &BookArgs,
    out: &mut dyn Write,
) -> Result<()> {
    let tz = parse_zone("--tz", &args.tz)?;
    let length = parse_duration("--for", &args.for_, false)?;
    let notifications = args
        .notify
        .iter()
        .map(|n| notification(n))
        .collect::<Result<Vec<_>>>()?;
    let now = Utc::now();
    // clap makes --at and --now exclusive, and asks for one of them.
    let start = match &args.at {
        Some(at) => {
            let start = parse_time("--at", at, tz, now)?;
            if start + Duration::minutes(1) < now {
                return Err(Error::Usage(format!(
                    "--at {at:?} is {}, in the past; give a later time, or --now to start now",
                    rfc3339_in(start, tz)
                )));
            }
            start
        }
        None => now.duration_trunc(Duration::seconds(1)).unwrap_or(now),
    };
    let end = checked_add(start, length).ok_or_else(|| {
        Error::Usage(format!(
            "--for {:?}: a booking starting at {} would end after the year 9999; give a shorter \
             length",
            args.for_,
            rfc3339_in(start, tz)
        ))
    })?;
    resource(conn, &args.resource).await?;
    let booking = Booking {
        metadata: ObjectMeta {
            name: args.name.clone(),
            generate_name: args.name.is_none().then(|| format!("{}-", args.resource)),
            namespace: Some(conn.namespace.clone()),
            ..Default::default()
        },
        spec: BookingSpec {
            resource_name: args.resource.clone(),
            start_at: rfc3339_in(start, tz),
            end_at: rfc3339_in(end, tz),
            user_id: args.user.clone().unwrap_or_default(),
            notifications,
        },
        status: None,
    };
    let params = PostParams {
        dry_run: args.dry_run,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    let created = bookings_api(conn)
        .create(&params, &booking)
        .await
        .map_err(|e| Error::from_kube(&format!("booking {}", args.resource), e))?;
    if args.dry_run {
        eprintln!("note: server dry run: the Booking was checked but not created");
    }
    print(out, global.output, &created, || booking_table(&created, tz))
}

/// `extend`.
pub async fn extend(
    conn: &Conn,
    global: &Global,
    args: &ExtendArgs,
    out: &mut dyn Write,
) -> Result<()> {
    let by = parse_duration("--by", &args.by, true)?;
    let (booking, slot) = booking(conn, &args.booking).await?;
    let end = extended_end(&args.booking, slot, by, Utc::now())?;
    let patched = patch_end(conn, &booking, end).await?;
    print(out, global.output, &patched, || {
        booking_table(&patched, Tz::UTC)
    })
}

/// `release`.
pub async fn release(
    conn: &Conn,
    global: &Global,
    args: &ReleaseArgs,
    out: &mut dyn Write,
) -> Result<()> {
    let (booking, slot) = booking(conn, &args.booking).await?;
    let end = released_end(&args.booking, &conn.namespace, slot, Utc::now())?;
    let patched = patch_end(conn, &booking, end).await?;
    print(out, global.output, &patched, || {
        booking_table(&patched, Tz::UTC)
    })
}

/// The new end of a booking of `slot` extended `by` at `now`: refused for a booking that has
/// ended, one that would end before it starts, or (shortened) before `now`.
pub fn extended_end(
    name: &str,
    slot: Slot,
    by: Duration,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>> {
    let utc = |t| format_rfc3339(t);
    if slot.end <= now {
        return Err(Error::State(format!(
            "booking {name} ended at {}; it cannot be extended: book the Resource again with \
             kubectl booking book",
            utc(slot.end)
        )));
    }
    let end = checked_add(slot.end, by).ok_or_else(|| {
        Error::Usage(format!(
            "--by {}: booking {name} would end after the year 9999; extend it by less",
            crate::when::format_duration(by)
        ))
    })?;
    if end <= slot.start {
        return Err(Error::Usage(format!(
            "--by {}: booking {name} would end at {}, not after its start {}; shorten it by \
             less than its length, or delete it",
            crate::when::format_duration(by),
            utc(end),
            utc(slot.start)
        )));
    }
    if end <= now {
        return Err(Error::Usage(format!(
            "--by {}: booking {name} would end at {}, which has passed; to end it now, run \
             kubectl booking release {name}",
            crate::when::format_duration(by),
            utc(end)
        )));
    }
    Ok(end)
}

/// The end of a booking of `slot` released at `now`: `now` to the second (rounded down, so the
/// booking has ended once the command returns; one that started within that second ends a
/// second after its start). A booking that has not started is not released but left to
/// `kubectl delete` (releasing ends a hold; cancelling a future booking is a separate,
/// deliberate act); one that has ended has nothing to release.
pub fn released_end(
    name: &str,
    namespace: &str,
    slot: Slot,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>> {
    if now < slot.start {
        return Err(Error::State(format!(
            "booking {name} has not started yet (it starts at {}): there is nothing to release; \
             to cancel it, delete it: kubectl delete bookings.manager.kotaico.de {name} -n \
             {namespace}",
            format_rfc3339(slot.start)
        )));
    }
    if slot.end <= now {
        return Err(Error::State(format!(
            "booking {name} already ended at {}: there is nothing to release",
            format_rfc3339(slot.end)
        )));
    }
    let down = now.duration_trunc(Duration::seconds(1)).unwrap_or(now);
    let end = if down > slot.start {
        down
    } else {
        slot.start + Duration::seconds(1)
    };
    Ok(end.min(slot.end))
}

/// The merge patch that sets `end_at`, with the `resourceVersion` read as its precondition.
pub fn end_patch(resource_version: Option<&str>, end: DateTime<Utc>) -> serde_json::Value {
    json!({
        "metadata": {"resourceVersion": resource_version},
        "spec": {"end_at": format_rfc3339(end)},
    })
}

async fn patch_end(conn: &Conn, booking: &Booking, end: DateTime<Utc>) -> Result<Booking> {
    let name = booking.metadata.name.as_deref().unwrap_or_default();
    let patch = end_patch(booking.metadata.resource_version.as_deref(), end);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    bookings_api(conn)
        .patch(name, &params, &Patch::Merge(&patch))
        .await
        .map_err(|e| Error::from_kube(&format!("changing booking {name}"), e))
}

/// A Booking of the namespace and its slot.
async fn booking(conn: &Conn, name: &str) -> Result<(Booking, Slot)> {
    let b = bookings_api(conn).get(name).await.map_err(|e| match e {
        kube::Error::Api(s) if s.code == 404 => Error::NotFound(format!(
            "booking {name:?} not found in namespace {:?}; list them with kubectl get \
             bookings.manager.kotaico.de -n {}",
            conn.namespace, conn.namespace
        )),
        e => Error::from_kube(&format!("reading booking {name}"), e),
    })?;
    let slot = Slot::of_booking(&b.spec)
        .map_err(|e| Error::State(format!("booking {name} has no valid slot: {e}")))?;
    Ok((b, slot))
}

/// A Resource of the namespace; a clear error when there is none of that name.
async fn resource(conn: &Conn, name: &str) -> Result<Resource> {
    Api::<Resource>::namespaced(conn.client.clone(), &conn.namespace)
        .get(name)
        .await
        .map_err(|e| match e {
            kube::Error::Api(s) if s.code == 404 => Error::NotFound(format!(
                "Resource {name:?} not found in namespace {:?}; list them with kubectl get \
                 resources.manager.kotaico.de -n {}, or give -n",
                conn.namespace, conn.namespace
            )),
            e => Error::from_kube(&format!("reading Resource {name}"), e),
        })
}

/// The Bookings of the namespace that name `resource`.
async fn bookings_of(conn: &Conn, resource: &str) -> Result<Vec<Booking>> {
    let mut all = list::<Booking>(conn, false, "Bookings").await?;
    all.retain(|b| b.spec.resource_name == resource);
    Ok(all)
}

/// Every object of a kind in the namespace, or in all of them.
async fn list<K>(conn: &Conn, all_namespaces: bool, what: &str) -> Result<Vec<K>>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = if all_namespaces {
        Api::all(conn.client.clone())
    } else {
        Api::namespaced(conn.client.clone(), &conn.namespace)
    };
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| match e {
            kube::Error::Api(s) if s.code == 403 && all_namespaces => Error::Api(format!(
                "listing {what} in all namespaces: {}; drop -A to list namespace {} only, or \
                 ask for a ClusterRole that may list them",
                s.message, conn.namespace
            )),
            e => Error::from_kube(&format!("listing {what}"), e),
        })
}

/// `-A` with a name: kubectl's own refusal, with the fix.
fn by_name_everywhere(name: &str) -> Error {
    Error::Usage(format!(
        "-A with RESOURCE {name:?}: a Resource cannot be read by name across all namespaces; \
         drop -A and give its namespace with -n"
    ))
}

fn bookings_api(conn: &Conn) -> Api<Booking> {
    Api::namespaced(conn.client.clone(), &conn.namespace)
}

fn no_resources(conn: &Conn) -> String {
    if conn.all_namespaces {
        "No resources found".to_owned()
    } else {
        format!("No resources found in {} namespace.", conn.namespace)
    }
}

/// A `--notify` value: `TYPE:RECIPIENT`, e.g. `email:team@example.com` (the webhook checks the
/// recipient).
pub fn notification(value: &str) -> Result<Notification> {
    let types = booking_shared::api::SUPPORTED_NOTIFICATION_TYPES;
    match value.split_once(':') {
        Some((type_, recipient)) if types.contains(&type_) && !recipient.is_empty() => {
            Ok(Notification {
                type_: type_.to_owned(),
                recipient: recipient.to_owned(),
                ..Default::default()
            })
        }
        _ => Err(Error::Usage(format!(
            "--notify {value:?} is not TYPE:RECIPIENT; write it like email:team@example.com \
             (types: {})",
            types.join(", ")
        ))),
    }
}

/// One Booking as a table, its times in `tz`.
fn booking_table(b: &Booking, tz: Tz) -> String {
    let time = |s: &str| {
        booking_shared::time::parse_rfc3339("", s)
            .map(|t| rfc3339_in(t, tz))
            .unwrap_or_else(|_| s.to_owned())
    };
    table(
        &["NAME", "RESOURCE", "USER", "START", "END"],
        &[vec![
            b.metadata.name.clone().unwrap_or_default(),
            b.spec.resource_name.clone(),
            b.spec.user_id.clone(),
            time(&b.spec.start_at),
            time(&b.spec.end_at),
        ]],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn slot() -> Slot {
        Slot::new(t("2026-12-07T09:00:00Z"), t("2026-12-07T11:00:00Z")).unwrap()
    }

    #[test]
    fn extending_moves_the_end_and_refuses_what_cannot_be() {
        let now = t("2026-12-07T10:00:00Z");
        let d = Duration::minutes;
        assert_eq!(
            extended_end("b", slot(), d(30), now).unwrap(),
            t("2026-12-07T11:30:00Z")
        );
        assert_eq!(
            extended_end("b", slot(), d(-30), now).unwrap(),
            t("2026-12-07T10:30:00Z")
        );
        let e = extended_end("b", slot(), d(-90), now).unwrap_err();
        assert!(
            e.to_string().contains("which has passed") && e.to_string().contains("release b"),
            "{e}"
        );
        let e = extended_end("b", slot(), d(-120), t("2026-12-07T08:00:00Z")).unwrap_err();
        assert!(e.to_string().contains("not after its start"), "{e}");
        let e = extended_end("b", slot(), d(30), t("2026-12-07T11:00:00Z")).unwrap_err();
        assert!(
            matches!(e, Error::State(_)) && e.to_string().contains("ended at 2026-12-07T11:00:00Z"),
            "{e}"
        );
    }

    #[test]
    fn extending_past_the_year_9999_is_refused_not_a_panic() {
        let now = t("2026-12-07T10:00:00Z");
        let e = extended_end("b", slot(), Duration::days(3_000_000), now).unwrap_err();
        assert!(
            matches!(e, Error::Usage(_)) && e.to_string().contains("after the year 9999"),
            "{e}"
        );
        let e = by_name_everywhere("ec2.web").to_string();
        assert!(
            e.contains("-A with RESOURCE \"ec2.web\"") && e.contains("-n"),
            "{e}"
        );
    }

    #[test]
    fn releasing_ends_now_to_the_second() {
        let now = t("2026-12-07T10:00:00.750Z");
        assert_eq!(
            released_end("b", "ns", slot(), now).unwrap(),
            t("2026-12-07T10:00:00Z")
        );
        // Released within its first second: still after the start.
        assert_eq!(
            released_end("b", "ns", slot(), t("2026-12-07T09:00:00.100Z")).unwrap(),
            t("2026-12-07T09:00:01Z")
        );
        let e = released_end("b", "ns", slot(), t("2026-12-07T08:00:00Z"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("has not started yet")
                && e.contains("kubectl delete bookings.manager.kotaico.de b -n ns"),
            "{e}"
        );
        let e = released_end("b", "ns", slot(), t("2026-12-07T11:00:00Z"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("already ended at 2026-12-07T11:00:00Z"), "{e}");
    }

    #[test]
    fn the_end_patch_carries_the_resource_version_it_was_computed_from() {
        assert_eq!(
            end_patch(Some("42"), t("2026-12-07T11:30:00Z")),
            json!({"metadata": {"resourceVersion": "42"}, "spec": {"end_at": "2026-12-07T11:30:00Z"}})
        );
    }

    #[test]
    fn notifications_are_type_and_recipient() {
        let n = notification("email:team@example.com").unwrap();
        assert_eq!(
            (n.type_.as_str(), n.recipient.as_str()),
            ("email", "team@example.com")
        );
        let n = notification("webhook:https://hooks.example.com/x").unwrap();
        assert_eq!(n.recipient, "https://hooks.example.com/x");
        for bad in ["team@example.com", "sms:123", "email:"] {
            let e = notification(bad).unwrap_err().to_string();
            assert!(
                e.contains("is not TYPE:RECIPIENT") && e.contains("email, webhook"),
                "{e}"
            );
        }
    }
}
