//! The admission handlers against AdmissionReview bodies as the API server sends them.

mod common;

use base64::Engine as _;
use booking_webhook::admission::{Endpoint, ReviewResult, admit};
use common::*;
use serde_json::{Value, json};

fn validate(state: &booking_webhook::state::State, req: &Req) -> Value {
    response_of(&admit(state, Endpoint::Validate, &req.body()).to_json())
}

fn mutate(state: &booking_webhook::state::State, req: &Req) -> Value {
    response_of(&admit(state, Endpoint::Mutate, &req.body()).to_json())
}

fn message(r: &Value) -> String {
    r["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_well_formed_booking_is_admitted_with_the_request_uid() {
    let state = state_with(&[], &[resource("ns", "ec2.analytics")]);
    let r = validate(
        &state,
        &Req::create(booking("ns", "b", "ec2.analytics", 1, 2, "ann")),
    );
    assert_eq!(r["allowed"], true, "{r}");
    assert_eq!(r["uid"], "0f1e2d3c-0000-4000-8000-000000000001");
    assert!(r.get("warnings").is_none(), "{r}");
}

#[test]
fn an_overlap_is_denied_naming_the_other_booking_its_user_and_times() {
    let state = state_with(
        &[booking("ns", "first-come", "ec2.analytics", 1, 3, "ann")],
        &[],
    );
    let r = validate(
        &state,
        &Req::create(booking("ns", "second", "ec2.analytics", 2, 4, "bob")),
    );
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(r["status"]["code"], 403);
    let m = message(&r);
    for part in ["first-come", "\"ann\"", &at(1), &at(3), "back-to-back"] {
        assert!(m.contains(part), "{m} lacks {part}");
    }
    // Back to back, other resource, other namespace: all admitted.
    for other in [
        booking("ns", "after", "ec2.analytics", 3, 4, "bob"),
        booking("ns", "before", "ec2.analytics", 0, 1, "bob"),
        booking("ns", "web", "ec2.web", 1, 3, "bob"),
        booking("elsewhere", "there", "ec2.analytics", 1, 3, "bob"),
    ] {
        let r = validate(&state, &Req::create(other.clone()));
        assert_eq!(r["allowed"], true, "{other} {r}");
    }
}

#[test]
fn an_update_never_collides_with_itself_and_is_checked_like_a_create() {
    let mine = booking("ns", "mine", "r", 1, 3, "ann");
    let state = state_with(
        &[mine.clone(), booking("ns", "later", "r", 5, 6, "bob")],
        &[],
    );
    let longer = booking("ns", "mine", "r", 1, 5, "ann");
    assert_eq!(
        validate(&state, &Req::update(mine.clone(), longer))["allowed"],
        true
    );
    let shorter = booking("ns", "mine", "r", 1, 2, "ann");
    assert_eq!(
        validate(&state, &Req::update(mine.clone(), shorter))["allowed"],
        true
    );
    let too_long = booking("ns", "mine", "r", 1, 6, "ann");
    let r = validate(&state, &Req::update(mine, too_long));
    assert_eq!(r["allowed"], false);
    assert!(message(&r).contains("\"later\""), "{r}");
}

#[test]
fn status_and_metadata_updates_are_never_denied() {
    // A stored booking that would be invalid today (overlapping, no user).
    let a = booking("ns", "a", "r", 1, 3, "ann");
    let b = booking("ns", "b", "r", 2, 4, "");
    let state = state_with(&[a, b.clone()], &[]);
    let mut with_status = b.clone();
    with_status["status"] = json!({"status": "CONFLICT"});
    let mut req = Req::update(b.clone(), with_status.clone());
    req.sub_resource = Some("status");
    assert_eq!(validate(&state, &req)["allowed"], true);
    // The same change through the main resource (spec unchanged), and a finalizer.
    assert_eq!(
        validate(&state, &Req::update(b.clone(), with_status))["allowed"],
        true
    );
    let mut with_finalizer = b.clone();
    with_finalizer["metadata"]["finalizers"] = json!(["manager.kotaico.de/release"]);
    assert_eq!(
        validate(&state, &Req::update(b.clone(), with_finalizer))["allowed"],
        true
    );
    // A spec change is judged.
    let mut moved = b.clone();
    moved["spec"]["user_id"] = json!("bob");
    assert_eq!(validate(&state, &Req::update(b, moved))["allowed"], false);
}

#[test]
fn delete_is_always_allowed() {
    let b = booking("ns", "b", "r", 1, 3, "ann");
    let state = state_with(std::slice::from_ref(&b), &[]);
    let req = Req {
        operation: "DELETE",
        object: Value::Null,
        old: b,
        ..Req::create(Value::Null)
    };
    let r = validate(&state, &req);
    assert_eq!(r["allowed"], true, "{r}");
    assert_eq!(mutate(&state, &req)["allowed"], true);
}

#[test]
fn dry_run_reserves_nothing_and_real_requests_reserve_their_slot() {
    let state = state_with(&[], &[]);
    let first = booking("ns", "first", "r", 1, 2, "ann");
    let rival = booking("ns", "rival", "r", 1, 2, "bob");
    let mut dry = Req::create(first.clone());
    dry.dry_run = true;
    assert_eq!(validate(&state, &dry)["allowed"], true);
    assert_eq!(state.read_index().reservations(), 0);
    // The dry run gets exactly the answer the real request gets.
    assert_eq!(validate(&state, &dry)["allowed"], true);
    assert_eq!(
        validate(&state, &Req::create(first.clone()))["allowed"],
        true
    );
    assert_eq!(state.read_index().reservations(), 1);
    // Before the watch delivers "first", a rival is already denied, and so is its dry run.
    let mut rival_dry = Req::create(rival.clone());
    rival_dry.dry_run = true;
    let r = validate(&state, &rival_dry);
    assert_eq!(r["allowed"], false);
    assert!(message(&r).contains("\"first\""));
    assert_eq!(validate(&state, &Req::create(rival))["allowed"], false);
    // Re-applying "first" itself is fine.
    assert_eq!(validate(&state, &Req::create(first))["allowed"], true);
}

/// One requester cannot fill the index with reservations: past the bound, its real creates are
/// refused naming the bound while others' are admitted; a refused review and a dry run reserve
/// nothing; a reservation ends when the watch delivers the booking, making room again.
#[test]
fn reservations_are_bounded_per_requester_and_released_when_the_watch_delivers() {
    let mut state = state_with(&[], &[]);
    std::sync::Arc::get_mut(&mut state)
        .unwrap()
        .max_reservations_per_requester = 2;
    let by = |user: &'static str, name: &str, resource: &str| {
        let mut req = Req::create(booking("ns", name, resource, 1, 2, "x"));
        req.user = user;
        req
    };
    for name in ["m0", "m1"] {
        let r = validate(&state, &by("mallory", name, name));
        assert_eq!(r["allowed"], true, "{r}");
    }
    let r = validate(&state, &by("mallory", "m2", "m2"));
    assert_eq!(r["allowed"], false, "{r}");
    assert!(
        message(&r).contains("at most 2 per requester"),
        "{}",
        message(&r)
    );
    assert_eq!(state.read_index().reservations_by("mallory"), 2);
    // Others are not held back; a dry run of mallory's is judged as usual.
    assert_eq!(validate(&state, &by("bob", "b0", "b0"))["allowed"], true);
    let mut dry = by("mallory", "m3", "m3");
    dry.dry_run = true;
    assert_eq!(validate(&state, &dry)["allowed"], true);
    // A refused review reserves nothing.
    let r = validate(&state, &by("bob", "b1", "m0"));
    assert_eq!(r["allowed"], false, "an overlap with m0: {r}");
    assert_eq!(state.read_index().reservations_by("bob"), 1);
    // The watch delivers m0: its reservation ends, mallory may book again.
    let m0: booking_shared::api::Booking =
        serde_json::from_value(booking("ns", "m0", "m0", 1, 2, "x")).unwrap();
    booking_webhook::caches::apply_booking_event(
        &state,
        &mut Default::default(),
        kube::runtime::watcher::Event::Apply(m0),
    );
    assert_eq!(state.read_index().reservations_by("mallory"), 1);
    assert_eq!(
        validate(&state, &by("mallory", "m2", "m2"))["allowed"],
        true
    );
}

#[test]
fn warnings_for_past_bookings_and_missing_resources() {
    let state = state_with(&[], &[resource("ns", "ec2.analytics")]);
    let r = validate(
        &state,
        &Req::create(booking("ns", "old", "ec2.analytics", -3, -2, "ann")),
    );
    assert_eq!(r["allowed"], true);
    assert_eq!(r["warnings"].as_array().map(Vec::len), Some(1), "{r}");
    let r = validate(
        &state,
        &Req::create(booking("ns", "new", "ec2.ghost", 1, 2, "ann")),
    );
    assert_eq!(r["allowed"], true);
    let w = r["warnings"][0].as_str().unwrap();
    assert!(
        w.contains("ec2.ghost") && w.contains("does not exist"),
        "{w}"
    );
}

#[test]
fn every_kind_is_validated() {
    let state = state_with(&[], &[]);
    let scheduler = |schedule: &str, duration: u32| {
        json!({"apiVersion": "manager.kotaico.de/v1", "kind": "BookingScheduler",
            "metadata": {"name": "s", "namespace": "ns"},
            "spec": {"schedule": schedule, "duration": duration,
                "bookingTemplate": {"resource_name": "ec2.analytics", "user_id": "ann"}}})
    };
    assert_eq!(
        validate(&state, &Req::create(scheduler("0 * * * *", 20)))["allowed"],
        true
    );
    let r = validate(&state, &Req::create(scheduler("*/10 * * * *", 15)));
    assert!(message(&r).contains("spec.duration"), "{r}");
    let r = validate(&state, &Req::create(scheduler("61 * * * *", 20)));
    assert!(message(&r).contains("61 * * * *"), "{r}");
    let mut gce = resource("ns", "gce.analytics");
    gce["spec"]["type"] = json!("gce");
    let r = validate(&state, &Req::create(gce));
    assert!(message(&r).contains("ec2, rds"), "{r}");
    let monitor = json!({"apiVersion": "manager.kotaico.de/v1", "kind": "ResourceMonitor",
        "metadata": {"name": "m", "namespace": "ns"}, "spec": {"type": "ec3"}});
    let r = validate(&state, &Req::create(monitor));
    assert!(message(&r).contains("ec3"), "{r}");
    // A spec that does not even read as a Booking is denied with the reason.
    let mut broken = booking("ns", "x", "r", 1, 2, "ann");
    broken["spec"]["start_at"] = json!(5);
    let r = validate(&state, &Req::create(broken));
    assert_eq!(r["allowed"], false);
    assert!(message(&r).contains("start_at"), "{r}");
}

#[test]
fn the_fast_path_takes_well_formed_reviews_and_leaves_the_rest_to_the_general_one() {
    use booking_webhook::admission::{admit_general, validate_fast};
    let scheduler = json!({"apiVersion": "manager.kotaico.de/v1", "kind": "BookingScheduler",
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": {"schedule": "0 * * * *", "duration": 20,
            "bookingTemplate": {"resource_name": "ec2.analytics", "user_id": "ann"}}});
    let monitor = json!({"apiVersion": "manager.kotaico.de/v1", "kind": "ResourceMonitor",
        "metadata": {"name": "m", "namespace": "ns"}, "spec": {"type": "ec2"}});
    let well_formed = [
        Req::create(booking("ns", "a", "r", 1, 2, "ann")),
        Req::create(booking("ns", "late", "r", -3, -2, "ann")),
        Req::update(
            booking("ns", "a", "r", 1, 2, "ann"),
            booking("ns", "a", "r", 1, 3, "ann"),
        ),
        Req::create(scheduler),
        Req::create(resource("ns", "ec2.analytics")),
        Req::create(monitor),
    ];
    for req in &well_formed {
        let (fast_state, general_state) = (state_with(&[], &[]), state_with(&[], &[]));
        let fast = validate_fast(&fast_state, &req.body())
            .unwrap_or_else(|| panic!("the fast path left {}", req.object));
        let general = admit_general(&general_state, Endpoint::Validate, &req.body());
        assert_eq!(
            response_of(&fast.to_json()),
            response_of(&general.to_json()),
            "{}",
            req.object
        );
        assert_eq!((fast.kind, fast.verdict), (general.kind, general.verdict));
    }
    // What does not read as the typed request is left to the general path, which names it.
    let mut broken = booking("ns", "x", "r", 1, 2, "ann");
    broken["spec"]["start_at"] = json!(5);
    let state = state_with(&[], &[]);
    assert!(validate_fast(&state, &Req::create(broken).body()).is_none());
    assert!(validate_fast(&state, b"{}").is_none());
    let v1beta1 = String::from_utf8(Req::create(booking("ns", "a", "r", 1, 2, "ann")).body())
        .unwrap()
        .replace("admission.k8s.io/v1", "admission.k8s.io/v1beta1");
    assert!(validate_fast(&state, v1beta1.as_bytes()).is_none());
    let no_object = Req::create(Value::Null);
    assert!(
        validate_fast(&state, &no_object.body()).is_none(),
        "a CREATE without its object is worded by the general path"
    );
}

fn patch_ops(r: &Value) -> Vec<Value> {
    let b64 = r["patch"].as_str().expect("a patch");
    assert_eq!(r["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn mutate_fills_absent_fields_with_an_rfc6902_patch() {
    let state = state_with(&[], &[]);
    let mut b = booking("ns", "anonymous", "ec2.analytics", 1, 2, "");
    b["spec"]["notifications"] = json!([{"type": "email", "recipient": "a@example.com"}]);
    let r = mutate(&state, &Req::create(b.clone()));
    assert_eq!(r["allowed"], true);
    let ops = patch_ops(&r);
    assert!(
        ops.iter().all(|op| op["op"] == "add"),
        "only additions: {ops:?}"
    );
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
    let mut patched = b.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(patched["spec"]["user_id"], "ann");
    assert_eq!(patched["spec"]["notifications"][0]["leadMinutes"], 20);
    assert_eq!(
        patched["metadata"]["labels"]["manager.kotaico.de/resource"],
        "ec2.analytics"
    );
    // Applying the patched object again changes nothing: no patch at all.
    let r = mutate(&state, &Req::create(patched));
    assert_eq!(r["allowed"], true);
    assert!(
        r.get("patch").is_none() && r.get("patchType").is_none(),
        "{r}"
    );
}

#[test]
fn mutate_keeps_what_the_user_wrote_and_other_labels() {
    let state = state_with(&[], &[]);
    let mut b = booking("ns", "b", "ec2.analytics", 1, 2, "zoe");
    b["metadata"]["labels"] = json!({"team": "data"});
    let r = mutate(&state, &Req::create(b.clone()));
    let ops = patch_ops(&r);
    assert_eq!(
        ops,
        vec![
            json!({"op": "add", "path": "/metadata/annotations", "value": {"manager.kotaico.de/requested-by": "ann"}}),
            json!({"op": "add", "path": "/metadata/labels/manager.kotaico.de~1resource", "value": "ec2.analytics"})
        ]
    );
}

#[test]
fn mutate_defaults_the_scheduler_time_zone_and_template_user() {
    let state = state_with(&[], &[]);
    let s = json!({"apiVersion": "manager.kotaico.de/v1", "kind": "BookingScheduler",
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": {"schedule": "0 * * * *", "duration": 20,
            "bookingTemplate": {"resource_name": "ec2.analytics"}}});
    let r = mutate(&state, &Req::create(s.clone()));
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(patch_ops(&r))).unwrap();
    let mut patched = s;
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(patched["spec"]["timeZone"], "UTC");
    assert_eq!(patched["spec"]["bookingTemplate"]["user_id"], "ann");
}

/// Hostile nesting in a value no rule reads (`managedFields[].fieldsV1`, 1.9 million levels,
/// within the 4 MiB body limit), read on a thread with a runtime worker's 2 MiB stack: closed,
/// it is skipped without recursion and the booking is judged; unclosed, the review is an error.
/// Neither overflows the stack.
#[test]
fn deep_nesting_where_no_rule_reads_neither_overflows_nor_hides_the_booking() {
    let body = real_review(&Req::create(stored_shape(booking(
        "ns", "a", "r", 5, 6, "ann",
    ))));
    let text = String::from_utf8(body).unwrap();
    let depth = 1_900_000;
    let closed = text.replacen(
        "\"fieldsV1\":{",
        &format!(
            "\"fieldsV1\":{}{},\"x\":{{",
            "[".repeat(depth),
            "]".repeat(depth)
        ),
        1,
    );
    let unclosed = text.replacen(
        "\"fieldsV1\":{",
        &format!("\"fieldsV1\":{}{{", "[".repeat(depth)),
        1,
    );
    assert!(closed.len() < 4 * 1024 * 1024);
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let state = state_with(&[], &[resource("ns", "r")]);
            let d = admit(&state, Endpoint::Validate, closed.as_bytes());
            assert_eq!(d.verdict, ReviewResult::Allowed);
            let held = state_with(
                &[booking("ns", "held", "r", 4, 7, "bob")],
                &[resource("ns", "r")],
            );
            let d = admit(&held, Endpoint::Validate, closed.as_bytes());
            assert_eq!(d.verdict, ReviewResult::Denied, "the overlap is still seen");
            for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
                let d = admit(&state, endpoint, unclosed.as_bytes());
                assert_eq!(d.verdict, ReviewResult::Error);
                assert_eq!(response_of(&d.to_json())["status"]["code"], 400);
            }
        })
        .unwrap()
        .join()
        .expect("no stack overflow");
}

#[test]
fn malformed_reviews_get_an_error_review_not_a_panic() {
    let state = state_with(&[], &[]);
    for (what, body) in [
        ("empty", b"".to_vec()),
        ("not json", b"\x00\xff garbage".to_vec()),
        ("json but not a review", br#"{"hello": 1}"#.to_vec()),
        (
            "no request",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
        ),
        (
            "v1beta1",
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#
                .to_vec(),
        ),
        (
            "request of the wrong shape",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":5}}"#
                .to_vec(),
        ),
    ] {
        for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
            let d = admit(&state, endpoint, &body);
            assert_eq!(d.verdict, ReviewResult::Error, "{what}");
            let r = response_of(&d.to_json());
            assert_eq!(r["allowed"], false, "{what}");
            assert_eq!(r["status"]["code"], 400, "{what}");
            assert!(!message(&r).is_empty(), "{what}");
        }
    }
}

#[test]
fn an_unknown_kind_is_an_error_naming_it() {
    let state = state_with(&[], &[]);
    let pod =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}});
    let mut req = Req::create(pod);
    req.object["apiVersion"] = json!("core/v1");
    let d = admit(&state, Endpoint::Validate, &req.body());
    assert_eq!(d.verdict, ReviewResult::Error);
    let r = response_of(&d.to_json());
    assert_eq!(r["uid"], "0f1e2d3c-0000-4000-8000-000000000001");
    assert!(message(&r).contains("\"Pod\""), "{r}");
}

fn median_admission_time(state: &booking_webhook::state::State, req: &Req) -> std::time::Duration {
    let body = req.body();
    let mut times: Vec<std::time::Duration> = (0..301)
        .map(|_| {
            let started = std::time::Instant::now();
            let d = admit(state, Endpoint::Validate, &body);
            let elapsed = started.elapsed();
            assert_ne!(d.verdict, ReviewResult::Error);
            elapsed
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

#[test]
fn ten_thousand_indexed_bookings_do_not_slow_admission() {
    let many: Vec<Value> = (0..10_000)
        .map(|i| booking("ns", &format!("b{i}"), "r", 10 + 2 * i, 11 + 2 * i, "ann"))
        .collect();
    let big = state_with(&many, &[]);
    let empty = state_with(&[], &[]);
    assert_eq!(big.read_index().len(), 10_000);
    let mut free = Req::create(booking("ns", "new", "r", 1, 2, "bob"));
    free.dry_run = true;
    let mut clash = Req::create(booking("ns", "new", "r", 5_000, 5_003, "bob"));
    clash.dry_run = true;
    let with_empty = median_admission_time(&empty, &free);
    let with_many = median_admission_time(&big, &free);
    let clashing = median_admission_time(&big, &clash);
    eprintln!(
        "median validate latency: empty index {with_empty:?}, 10,000 bookings {with_many:?}, 10,000 bookings with 2 conflicts {clashing:?}"
    );
    // Generous bounds for a debug build on a shared machine; a scan or a list per request
    // would be far slower than this.
    let bound = with_empty * 3 + std::time::Duration::from_millis(1);
    assert!(with_many < bound, "{with_many:?} vs {with_empty:?}");
    assert!(clashing < bound, "{clashing:?} vs {with_empty:?}");
}

#[test]
fn watch_events_keep_the_index_current() {
    use booking_shared::api::Booking;
    use booking_webhook::caches::apply_booking_event;
    use kube::runtime::watcher::Event;
    let typed = |v: Value| -> Booking { serde_json::from_value(v).unwrap() };
    let state = state_with(&[booking("ns", "old", "r", 1, 2, "ann")], &[]);
    let mut buffer = Default::default();
    let slot_of = |name: &str| {
        state
            .read_index()
            .get("ns", name)
            .map(|b| b.end_at.to_string())
    };
    apply_booking_event(
        &state,
        &mut buffer,
        Event::Apply(typed(booking("ns", "new", "r", 3, 4, "bob"))),
    );
    assert_eq!(slot_of("new"), Some(at(4)));
    apply_booking_event(
        &state,
        &mut buffer,
        Event::Apply(typed(booking("ns", "new", "r", 3, 5, "bob"))),
    );
    assert_eq!(slot_of("new"), Some(at(5)));
    // Times that no longer form a slot block nothing.
    apply_booking_event(
        &state,
        &mut buffer,
        Event::Apply(typed(booking("ns", "new", "r", 5, 3, "bob"))),
    );
    assert_eq!(slot_of("new"), None);
    apply_booking_event(
        &state,
        &mut buffer,
        Event::Delete(typed(booking("ns", "old", "r", 1, 2, "ann"))),
    );
    assert_eq!(slot_of("old"), None);
    // A relist replaces the contents only when complete.
    apply_booking_event(
        &state,
        &mut buffer,
        Event::<booking_shared::api::Booking>::Init,
    );
    apply_booking_event(
        &state,
        &mut buffer,
        Event::InitApply(typed(booking("ns", "relisted", "r", 1, 2, "ann"))),
    );
    assert_eq!(slot_of("relisted"), None, "not before InitDone");
    apply_booking_event(
        &state,
        &mut buffer,
        Event::<booking_shared::api::Booking>::InitDone,
    );
    assert_eq!(slot_of("relisted"), Some(at(2)));
    assert_eq!(state.read_index().len(), 1);
}

#[test]
fn reviews_shaped_like_the_api_servers_get_the_general_paths_answer() {
    use booking_webhook::admission::{admit_general, validate_fast};
    let held = booking("ns", "held", "r", 1, 3, "ann");
    let mut deleting = stored_shape(booking("ns", "a", "r", 1, 2, "ann"));
    deleting["metadata"]["deletionTimestamp"] = json!("2030-06-01T12:00:00Z");
    let mut other_requester = stored_shape(booking("ns", "a", "r", 5, 6, "ann"));
    other_requester["metadata"]["annotations"]["manager.kotaico.de/requested-by"] = json!("bob");
    let cases = [
        Req::create(stored_shape(booking("ns", "a", "r", 5, 6, "ann"))),
        Req::create(stored_shape(booking("ns", "a", "r", 2, 4, "ann"))),
        Req::create(stored_shape(booking("ns", "a", "missing", -3, -2, ""))),
        Req::create(other_requester.clone()),
        Req::update(
            stored_shape(booking("ns", "a", "r", 5, 6, "ann")),
            other_requester,
        ),
        Req::update(
            stored_shape(booking("ns", "a", "r", 5, 6, "ann")),
            stored_shape(booking("ns", "a", "r", 2, 6, "ann")),
        ),
        Req::update(stored_shape(booking("ns", "a", "r", 2, 6, "ann")), deleting),
        Req {
            dry_run: true,
            ..Req::create(stored_shape(booking("ns", "a", "r", 5, 6, "ann")))
        },
        Req {
            sub_resource: Some("status"),
            ..Req::update(
                stored_shape(booking("ns", "a", "r", 5, 6, "ann")),
                stored_shape(booking("ns", "a", "r", 1, 2, "ann")),
            )
        },
        Req {
            operation: "DELETE",
            object: Value::Null,
            ..Req::update(
                stored_shape(booking("ns", "a", "r", 5, 6, "ann")),
                Value::Null,
            )
        },
    ];
    for req in &cases {
        let body = real_review(req);
        let (fast_state, general_state) = (
            state_with(std::slice::from_ref(&held), &[resource("ns", "r")]),
            state_with(std::slice::from_ref(&held), &[resource("ns", "r")]),
        );
        let fast = validate_fast(&fast_state, &body)
            .unwrap_or_else(|| panic!("the fast path left {}", String::from_utf8_lossy(&body)));
        let general = admit_general(&general_state, Endpoint::Validate, &body);
        assert_eq!(
            serde_json::from_slice::<Value>(&fast.to_json()).unwrap(),
            serde_json::from_slice::<Value>(&general.to_json()).unwrap(),
            "{}",
            String::from_utf8_lossy(&body)
        );
        assert_eq!(
            (&fast.kind, fast.operation, fast.verdict, fast.uid()),
            (
                &general.kind,
                general.operation,
                general.verdict,
                general.uid()
            )
        );
        // The same reservations were made.
        assert_eq!(
            fast_state.read_index().reservations(),
            general_state.read_index().reservations()
        );
    }
    // A value of the wrong type anywhere in the metadata is left to the general path.
    for (field, value) in [
        ("labels", json!({"team": 5})),
        ("managedFields", json!([{"time": "yesterday"}])),
        ("finalizers", json!("one")),
        ("generation", json!("1")),
        ("ownerReferences", json!([{"controller": "yes"}])),
    ] {
        let mut object = stored_shape(booking("ns", "a", "r", 5, 6, "ann"));
        object["metadata"][field] = value;
        let body = real_review(&Req::create(object));
        let state = state_with(&[], &[]);
        assert!(validate_fast(&state, &body).is_none(), "{field}");
        let r = response_of(&admit(&state, Endpoint::Validate, &body).to_json());
        assert_eq!(r["allowed"], false, "{field}: {r}");
    }
}

#[test]
fn the_watch_reads_a_stored_booking_as_its_whole_object() {
    use booking_shared::api::Booking;
    use booking_webhook::caches::{IndexSource as _, WatchedBooking};
    let mut stored = stored_shape(booking("ns", "a", "r", 5, 6, "ann"));
    let whole: Booking = serde_json::from_value(stored.clone()).unwrap();
    let watched: WatchedBooking = serde_json::from_value(stored.clone()).unwrap();
    assert_eq!(watched.entry(), whole.entry());
    assert!(watched.entry().is_some());
    assert_eq!(
        kube::ResourceExt::resource_version(&watched).as_deref(),
        Some("48213")
    );
    stored["metadata"]["deletionTimestamp"] = json!("2030-06-01T12:00:00Z");
    let watched: WatchedBooking = serde_json::from_value(stored).unwrap();
    assert!(watched.entry().is_some_and(|e| e.deleting));
    assert_eq!(
        <WatchedBooking as kube::Resource>::url_path(&(), Some("ns")),
        <Booking as kube::Resource>::url_path(&(), Some("ns"))
    );
}

/// A restarted webhook whose index has not synced yet cannot know the cluster's bookings: it
/// answers 503 with a message to retry, on the fast path and the general one alike, and admits
/// nothing that could overlap. Other kinds and status updates are judged as usual.
#[test]
fn bookings_are_not_judged_before_the_index_has_synced() {
    use booking_webhook::{metrics::Metrics, state::State};
    let state = State::new(
        booking_shared::validation::Policy::default(),
        chrono::Duration::seconds(30),
        None,
        std::sync::Arc::new(now),
        Metrics::new(),
    );
    let req = Req::create(booking("ns", "b", "ec2.analytics", 1, 2, "ann"));
    assert!(booking_webhook::admission::validate_fast(&state, &req.body()).is_none());
    let r = validate(&state, &req);
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(r["status"]["code"], 503, "{r}");
    assert!(message(&r).contains("retry in a few seconds"), "{r}");
    assert!(message(&r).contains("spec.start_at/spec.end_at"), "{r}");
    let scheduler = validate(
        &state,
        &Req::create(json!({
            "apiVersion": "manager.kotaico.de/v1",
            "kind": "BookingScheduler",
            "metadata": {"namespace": "ns", "name": "s"},
            "spec": {"schedule": "0 9 * * 1-5", "duration": 60,
                     "bookingTemplate": {"resource_name": "ec2.analytics", "user_id": "ann"}},
        })),
    );
    assert_eq!(scheduler["allowed"], true, "{scheduler}");
    let mut buffer = Default::default();
    booking_webhook::caches::apply_booking_event(
        &state,
        &mut buffer,
        kube::runtime::watcher::Event::<booking_shared::api::Booking>::Init,
    );
    booking_webhook::caches::apply_booking_event(
        &state,
        &mut buffer,
        kube::runtime::watcher::Event::<booking_shared::api::Booking>::InitDone,
    );
    assert_eq!(validate(&state, &req)["allowed"], true);
}

#[test]
fn a_second_resource_for_a_claimed_group_is_denied_naming_the_claimer() {
    let mut stored = resource("team-a", "ec2.analytics");
    stored["metadata"]["creationTimestamp"] = json!("2030-01-01T00:00:00Z");
    let state = state_with(&[], &[stored.clone()]);
    // Another namespace, same type and tag: denied, on both paths, naming team-a's Resource.
    let req = Req::create(resource("team-b", "mine"));
    let r = validate(&state, &req);
    assert_eq!(r["allowed"], false, "{r}");
    let m = message(&r);
    assert!(
        m.starts_with("spec.tag: the ec2 group \"analytics\""),
        "{m}"
    );
    assert!(
        m.contains("claimed by Resource team-a/ec2.analytics"),
        "{m}"
    );
    let general = response_of(
        &booking_webhook::admission::admit_general(&state, Endpoint::Validate, &req.body())
            .to_json(),
    );
    assert_eq!(message(&general), m);
    // Another tag, or another region, is another group.
    let mut other = resource("team-b", "web");
    other["spec"]["tag"] = json!("web");
    assert_eq!(
        validate(&state, &Req::create(other.clone()))["allowed"],
        true
    );
    let mut region = resource("team-b", "eu");
    region["spec"]["region"] = json!("eu-west-1");
    assert_eq!(
        validate(&state, &Req::create(region.clone()))["allowed"],
        true
    );
    // The claimer itself may change its other fields; an update moving another Resource onto
    // the claimed group is denied.
    let mut hibernating = stored.clone();
    hibernating["spec"]["hibernate"] = json!(true);
    assert_eq!(
        validate(&state, &Req::update(stored.clone(), hibernating))["allowed"],
        true
    );
    let mut moved = other.clone();
    moved["spec"]["tag"] = json!("analytics");
    let r = validate(&state, &Req::update(other, moved));
    assert_eq!(r["allowed"], false, "{r}");
    assert!(message(&r).contains("team-a/ec2.analytics"), "{r}");
}

#[test]
fn the_requested_by_annotation_is_only_the_requester_and_never_changes() {
    let state = state_with(&[], &[]);
    let mut b = booking("ns", "b", "ec2.analytics", 1, 2, "zoe");
    b["metadata"]["annotations"] = json!({"manager.kotaico.de/requested-by": "mallory"});
    let r = validate(&state, &Req::create(b.clone()));
    assert_eq!(r["allowed"], false, "{r}");
    assert!(
        message(&r).contains("\"mallory\" is not the user making this request (\"ann\")"),
        "{r}"
    );
    // Stored with ann as its creator: an update that only rewrites the annotation is judged
    // (not exempt as a metadata change) and denied.
    let mut stored = b.clone();
    stored["metadata"]["annotations"] = json!({"manager.kotaico.de/requested-by": "ann"});
    let r = validate(&state, &Req::update(stored.clone(), b));
    assert_eq!(r["allowed"], false, "{r}");
    assert!(message(&r).contains("created by \"ann\""), "{r}");
    let mut removed = stored.clone();
    removed["metadata"]["annotations"] = json!({});
    assert_eq!(
        validate(&state, &Req::update(stored.clone(), removed))["allowed"],
        false
    );
    let mut labelled = stored.clone();
    labelled["metadata"]["labels"] = json!({"team": "data"});
    assert_eq!(
        validate(&state, &Req::update(stored, labelled))["allowed"],
        true
    );
}
