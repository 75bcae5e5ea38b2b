//! `/validate` for a well-formed review, parsed once into the typed request.
//!
//! kube's `AdmissionReview` flattens its type fields, which makes serde buffer the whole
//! document before reading it, and the general path then reads the object a second time into
//! its typed kind. Here a first pass reads only the review's type and the request's kind
//! (skipping the rest without allocating), and a second reads the whole review straight into
//! `AdmissionRequest<K>`. Anything that does not read that way returns `None` and is judged by
//! the general path, which explains what is wrong.

use booking_shared::api::{Booking, BookingCalendar, BookingScheduler, Resource, ResourceMonitor};
use booking_shared::validation::{self, Outcome};
use kube::core::{
    GroupVersionKind, TypeMeta,
    admission::{AdmissionRequest, AdmissionResponse},
    object::HasSpec,
};
use serde::{Deserialize, de::DeserializeOwned};

use super::{
    Decision, RequestInfo, ReviewResult, ServedKind, answer, operation_str, validate_booking,
    validate_resource,
};
use crate::state::State;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Peek {
    api_version: String,
    kind: String,
    request: Option<PeekRequest>,
}

#[derive(Deserialize)]
struct PeekRequest {
    kind: GroupVersionKind,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(bound = "K: DeserializeOwned")]
struct Envelope<K: kube::Resource> {
    api_version: String,
    kind: String,
    request: Option<AdmissionRequest<K>>,
}

pub(super) fn validate(state: &State, body: &[u8]) -> Option<Decision> {
    let peek: Peek = serde_json::from_slice(body).ok()?;
    if peek.api_version != "admission.k8s.io/v1" || peek.kind != "AdmissionReview" {
        return None;
    }
    match ServedKind::of(&peek.request?.kind)? {
        // Until the index has synced, the general path answers (503).
        ServedKind::Booking if !state.bookings_synced() => None,
        ServedKind::Booking => judge::<Booking>(state, body, validate_booking),
        ServedKind::BookingScheduler => {
            judge::<BookingScheduler>(state, body, |state, _, s, _, now| {
                validation::validate_booking_scheduler(&s.spec, &state.policy, now)
            })
        }
        ServedKind::Resource => judge::<Resource>(state, body, |state, info, r, old, _| {
            validate_resource(state, info, r, old)
        }),
        ServedKind::ResourceMonitor => judge::<ResourceMonitor>(state, body, |_, _, m, _, _| {
            validation::validate_resource_monitor(&m.spec)
        }),
        ServedKind::BookingCalendar => judge::<BookingCalendar>(state, body, |_, _, c, _, _| {
            validation::validate_booking_calendar(&c.spec)
        }),
    }
}

fn judge<K>(
    state: &State,
    body: &[u8],
    rules: impl FnOnce(
        &State,
        &RequestInfo<'_>,
        &K,
        Option<&K>,
        chrono::DateTime<chrono::Utc>,
    ) -> Outcome,
) -> Option<Decision>
where
    K: kube::Resource + DeserializeOwned + HasSpec,
    K::Spec: PartialEq,
{
    let envelope: Envelope<K> = serde_json::from_slice(body).ok()?;
    let mut req = envelope.request?;
    req.types = TypeMeta {
        api_version: envelope.api_version,
        kind: envelope.kind,
    };
    let (response, verdict) = if super::exempt(&req, |old, new| {
        old.spec() == new.spec() && super::same_requester(old, new)
    }) {
        (AdmissionResponse::from(&req), ReviewResult::Allowed)
    } else {
        // A review without its object is an error the general path words.
        let object = req.object.as_ref()?;
        answer(
            &req,
            rules(
                state,
                &RequestInfo::of(&req),
                object,
                req.old_object.as_ref(),
                state.now(),
            ),
        )
    };
    Some(Decision::of_review(
        response.into_review(),
        req.kind.kind.clone(),
        operation_str(&req.operation),
        verdict,
        None,
    ))
}
