//! API errors rendered as `metav1.Status`, with the reasons, codes and message shapes the real
//! API server uses (`k8s.io/apimachinery/pkg/api/errors`).

use serde_json::{Value, json};

/// One field-level cause of an `Invalid` error (`metav1.StatusCause`).
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    /// Machine-readable reason, e.g. `FieldValueRequired`.
    pub reason: String,
    /// The error body without the field, e.g. `Required value`.
    pub message: String,
    /// The dotted field path, e.g. `spec.type`.
    pub field: String,
}

impl Cause {
    /// A cause with the given reason, field and message body.
    pub fn new(reason: &str, field: &str, message: impl Into<String>) -> Self {
        Cause {
            reason: reason.to_string(),
            message: message.into(),
            field: field.to_string(),
        }
    }

    /// The cause as the real server prints it inside an aggregate: `field: body`.
    pub fn display(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// An error answered to the client as a `metav1.Status` body with an HTTP status code.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `metav1.StatusReason` (may be empty, as for some webhook denials).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// `details` of the status, if any.
    pub details: Option<Value>,
}

impl ApiError {
    /// A new error with the given code, reason and message.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, group: &str, kind: &str, name: &str) -> Self {
        let mut d = serde_json::Map::new();
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            d.insert("group".into(), json!(group));
        }
        d.insert("kind".into(), json!(kind));
        self.details = Some(Value::Object(d));
        self
    }

    /// `404 NotFound`: `<resource>.<group> "<name>" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", qualified(group, resource), name),
        )
        .with_details(group, resource, name)
    }

    /// `404 NotFound` for a path the server does not serve.
    pub fn path_not_found() -> Self {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_empty_details()
    }

    fn with_empty_details(mut self) -> Self {
        self.details = Some(json!({}));
        self
    }

    /// `409 AlreadyExists`.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", qualified(group, resource), name),
        )
        .with_details(group, resource, name)
    }

    /// `409 Conflict` for a stale resourceVersion or failed precondition.
    pub fn conflict(group: &str, resource: &str, name: &str, detail: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                qualified(group, resource),
                name,
                detail
            ),
        )
        .with_details(group, resource, name)
    }

    /// `409 Conflict` for the usual optimistic-concurrency failure.
    pub fn stale(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// `422 Invalid` with field causes: `Kind.group "name" is invalid: cause[, cause]`.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let qualified_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let body = if causes.len() == 1 {
            causes[0].display()
        } else {
            format!(
                "[{}]",
                causes
                    .iter()
                    .map(Cause::display)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let mut err = ApiError::new(
            422,
            "Invalid",
            format!("{qualified_kind} \"{name}\" is invalid: {body}"),
        )
        .with_details(group, kind, name);
        if let Some(Value::Object(d)) = err.details.as_mut() {
            d.insert(
                "causes".into(),
                Value::Array(
                    causes
                        .iter()
                        .map(
                            |c| json!({"reason": c.reason, "message": c.message, "field": c.field}),
                        )
                        .collect(),
                ),
            );
        }
        err
    }

    /// `400 BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    /// `405 MethodNotAllowed`.
    pub fn method_not_allowed() -> Self {
        ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// `415 UnsupportedMediaType`, listing the media types the endpoint accepts.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    /// `500 InternalError`: `Internal error occurred: <message>`.
    pub fn internal(message: impl AsRef<str>) -> Self {
        let msg = message.as_ref();
        let mut e = ApiError::new(
            500,
            "InternalError",
            format!("Internal error occurred: {msg}"),
        );
        e.details = Some(json!({"causes": [{"message": msg}]}));
        e
    }

    /// `401 Unauthorized`.
    pub fn unauthorized() -> Self {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    /// `403 Forbidden`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(403, "Forbidden", message)
    }

    /// `410 Expired` for a watch or list from a compacted resourceVersion.
    pub fn gone(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        });
        if !self.reason.is_empty() {
            v["reason"] = json!(self.reason);
        }
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

/// `resource.group`, or `resource` for the core group.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

/// A `Success` status, as answered by some deletes.
pub fn success_status(group: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": group, "kind": kind, "uid": uid}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_message_shapes() {
        let one = ApiError::invalid(
            "manager.kotaico.de",
            "Booking",
            "x",
            vec![Cause::new(
                "FieldValueNotSupported",
                "spec.type",
                "Unsupported value: \"gce\": supported values: \"ec2\", \"rds\"",
            )],
        );
        assert_eq!(
            one.message,
            "Booking.manager.kotaico.de \"x\" is invalid: spec.type: Unsupported value: \"gce\": supported values: \"ec2\", \"rds\""
        );
        let s = one.to_status();
        assert_eq!(s["code"], 422);
        assert_eq!(s["details"]["causes"][0]["field"], "spec.type");
        let two = ApiError::invalid(
            "",
            "ConfigMap",
            "c",
            vec![
                Cause::new("FieldValueRequired", "a", "Required value"),
                Cause::new("FieldValueRequired", "b", "Required value"),
            ],
        );
        assert_eq!(
            two.message,
            "ConfigMap \"c\" is invalid: [a: Required value, b: Required value]"
        );
    }

    #[test]
    fn not_found_and_conflict() {
        let e = ApiError::not_found("", "configmaps", "c");
        assert_eq!(e.message, "configmaps \"c\" not found");
        assert_eq!(e.to_status()["reason"], "NotFound");
        let e = ApiError::stale("coordination.k8s.io", "leases", "l");
        assert!(e.message.starts_with(
            "Operation cannot be fulfilled on leases.coordination.k8s.io \"l\": the object has been modified"
        ));
        assert_eq!(e.code, 409);
    }
}
