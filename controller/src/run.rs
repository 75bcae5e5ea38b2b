//! Wiring: clients built once, leader election, the three controllers, the inventory loop, the
//! admin port and graceful shutdown.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use booking_shared::api::{Booking, BookingScheduler, Resource, ResourceMonitor};
use chrono::Utc;
use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use crate::admin::{self, Readiness};
use crate::aws::executor::Executor;
use crate::aws::inventory::Inventory;
use crate::aws::sdk::{SdkClients, load_config};
use crate::config::{Args, RetryMode};
use crate::error::Error;
use crate::fanout::Fanout;
use crate::index::{BookingIndex, Change};
use crate::leader::{self, LeaseConfig};
use crate::metrics::Metrics;
use crate::plan::Backoff;
use crate::reconcile::{self, Context};
use crate::tags::TagKeys;

fn api<K>(client: &kube::Client, namespace: &str) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    if namespace.is_empty() {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), namespace)
    }
}

/// Drops from a cached object what no reconciler reads: `metadata.managedFields` and the
/// `kubectl.kubernetes.io/last-applied-configuration` annotation (a full copy of the spec).
/// Together they are most of a Booking's size.
fn strip_cached<K: kube::Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// A stream that yields once per change of `rx`.
fn ticks(rx: watch::Receiver<u64>) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}

fn error_policy<K>(kind: &'static str) -> impl Fn(Arc<K>, &Error, Arc<Context>) -> Action {
    move |_obj, err, ctx| {
        tracing::warn!(kind, error = %err, "reconcile failed; retrying");
        ctx.metrics.failed(kind, err.metric_label());
        Action::requeue(Duration::from_secs(5))
    }
}

/// How long reconciles in flight may take to finish after SIGTERM: below Kubernetes' default
/// `terminationGracePeriodSeconds` (30 s), so that the process ends on its own terms.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(20);

/// Resolves when SIGTERM or SIGINT arrives.
async fn signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

async fn shutdown_future(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Runs the controller until SIGTERM (Ok) or a fatal error such as a lost Lease (Err).
pub async fn run(args: Args) -> anyhow::Result<()> {
    args.validate()?;
    let notification_roots = match &args.notification_ca_file {
        Some(path) => vec![
            std::fs::read(path)
                .with_context(|| format!("NOTIFICATION_CA_FILE: cannot read {}", path.display()))?,
        ],
        None => Vec::new(),
    };
    let notifiers = crate::notify::Notifiers::new(&args.smtp, &notification_roots)?;
    if args.smtp.host.is_none() {
        tracing::info!("SMTP_HOST is not set: email notifications are reported as failed");
    }
    let metrics = Metrics::new();
    let ready = Readiness::default();
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let listener = admin::bind(args.ops.admin_address)
        .await
        .with_context(|| format!("cannot bind the admin port {}", args.ops.admin_address))?;
    tracing::info!(address = %listener.local_addr()?, "admin port listening");
    tokio::spawn(admin::serve(
        listener,
        ready.clone(),
        metrics.clone(),
        shutdown_rx.clone(),
    ));
    {
        let tx = shutdown_tx.clone();
        tokio::spawn(async move {
            signal().await;
            tracing::info!("shutdown requested");
            let _ = tx.send(true);
        });
    }

    let client = kube::Client::try_default()
        .await
        .context("no Kubernetes configuration (in-cluster or KUBECONFIG)")?;
    let sdk = load_config(
        args.aws.assume_role_arn.as_deref(),
        args.aws.retry_mode == RetryMode::Adaptive,
        args.aws.max_attempts,
    )
    .await;
    let clients = Arc::new(SdkClients::new(sdk, metrics.clone()));
    let default_region = clients.default_region().context(
        "no AWS region configured: set AWS_REGION (or a profile region); Resources without spec.region use it",
    )?;

    // Leader election before anything acts.
    let identity = args
        .leader
        .identity
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
            format!("{}-{}", host.trim(), std::process::id())
        });
    ready.set(true);
    let mut leader_task = None;
    // The Lease is released only once every controller has finished its reconciles in flight
    // (graceful shutdown), never at the signal itself: a successor must not act while this
    // replica still does (a mail sent but not yet recorded, a stop not yet reported).
    let (release_tx, release_rx) = watch::channel(false);
    if args.leader.leader_elect {
        let cfg = LeaseConfig {
            name: args.leader.lease_name.clone(),
            namespace: args.lease_namespace(),
            identity: identity.clone(),
            duration: Duration::from_secs(args.leader.lease_duration_seconds),
            renew: Duration::from_secs(args.leader.lease_renew_seconds),
        };
        let leases: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
        tracing::info!(identity = %cfg.identity, lease = %cfg.name, "waiting for leadership");
        let mut rx = shutdown_rx.clone();
        if !leader::acquire(&leases, &cfg, &mut rx).await {
            return Ok(());
        }
        tracing::info!(identity = %cfg.identity, "leading");
        metrics.set_leader(true);
        leader_task = Some(tokio::spawn(leader::keep(leases, cfg, release_rx)));
    }

    let keys = TagKeys::new(args.aws.tag_prefix.clone());
    let inventory = Arc::new(Inventory::new(
        clients.clone(),
        clients.clone(),
        keys.clone(),
        metrics.clone(),
    ));
    let executor = Arc::new(Executor::new(
        clients.clone(),
        clients,
        Duration::from_millis(args.aws.batch_window_ms),
    ));
    tokio::spawn(inventory.clone().run(args.inventory_interval()));

    let ns = args.kube.namespace.clone();
    let wc = watcher::Config::default();
    let bookings_api: Api<Booking> = api(&client, &ns);
    let resources_api: Api<Resource> = api(&client, &ns);
    let monitors_api: Api<ResourceMonitor> = api(&client, &ns);
    let controller_config = kube::runtime::controller::Config::default()
        .concurrency(args.kube.max_concurrent_reconciles);

    // One watch and one cache per kind, shared by every controller that reads it: the Booking
    // controller and the notification controller are fed by the same Booking watch, the
    // Resource controller and the Booking triggers by the same Resource watch (see `fanout` for
    // why not kube's shared streams). Cached objects drop what no reconciler reads
    // (managedFields, the last-applied annotation), which is most of a small object's size.
    let (bookings_store, bookings_writer) = kube::runtime::reflector::store::<Booking>();
    let (resources_store, resources_writer) = kube::runtime::reflector::store::<Resource>();
    let mut booking_fanout = Fanout::<Booking>::default();
    let booking_events = booking_fanout.subscribe();
    let notification_events = booking_fanout.subscribe();
    let mut resource_fanout = Fanout::<Resource>::default();
    let resource_events = resource_fanout.subscribe();
    let index = Arc::new(BookingIndex::default());
    // What a change concerns, as computed by the index: the Resources to reconcile and the
    // bookings whose arbitration may have changed. The cache and the index are updated before
    // any trigger is sent (the fan-out's too), so a reconcile never decides on a cache older
    // than its trigger (a deleted active booking must release its group).
    let (resource_triggers, resource_triggers_rx) = mpsc::unbounded::<ObjectRef<Resource>>();
    let (booking_triggers, booking_triggers_rx) = mpsc::unbounded::<ObjectRef<Booking>>();
    let send_change = {
        let index = index.clone();
        let metrics = metrics.clone();
        let resource_triggers = resource_triggers.clone();
        let booking_triggers = booking_triggers.clone();
        move |change: Change| {
            metrics.set_active_bookings(i64::try_from(index.in_progress()).unwrap_or(i64::MAX));
            for r in change.resources {
                let _ = resource_triggers.unbounded_send(r);
            }
            for r in &change.rearbitrate {
                for b in index.of_resource(r) {
                    let _ = booking_triggers.unbounded_send(b);
                }
            }
        }
    };
    let bookings_feed = {
        let index = index.clone();
        let store = bookings_store.clone();
        kube::runtime::reflector(
            bookings_writer,
            watcher(bookings_api.clone(), wc.clone())
                .default_backoff()
                .modify(strip_cached),
        )
        .for_each(move |ev| {
            let change = match &ev {
                Ok(watcher::Event::Apply(b)) => index.apply(b),
                Ok(watcher::Event::Delete(b)) => index.delete(b),
                Ok(watcher::Event::InitDone) => {
                    let all = store.state();
                    index.rebuild(all.iter().map(|b| b.as_ref()))
                }
                Ok(_) => Change::default(),
                Err(e) => {
                    tracing::warn!(error = %e, "booking watch error; retrying");
                    index.mark_stale();
                    Change::default()
                }
            };
            if let Ok(ev) = &ev {
                booking_fanout.send(&store, ev);
            }
            send_change(change);
            futures::future::ready(())
        })
    };
    let resources_synced = Arc::new(crate::fanout::Synced::default());
    let resources_feed = {
        let index = index.clone();
        let synced = resources_synced.clone();
        let booking_triggers = booking_triggers.clone();
        let store = resources_store.clone();
        // Bookings read only whether their Resource exists: only its appearance and its
        // deletion concern them, not its status, which changes with every start and stop.
        let mut known: HashSet<ObjectRef<Resource>> = HashSet::new();
        kube::runtime::reflector(
            resources_writer,
            watcher(resources_api.clone(), wc.clone())
                .default_backoff()
                .modify(strip_cached),
        )
        .for_each(move |ev| {
            let resources = match &ev {
                Ok(watcher::Event::Apply(r)) => {
                    let key = ObjectRef::from_obj(r);
                    if known.insert(key.clone()) {
                        vec![key]
                    } else {
                        Vec::new()
                    }
                }
                Ok(watcher::Event::Delete(r)) => {
                    let key = ObjectRef::from_obj(r);
                    known.remove(&key);
                    vec![key]
                }
                Ok(watcher::Event::InitDone) => {
                    synced.mark();
                    known = store
                        .state()
                        .iter()
                        .map(|r| ObjectRef::from_obj(r.as_ref()))
                        .collect();
                    index.resources()
                }
                Ok(_) => Vec::new(),
                Err(e) => {
                    tracing::warn!(error = %e, "resource watch error; retrying");
                    Vec::new()
                }
            };
            if let Ok(ev) = &ev {
                resource_fanout.send(&store, ev);
            }
            for r in &resources {
                for b in index.of_resource(r) {
                    let _ = booking_triggers.unbounded_send(b);
                }
            }
            futures::future::ready(())
        })
    };
    // The feeds end with the process; the controllers' graceful shutdown stops them first.
    tokio::spawn(bookings_feed);
    tokio::spawn(resources_feed);

    let ctx = Arc::new(Context {
        client: client.clone(),
        inventory: inventory.clone(),
        executor,
        keys,
        default_region,
        index,
        resources: resources_store.clone(),
        resources_synced,
        attempts: Mutex::new(BTreeMap::new()),
        targeted: Mutex::new(BTreeMap::new()),
        targeted_min_interval: chrono::Duration::from_std(args.inventory_interval())
            .unwrap_or(chrono::Duration::seconds(30)),
        backoff: Backoff::default(),
        metrics: metrics.clone(),
        api_writes: tokio::sync::Semaphore::new(match args.kube.max_concurrent_reconciles {
            0 => tokio::sync::Semaphore::MAX_PERMITS,
            n => usize::from(n),
        }),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "booking-controller".into(),
                instance: Some(identity.clone()),
            },
        ),
    });

    let stop = || shutdown_future(shutdown_rx.clone());
    let bookings = Controller::for_shared_stream(booking_events, bookings_store.clone())
        .with_config(controller_config.clone())
        .reconcile_on(booking_triggers_rx)
        .graceful_shutdown_on(stop())
        .run(
            reconcile::booking::reconcile,
            error_policy("Booking"),
            ctx.clone(),
        )
        .for_each(|_| async {});
    // Resource reconciles are not bounded: a start or stop waits for the executor's batch
    // window, where the reconciles of every Resource starting together join one call. A
    // bound would split 1,000 simultaneous starts into 1,000/bound sequential batches. Their
    // Kubernetes API writes are bounded instead (`Context::api_writes`).
    let resources = Controller::for_shared_stream(resource_events, resources_store)
        .reconcile_on(resource_triggers_rx)
        .reconcile_all_on(ticks(inventory.subscribe()))
        .graceful_shutdown_on(stop())
        .run(
            reconcile::resource::reconcile,
            error_policy("Resource"),
            ctx.clone(),
        )
        .for_each(|_| async {});
    let monitors = Controller::new(monitors_api, wc.clone())
        .with_config(controller_config.clone())
        .reconcile_all_on(ticks(inventory.subscribe_scans()))
        .graceful_shutdown_on(stop())
        .run(
            reconcile::monitor::reconcile,
            error_policy("ResourceMonitor"),
            ctx.clone(),
        )
        .for_each(|_| async {});
    // Schedulers and notifications run as controllers of their own, so that neither a slow
    // SMTP server nor a scheduler can delay a group's start or stop.
    let clock: reconcile::scheduler::Clock = Arc::new(Utc::now);
    let recorder = || {
        Recorder::new(
            client.clone(),
            Reporter {
                controller: "booking-controller".into(),
                instance: Some(identity.clone()),
            },
        )
    };
    let schedulers = reconcile::scheduler::run(
        Controller::new(api::<BookingScheduler>(&client, &ns), wc.clone())
            .with_config(controller_config.clone()),
        Arc::new(reconcile::scheduler::SchedulerContext {
            client: client.clone(),
            recorder: recorder(),
            clock: clock.clone(),
        }),
        stop(),
    );
    let notifications = reconcile::notification::run(
        Controller::for_shared_stream(notification_events, bookings_store)
            .with_config(controller_config.clone()),
        Arc::new(reconcile::notification::NotificationReconcilerContext {
            client: client.clone(),
            recorder: recorder(),
            clock,
            notifiers,
            failures: Mutex::new(BTreeMap::new()),
        }),
        stop(),
    );

    if !args.leader.leader_elect {
        metrics.set_leader(true);
    }
    tracing::info!(namespace = %if ns.is_empty() { "*" } else { ns.as_str() }, "controllers running");
    let controllers = async {
        tokio::join!(bookings, resources, monitors, schedulers, notifications);
    };
    // After the shutdown signal, reconciles in flight get SHUTDOWN_DRAIN to finish (one may wait
    // for a cache whose first list never comes while the API server is away). Past it the
    // process exits without releasing the Lease, which then expires: a successor never acts
    // while a reconcile of this replica might still.
    let drain_deadline = {
        let rx = shutdown_rx.clone();
        async move {
            shutdown_future(rx).await;
            tokio::time::sleep(SHUTDOWN_DRAIN).await;
            tracing::warn!(
                seconds = SHUTDOWN_DRAIN.as_secs(),
                "reconciles still running after the shutdown signal; exiting without releasing the Lease (it expires)"
            );
        }
    };
    match leader_task {
        Some(mut task) => {
            tokio::select! {
                _ = drain_deadline => Ok(()),
                _ = controllers => {
                    // Shut down: every reconcile in flight has finished; release the Lease so
                    // that a standby replica takes over at once.
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
        None => {
            tokio::select! {
                _ = drain_deadline => {}
                _ = controllers => {}
            }
            Ok(())
        }
    }
}
