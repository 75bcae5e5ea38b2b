//! Property tests: no input makes the admission handlers panic, and every answer is a
//! well-formed AdmissionReview.

mod common;

use booking_webhook::admission::{Endpoint, admit, admit_general};
use common::*;
use proptest::prelude::*;
use serde_json::{Value, json};

fn check_answer(body: &[u8]) {
    let r = response_of(body);
    assert!(r["allowed"].is_boolean(), "{r}");
    if r["allowed"] == false {
        assert!(
            !r["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "{r}"
        );
    }
}

/// `/validate` answers `body` the same through [`admit`] (which takes the fast path for
/// well-formed reviews) and [`admit_general`], each on a state of its own.
fn check_paths_agree(
    fast: &booking_webhook::state::State,
    general: &booking_webhook::state::State,
    body: &[u8],
) {
    let a = admit(fast, Endpoint::Validate, body).to_json();
    let b = admit_general(general, Endpoint::Validate, body).to_json();
    assert_eq!(
        serde_json::from_slice::<Value>(&a).unwrap(),
        serde_json::from_slice::<Value>(&b).unwrap(),
        "fast and general paths disagree on {}",
        String::from_utf8_lossy(body)
    );
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn timestamp() -> impl Strategy<Value = String> {
    prop_oneof![
        (-48i64..48).prop_map(at),
        Just("2031-02-30T00:00:00Z".to_owned()),
        Just("2031-01-10 22:35".to_owned()),
        ".{0,25}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let state = state_with(&[], &[]);
        for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
            check_answer(&admit(&state, endpoint, &bytes).to_json());
        }
    }

    #[test]
    fn arbitrary_objects_in_a_review_never_panic(object in any_json(), old in any_json(), op in prop_oneof![Just("CREATE"), Just("UPDATE"), Just("DELETE"), Just("CONNECT")]) {
        let state = state_with(&[booking("ns", "held", "r", 1, 3, "ann")], &[]);
        let req = Req { operation: op, object, old, ..Req::create(Value::Null) };
        for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
            check_answer(&admit(&state, endpoint, &req.body()).to_json());
        }
        let general = state_with(&[booking("ns", "held", "r", 1, 3, "ann")], &[]);
        check_paths_agree(&state_with(&[booking("ns", "held", "r", 1, 3, "ann")], &[]), &general, &req.body());
    }

    #[test]
    fn arbitrary_bookings_never_panic(
        resource in prop_oneof![Just("r".to_owned()), ".{0,70}"],
        start in timestamp(),
        end in timestamp(),
        user in prop_oneof![Just(String::new()), ".{0,10}"],
        notif_type in prop_oneof![Just("email".to_owned()), Just("webhook".to_owned()), ".{0,6}"],
        recipient in ".{0,30}",
        lead in prop::option::of(0u32..20_000),
        labels in prop::option::of(prop::collection::btree_map("[a-z./]{1,30}", ".{0,70}", 0..3)),
    ) {
        let state = state_with(&[booking("ns", "held", "r", 1, 3, "ann")], &[]);
        let mut notification = json!({"type": notif_type, "recipient": recipient});
        if let Some(l) = lead {
            notification["leadMinutes"] = json!(l);
        }
        let mut object = json!({
            "apiVersion": "manager.kotaico.de/v1",
            "kind": "Booking",
            "metadata": {"name": "fuzzed", "namespace": "ns"},
            "spec": {"resource_name": resource, "start_at": start, "end_at": end, "user_id": user,
                "notifications": [notification]},
        });
        if let Some(l) = labels {
            object["metadata"]["labels"] = json!(l);
        }
        let (fast, general) = (
            state_with(&[booking("ns", "held", "r", 1, 3, "ann")], &[]),
            state_with(&[booking("ns", "held", "r", 1, 3, "ann")], &[]),
        );
        for req in [Req::create(object.clone()), Req::update(booking("ns", "fuzzed", "r", 1, 2, "ann"), object)] {
            for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
                check_answer(&admit(&state, endpoint, &req.body()).to_json());
            }
            check_paths_agree(&fast, &general, &req.body());
        }
    }
}
