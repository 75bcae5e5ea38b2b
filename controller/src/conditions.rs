//! Standard Kubernetes conditions (`type`, `status`, `reason`, `message`,
//! `lastTransitionTime`, `observedGeneration`), merged so that `lastTransitionTime` only moves
//! when `status` changes, as the API conventions require.

use booking_shared::time::to_kube_time;
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// A condition as a plan states it, before timestamps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CondSpec {
    /// `type`, e.g. `Ready`.
    pub type_: String,
    /// `status` True/False.
    pub status: bool,
    /// PascalCase `reason`.
    pub reason: String,
    /// Human-readable `message`.
    pub message: String,
}

impl CondSpec {
    /// A condition.
    pub fn new(type_: &str, status: bool, reason: &str, message: &str) -> Self {
        Self {
            type_: type_.to_owned(),
            status,
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }
}

/// The new condition list: `wanted` in order, keeping the previous `lastTransitionTime` of a
/// condition whose status did not change, `now` otherwise.
pub fn merge(
    previous: &[Condition],
    wanted: &[CondSpec],
    generation: Option<i64>,
    now: DateTime<Utc>,
) -> Vec<Condition> {
    wanted
        .iter()
        .map(|w| {
            let status = if w.status { "True" } else { "False" };
            let last = previous
                .iter()
                .find(|p| p.type_ == w.type_ && p.status == status)
                .map(|p| p.last_transition_time.clone())
                .unwrap_or_else(|| to_kube_time(now));
            Condition {
                type_: w.type_.clone(),
                status: status.to_owned(),
                reason: w.reason.clone(),
                message: w.message.clone(),
                last_transition_time: last,
                observed_generation: generation,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use booking_shared::time::kube_time;
    use chrono::TimeZone;

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let t0 = Utc.with_ymd_and_hms(2031, 1, 1, 0, 0, 0).unwrap();
        let t1 = t0 + chrono::Duration::minutes(5);
        let first = merge(
            &[],
            &[CondSpec::new("Ready", false, "Starting", "m")],
            Some(1),
            t0,
        );
        let same = merge(
            &first,
            &[CondSpec::new("Ready", false, "Starting", "m2")],
            Some(2),
            t1,
        );
        assert_eq!(kube_time(&same[0].last_transition_time), t0);
        assert_eq!(same[0].message, "m2");
        assert_eq!(same[0].observed_generation, Some(2));
        let flipped = merge(
            &same,
            &[CondSpec::new("Ready", true, "Running", "ok")],
            Some(2),
            t1,
        );
        assert_eq!(kube_time(&flipped[0].last_transition_time), t1);
        assert_eq!(flipped[0].status, "True");
    }
}
