//! Leader election through a coordination.k8s.io/v1 Lease, as client-go's leaderelection does
//! it:
//!
//! - expiry is judged by when *this* replica last saw the Lease record change, on its own
//!   monotonic clock ([`Observed`]), never by the holder's `renewTime` (another machine's clock);
//! - the leader renews every retry period and gives up once no renewal succeeded for the renew
//!   deadline, which is shorter than the lease duration; every attempt (a GET, then a create or
//!   replace) runs under a timeout shorter than the renew deadline;
//! - what the leader may do is told by [`Leadership`]: valid until the start of the last
//!   successful renewal plus the renew deadline. The AWS writes check it just before each call
//!   (`aws::fence`), so a replica whose renewals stall stops writing at least
//!   `lease duration − renew deadline` before any other replica can take the Lease over.
//!
//! Writes use the Lease's `resourceVersion`, so two replicas can never both win one.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta};
use tokio::sync::watch;
use tokio::time::Instant;

use booking_shared::time::{Clock, to_kube_time};

/// Lease settings; `retry < renew_deadline < duration` (checked by `Args::validate`).
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This replica's identity.
    pub identity: String,
    /// How long a standby waits without seeing the Lease change before it takes it over.
    pub duration: Duration,
    /// How long the leader keeps acting without a successful renewal.
    pub renew_deadline: Duration,
    /// Time between attempts to acquire or renew.
    pub retry: Duration,
}

impl LeaseConfig {
    /// The timeout of one attempt while not leading: the renew deadline less one retry period,
    /// shorter than the renew deadline. (While leading, an attempt is also cut at the end of
    /// the leadership's validity, which is sooner.)
    pub fn attempt_timeout(&self) -> Duration {
        self.renew_deadline
            .saturating_sub(self.retry)
            .max(Duration::from_millis(100))
    }
}

/// What this replica last saw of the Lease, and when it saw it change (monotonic).
#[derive(Debug, Clone, Default)]
pub struct Observed {
    spec: Option<LeaseSpec>,
    changed_at: Option<Instant>,
}

impl Observed {
    /// Records `spec` as read at `now`: the time moves only when the record differs from the
    /// one seen before (or nothing was seen yet).
    pub fn see(&mut self, spec: Option<&LeaseSpec>, now: Instant) {
        if self.changed_at.is_none() || self.spec.as_ref() != spec {
            self.spec = spec.cloned();
            self.changed_at = Some(now);
        }
    }

    /// The holder of the record last seen (`""` when free or absent).
    pub fn holder(&self) -> &str {
        self.spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            .unwrap_or("")
    }

    /// Whether `identity` may take or keep the Lease at `now`: it is absent, free, ours, or
    /// another's record has not changed for its lease duration (`default` when it names none)
    /// since this replica saw it change.
    pub fn may_acquire(&self, identity: &str, default: Duration, now: Instant) -> bool {
        let Some(spec) = &self.spec else { return true };
        let holder = spec.holder_identity.as_deref().unwrap_or("");
        if holder.is_empty() || holder == identity {
            return true;
        }
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .filter(|s| *s > 0)
            .map_or(default, Duration::from_secs);
        self.changed_at.is_some_and(|at| now >= at + duration)
    }
}

/// Until when this replica may act as the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// No election (a single replica): always.
    Always,
    /// Until this instant, unless renewed meanwhile.
    Until(Instant),
    /// Not leading (lost, released, or not yet acquired).
    Never,
}

impl Validity {
    /// Whether the replica may act at `now`; `Err` says why not.
    pub fn check(self, now: Instant) -> Result<Option<Instant>, String> {
        match self {
            Validity::Always => Ok(None),
            Validity::Until(until) if now < until => Ok(Some(until)),
            Validity::Until(until) => Err(format!(
                "the Lease was not renewed within the renew deadline (validity ended {:?} ago)",
                now - until
            )),
            Validity::Never => Err("this replica does not hold the Lease".into()),
        }
    }
}

/// The leadership as this replica's Lease loop keeps it; cheap to clone, read before each AWS
/// write.
#[derive(Debug, Clone)]
pub struct Leadership(watch::Receiver<Validity>);

impl Leadership {
    /// Without election: always valid.
    pub fn unfenced() -> Self {
        Self(watch::channel(Validity::Always).1)
    }

    /// A leadership set through the returned sender (initially not leading).
    pub fn channel() -> (watch::Sender<Validity>, Self) {
        let (tx, rx) = watch::channel(Validity::Never);
        (tx, Self(rx))
    }

    /// Whether this replica may act at `now`: `Ok` with the end of its validity (`None`: no
    /// end), `Err` saying why not.
    pub fn check(&self, now: Instant) -> Result<Option<Instant>, String> {
        self.0.borrow().check(now)
    }
}

fn micro(clock: &Clock) -> MicroTime {
    MicroTime(to_kube_time(clock()).0)
}

/// The Lease record this replica writes to take or renew `prev`: `renewTime` (and
/// `acquireTime` on a take-over) from the wall clock, for people and other tools; the decisions
/// never read them.
fn spec_for(prev: Option<&LeaseSpec>, cfg: &LeaseConfig, wall: &Clock) -> LeaseSpec {
    let ours = prev.and_then(|p| p.holder_identity.as_deref()) == Some(cfg.identity.as_str());
    let transitions = prev.and_then(|p| p.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(i32::try_from(cfg.duration.as_secs()).unwrap_or(i32::MAX)),
        acquire_time: if ours {
            prev.and_then(|p| p.acquire_time.clone())
        } else {
            Some(micro(wall))
        },
        renew_time: Some(micro(wall)),
        lease_transitions: Some(if ours || prev.is_none() {
            transitions
        } else {
            transitions + 1
        }),
        ..Default::default()
    }
}

/// One replica's side of the election.
pub struct Elector {
    api: Api<Lease>,
    cfg: LeaseConfig,
    wall: Clock,
    observed: Observed,
}

impl Elector {
    /// An elector for `cfg` on `api`; `wall` stamps the record's times.
    pub fn new(api: Api<Lease>, cfg: LeaseConfig, wall: Clock) -> Self {
        Self {
            api,
            cfg,
            wall,
            observed: Observed::default(),
        }
    }

    /// Tries once to take or renew the Lease; whether this replica holds it now.
    async fn try_acquire(&mut self) -> Result<bool, kube::Error> {
        let current = self.api.get_opt(&self.cfg.name).await?;
        self.observed.see(
            current.as_ref().and_then(|l| l.spec.as_ref()),
            Instant::now(),
        );
        if !self
            .observed
            .may_acquire(&self.cfg.identity, self.cfg.duration, Instant::now())
        {
            return Ok(false);
        }
        let pp = crate::context::post_params();
        let written = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.cfg.name.clone()),
                        namespace: Some(self.cfg.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(spec_for(None, &self.cfg, &self.wall)),
                };
                self.api.create(&pp, &lease).await
            }
            Some(mut lease) => {
                lease.spec = Some(spec_for(lease.spec.as_ref(), &self.cfg, &self.wall));
                // `resourceVersion` is kept: a concurrent writer makes this a 409.
                self.api.replace(&self.cfg.name, &pp, &lease).await
            }
        };
        match written {
            Ok(lease) => {
                self.observed.see(lease.spec.as_ref(), Instant::now());
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One attempt cut at `deadline`: `Ok(held)` or why it failed.
    async fn attempt(&mut self, deadline: Instant) -> Result<bool, String> {
        match tokio::time::timeout_at(deadline, self.try_acquire()).await {
            Ok(Ok(held)) => Ok(held),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("the Lease request timed out".into()),
        }
    }

    /// Waits until this replica holds the Lease, then sets `validity`; `false` when `shutdown`
    /// fired first.
    pub async fn acquire(
        &mut self,
        validity: &watch::Sender<Validity>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> bool {
        loop {
            let began = Instant::now();
            match self.attempt(began + self.cfg.attempt_timeout()).await {
                Ok(true) => {
                    validity.send_replace(Validity::Until(began + self.cfg.renew_deadline));
                    return true;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "leader election: lease request failed"),
            }
            tokio::select! {
                () = tokio::time::sleep_until(began + self.cfg.retry) => {}
                _ = shutdown.changed() => return false,
            }
        }
    }

    /// Renews the Lease every retry period, moving `validity` on with each success, until
    /// `release` fires (then releases it for a fast failover: the caller fires it once it has
    /// stopped acting) or until no renewal succeeded within the renew deadline or another
    /// replica holds it (then returns `Err`: the caller must stop acting; `validity` is already
    /// `Never`).
    pub async fn keep(
        mut self,
        validity: watch::Sender<Validity>,
        mut release: watch::Receiver<bool>,
    ) -> Result<(), String> {
        let mut valid_until = match *validity.borrow() {
            Validity::Until(t) => t,
            _ => Instant::now(),
        };
        loop {
            // The next attempt after the retry period, or at once when the validity ends first
            // (then it fails at once and the loss is told without delay).
            let next = (Instant::now() + self.cfg.retry).min(valid_until);
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                changed = release.changed() => {
                    validity.send_replace(Validity::Never);
                    // Released only when told so; a caller gone without a word (it stopped
                    // waiting for its reconciles) leaves the Lease to expire.
                    if changed.is_ok() && *release.borrow() {
                        self.release().await;
                    }
                    return Ok(());
                }
            }
            let began = Instant::now();
            let lost = match self.attempt(valid_until).await {
                Ok(true) => {
                    valid_until = began + self.cfg.renew_deadline;
                    validity.send_replace(Validity::Until(valid_until));
                    None
                }
                Ok(false)
                    if !self.observed.holder().is_empty()
                        && self.observed.holder() != self.cfg.identity =>
                {
                    Some(format!("{} holds the Lease", self.observed.holder()))
                }
                // A write conflict with the record still ours: tried again until the deadline.
                Ok(false) => (Instant::now() >= valid_until).then(|| {
                    "the Lease could not be renewed within the renew deadline (conflicts)".into()
                }),
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: renewal failed");
                    (Instant::now() >= valid_until).then(|| {
                        format!(
                            "the Lease could not be renewed within the renew deadline ({:?}): {e}",
                            self.cfg.renew_deadline
                        )
                    })
                }
            };
            if let Some(why) = lost {
                validity.send_replace(Validity::Never);
                return Err(why);
            }
        }
    }

    /// Clears the holder of the Lease when it is ours (within one attempt's timeout, at most
    /// 4 s: the caller waits 5 s for it).
    async fn release(&self) {
        let work = async {
            let mut lease = self.api.get_opt(&self.cfg.name).await?;
            if let Some(lease) = lease.as_mut()
                && let Some(spec) = lease.spec.as_mut()
                && spec.holder_identity.as_deref() == Some(self.cfg.identity.as_str())
            {
                spec.holder_identity = None;
                spec.renew_time = None;
                self.api
                    .replace(&self.cfg.name, &crate::context::post_params(), lease)
                    .await?;
            }
            Ok::<_, kube::Error>(())
        };
        let limit = self.cfg.attempt_timeout().min(Duration::from_secs(4));
        match tokio::time::timeout(limit, work).await {
            Ok(Ok(())) => tracing::info!("lease released"),
            Ok(Err(e)) => tracing::warn!(error = %e, "could not release the lease"),
            Err(_) => tracing::warn!("could not release the lease: the request timed out"),
        }
    }
}

#[cfg(test)]
#[path = "leader_tests.rs"]
mod tests;
