//! Leader election through a coordination.k8s.io/v1 Lease, as client-go does it: the holder
//! renews `renewTime` every renew interval; another replica takes the Lease over once
//! `renewTime + leaseDurationSeconds` has passed. Writes use the Lease's `resourceVersion`, so
//! two replicas can never both win. The pure rule [`may_acquire`] decides; the loop does.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{Api, ObjectMeta};
use tokio::sync::watch;

use booking_shared::time::{kube_time, to_kube_time};

/// Lease settings.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This replica's identity.
    pub identity: String,
    /// Validity without renewal.
    pub duration: Duration,
    /// Renewal period.
    pub renew: Duration,
}

/// Whether `identity` may take or keep `spec` at `now`: the Lease is free, already ours, or
/// expired.
pub fn may_acquire(spec: Option<&LeaseSpec>, identity: &str, now: DateTime<Utc>) -> bool {
    let Some(spec) = spec else { return true };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() || holder == identity {
        return true;
    }
    let Some(renewed) = spec.renew_time.as_ref() else {
        return true;
    };
    let duration = chrono::Duration::seconds(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    kube_time(&Time(renewed.0)) + duration < now
}

fn micro(t: DateTime<Utc>) -> MicroTime {
    MicroTime(to_kube_time(t).0)
}

/// Tries once to take or renew the Lease; returns whether this replica holds it now.
pub async fn try_acquire(api: &Api<Lease>, cfg: &LeaseConfig) -> Result<bool, kube::Error> {
    let now = Utc::now();
    let current = api.get_opt(&cfg.name).await?;
    let spec_for = |prev: Option<&LeaseSpec>| {
        let ours = prev.and_then(|p| p.holder_identity.as_deref()) == Some(cfg.identity.as_str());
        let transitions = prev.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(cfg.identity.clone()),
            lease_duration_seconds: Some(i32::try_from(cfg.duration.as_secs()).unwrap_or(i32::MAX)),
            acquire_time: if ours {
                prev.and_then(|p| p.acquire_time.clone())
            } else {
                Some(micro(now))
            },
            renew_time: Some(micro(now)),
            lease_transitions: Some(if ours || prev.is_none() {
                transitions
            } else {
                transitions + 1
            }),
            ..Default::default()
        }
    };
    match current {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(spec_for(None)),
            };
            match api.create(&crate::context::post_params(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(mut lease) => {
            if !may_acquire(lease.spec.as_ref(), &cfg.identity, now) {
                return Ok(false);
            }
            lease.spec = Some(spec_for(lease.spec.as_ref()));
            // `resourceVersion` is kept: a concurrent writer makes this a 409.
            match api
                .replace(&cfg.name, &crate::context::post_params(), &lease)
                .await
            {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

/// Waits until this replica holds the Lease (or `shutdown` fires: returns false).
pub async fn acquire(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    loop {
        match try_acquire(api, cfg).await {
            Ok(true) => return true,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "leader election: lease request failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(cfg.renew) => {}
            _ = shutdown.changed() => return false,
        }
    }
}

/// Renews the Lease until `release` fires (then releases it for a fast failover: the caller
/// fires it once it has stopped acting) or until it cannot be renewed within its duration (then
/// returns `Err`: the caller must stop acting).
pub async fn keep(
    api: Api<Lease>,
    cfg: LeaseConfig,
    mut release: watch::Receiver<bool>,
) -> Result<(), String> {
    let mut last_renewal = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(cfg.renew) => {}
            changed = release.changed() => {
                // Released only when told so; a caller gone without a word (it stopped waiting
                // for its reconciles) leaves the Lease to expire.
                if changed.is_ok() && *release.borrow() {
                    self::release(&api, &cfg).await;
                }
                return Ok(());
            }
        }
        match try_acquire(&api, &cfg).await {
            Ok(true) => last_renewal = tokio::time::Instant::now(),
            Ok(false) => return Err("another replica took the lease".into()),
            Err(e) => tracing::warn!(error = %e, "leader election: renewal failed"),
        }
        if last_renewal.elapsed() >= cfg.duration {
            return Err("the lease could not be renewed within its duration".into());
        }
    }
}

async fn release(api: &Api<Lease>, cfg: &LeaseConfig) {
    if let Ok(Some(mut lease)) = api.get_opt(&cfg.name).await
        && let Some(spec) = lease.spec.as_mut()
        && spec.holder_identity.as_deref() == Some(cfg.identity.as_str())
    {
        spec.holder_identity = None;
        spec.renew_time = None;
        if let Err(e) = api
            .replace(&cfg.name, &crate::context::post_params(), &lease)
            .await
        {
            tracing::warn!(error = %e, "could not release the lease");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn lease_rules() {
        let now = Utc.with_ymd_and_hms(2031, 1, 1, 0, 0, 30).unwrap();
        let spec = |holder: &str, renewed_secs_ago: i64| LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(micro(now - chrono::Duration::seconds(renewed_secs_ago))),
            ..Default::default()
        };
        assert!(may_acquire(None, "a", now));
        assert!(may_acquire(Some(&spec("a", 1)), "a", now), "own lease");
        assert!(!may_acquire(Some(&spec("b", 5)), "a", now), "held by b");
        assert!(may_acquire(Some(&spec("b", 16)), "a", now), "expired");
        assert!(may_acquire(Some(&spec("", 1)), "a", now), "released");
    }
}
