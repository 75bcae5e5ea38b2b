//! Which reconciles a watch event wakes (pure; `run` only wires them to the controllers).
//!
//! - A change of a Booking wakes its Resource (and the Resource it named before), and — when the
//!   change may alter arbitration (a slot moved, a booking went away) — every booking of those
//!   Resources: [`BookingIndex`]'s [`Change`] says which.
//! - A Resource's appearance or deletion wakes the bookings naming it (they report whether their
//!   Resource exists); its other changes (the status of every start and stop) do not:
//!   [`ResourceTriggers`].
//! - An inventory listing that changed groups' members wakes the Resources of those groups
//!   (every Resource of the inventory when the listing failed, recovered or was the first):
//!   [`of_inventory_change`].
//! - A BookingCalendar's creation, change or deletion wakes the BookingSchedulers of its
//!   namespace that name it in `spec.calendars`: [`schedulers_of_calendar`].

use std::collections::HashSet;

use booking_shared::api::{Booking, BookingCalendar, BookingScheduler, Resource};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;

use crate::index::{BookingIndex, Change};

/// The Resources and Bookings to reconcile for a change of the booking index.
pub fn of_booking_change(
    index: &BookingIndex,
    change: Change,
) -> (Vec<ObjectRef<Resource>>, Vec<ObjectRef<Booking>>) {
    let rearbitrate: Vec<_> = change.rearbitrate.into_iter().collect();
    (
        change.resources.into_iter().collect(),
        bookings_of(index, &rearbitrate),
    )
}

/// The Resources whose group inventory change `change` touched; every Resource when `change` is
/// `None` (changes were missed).
pub fn of_inventory_change<'a>(
    change: Option<&crate::aws::inventory::Change>,
    resources: impl IntoIterator<Item = &'a Resource>,
    default_region: &str,
) -> Vec<ObjectRef<Resource>> {
    resources
        .into_iter()
        .filter(|r| {
            change.is_none_or(|c| {
                booking_shared::claims::group_of(r, Some(default_region))
                    .is_some_and(|g| c.touches(&g))
            })
        })
        .map(ObjectRef::from_obj)
        .collect()
}

/// The bookings naming any of `resources`.
pub fn bookings_of(
    index: &BookingIndex,
    resources: &[ObjectRef<Resource>],
) -> Vec<ObjectRef<Booking>> {
    resources
        .iter()
        .flat_map(|r| index.of_resource(r))
        .collect()
}

/// The bookings of Resource `resource` whose notifications follow its group's state (`started`,
/// `stopped`, `failed`) and may still be sent at `now`: every change of the Resource (its status
/// after each start and stop) wakes the notification reconciler for them.
pub fn notified_by(
    index: &BookingIndex,
    resource: &Resource,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<ObjectRef<Booking>> {
    use booking_shared::api::NotificationEvent;
    index
        .of_resource(&ObjectRef::from_obj(resource))
        .into_iter()
        .filter(|key| {
            index.get(key).is_some_and(|b| {
                let follows = b.spec.notifications.iter().any(|n| {
                    n.wanted_events()
                        .iter()
                        .any(|e| *e != NotificationEvent::Reminder)
                });
                let open = booking_shared::time::Slot::of_booking(&b.spec).is_ok_and(|slot| {
                    now < crate::reconcile::notification::last_instant(&b.spec.notifications, &slot)
                });
                follows && open
            })
        })
        .collect()
}

/// The schedulers among `schedulers` that name `calendar` in `spec.calendars` (same namespace).
pub fn schedulers_of_calendar<'a>(
    schedulers: impl IntoIterator<Item = &'a BookingScheduler>,
    calendar: &BookingCalendar,
) -> Vec<ObjectRef<BookingScheduler>> {
    let name = calendar.metadata.name.as_deref().unwrap_or_default();
    schedulers
        .into_iter()
        .filter(|s| s.metadata.namespace == calendar.metadata.namespace)
        .filter(|s| s.spec.calendars.iter().any(|c| c.name == name))
        .map(ObjectRef::from_obj)
        .collect()
}

/// Remembers which Resources exist, to tell an appearance from an update.
#[derive(Default)]
pub struct ResourceTriggers {
    known: HashSet<ObjectRef<Resource>>,
}

impl ResourceTriggers {
    /// The Resources whose bookings a Resource watch event concerns. After a full list
    /// (`relisted`, the Resources now known) those that appeared or went away since the
    /// Resources known before it: on a first list every Resource, on a relist after a watch
    /// gap only those created or deleted during the gap.
    pub fn on_event(
        &mut self,
        event: &Event<Resource>,
        relisted: impl FnOnce() -> Vec<ObjectRef<Resource>>,
    ) -> Vec<ObjectRef<Resource>> {
        match event {
            Event::Apply(r) => {
                let key = ObjectRef::from_obj(r);
                if self.known.insert(key.clone()) {
                    vec![key]
                } else {
                    Vec::new()
                }
            }
            Event::Delete(r) => {
                let key = ObjectRef::from_obj(r);
                self.known.remove(&key);
                vec![key]
            }
            Event::InitDone => {
                let now: HashSet<_> = relisted().into_iter().collect();
                let before = std::mem::replace(&mut self.known, now);
                before.symmetric_difference(&self.known).cloned().collect()
            }
            Event::Init | Event::InitApply(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use booking_shared::api::{BookingSpec, ResourceSpec};

    fn resource(name: &str, status_running: u32) -> Resource {
        let mut r = Resource::new(name, ResourceSpec::default());
        r.metadata.namespace = Some("team".into());
        r.status = Some(booking_shared::api::ResourceStatus {
            running: status_running,
            ..Default::default()
        });
        r
    }

    fn key(name: &str) -> ObjectRef<Resource> {
        ObjectRef::new(name).within("team")
    }

    #[test]
    fn an_inventory_change_wakes_the_resources_of_the_groups_it_changed() {
        use crate::aws::inventory::Change;
        use crate::model::{InventoryKey, ProviderType};
        let res = |name: &str, type_: &str, tag: &str, region: Option<&str>| {
            let mut r = Resource::new(
                name,
                ResourceSpec {
                    type_: type_.into(),
                    tag: tag.into(),
                    region: region.map(Into::into),
                    ..Default::default()
                },
            );
            r.metadata.namespace = Some("team".into());
            r
        };
        let all = [
            res("web", "ec2", "web", None),
            res("web-eu", "ec2", "web", Some("eu-west-1")),
            res("db", "rds", "web", None),
            res("api", "ec2", "api", Some("")),
            res("odd", "tape", "web", None),
        ];
        let ec2_home = InventoryKey {
            kind: ProviderType::Ec2,
            region: "us-east-1".into(),
        };
        let woken = |change: Option<&Change>| -> Vec<String> {
            of_inventory_change(change, &all, "us-east-1")
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        let change = |groups: Option<&[&str]>| Change {
            key: ec2_home.clone(),
            groups: groups.map(|g| g.iter().map(|t| (*t).to_owned()).collect()),
        };
        // Same type, region (the default one when unset or empty) and tag; not the same tag in
        // another region or of another type.
        assert_eq!(woken(Some(&change(Some(&["web"])))), ["web"]);
        assert_eq!(woken(Some(&change(Some(&["api", "web"])))), ["web", "api"]);
        assert!(woken(Some(&change(Some(&["mail"])))).is_empty());
        // Every group of the inventory may have changed.
        assert_eq!(woken(Some(&change(None))), ["web", "api"]);
        // Changes were missed: every Resource.
        assert_eq!(woken(None), ["web", "web-eu", "db", "api", "odd"]);
    }

    #[test]
    fn only_appearance_and_deletion_of_resources_wake_bookings_relisted_or_not() {
        let mut t = ResourceTriggers::default();
        let none = Vec::new;
        struct Step {
            what: &'static str,
            event: Event<Resource>,
            want: Vec<ObjectRef<Resource>>,
        }
        let steps = [
            Step {
                what: "appears",
                event: Event::Apply(resource("a", 0)),
                want: vec![key("a")],
            },
            Step {
                what: "its status changes",
                event: Event::Apply(resource("a", 2)),
                want: vec![],
            },
            Step {
                what: "deleted",
                event: Event::Delete(resource("a", 2)),
                want: vec![key("a")],
            },
            Step {
                what: "appears again",
                event: Event::Apply(resource("a", 0)),
                want: vec![key("a")],
            },
            Step {
                what: "another appears",
                event: Event::Apply(resource("c", 0)),
                want: vec![key("c")],
            },
            Step {
                what: "a relist starts",
                event: Event::Init,
                want: vec![],
            },
            Step {
                what: "a relisted object",
                event: Event::InitApply(resource("b", 0)),
                want: vec![],
            },
        ];
        for s in steps {
            assert_eq!(t.on_event(&s.event, none), s.want, "{}", s.what);
        }
        // After the relist, the Resources that came or went during the gap are concerned (`a`
        // went, `b` came; `c`, known before and after, is not), and the relisted ones are known:
        // their next update is not an appearance.
        let mut concerned = t.on_event(&Event::InitDone, || vec![key("b"), key("c")]);
        concerned.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(concerned, [key("a"), key("b")]);
        assert!(t.on_event(&Event::Apply(resource("b", 1)), none).is_empty());
        assert_eq!(
            t.on_event(&Event::Apply(resource("a", 1)), none),
            [key("a")]
        );
        // A relist that changes nothing concerns nothing.
        assert!(
            t.on_event(&Event::InitDone, || vec![key("a"), key("b"), key("c")])
                .is_empty()
        );
    }

    #[test]
    fn a_calendar_wakes_the_schedulers_of_its_namespace_that_name_it() {
        use booking_shared::api::{BookingCalendarSpec, BookingSchedulerSpec, CalendarRef};
        let scheduler = |ns: &str, name: &str, calendars: &[&str]| {
            let mut s = BookingScheduler::new(
                name,
                BookingSchedulerSpec {
                    calendars: calendars
                        .iter()
                        .map(|c| CalendarRef { name: (*c).into() })
                        .collect(),
                    ..Default::default()
                },
            );
            s.metadata.namespace = Some(ns.into());
            s
        };
        let all = [
            scheduler("team", "a", &["holidays"]),
            scheduler("team", "b", &["plant", "holidays"]),
            scheduler("team", "c", &["plant"]),
            scheduler("other", "d", &["holidays"]),
        ];
        let mut calendar = BookingCalendar::new("holidays", BookingCalendarSpec::default());
        calendar.metadata.namespace = Some("team".into());
        let woken: Vec<String> = schedulers_of_calendar(&all, &calendar)
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
        assert_eq!(woken, ["team/a", "team/b"]);
    }

    #[test]
    fn a_moved_booking_wakes_both_resources_and_their_bookings() {
        let index = BookingIndex::default();
        let booking = |name: &str, resource: &str, start: &str| {
            let mut b = Booking::new(
                name,
                BookingSpec {
                    resource_name: resource.into(),
                    start_at: start.into(),
                    end_at: "2031-01-10T12:00:00Z".into(),
                    user_id: "ann".into(),
                    notifications: vec![],
                },
            );
            b.metadata.namespace = Some("team".into());
            b
        };
        let _ = index.rebuild([
            &booking("one", "a", "2031-01-10T10:00:00Z"),
            &booking("two", "b", "2031-01-10T10:00:00Z"),
        ]);
        // A status-only change wakes the Resource, no booking.
        let (resources, bookings) = of_booking_change(
            &index,
            index.apply(booking("one", "a", "2031-01-10T10:00:00Z")),
        );
        assert_eq!(resources, [key("a")]);
        assert!(bookings.is_empty());
        // Moving "one" from a to b wakes both Resources and every booking of both.
        let (mut resources, mut bookings) = of_booking_change(
            &index,
            index.apply(booking("one", "b", "2031-01-10T10:00:00Z")),
        );
        resources.sort_by_key(|r| r.name.clone());
        bookings.sort_by_key(|b| b.name.clone());
        assert_eq!(resources, [key("a"), key("b")]);
        let names: Vec<&str> = bookings.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["one", "two"]);
    }
}
