//! The one [`Context`] of every reconciler: the Kubernetes client, the clock, the metrics, the
//! Event sink, the bound on API writes and the per-object retry backoff, beside the state each
//! reconciler keeps (the AWS layer and the caches for Resources, the senders for notifications).
//! Built once by `run` (and by tests, from [`Settings`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use booking_shared::api::Resource;
use booking_shared::time::Clock;
use chrono::{DateTime, Utc};
use kube::api::{PatchParams, PostParams};
use kube::runtime::reflector::Store;
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::aws::dry_run::ReadOnly;
use crate::aws::executor::{Executor, Turns};
use crate::aws::fence::Fenced;
use crate::aws::inventory::Inventory;
use crate::aws::sdk::SdkClients;
use crate::aws::{Ec2Api, RdsApi};
use crate::backoff::Backoff;
use crate::dry_run::DryRun;
pub use crate::events::Events;
use crate::fanout::Synced;
use crate::index::BookingIndex;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::notify::Notifiers;
use crate::plan::Attempt;
use crate::regions::AllowedRegions;
use crate::stop_reads::StopReads;
use crate::tags::TagKeys;
use crate::wakeups::Wakeups;

/// The field manager of every write of the controller, so that `managedFields` (and Argo CD's
/// diff) tell its writes apart from any other client's.
pub const FIELD_MANAGER: &str = "booking-controller";

/// Parameters of the controller's patches: its field manager.
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

/// Parameters of the controller's creates and replaces: its field manager.
pub fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    }
}

/// What a [`Context`] is built from.
pub struct Settings {
    /// This replica's identity (Events' reporting instance, the Lease holder).
    pub identity: String,
    /// The AWS SDK configuration (credentials, retries); clients per region derive from it.
    pub aws: aws_config::SdkConfig,
    /// Region of Resources without `spec.region`.
    pub default_region: String,
    /// Tag keys.
    pub tag_keys: TagKeys,
    /// Minimum time between two targeted refreshes of one Resource's group.
    pub targeted_min_interval: chrono::Duration,
    /// Bound on concurrent Kubernetes API writes (status patches, Events); 0 for none.
    pub max_concurrent_writes: usize,
    /// The notification senders.
    pub notifiers: Notifiers,
    /// This replica's leadership, checked before every AWS write.
    pub leadership: Leadership,
    /// The regions Resources and monitors may name.
    pub allowed_regions: AllowedRegions,
    /// Consecutive complete listings a group must be missing from before it is pruned.
    pub prune_after_listings: u32,
    /// Namespaces allowed to claim groups whose instances carry no namespace tag; empty for
    /// every namespace.
    pub untagged_claim_namespaces: Vec<String>,
    /// Dry-run mode: no AWS write, no notification sent (see [`crate::dry_run`]).
    pub dry_run: bool,
}

/// The caches the reconcilers read, filled by the watches `run` wires.
#[derive(Clone)]
pub struct Caches {
    /// The Bookings of each Resource.
    pub index: Arc<BookingIndex>,
    /// All Resources in scope.
    pub resources: Store<Resource>,
    /// Whether `resources` holds its first full list.
    pub resources_synced: Arc<Synced>,
    /// All BookingSchedulers in scope (the scheduler controller's cache).
    pub schedulers: Store<booking_shared::api::BookingScheduler>,
    /// When each Booking's phase changes next (the Booking controller's timer).
    pub booking_wakeups: Arc<Wakeups>,
    /// When each Booking's next notification is due (the notification controller's timer).
    pub notification_wakeups: Arc<Wakeups>,
    /// When each Resource must be reconciled again (its bookings' next boundary, a recheck of
    /// members in transit): the Resource controller's timer. One timer wakes every Resource due
    /// at the same instant together and reserves their turns to prepare a start at once, so
    /// their starts join one call (a requeue through kube's scheduler is due a few milliseconds
    /// apart per Resource: the delay between computing it and the scheduler taking it).
    pub resource_wakeups: Arc<Wakeups>,
    /// The turns to prepare a start that the Resources' timer reserves for what it wakes, read
    /// by the executor's batcher (see [`crate::aws::executor::Turns`]).
    pub resource_turns: Turns,
}

/// The Resource reconciler's own state: the AWS layer and its memory of actions.
pub struct Groups {
    /// Shared AWS inventories.
    pub inventory: Arc<Inventory>,
    /// AWS actions.
    pub executor: Arc<Executor>,
    /// Tag keys.
    pub keys: TagKeys,
    /// Region of Resources without `spec.region`.
    pub default_region: String,
    /// Last action per member ID.
    pub attempts: Mutex<BTreeMap<String, Attempt>>,
    /// Last targeted refresh per Resource (`ns/name`), to bound them.
    pub targeted: Mutex<BTreeMap<String, DateTime<Utc>>>,
    /// Minimum time between two targeted refreshes of one Resource.
    pub targeted_min_interval: chrono::Duration,
    /// Retry policy of failed members.
    pub backoff: Backoff,
    /// The regions Resources and monitors may name.
    pub allowed_regions: AllowedRegions,
    /// Consecutive complete listings a group must be missing from before it is pruned.
    pub prune_after_listings: u32,
    /// See [`Settings::untagged_claim_namespaces`].
    pub untagged_claim_namespaces: Vec<String>,
}

/// How many namespaces' stop confirmations read from the API server at once.
const STOP_READS: usize = 2;

/// Everything the reconcilers use.
pub struct Context {
    /// Kubernetes client.
    pub client: kube::Client,
    /// The clock every reconciler reads.
    pub clock: Clock,
    /// Metrics.
    pub metrics: Metrics,
    /// The one Event sink.
    pub events: Events,
    /// Bounds the Kubernetes API writes (status patches, Events) of reconciles that are not
    /// bounded themselves (Resources), so that 1,000 Resources acting together open tens of
    /// connections to the API server, not 1,000.
    api_writes: Arc<Semaphore>,
    /// The consistent reads that confirm planned stops, shared by the stops of a namespace and
    /// a few at a time across namespaces (see [`StopReads`]).
    pub stop_reads: StopReads,
    /// Consecutive failed reconciles per object, for the error policy's backoff.
    retries: Mutex<HashMap<String, u32>>,
    /// Backoff of failed reconciles.
    pub retry_backoff: Backoff,
    /// The caches.
    pub caches: Caches,
    /// The Resource reconciler's state.
    pub groups: Groups,
    /// The notification senders.
    pub notifiers: Notifiers,
    /// Consecutive failed sends per booking uid and when the next attempt may happen.
    pub notification_failures: Mutex<BTreeMap<String, (u32, DateTime<Utc>)>>,
    /// Backoff of failed notifications (30 s doubling to 10 min).
    pub notification_backoff: Backoff,
    /// The dry run's memory, in dry-run mode; `None` otherwise.
    pub dry_run: Option<DryRun>,
    /// The statuses just written, until the cache shows them (the one status writer's).
    pub status_memo: crate::reconcile::StatusMemo,
}

impl Context {
    /// The context of `settings`, reading `caches`. Spawns the executor's batcher.
    pub fn new(
        client: kube::Client,
        clock: Clock,
        metrics: Metrics,
        caches: Caches,
        settings: Settings,
    ) -> Arc<Self> {
        let clients = Arc::new(SdkClients::new(settings.aws, metrics.clone()));
        let inventory = Arc::new(Inventory::new(
            clients.clone(),
            clients.clone(),
            settings.tag_keys.clone(),
            metrics.clone(),
        ));
        // The executor writes through fenced clients: no AWS write once leadership has ended;
        // in dry-run mode, none at all.
        let mut ec2: Arc<dyn Ec2Api> =
            Arc::new(Fenced::new(clients.clone(), settings.leadership.clone()));
        let mut rds: Arc<dyn RdsApi> = Arc::new(Fenced::new(clients, settings.leadership));
        if settings.dry_run {
            ec2 = Arc::new(ReadOnly::new(ec2));
            rds = Arc::new(ReadOnly::new(rds));
        }
        let executor = Arc::new(Executor::with_turns(
            ec2,
            rds,
            caches.resource_turns.clone(),
        ));
        let api_writes = Arc::new(Semaphore::new(match settings.max_concurrent_writes {
            0 => Semaphore::MAX_PERMITS,
            n => n,
        }));
        let events = Events::new(
            client.clone(),
            clock.clone(),
            settings.identity,
            api_writes.clone(),
        );
        let ctx = Self {
            client,
            clock,
            metrics,
            events,
            api_writes,
            stop_reads: StopReads::new(STOP_READS),
            retries: Mutex::default(),
            status_memo: Default::default(),
            retry_backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(300)),
            caches,
            groups: Groups {
                inventory,
                executor,
                keys: settings.tag_keys,
                default_region: settings.default_region,
                attempts: Mutex::default(),
                targeted: Mutex::default(),
                targeted_min_interval: settings.targeted_min_interval,
                backoff: Backoff::default(),
                allowed_regions: settings.allowed_regions,
                prune_after_listings: settings.prune_after_listings,
                untagged_claim_namespaces: settings.untagged_claim_namespaces,
            },
            notifiers: settings.notifiers.dry_run(settings.dry_run),
            dry_run: settings.dry_run.then(DryRun::default),
            notification_failures: Mutex::default(),
            notification_backoff: Backoff::new(Duration::from_secs(30), Duration::from_secs(600)),
        };
        Arc::new(ctx)
    }

    /// Now, by the context's clock.
    pub fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    /// The delay from now until `at` (zero when it has passed).
    pub fn until(&self, at: DateTime<Utc>) -> Duration {
        (at - self.now()).to_std().unwrap_or_default()
    }

    /// Waits for a turn to write to the Kubernetes API; see the `api_writes` bound.
    pub async fn api_write_permit(&self) -> Option<SemaphorePermit<'_>> {
        // The semaphore is never closed; a closed one would only lift the bound.
        self.api_writes.acquire().await.ok()
    }

    /// Waits until the Booking and Resource caches (and the index of bookings) hold their
    /// first full list: until then an empty cache would read as "no bookings" and stop a group
    /// that is booked. Returns at once afterwards.
    pub async fn caches_ready(&self) {
        self.caches.index.wait_ready().await;
        self.caches.resources_synced.wait().await;
    }

    /// Records one more failed reconcile of `key` and returns the delay before the next try.
    pub fn retry_after_failure(&self, key: &str) -> Duration {
        let mut map = self.retries.lock().unwrap_or_else(|p| p.into_inner());
        let count = map.entry(key.to_owned()).or_insert(0);
        *count = count.saturating_add(1);
        self.retry_backoff.delay(*count)
    }

    /// Forgets the failures of `key` after a reconcile that succeeded.
    pub fn reconciled_ok(&self, key: &str) {
        let mut map = self.retries.lock().unwrap_or_else(|p| p.into_inner());
        if !map.is_empty() {
            map.remove(key);
        }
    }
}
