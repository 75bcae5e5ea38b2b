//! What makes a planned stop of a Resource's group wait: a booking holding it that the Booking
//! cache has not shown yet, and a scheduler about to create the next booking of a handover.

use booking_shared::{
    api::BookingScheduler,
    arbitration::{BookingView, holder_at},
    schedule::CronSchedule,
};
use chrono::{DateTime, Utc};
use futures::FutureExt as _;
use kube::runtime::reflector::Store;

use crate::context::Context;

/// Whether a planned stop may go out: the API server is asked, in a consistent read of the
/// Resource's bookings, whether one of them holds the group at `now`. The Booking cache is
/// always some way behind the store (a watch resumed after an API server restart can stall for
/// seconds while the server's own watch cache catches up, with nothing to tell it has), and a
/// handover's next booking may have been created just before the boundary; stopping is what
/// cannot be taken back, so it is confirmed first. The stops of a namespace share their reads
/// (see [`crate::stop_reads`]). A read that fails makes the stop wait.
pub(super) async fn stop_is_safe(ctx: &Context, ns: &str, name: &str, now: DateTime<Utc>) -> bool {
    ctx.stop_reads
        .bookings_of(&ctx.client, ns, name)
        .await
        .is_some_and(|views| holder_at(&views, now).is_none())
}

/// How long a booking ending at a fire time of a BookingScheduler of the same Resource waits
/// for the scheduler's next booking before the group is stopped: long enough for the scheduler
/// to create it after an API server restart.
const HANDOVER_GRACE: chrono::Duration = chrono::Duration::seconds(30);

/// Schedulers create their bookings at the fire time, never before; when one booking of a
/// scheduler ends exactly as the next fires, the next booking appears some milliseconds after the
/// boundary. Instead of stopping the group and starting it again at once, wait (briefly) for it.
/// The schedulers are read from the scheduler controller's cache (no API request). Returns the
/// delay before looking again, or `None` to proceed.
pub(super) fn scheduler_handover(
    schedulers: &Store<BookingScheduler>,
    ns: &str,
    resource: &str,
    views: &[BookingView],
    now: DateTime<Utc>,
) -> Option<std::time::Duration> {
    let just_ended = views
        .iter()
        .filter_map(|v| v.slot.as_ref().ok())
        .map(|s| s.end)
        .filter(|end| *end <= now && now - *end < HANDOVER_GRACE)
        .max()?;
    if schedulers.wait_until_ready().now_or_never().is_none() {
        // Before the first full list, whether a scheduler fires now cannot be told: wait
        // rather than stop.
        return Some(std::time::Duration::from_millis(500));
    }
    let fires_then = schedulers.state().iter().any(|s| {
        s.metadata.namespace.as_deref() == Some(ns)
            && s.spec.booking_template.resource_name == resource
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
