//! `booking-webhook`: the validating and mutating admission webhook of the booking API.
//!
//! The handlers are plumbing around the pure rules of [`booking_shared::validation`] and the
//! interval index of [`booking_shared::overlap`], which the controller uses too:
//!
//! - [`admission`]: AdmissionReview in, decision out (validate / mutate), never a panic.
//! - [`authorize`]: who may book for whom (`--restrict-user-id`), by SubjectAccessReview.
//! - [`caches`]: the watches feeding the overlap index and the Resource cache.
//! - [`server`]: the HTTPS admission listener (the plain-HTTP admin port is
//!   `booking_shared::ops`, the controller's too).
//! - [`tls`]: the serving certificate, reloaded when its files change.
//! - [`metrics`]: Prometheus metrics.
//! - [`config`]: command-line flags (each also an environment variable).
//!
//! The controller's arbitration remains the final guard against two overlapping bookings
//! admitted at the same instant (e.g. by two replicas); see [`admission`].

pub mod admission;
pub mod authorize;
pub mod caches;
pub mod config;
pub mod metrics;
pub mod server;
pub mod state;
pub mod tls;

use std::sync::Arc;

use anyhow::Context as _;
use tokio::{net::TcpListener, sync::watch};

use crate::{config::Args, metrics::Metrics, state::State};

/// Runs the webhook until SIGTERM or SIGINT: loads the certificate, starts the watches, serves
/// admission and admin requests, then drains ([`drain`]) and shuts down gracefully.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let policy = args.policy.policy()?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cert = tls::ReloadingCert::load(
        args.tls.tls_cert_file.clone(),
        args.tls.tls_key_file.clone(),
        provider,
    )
    .await
    .context("loading the serving certificate")?;
    let tls_config = Arc::new(
        cert.server_config_with_client_ca(args.tls.client_ca_file.as_deref())
            .context("building the TLS configuration")?,
    );

    let client = client().await?;
    let metrics = Metrics::new();
    let (resources, resource_writer) = caches::resource_store();
    let state = Arc::new(state(&args, policy, resources, &client, metrics.clone()));

    let admission_listener = TcpListener::bind(args.server.listen_addr)
        .await
        .with_context(|| format!("binding the admission port {}", args.server.listen_addr))?;
    let admin_listener = TcpListener::bind(args.server.admin_addr)
        .await
        .with_context(|| format!("binding the admin port {}", args.server.admin_addr))?;
    tracing::info!(
        admission = %admission_listener.local_addr()?,
        admin = %admin_listener.local_addr()?,
        "booking-webhook listening"
    );

    let (stop, shutdown) = watch::channel(false);
    let tasks = vec![
        tokio::spawn(caches::run_booking_watch(
            client.clone(),
            state.clone(),
            shutdown.clone(),
        )),
        tokio::spawn(caches::run_resource_watch(
            client,
            resource_writer,
            state.clone(),
            shutdown.clone(),
        )),
        tokio::spawn(
            cert.clone()
                .watch(args.tls.reload_interval(), metrics, shutdown.clone()),
        ),
        tokio::spawn(server::serve_admission(
            admission_listener,
            tls_config,
            state.clone(),
            args.server.limits(),
            shutdown.clone(),
        )),
        tokio::spawn(booking_shared::ops::serve_admin(
            admin_listener,
            state.clone(),
            shutdown,
        )),
    ];

    booking_shared::ops::shutdown_signal().await;
    drain(&state, args.server.drain()).await;
    tracing::info!("shutting down: no new connections; finishing open requests");
    let _ = stop.send(true);
    for task in tasks {
        if let Err(e) = task.await {
            tracing::error!(error = %e, "a task of the webhook failed");
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// The Kubernetes client of the watches and the permission checks.
async fn client() -> anyhow::Result<kube::Client> {
    let mut config = kube::Config::infer()
        .await
        .context("connecting to the Kubernetes API (in-cluster config or KUBECONFIG)")?;
    // The client's own retries of 429/503/504 (up to 15, minutes apart) would hide a failing
    // watch from the watchers, which retry with their own backoff and report every failure
    // (see caches::run_booking_watch).
    config.default_retry = false;
    booking_shared::client::client(config).context("building the Kubernetes client")
}

/// The webhook's state from its settings.
fn state(
    args: &Args,
    policy: booking_shared::validation::Policy,
    resources: kube::runtime::reflector::Store<booking_shared::api::Resource>,
    client: &kube::Client,
    metrics: Metrics,
) -> State {
    let mut state = State::new(
        policy,
        chrono::Duration::seconds(i64::from(args.policy.reservation_ttl_seconds)),
        Some(resources),
        booking_shared::time::system_clock(),
        metrics,
    );
    state.watch_failure_bound =
        chrono::Duration::seconds(i64::from(args.server.watch_failure_bound_seconds));
    state.max_reservations_per_requester = args.policy.max_reservations_per_requester as usize;
    if args.policy.restrict_user_id {
        state = state.with_authorizer(authorize::Authorizer::new(
            client.clone(),
            std::time::Duration::from_millis(args.policy.authorization_timeout_ms),
        ));
        tracing::info!(
            verb = authorize::VERB,
            "spec.user_id is restricted to the requester"
        );
    }
    state
}

/// The drain after SIGTERM: `/readyz` fails at once, so the Service's endpoints drop this
/// replica, while admission requests (from API servers that still route here) are answered for
/// `period`; a second signal ends the drain early.
async fn drain(state: &State, period: std::time::Duration) {
    state.mark_draining();
    tracing::info!(
        drain_seconds = period.as_secs(),
        "shutting down: /readyz fails, admission requests are still served for the drain period"
    );
    tokio::select! {
        _ = tokio::time::sleep(period) => {}
        _ = booking_shared::ops::shutdown_signal() => {
            tracing::info!("second signal: ending the drain early");
        }
    }
}
