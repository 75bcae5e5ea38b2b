//! Wiring: clients built once, leader election, the watches (`feeds`), the five controllers,
//! the inventory loop, the admin port and graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use booking_shared::api::Resource;
use booking_shared::api::{BookingCalendar, ResourceMonitor};
use booking_shared::ops;
use booking_shared::time::system_clock;
use futures::{Stream, StreamExt as _};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::{broadcast, watch};

use crate::admin::{Admin, Readiness};
use crate::aws::inventory::Change;
use crate::aws::sdk::load_config;
use crate::config::{Args, RetryMode};
use crate::context::{Context, Settings};
use crate::feeds::{Feeds, api};
use crate::leader::{Elector, Leadership, LeaseConfig};
use crate::metrics::Metrics;
use crate::reconcile::{self, drive};
use crate::regions::AllowedRegions;
use crate::tags::TagKeys;

/// A stream that yields once per change of `rx`.
fn ticks(rx: watch::Receiver<u64>) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}

/// The Resources to reconcile after each inventory change: those of the groups it changed (every
/// Resource after changes were missed).
fn inventory_triggers(
    changes: broadcast::Receiver<Arc<Change>>,
    resources: Store<Resource>,
    default_region: String,
) -> impl Stream<Item = ObjectRef<Resource>> + Send + 'static {
    // `None` after changes were missed.
    let changes = futures::stream::unfold(changes, |mut rx| async move {
        match rx.recv().await {
            Ok(change) => Some((Some(change), rx)),
            Err(broadcast::error::RecvError::Lagged(_)) => Some((None, rx)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    });
    changes.flat_map(move |change| {
        let all = resources.state();
        futures::stream::iter(crate::triggers::of_inventory_change(
            change.as_deref(),
            all.iter().map(AsRef::as_ref),
            &default_region,
        ))
    })
}

/// How long reconciles in flight may take to finish after SIGTERM: below Kubernetes' default
/// `terminationGracePeriodSeconds` (30 s), so that the process ends on its own terms.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(20);

async fn shutdown_future(mut rx: watch::Receiver<bool>) {
    ops::stopped(&mut rx).await;
}

/// Runs the controller until SIGTERM (Ok) or a fatal error such as a lost Lease (Err).
pub async fn run(args: Args) -> anyhow::Result<()> {
    args.validate()?;
    if args.dry_run {
        tracing::warn!(
            "dry-run mode: no AWS write (start, stop, lock tags) is made and no notification is sent; Events WouldStart/WouldStop/WouldNotify report what would be done"
        );
    }
    let notifiers = notifiers(&args)?;
    let metrics = Metrics::new();
    let ready = Readiness::default();
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let listener = tokio::net::TcpListener::bind(args.ops.admin_address)
        .await
        .with_context(|| format!("cannot bind the admin port {}", args.ops.admin_address))?;
    tracing::info!(address = %listener.local_addr()?, "admin port listening");
    let admin = Arc::new(Admin {
        ready: ready.clone(),
        metrics: metrics.clone(),
    });
    tokio::spawn(ops::serve_admin(listener, admin, shutdown_rx.clone()));
    {
        let tx = shutdown_tx.clone();
        tokio::spawn(async move {
            ops::shutdown_signal().await;
            tracing::info!("shutdown requested");
            let _ = tx.send(true);
        });
    }

    let config = kube::Config::infer()
        .await
        .context("no Kubernetes configuration (in-cluster or KUBECONFIG)")?;
    let client =
        booking_shared::client::client(config).context("building the Kubernetes client")?;
    let sdk = load_config(
        args.aws.assume_role_arn.as_deref(),
        args.aws.retry_mode == RetryMode::Adaptive,
        args.aws.max_attempts,
        args.aws.timeouts(),
    )
    .await;
    let default_region = sdk.region().map(|r| r.to_string()).context(
        "no AWS region configured: set AWS_REGION (or a profile region); Resources without spec.region use it",
    )?;
    let identity = identity(&args);
    ready.set(true);
    // The Lease is released only once every controller has finished its reconciles in flight
    // (graceful shutdown), never at the signal itself: a successor must not act while this
    // replica still does (a mail sent but not yet recorded, a stop not yet reported).
    let (release_tx, release_rx) = watch::channel(false);
    let (leader_task, leadership) = if args.leader.leader_elect {
        match lead(&args, &client, &identity, shutdown_rx.clone(), release_rx).await {
            Some((task, leadership)) => (Some(task), leadership),
            None => return Ok(()),
        }
    } else {
        (None, Leadership::unfenced())
    };
    metrics.set_leader(true);

    let ns = args.kube.namespace.clone();
    let (caches, feeds) = Feeds::new(&client, &ns, metrics.clone());
    let settings = Settings {
        identity,
        aws: sdk,
        default_region,
        tag_keys: TagKeys::new(args.aws.tag_prefix.clone()),
        targeted_min_interval: chrono::Duration::from_std(args.inventory_interval())
            .unwrap_or(chrono::Duration::seconds(30)),
        max_concurrent_writes: usize::from(args.kube.max_concurrent_reconciles),
        notifiers,
        leadership,
        allowed_regions: AllowedRegions::new(&args.aws.allowed_regions),
        prune_after_listings: args.aws.prune_after_listings,
        untagged_claim_namespaces: args.tenancy.untagged_claim_namespaces.clone(),
        dry_run: args.dry_run,
    };
    let ctx = Context::new(
        client.clone(),
        system_clock(),
        metrics.clone(),
        caches,
        settings,
    );
    tokio::spawn(ctx.groups.inventory.clone().run(args.inventory_interval()));
    let controllers = controllers(&args, &client, ctx, feeds, &shutdown_rx);
    tracing::info!(namespace = %if ns.is_empty() { "*" } else { ns.as_str() }, "controllers running");
    finish(
        controllers,
        leader_task,
        shutdown_rx,
        shutdown_tx,
        release_tx,
        ready,
        metrics,
    )
    .await
}

/// The notification senders of `args`.
fn notifiers(args: &Args) -> anyhow::Result<crate::notify::Notifiers> {
    let roots = match &args.notification_ca_file {
        Some(path) => vec![
            std::fs::read(path)
                .with_context(|| format!("NOTIFICATION_CA_FILE: cannot read {}", path.display()))?,
        ],
        None => Vec::new(),
    };
    if args.smtp.host.is_none() {
        tracing::info!("SMTP_HOST is not set: email notifications are reported as failed");
    }
    Ok(crate::notify::Notifiers::new(&args.smtp, &roots)?)
}

/// This replica's identity: the configured one, else `<hostname>-<pid>`.
fn identity(args: &Args) -> String {
    args.leader
        .identity
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
            format!("{}-{}", host.trim(), std::process::id())
        })
}

type LeaderTask = tokio::task::JoinHandle<Result<(), String>>;

/// Waits for leadership (before anything acts) and keeps it in a task; `None` when shut down
/// while waiting. The [`Leadership`] tells the AWS writes whether this replica still leads.
async fn lead(
    args: &Args,
    client: &kube::Client,
    identity: &str,
    mut shutdown: watch::Receiver<bool>,
    release: watch::Receiver<bool>,
) -> Option<(LeaderTask, Leadership)> {
    let cfg = LeaseConfig {
        name: args.leader.lease_name.clone(),
        namespace: args.lease_namespace(),
        identity: identity.to_owned(),
        duration: Duration::from_secs(args.leader.lease_duration_seconds),
        renew_deadline: args.lease_renew_deadline(),
        retry: Duration::from_secs(args.leader.lease_renew_seconds),
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    tracing::info!(identity = %cfg.identity, lease = %cfg.name, "waiting for leadership");
    let (validity, leadership) = Leadership::channel();
    let mut elector = Elector::new(leases, cfg.clone(), system_clock());
    if !elector.acquire(&validity, &mut shutdown).await {
        return None;
    }
    tracing::info!(identity = %cfg.identity, "leading");
    Some((tokio::spawn(elector.keep(validity, release)), leadership))
}

/// The five controllers, run until the shutdown signal.
fn controllers(
    args: &Args,
    client: &kube::Client,
    ctx: Arc<Context>,
    feeds: Feeds,
    shutdown: &watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + use<> {
    let ns = &args.kube.namespace;
    let wc = watcher::Config::default();
    let config = kube::runtime::controller::Config::default()
        .concurrency(args.kube.max_concurrent_reconciles);
    let shutdown = shutdown.clone();
    let stop = move || shutdown_future(shutdown.clone());
    let Feeds {
        booking_events,
        notification_events,
        resource_events,
        notification_resource_events,
        booking_triggers,
        resource_triggers,
        scheduler_events,
    } = feeds;
    let inventory = ctx.groups.inventory.clone();
    // The instants the Booking and notification reconcilers asked to run again at come as
    // triggers from their timers (see `wakeups`).
    let booking_wakeups = ctx.caches.booking_wakeups.clone().due(ctx.clock.clone());
    let notification_wakeups = ctx
        .caches
        .notification_wakeups
        .clone()
        .due(ctx.clock.clone());
    let resource_wakeups = ctx.caches.resource_wakeups.clone().due(ctx.clock.clone());
    // The Booking and notification reconcilers run on the work queue of the booking index
    // (see `queue`), not on kube's controller, whose store would keep every booking whole.
    let booking_triggers = futures::stream::select(
        booking_events,
        futures::stream::select(booking_triggers, booking_wakeups),
    );
    // Resource reconciles are not bounded: the reconciles of every Resource starting at the same
    // instant run in one pass and send their starts to the executor together, where they join
    // one call. A bound would split 1,000 simultaneous starts into 1,000/bound sequential
    // batches. Their Kubernetes API writes are bounded instead (the context's API-write bound).
    // An inventory listing wakes the Resources of the groups whose members it changed, not
    // every Resource: a pass over all of them would hold back a start due meanwhile.
    let inventory_changes = inventory_triggers(
        inventory.subscribe(),
        ctx.caches.resources.clone(),
        ctx.groups.default_region.clone(),
    );
    let resource_controller =
        Controller::for_shared_stream(resource_events, ctx.caches.resources.clone()).reconcile_on(
            futures::stream::select(
                futures::stream::select(resource_triggers, resource_wakeups),
                inventory_changes,
            ),
        );
    let monitor_controller = Controller::new(api::<ResourceMonitor>(client, ns), wc.clone())
        .with_config(config.clone())
        .reconcile_all_on(ticks(inventory.subscribe_scans()));
    // Schedulers and notifications run as controllers of their own, so that neither a slow SMTP
    // server nor a scheduler can delay a group's start or stop.
    let scheduler_controller =
        Controller::for_stream(scheduler_events, ctx.caches.schedulers.clone())
            .with_config(config.clone());
    // A calendar created, changed or deleted wakes the schedulers that reference it.
    let schedulers = scheduler_controller.store();
    let scheduler_controller =
        scheduler_controller.watches(api::<BookingCalendar>(client, ns), wc, move |calendar| {
            let state = schedulers.state();
            crate::triggers::schedulers_of_calendar(state.iter().map(|s| s.as_ref()), &calendar)
        });
    // A Resource's change (the status of each start and stop) wakes the bookings whose
    // notifications follow its group's state.
    let notified = {
        let ctx = ctx.clone();
        futures::StreamExt::flat_map(notification_resource_events, move |r| {
            futures::stream::iter(crate::triggers::notified_by(
                &ctx.caches.index,
                &r,
                ctx.now(),
            ))
        })
    };
    let notification_triggers = futures::stream::select(
        notification_events,
        futures::stream::select(notified, notification_wakeups),
    );
    let concurrency = args.kube.max_concurrent_reconciles;
    async move {
        tokio::join!(
            crate::queue::run(
                "Booking",
                booking_triggers,
                ctx.caches.index.clone(),
                reconcile::booking::reconcile,
                ctx.clone(),
                concurrency,
                stop()
            ),
            drive(
                "Resource",
                resource_controller,
                reconcile::resource::reconcile,
                ctx.clone(),
                stop()
            ),
            drive(
                "ResourceMonitor",
                monitor_controller,
                reconcile::monitor::reconcile,
                ctx.clone(),
                stop()
            ),
            drive(
                "BookingScheduler",
                scheduler_controller,
                reconcile::scheduler::reconcile,
                ctx.clone(),
                stop()
            ),
            crate::queue::run(
                "Notification",
                notification_triggers,
                ctx.caches.index.clone(),
                reconcile::notification::reconcile,
                ctx.clone(),
                concurrency,
                stop()
            ),
        );
    }
}

/// Waits for the controllers to finish after the shutdown signal, or for the Lease to be lost.
/// After the signal, reconciles in flight get SHUTDOWN_DRAIN to finish (one may wait for a cache
/// whose first list never comes while the API server is away). Past it the process exits
/// without releasing the Lease, which then expires: a successor never acts while a reconcile of
/// this replica might still.
async fn finish(
    controllers: impl std::future::Future<Output = ()>,
    leader_task: Option<LeaderTask>,
    shutdown_rx: watch::Receiver<bool>,
    shutdown_tx: watch::Sender<bool>,
    release_tx: watch::Sender<bool>,
    ready: Readiness,
    metrics: Metrics,
) -> anyhow::Result<()> {
    let drain_deadline = async move {
        shutdown_future(shutdown_rx).await;
        tokio::time::sleep(SHUTDOWN_DRAIN).await;
        tracing::warn!(
            seconds = SHUTDOWN_DRAIN.as_secs(),
            "reconciles still running after the shutdown signal; exiting without releasing the Lease (it expires)"
        );
    };
    let Some(mut task) = leader_task else {
        tokio::select! {
            _ = drain_deadline => {}
            _ = controllers => {}
        }
        return Ok(());
    };
    tokio::select! {
        _ = drain_deadline => Ok(()),
        _ = controllers => {
            // Shut down: every reconcile in flight has finished; release the Lease so that a
            // standby replica takes over at once.
            ready.set(false);
            let _ = shutdown_tx.send(true);
            let _ = release_tx.send(true);
            match tokio::time::timeout(Duration::from_secs(5), &mut task).await {
                Ok(Ok(Err(why))) => tracing::warn!(%why, "lease ended badly during shutdown"),
                Ok(_) => {}
                Err(_) => tracing::warn!("the lease was not released within 5 s"),
            }
            Ok(())
        }
        lost = &mut task => {
            ready.set(false);
            metrics.set_leader(false);
            match lost {
                Ok(Ok(())) => Ok(()),
                Ok(Err(why)) => {
                    let _ = shutdown_tx.send(true);
                    anyhow::bail!("leadership lost: {why}; exiting so that another replica takes over")
                }
                Err(e) => anyhow::bail!("leader election task failed: {e}"),
            }
        }
    }
}
