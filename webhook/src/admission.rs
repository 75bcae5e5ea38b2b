//! Admission handlers: plumbing from an AdmissionReview to the pure rules of
//! [`booking_shared::validation`] and back.
//!
//! - `/validate` admits or denies CREATE and UPDATE of the four kinds. DELETE and CONNECT are
//!   always allowed, requests for a subresource (`status`) are always allowed, and an UPDATE
//!   that leaves `spec` unchanged (metadata, finalizers, or a status written by the controller)
//!   is never denied: updates are judged on their spec. Bookings are also checked against the
//!   overlap index; a booking admitted by a real (not dry-run) request reserves its slot until
//!   the watch delivers it, so that two requests in quick succession cannot both win.
//!   Server-side dry-run requests get the same answer and reserve nothing.
//! - `/mutate` fills absent fields ([`booking_shared::validation`]'s `default_*` functions) and
//!   answers with an RFC 6902 patch, or with no patch at all when nothing changes.
//! - Input that is not a v1 AdmissionReview, or a kind this webhook does not serve, is answered
//!   with an AdmissionReview whose result is an error (code 400): never a panic, never a 500.
//!
//! The controller's arbitration (the earlier-created booking holds the Resource) remains the
//! final guard against races the index cannot see, such as two webhook replicas admitting
//! overlapping bookings at the same instant.

use base64::{Engine as _, engine::general_purpose::STANDARD as BASE64};
use booking_shared::{
    api::{
        Booking, BookingCalendar, BookingScheduler, BookingSpec, GROUP, Resource, ResourceMonitor,
    },
    claims,
    overlap::IndexedBooking,
    time::Slot,
    validation::{self, Invalid, Outcome},
};
use kube::core::{
    DynamicObject, GroupVersionKind, Status,
    admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation},
};
use serde::{Serialize, de::DeserializeOwned};

use crate::state::State;

/// The two admission endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /validate`: the validating webhook.
    Validate,
    /// `POST /mutate`: the mutating (defaulting) webhook.
    Mutate,
}

impl Endpoint {
    /// The metric label and path segment.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Validate => "validate",
            Self::Mutate => "mutate",
        }
    }
}

/// The kinds this webhook serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServedKind {
    /// `Booking`.
    Booking,
    /// `BookingScheduler`.
    BookingScheduler,
    /// `Resource`.
    Resource,
    /// `ResourceMonitor`.
    ResourceMonitor,
    /// `BookingCalendar`.
    BookingCalendar,
}

impl ServedKind {
    /// The kind of a request, if it is one of ours.
    pub fn of(gvk: &GroupVersionKind) -> Option<Self> {
        if gvk.group != GROUP {
            return None;
        }
        match gvk.kind.as_str() {
            "Booking" => Some(Self::Booking),
            "BookingScheduler" => Some(Self::BookingScheduler),
            "Resource" => Some(Self::Resource),
            "ResourceMonitor" => Some(Self::ResourceMonitor),
            "BookingCalendar" => Some(Self::BookingCalendar),
            _ => None,
        }
    }
}

/// Outcome class of one review, for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReviewResult {
    /// Admitted (possibly with warnings or a patch).
    Allowed,
    /// Denied by a rule.
    Denied,
    /// The review could not be judged (malformed input, unknown kind).
    Error,
}

impl ReviewResult {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::Error => "error",
        }
    }
}

/// The answer to one AdmissionReview, with labels for metrics.
#[derive(Debug)]
pub struct Decision {
    answer: Answer,
    /// The request's kind (`unknown` when unreadable).
    pub kind: String,
    /// The request's operation (`UNKNOWN` when unreadable).
    pub operation: &'static str,
    /// Allowed, denied or error.
    pub verdict: ReviewResult,
    /// The RFC 6902 patch of a mutating answer, when something changes.
    pub patch: Option<json_patch::Patch>,
}

/// The AdmissionReview to send back: as kube's type, or already encoded (the allowed answers of
/// the borrowed path, from [`AllowedTemplate`]).
#[derive(Debug)]
enum Answer {
    Review(Box<AdmissionReview<DynamicObject>>),
    Encoded { uid: String, json: Vec<u8> },
}

impl Decision {
    fn of_review(
        review: AdmissionReview<DynamicObject>,
        kind: String,
        operation: &'static str,
        verdict: ReviewResult,
        patch: Option<json_patch::Patch>,
    ) -> Self {
        Self {
            answer: Answer::Review(Box::new(review)),
            kind,
            operation,
            verdict,
            patch,
        }
    }

    /// An allowed answer to the request `uid`, with `warnings`, written from the template.
    fn allowed(uid: &str, kind: &str, operation: &'static str, warnings: &[String]) -> Self {
        Self {
            answer: Answer::Encoded {
                uid: uid.to_owned(),
                json: AllowedTemplate::get().encode(uid, warnings),
            },
            kind: kind.to_owned(),
            operation,
            verdict: ReviewResult::Allowed,
            patch: None,
        }
    }

    /// The uid of the request answered (empty when unreadable).
    pub fn uid(&self) -> &str {
        match &self.answer {
            Answer::Review(review) => review
                .response
                .as_ref()
                .map(|r| r.uid.as_str())
                .unwrap_or_default(),
            Answer::Encoded { uid, .. } => uid,
        }
    }

    /// The JSON body of the answer. The patch is written as the API server's Go types expect
    /// a `[]byte`: base64 of the JSON patch, with `patchType: JSONPatch`.
    pub fn to_json(&self) -> Vec<u8> {
        let review = match &self.answer {
            Answer::Encoded { json, .. } => return json.clone(),
            Answer::Review(review) => review,
        };
        if self.patch.is_none()
            && let Ok(bytes) = serde_json::to_vec(review)
        {
            return bytes;
        }
        let mut value = serde_json::to_value(review).unwrap_or_else(|e| {
            serde_json::json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": "", "allowed": false,
                    "status": {"code": 400, "message": format!("the answer could not be encoded: {e}")}},
            })
        });
        if let (Some(patch), Some(response)) = (&self.patch, value.get_mut("response")) {
            let bytes = serde_json::to_vec(patch).unwrap_or_default();
            response["patch"] = serde_json::Value::String(BASE64.encode(bytes));
            response["patchType"] = serde_json::Value::String("JSONPatch".to_owned());
        }
        serde_json::to_vec(&value).unwrap_or_default()
    }

    /// An error answer to input that is not a readable AdmissionReview.
    pub fn malformed(message: impl Into<String>) -> Self {
        let mut response = AdmissionResponse::invalid(message.into());
        response.result = Status::failure(&response.result.message, "BadRequest").with_code(400);
        Self::of_review(
            response.into_review(),
            "unknown".to_owned(),
            "UNKNOWN",
            ReviewResult::Error,
            None,
        )
    }
}

/// The allowed answer of a v1 review as kube encodes it (`AdmissionResponse::from(request)`,
/// allowed, with warnings when there are any), split around the uid and the warnings, so that
/// an answer is three copies and the encoding of two strings.
struct AllowedTemplate {
    /// Before and after the uid's JSON string, without warnings.
    plain: (Vec<u8>, Vec<u8>),
    /// Before the uid, between the uid and the warnings' elements, after them.
    warned: (Vec<u8>, Vec<u8>, Vec<u8>),
}

impl AllowedTemplate {
    fn get() -> &'static Self {
        static TEMPLATE: std::sync::OnceLock<AllowedTemplate> = std::sync::OnceLock::new();
        TEMPLATE.get_or_init(|| {
            let review = |warnings: Option<Vec<String>>| {
                let mut response = AdmissionResponse::invalid(String::new());
                response.types = kube::core::TypeMeta {
                    api_version: "admission.k8s.io/v1".to_owned(),
                    kind: "AdmissionReview".to_owned(),
                };
                response.allowed = true;
                response.result = Status::default();
                response.warnings = warnings;
                serde_json::to_vec(&response.into_review()).unwrap_or_default()
            };
            let split = |bytes: &[u8], at: &[u8]| -> (Vec<u8>, Vec<u8>) {
                let i = bytes
                    .windows(at.len())
                    .position(|w| w == at)
                    .unwrap_or(bytes.len());
                let j = (i + at.len()).min(bytes.len());
                (bytes[..i].to_vec(), bytes[j..].to_vec())
            };
            const UID: &[u8] = br#""uid":"""#;
            let (before, after) = split(&review(None), UID);
            let plain = ([before, br#""uid":"#.to_vec()].concat(), after);
            let (before, rest) = split(&review(Some(Vec::new())), UID);
            let (middle, end) = split(&rest, br#""warnings":[]"#);
            let warned = (
                [before, br#""uid":"#.to_vec()].concat(),
                [middle, br#""warnings":["#.to_vec()].concat(),
                [b"]".to_vec(), end].concat(),
            );
            AllowedTemplate { plain, warned }
        })
    }

    fn encode(&self, uid: &str, warnings: &[String]) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        let string = |out: &mut Vec<u8>, s: &str| {
            // Writing a string into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *out, s);
        };
        if warnings.is_empty() {
            out.extend_from_slice(&self.plain.0);
            string(&mut out, uid);
            out.extend_from_slice(&self.plain.1);
        } else {
            out.extend_from_slice(&self.warned.0);
            string(&mut out, uid);
            out.extend_from_slice(&self.warned.1);
            for (i, w) in warnings.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(&mut out, w);
            }
            out.extend_from_slice(&self.warned.2);
        }
        out
    }
}

fn operation_str(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// The refusal of the permission check of `--restrict-user-id` (see [`crate::authorize`]), which
/// the server makes before [`admit`] (so before any slot is reserved); `None` when the check is
/// off or passes. Never panics on any input.
pub async fn authorization_refusal(
    state: &State,
    endpoint: Endpoint,
    body: &[u8],
) -> Option<Decision> {
    if endpoint == Endpoint::Validate
        && let Some(authorizer) = state.authorizer.as_ref()
        && let Some((req, code, message)) = crate::authorize::check(authorizer, body).await
    {
        let (reason, verdict) = if code == 403 {
            ("Forbidden", ReviewResult::Denied)
        } else {
            ("ServiceUnavailable", ReviewResult::Error)
        };
        return Some(Decision::of_review(
            refused(&req, code, reason, &message).into_review(),
            req.kind.kind.clone(),
            operation_str(&req.operation),
            verdict,
            None,
        ));
    }
    None
}

/// Judges one AdmissionReview body by the rules. Never panics on any input.
///
/// A well-formed `/validate` review whose objects read as their typed kind (every review the
/// API server sends for a valid object) is parsed once, straight into the typed request; any
/// other input takes [`admit_general`], which says what is wrong with it. Both give the same
/// answer to the same review.
pub fn admit(state: &State, endpoint: Endpoint, body: &[u8]) -> Decision {
    if endpoint == Endpoint::Validate
        && let Some(decision) = validate_fast(state, body)
    {
        return decision;
    }
    admit_general(state, endpoint, body)
}

/// The fast paths of `/validate` alone: a Booking review read in one pass borrowing from the
/// body ([`borrowed`]), else a review of any served kind read into its typed request ([`fast`]);
/// `None` for any review they leave to [`admit_general`] (not v1, not one of our kinds, no
/// object, an object that does not read as its kind).
pub fn validate_fast(state: &State, body: &[u8]) -> Option<Decision> {
    borrowed::validate(state, body).or_else(|| fast::validate(state, body))
}

/// Judges one AdmissionReview body through the general representation (a dynamic object,
/// then each kind's typed object): slower, but able to name what does not read. Never panics.
pub fn admit_general(state: &State, endpoint: Endpoint, body: &[u8]) -> Decision {
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => {
            return Decision::malformed(format!(
                "the request body is not an AdmissionReview ({e}); send an admission.k8s.io/v1 AdmissionReview as JSON"
            ));
        }
    };
    if review.types.api_version != "admission.k8s.io/v1" || review.types.kind != "AdmissionReview" {
        return Decision::malformed(format!(
            "apiVersion {:?} kind {:?} is not supported; this webhook speaks admission.k8s.io/v1 AdmissionReview (set admissionReviewVersions: [v1])",
            review.types.api_version, review.types.kind
        ));
    }
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(_) => {
            return Decision::malformed(
                "the AdmissionReview has no request; the API server sends one in every review",
            );
        }
    };
    let operation = operation_str(&request.operation);
    let Some(kind) = ServedKind::of(&request.kind) else {
        let message = format!(
            "kind {:?} of group {:?} is not served by this webhook; it serves Booking, BookingScheduler, BookingCalendar, Resource and ResourceMonitor of {GROUP}: fix the rules of the webhook configuration",
            request.kind.kind, request.kind.group
        );
        return Decision::of_review(
            refused(&request, 400, "BadRequest", &message).into_review(),
            request.kind.kind.clone(),
            operation,
            ReviewResult::Error,
            None,
        );
    };
    let ((response, verdict), patch) = match endpoint {
        Endpoint::Validate => (validate(state, kind, &request), None),
        Endpoint::Mutate => mutate(kind, &request),
    };
    Decision::of_review(
        response.into_review(),
        request.kind.kind.clone(),
        operation,
        verdict,
        patch,
    )
}

// === validate =================================================================================

fn validate(
    state: &State,
    kind: ServedKind,
    req: &AdmissionRequest<DynamicObject>,
) -> (AdmissionResponse, ReviewResult) {
    if exempt(req, |old, new| {
        old.data.get("spec") == new.data.get("spec") && same_requester(old, new)
    }) {
        return (AdmissionResponse::from(req), ReviewResult::Allowed);
    }
    let Some(object) = req.object.as_ref() else {
        return error(
            req,
            "the request has no object; CREATE and UPDATE reviews carry the object",
        );
    };
    if kind == ServedKind::Booking && !state.bookings_synced() {
        return unavailable(
            req,
            "the webhook is still loading the cluster's bookings (its overlap index has not \
             synced since it started, or its watch of bookings has failed for too long and it is \
             listing them again), so it cannot check spec.start_at/spec.end_at against them; \
             nothing was changed: retry in a few seconds",
        );
    }
    let now = state.now();
    let info = RequestInfo::of(req);
    let outcome = match kind {
        ServedKind::Booking => typed::<Booking>(object, "Booking").and_then(|b| {
            let old = req
                .old_object
                .as_ref()
                .and_then(|o| typed::<Booking>(o, "Booking").ok());
            validate_booking(state, &info, &b, old.as_ref(), now)
        }),
        ServedKind::BookingScheduler => typed::<BookingScheduler>(object, "BookingScheduler")
            .and_then(|s| validation::validate_booking_scheduler(&s.spec, &state.policy, now)),
        ServedKind::Resource => typed::<Resource>(object, "Resource").and_then(|r| {
            let old = req
                .old_object
                .as_ref()
                .and_then(|o| typed::<Resource>(o, "Resource").ok());
            validate_resource(state, &info, &r, old.as_ref())
        }),
        ServedKind::ResourceMonitor => typed::<ResourceMonitor>(object, "ResourceMonitor")
            .and_then(|m| validation::validate_resource_monitor(&m.spec)),
        ServedKind::BookingCalendar => typed::<BookingCalendar>(object, "BookingCalendar")
            .and_then(|c| validation::validate_booking_calendar(&c.spec)),
    };
    answer(req, outcome)
}

/// The one rule of what is not judged: anything but a CREATE or UPDATE of the object itself (a
/// subresource such as `status` is never judged), and an UPDATE that leaves the spec as it was
/// (`same_spec`) or marks the object for deletion: nothing a rule reads has changed, and an
/// object must always be able to go away. A CREATE or UPDATE without its object is judged (and
/// refused by the caller).
fn exempt<K: kube::Resource>(
    req: &AdmissionRequest<K>,
    same_spec: impl Fn(&K, &K) -> bool,
) -> bool {
    if !matches!(req.operation, Operation::Create | Operation::Update) || req.sub_resource.is_some()
    {
        return true;
    }
    let Some(object) = req.object.as_ref() else {
        return false;
    };
    req.operation == Operation::Update
        && (req
            .old_object
            .as_ref()
            .is_some_and(|old| same_spec(old, object))
            || object.meta().deletion_timestamp.is_some())
}

/// What the rules read from a request besides its object.
struct RequestInfo<'a> {
    namespace: Option<&'a str>,
    name: &'a str,
    dry_run: bool,
    /// The authenticated requester (`userInfo.username`).
    user: &'a str,
    /// Whether the request is a CREATE.
    create: bool,
}

impl<'a> RequestInfo<'a> {
    fn of<K: kube::Resource>(req: &'a AdmissionRequest<K>) -> Self {
        Self {
            namespace: req.namespace.as_deref(),
            name: &req.name,
            dry_run: req.dry_run,
            user: req.user_info.username.as_deref().unwrap_or_default(),
            create: req.operation == Operation::Create,
        }
    }
}

/// The rule of the requested-by annotation (see [`validation::validate_requested_by`]), from
/// the annotation of the object and of the old object (`None` when absent, or when there is no
/// old object).
fn validate_requester(
    req: &RequestInfo<'_>,
    new: Option<&str>,
    old: Option<&str>,
) -> Result<(), Invalid> {
    let old = (!req.create).then_some(old);
    validation::validate_requested_by(new, old, req.user)
}

/// A typed Booking's rules: the requested-by annotation, then [`validate_booking_parts`].
fn validate_booking(
    state: &State,
    info: &RequestInfo<'_>,
    b: &Booking,
    old: Option<&Booking>,
    now: chrono::DateTime<chrono::Utc>,
) -> Outcome {
    validate_requester(
        info,
        validation::requested_by(&b.metadata),
        old.and_then(|o| validation::requested_by(&o.metadata)),
    )?;
    validate_booking_parts(
        state,
        info,
        &b.spec,
        b.metadata.namespace.as_deref(),
        b.metadata.name.as_deref(),
        now,
    )
}

/// Whether an UPDATE keeps the requested-by annotation as it was (part of what [`exempt`]
/// compares besides the spec).
fn same_requester<K: kube::Resource>(old: &K, new: &K) -> bool {
    validation::requested_by(old.meta()) == validation::requested_by(new.meta())
}

/// The answer of the borrowed path to a Booking request `uid` judged by the rules: an allowed
/// one from the template, a denial as [`answer`] words it.
fn answer_borrowed(uid: &str, kind: &str, operation: &'static str, outcome: Outcome) -> Decision {
    match outcome {
        Ok(warnings) => Decision::allowed(uid, kind, operation, &warnings),
        Err(invalid) => {
            let mut response = AdmissionResponse::invalid(String::new());
            response.types = kube::core::TypeMeta {
                api_version: "admission.k8s.io/v1".to_owned(),
                kind: "AdmissionReview".to_owned(),
            };
            response.uid = uid.to_owned();
            response.allowed = false;
            response.result = Status::failure(&invalid.to_string(), "Forbidden").with_code(403);
            Decision::of_review(
                response.into_review(),
                kind.to_owned(),
                operation,
                ReviewResult::Denied,
                None,
            )
        }
    }
}

/// The response to a request judged by the rules.
fn answer<K: kube::Resource>(
    req: &AdmissionRequest<K>,
    outcome: Outcome,
) -> (AdmissionResponse, ReviewResult) {
    match outcome {
        Ok(warnings) => {
            let mut response = AdmissionResponse::from(req);
            if !warnings.is_empty() {
                response.warnings = Some(warnings);
            }
            (response, ReviewResult::Allowed)
        }
        Err(invalid) => {
            // 403 Forbidden, as the API server reports a webhook denial without a code.
            let response = refused(req, 403, "Forbidden", &invalid.to_string());
            (response, ReviewResult::Denied)
        }
    }
}

/// A Booking's own rules, then its overlaps with other bookings, then the reservation of its
/// slot (real requests only) and the missing-Resource warning. `namespace` and `name` are the
/// object's (the request's when absent).
fn validate_booking_parts(
    state: &State,
    req: &RequestInfo<'_>,
    spec: &BookingSpec,
    namespace: Option<&str>,
    name: Option<&str>,
    now: chrono::DateTime<chrono::Utc>,
) -> Outcome {
    let mut warnings = validation::validate_booking(spec, &state.policy, now)?;
    let namespace = req.namespace.or(namespace).unwrap_or_default();
    let name = name.unwrap_or(req.name);
    let slot = Slot::of_booking(spec).map_err(|e| {
        Invalid(vec![validation::Violation {
            field: "spec.end_at".to_owned(),
            message: e.to_string(),
        }])
    })?;
    let check = |index: &booking_shared::overlap::OverlapIndex| -> Result<(), Invalid> {
        let conflicts = index.conflicts(namespace, name, &spec.resource_name, slot, now);
        if conflicts.is_empty() {
            Ok(())
        } else {
            Err(Invalid(
                conflicts
                    .into_iter()
                    .map(|other| validation::overlap_violation(spec, other))
                    .collect(),
            ))
        }
    };
    if req.dry_run || name.is_empty() {
        check(&state.read_index())?;
    } else {
        // Check and reserve under one write lock, so that two concurrent requests cannot both
        // see a free slot.
        let mut index = state.write_index();
        check(&index)?;
        index.purge_expired(now);
        reservation_room(state, &index, req.user)?;
        let entry = IndexedBooking {
            namespace: namespace.into(),
            name: name.into(),
            resource_name: spec.resource_name.as_str().into(),
            user_id: spec.user_id.as_str().into(),
            start_at: spec.start_at.as_str().into(),
            end_at: spec.end_at.as_str().into(),
            slot,
            deleting: false,
        };
        index.reserve(entry, now + state.reservation_ttl, req.user);
    }
    if state.resource_exists(namespace, &spec.resource_name) == Some(false) {
        warnings.push(validation::missing_resource_warning(
            namespace,
            &spec.resource_name,
        ));
    }
    Ok(warnings)
}

/// Whether `requester` may reserve one more slot (see [`State::max_reservations_per_requester`]):
/// reservations are made only once every rule has passed, and end when the watch delivers the
/// booking, when it is deleted, or after the reservation TTL.
fn reservation_room(
    state: &State,
    index: &booking_shared::overlap::OverlapIndex,
    requester: &str,
) -> Result<(), Invalid> {
    let held = index.reservations_by(requester);
    if held < state.max_reservations_per_requester {
        return Ok(());
    }
    state.metrics.reject("reservation_limit");
    Err(Invalid(vec![validation::Violation {
        field: "metadata.name".to_owned(),
        message: format!(
            "{requester:?} has {held} bookings admitted in the last {} s that the API server has not stored yet (at most {} per requester, --max-reservations-per-requester); nothing was changed: retry in a few seconds",
            state.reservation_ttl.num_seconds(),
            state.max_reservations_per_requester
        ),
    }]))
}

/// A Resource's own rules, then its claim: a CREATE, or an UPDATE that changes the group, of a
/// Resource whose AWS group another Resource of the cluster already claims is denied, naming
/// the claimer (see [`booking_shared::claims`]). The webhook does not know the controller's
/// region: an absent `spec.region` matches only another absent one here (the controller, which
/// knows it, enforces the rest).
fn validate_resource(
    state: &State,
    req: &RequestInfo<'_>,
    r: &Resource,
    old: Option<&Resource>,
) -> Outcome {
    let warnings = validation::validate_resource(&r.spec)?;
    let Some(store) = state.resources.as_ref() else {
        return Ok(warnings);
    };
    let mut me = r.clone();
    if me.metadata.namespace.is_none() {
        me.metadata.namespace = req.namespace.map(str::to_owned);
    }
    if me.metadata.name.as_deref().is_none_or(str::is_empty) {
        me.metadata.name = Some(req.name.to_owned());
    }
    let Some(group) = claims::group_of(&me, None) else {
        return Ok(warnings);
    };
    if old.is_some_and(|o| claims::group_of(o, None).as_ref() == Some(&group)) {
        // The group is unchanged: an update never loses a claim it was admitted with.
        return Ok(warnings);
    }
    let all = store.state();
    match claims::other_claimer(&me, all.iter().map(|a| a.as_ref()), None) {
        Some(claimer) => Err(Invalid(vec![validation::Violation {
            field: "spec.tag".to_owned(),
            message: format!("spec.tag: {}", claims::claimed_message(&group, claimer)),
        }])),
        None => Ok(warnings),
    }
}

// === mutate ===================================================================================

fn mutate(
    kind: ServedKind,
    req: &AdmissionRequest<DynamicObject>,
) -> ((AdmissionResponse, ReviewResult), Option<json_patch::Patch>) {
    let allow = || ((AdmissionResponse::from(req), ReviewResult::Allowed), None);
    if !matches!(req.operation, Operation::Create | Operation::Update) || req.sub_resource.is_some()
    {
        return allow();
    }
    let Some(object) = req.object.as_ref() else {
        return (
            error(
                req,
                "the request has no object; CREATE and UPDATE reviews carry the object",
            ),
            None,
        );
    };
    if object.metadata.deletion_timestamp.is_some() {
        return allow();
    }
    let user = req.user_info.username.as_deref().unwrap_or_default();
    let patch = match kind {
        ServedKind::Booking => defaulted::<Booking>(object, req.old_object.as_ref(), |b, old| {
            validation::default_booking(b, old, user)
        }),
        ServedKind::BookingScheduler => {
            defaulted::<BookingScheduler>(object, req.old_object.as_ref(), |s, old| {
                validation::default_booking_scheduler(s, old, user)
            })
        }
        ServedKind::Resource => {
            defaulted::<Resource>(object, None, |r, _| validation::default_resource(r))
        }
        ServedKind::ResourceMonitor => defaulted::<ResourceMonitor>(object, None, |m, _| {
            validation::default_resource_monitor(m)
        }),
        // A calendar has no defaults.
        ServedKind::BookingCalendar => None,
    };
    ((AdmissionResponse::from(req), ReviewResult::Allowed), patch)
}

/// The RFC 6902 patch that fills the defaults of `object`, or `None` when nothing changes or
/// the object does not read as `K` (the API server's schema validation then reports it, with
/// its own message, after the mutating webhooks).
fn defaulted<K: Serialize + DeserializeOwned + Clone>(
    object: &DynamicObject,
    old: Option<&DynamicObject>,
    fill: impl FnOnce(&mut K, Option<&K>) -> Vec<validation::Defaulted>,
) -> Option<json_patch::Patch> {
    let before: K = typed(object, "").ok()?;
    let old: Option<K> = old.and_then(|o| typed(o, "").ok());
    let mut after = before.clone();
    if fill(&mut after, old.as_ref()).is_empty() {
        return None;
    }
    let patch = json_patch::diff(
        &serde_json::to_value(&before).ok()?,
        &serde_json::to_value(&after).ok()?,
    );
    (!patch.0.is_empty()).then_some(patch)
}

// === fast path ================================================================================

mod borrowed;
mod fast;

// === helpers ==================================================================================

/// Reads a request's object as the typed kind; a mismatch is a violation naming the field.
fn typed<K: DeserializeOwned>(object: &DynamicObject, kind: &str) -> Result<K, Invalid> {
    let value = serde_json::to_value(object).map_err(|e| {
        Invalid(vec![validation::Violation {
            field: String::new(),
            message: format!("the object could not be read: {e}"),
        }])
    })?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        Invalid(vec![validation::Violation {
            message: format!(
                "{field}: the object is not a valid {kind} ({}); fix {field} and apply again",
                e.inner()
            ),
            field,
        }])
    })
}

/// 503 Service Unavailable: the request cannot be judged yet; the client may retry.
fn unavailable(
    req: &AdmissionRequest<DynamicObject>,
    message: &str,
) -> (AdmissionResponse, ReviewResult) {
    (
        refused(req, 503, "ServiceUnavailable", message),
        ReviewResult::Error,
    )
}

/// 400 Bad Request: the review cannot be judged as sent.
fn error(
    req: &AdmissionRequest<DynamicObject>,
    message: &str,
) -> (AdmissionResponse, ReviewResult) {
    (
        refused(req, 400, "BadRequest", message),
        ReviewResult::Error,
    )
}

/// The refusal of `req` with HTTP `code`, the Kubernetes `reason` and `message`.
fn refused<K: kube::Resource>(
    req: &AdmissionRequest<K>,
    code: u16,
    reason: &str,
    message: &str,
) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(req);
    response.allowed = false;
    response.result = Status::failure(message, reason).with_code(code);
    response
}
