//! Who may book for whom (off unless `--restrict-user-id`): a Booking's `spec.user_id` (and a
//! BookingScheduler's `spec.bookingTemplate.user_id`) must be the authenticated requester, and only the user who created a booking (its
//! `manager.kotaico.de/requested-by` annotation) may change its `user_id`, `end_at` or
//! `resource_name` — unless a SubjectAccessReview grants the requester the verb [`VERB`] on
//! `bookings` of group `manager.kotaico.de` in the booking's namespace (GitOps service accounts
//! get a Role for it; see `manifests/components/restrict-user-id`).
//!
//! Which requests need the permission is decided by the pure [`needed`]; the SubjectAccessReview
//! runs under a timeout, and a review that fails or times out refuses the request (fail closed)
//! with a message saying so.

use std::time::Duration;

use booking_shared::{
    api::{Booking, BookingScheduler, GROUP},
    validation,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::{
    Api,
    api::PostParams,
    core::{
        DynamicObject,
        admission::{AdmissionRequest, AdmissionReview, Operation},
    },
};

/// The custom verb that lets a requester book for another user and change another user's
/// bookings.
pub const VERB: &str = "book-for-others";

/// The resource the verb is checked on.
pub const RESOURCE: &str = "bookings";

/// Checks permissions with SubjectAccessReviews.
#[derive(Clone)]
pub struct Authorizer {
    client: kube::Client,
    timeout: Duration,
}

impl Authorizer {
    /// An authorizer asking the API server through `client`, each review bounded by `timeout`.
    pub fn new(client: kube::Client, timeout: Duration) -> Self {
        Self { client, timeout }
    }

    /// Whether the requester of `req` holds [`VERB`] on bookings in `namespace`; `Err` with a
    /// message when the review could not be made in time.
    async fn granted(
        &self,
        req: &AdmissionRequest<DynamicObject>,
        namespace: &str,
    ) -> Result<(bool, Option<String>), String> {
        let info = &req.user_info;
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: info.username.clone(),
                groups: info.groups.clone(),
                uid: info.uid.clone(),
                extra: info.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_owned()),
                    verb: Some(VERB.to_owned()),
                    group: Some(GROUP.to_owned()),
                    resource: Some(RESOURCE.to_owned()),
                    name: Some(req.name.clone()).filter(|n| !n.is_empty()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        match tokio::time::timeout(self.timeout, api.create(&PostParams::default(), &review)).await
        {
            Err(_) => Err(format!(
                "the SubjectAccessReview did not answer within {:?}",
                self.timeout
            )),
            Ok(Err(e)) => Err(format!("the SubjectAccessReview failed: {e}")),
            Ok(Ok(answer)) => Ok(answer
                .status
                .map(|s| (s.allowed, s.reason.filter(|r| !r.is_empty())))
                .unwrap_or((false, None))),
        }
    }
}

/// Why a request needs [`VERB`], or `None` when it does not. Pure.
///
/// - CREATE: `spec.user_id` is not the requester.
/// - UPDATE of a booking created by someone else (its requested-by annotation): `user_id`,
///   `end_at` or `resource_name` change.
/// - UPDATE that changes `user_id` to someone other than the requester.
pub fn needed(
    operation: &Operation,
    requester: &str,
    new: &Booking,
    old: Option<&Booking>,
) -> Option<String> {
    match (operation, old) {
        (Operation::Create, _) => (new.spec.user_id != requester).then(|| {
            format!(
                "spec.user_id is {:?}, not the requesting user {requester:?}",
                new.spec.user_id
            )
        }),
        (Operation::Update, Some(old)) => {
            let changed: Vec<&str> = [
                ("spec.user_id", old.spec.user_id != new.spec.user_id),
                ("spec.end_at", old.spec.end_at != new.spec.end_at),
                (
                    "spec.resource_name",
                    old.spec.resource_name != new.spec.resource_name,
                ),
            ]
            .into_iter()
            .filter_map(|(f, c)| c.then_some(f))
            .collect();
            let creator = validation::requested_by(&old.metadata);
            if let Some(creator) = creator.filter(|c| *c != requester)
                && !changed.is_empty()
            {
                return Some(format!(
                    "the booking was created by {creator:?} and this update by {requester:?} changes {}",
                    changed.join(", ")
                ));
            }
            (old.spec.user_id != new.spec.user_id && new.spec.user_id != requester).then(|| {
                format!(
                    "spec.user_id changes to {:?}, not the requesting user {requester:?}",
                    new.spec.user_id
                )
            })
        }
        _ => None,
    }
}

/// Why a BookingScheduler request needs [`VERB`]: its bookings would be made for a
/// `bookingTemplate.user_id` other than the requester (on CREATE, or an UPDATE that changes
/// it); the scheduler would otherwise be a way around the rule for bookings. Pure.
pub fn needed_for_scheduler(
    operation: &Operation,
    requester: &str,
    new: &BookingScheduler,
    old: Option<&BookingScheduler>,
) -> Option<String> {
    let user = &new.spec.booking_template.user_id;
    let changed = match (operation, old) {
        (Operation::Create, _) => true,
        (Operation::Update, Some(old)) => old.spec.booking_template.user_id != *user,
        _ => false,
    };
    (changed && user != requester).then(|| {
        format!("spec.bookingTemplate.user_id is {user:?}, not the requesting user {requester:?}")
    })
}

/// The kind of a review, read without the objects.
#[derive(serde::Deserialize)]
struct Peek {
    request: Option<PeekRequest>,
}

#[derive(serde::Deserialize)]
struct PeekRequest {
    kind: kube::core::GroupVersionKind,
}

/// A refusal: the request it answers, the HTTP code (403 missing permission, 503 the review
/// could not be made) and the message.
pub type Refusal<K> = (AdmissionRequest<K>, u16, String);

/// The refusal of a Booking or BookingScheduler request that needs [`VERB`] the requester does
/// not hold, or `None` when the request may go on to the rules (anything that does not read as
/// such a review is left to them).
pub async fn check(authorizer: &Authorizer, body: &[u8]) -> Option<Refusal<DynamicObject>> {
    let peek: Peek = serde_json::from_slice(body).ok()?;
    let kind = peek.request?.kind;
    if kind.group != GROUP {
        return None;
    }
    match kind.kind.as_str() {
        "Booking" => judge::<Booking>(authorizer, body, needed).await,
        "BookingScheduler" => {
            judge::<BookingScheduler>(authorizer, body, needed_for_scheduler).await
        }
        _ => None,
    }
}

async fn judge<K>(
    authorizer: &Authorizer,
    body: &[u8],
    needed: impl Fn(&Operation, &str, &K, Option<&K>) -> Option<String>,
) -> Option<Refusal<DynamicObject>>
where
    K: kube::Resource + serde::de::DeserializeOwned,
{
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body).ok()?;
    let req: AdmissionRequest<DynamicObject> = review.try_into().ok()?;
    if req.sub_resource.is_some() {
        return None;
    }
    let typed = |o: &DynamicObject| -> Option<K> {
        serde_json::from_value(serde_json::to_value(o).ok()?).ok()
    };
    let new = typed(req.object.as_ref()?)?;
    if new.meta().deletion_timestamp.is_some() {
        return None;
    }
    let old = req.old_object.as_ref().and_then(typed);
    let requester = req.user_info.username.as_deref().unwrap_or_default();
    let why = needed(&req.operation, requester, &new, old.as_ref())?;
    let namespace = req
        .namespace
        .clone()
        .or_else(|| new.meta().namespace.clone())
        .unwrap_or_default();
    let permission = format!(
        "verb {VERB:?} on resource {RESOURCE:?} of group {GROUP:?} in namespace {namespace:?}"
    );
    let (code, message) = match authorizer.granted(&req, &namespace).await {
        Ok((true, _)) => return None,
        Ok((false, reason)) => (
            403,
            format!(
                "{why}; that needs the permission {permission}, which user {requester:?} does not have{}; set the user id to {requester:?} (or leave it out), or ask an administrator for a Role granting {VERB:?} on {RESOURCE} in {namespace:?}",
                reason.map(|r| format!(" ({r})")).unwrap_or_default()
            ),
        ),
        Err(e) => (
            503,
            format!(
                "{why}; that needs the permission {permission}, and it could not be checked ({e}), so the request is refused; nothing was changed: retry in a few seconds"
            ),
        ),
    };
    Some((req, code, message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use booking_shared::api::BookingSpec;

    fn booking(user: &str, end: &str, creator: Option<&str>) -> Booking {
        let mut b = Booking::new(
            "b",
            BookingSpec {
                resource_name: "ec2.web".into(),
                start_at: "2031-01-10T10:00:00Z".into(),
                end_at: end.into(),
                user_id: user.into(),
                notifications: vec![],
            },
        );
        if let Some(c) = creator {
            b.metadata.annotations = Some(
                [(validation::REQUESTED_BY_ANNOTATION.to_owned(), c.to_owned())]
                    .into_iter()
                    .collect(),
            );
        }
        b
    }

    #[test]
    fn the_permission_is_needed_to_book_for_or_change_the_bookings_of_others() {
        let end = "2031-01-10T11:00:00Z";
        let later = "2031-01-10T12:00:00Z";
        let create = Operation::Create;
        let update = Operation::Update;
        // Booking for oneself needs nothing; for someone else it does.
        assert_eq!(
            needed(&create, "ann", &booking("ann", end, None), None),
            None
        );
        let why = needed(&create, "ann", &booking("cd39ad8bc3", end, None), None).unwrap();
        assert!(
            why.contains("\"cd39ad8bc3\"") && why.contains("\"ann\""),
            "{why}"
        );
        // The creator changes their own booking freely.
        let own = booking("ann", end, Some("ann"));
        assert_eq!(
            needed(
                &update,
                "ann",
                &booking("ann", later, Some("ann")),
                Some(&own)
            ),
            None
        );
        // Someone else changing end_at needs it; changing only a notification does not.
        let why = needed(
            &update,
            "bob",
            &booking("ann", later, Some("ann")),
            Some(&own),
        )
        .unwrap();
        assert!(
            why.contains("created by \"ann\"") && why.contains("spec.end_at"),
            "{why}"
        );
        assert_eq!(
            needed(
                &update,
                "bob",
                &booking("ann", end, Some("ann")),
                Some(&own)
            ),
            None
        );
        // Giving one's booking to someone else needs it.
        let why = needed(
            &update,
            "ann",
            &booking("bob", end, Some("ann")),
            Some(&own),
        )
        .unwrap();
        assert!(why.contains("spec.user_id changes to \"bob\""), "{why}");
        // A scheduler's template is checked on create and when its user_id changes.
        let mut s = BookingScheduler::new(
            "s",
            booking_shared::api::BookingSchedulerSpec {
                schedule: "0 3 * * *".into(),
                duration: 20,
                booking_template: booking_shared::api::BookingTemplate {
                    resource_name: "ec2.web".into(),
                    user_id: "cd39ad8bc3".into(),
                    notifications: vec![],
                },
                ..Default::default()
            },
        );
        let why = needed_for_scheduler(&create, "ann", &s, None).unwrap();
        assert!(
            why.contains("spec.bookingTemplate.user_id is \"cd39ad8bc3\""),
            "{why}"
        );
        let old = s.clone();
        s.spec.duration = 30;
        assert_eq!(needed_for_scheduler(&update, "ann", &s, Some(&old)), None);
        s.spec.booking_template.user_id = "bob".into();
        assert!(needed_for_scheduler(&update, "ann", &s, Some(&old)).is_some());
        // Deletes are never judged here.
        assert_eq!(needed(&Operation::Delete, "bob", &own, Some(&own)), None);
    }
}
