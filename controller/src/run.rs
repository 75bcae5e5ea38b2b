//! Wiring: clients built once, leader election, the three controllers, the inventory loop, the
//! admin port and graceful shutdown.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use booking_shared::api::{Booking, BookingScheduler, Resource, ResourceMonitor};
use chrono::Utc;
use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::admin::{self, Readiness};
use crate::aws::executor::Executor;
use crate::aws::inventory::Inventory;
use crate::aws::sdk::{SdkClients, load_config};
use crate::config::{Args, RetryMode};
use crate::error::Error;
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
        leader_task = Some(tokio::spawn(leader::keep(leases, cfg, shutdown_rx.clone())));
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
    let bookings_api_for_notifications = bookings_api.clone();
    let resources_api: Api<Resource> = api(&client, &ns);
    let monitors_api: Api<ResourceMonitor> = api(&client, &ns);
    let booking_ctrl = Controller::new(bookings_api.clone(), wc.clone());
    let resource_ctrl = Controller::new(resources_api.clone(), wc.clone());
    let monitor_ctrl = Controller::new(monitors_api, wc.clone());
    let resources_store = resource_ctrl.store();
    // One reflector of Bookings feeds the cache every reconciler reads; its events trigger the
    // reconciles that depend on other Bookings only *after* the cache holds them, so a
    // reconcile never decides on a cache older than its trigger (a deleted active booking must
    // release its group). Bursts coalesce in the watch channels.
    let (bookings_store, bookings_writer) = kube::runtime::reflector::store::<Booking>();
    let (bookings_changed, bookings_changed_rx) = watch::channel(0u64);
    let (bookings_removed, bookings_removed_rx) = watch::channel(0u64);
    tokio::spawn(
        kube::runtime::reflector(
            bookings_writer,
            kube::runtime::WatchStreamExt::default_backoff(watcher(
                bookings_api.clone(),
                wc.clone(),
            )),
        )
        .for_each(move |ev| {
            let bump = |tx: &watch::Sender<u64>| tx.send_modify(|n| *n = n.wrapping_add(1));
            match &ev {
                Ok(watcher::Event::Apply(b)) => {
                    bump(&bookings_changed);
                    // A changed slot can change other bookings' arbitration.
                    if b.metadata.generation.unwrap_or(1) > 1 {
                        bump(&bookings_removed);
                    }
                }
                Ok(watcher::Event::Delete(_)) => {
                    bump(&bookings_changed);
                    bump(&bookings_removed);
                }
                Ok(watcher::Event::InitDone) => {
                    bump(&bookings_changed);
                    bump(&bookings_removed);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "booking watch error; retrying"),
            }
            futures::future::ready(())
        }),
    );

    let ctx = Arc::new(Context {
        client: client.clone(),
        inventory: inventory.clone(),
        executor,
        keys,
        default_region,
        bookings: bookings_store.clone(),
        resources: resources_store.clone(),
        attempts: Mutex::new(BTreeMap::new()),
        targeted: Mutex::new(BTreeMap::new()),
        targeted_min_interval: chrono::Duration::from_std(args.inventory_interval())
            .unwrap_or(chrono::Duration::seconds(30)),
        backoff: Backoff::default(),
        metrics: metrics.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "booking-controller".into(),
                instance: Some(identity.clone()),
            },
        ),
    });

    let stop = || shutdown_future(shutdown_rx.clone());
    let of_resource = {
        let store = bookings_store.clone();
        move |r: Resource| -> Vec<ObjectRef<Booking>> {
            let ns = r.namespace();
            let name = r.name_any();
            store
                .state()
                .iter()
                .filter(|o| o.namespace() == ns && o.spec.resource_name == name)
                .map(|o| ObjectRef::from_obj(o.as_ref()))
                .collect()
        }
    };
    let bookings = booking_ctrl
        .watches(resources_api.clone(), wc.clone(), of_resource)
        .reconcile_all_on(ticks(bookings_removed_rx))
        .graceful_shutdown_on(stop())
        .run(
            reconcile::booking::reconcile,
            error_policy("Booking"),
            ctx.clone(),
        )
        .for_each(|_| async {});
    let resources = resource_ctrl
        .reconcile_all_on(ticks(bookings_changed_rx))
        .reconcile_all_on(ticks(inventory.subscribe()))
        .graceful_shutdown_on(stop())
        .run(
            reconcile::resource::reconcile,
            error_policy("Resource"),
            ctx.clone(),
        )
        .for_each(|_| async {});
    let monitors = monitor_ctrl
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
        api::<BookingScheduler>(&client, &ns),
        Arc::new(reconcile::scheduler::SchedulerContext {
            client: client.clone(),
            recorder: recorder(),
            clock: clock.clone(),
        }),
        stop(),
    );
    let notifications = reconcile::notification::run(
        bookings_api_for_notifications,
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
    match leader_task {
        Some(mut task) => {
            tokio::select! {
                _ = controllers => {
                    // Shut down: the lease task sees the same signal and releases the Lease so
                    // that a standby replica takes over at once.
                    ready.set(false);
                    let _ = shutdown_tx.send(true);
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
            controllers.await;
            Ok(())
        }
    }
}
