//! Section `startup`: from the controller's process start to its first correct reconcile with
//! 10,000 bookings stored. One more booking's slot began while no controller ran, on a group
//! whose instance is stopped; the figure is the time from the spawn of the process to the
//! first StartInstances naming that instance reaching the AWS proxy (and, beside it, to the
//! first `/readyz` answering 200).

use std::time::{Duration, Instant, SystemTime};

use booking_harness::proxy::FaultProxy;
use chrono::Utc;

use super::api_load::{World, controller_process, instance_state, store_future_bookings, world};
use super::*;

/// When the controller first answered `/readyz` with 200 and first asked AWS to start
/// `instance`, from its spawn at `spawned`.
async fn time_to_start(
    proxy: &FaultProxy,
    admin: u16,
    instance: &str,
    spawned: SystemTime,
    limit: Duration,
) -> anyhow::Result<(Option<Duration>, Duration)> {
    let t0 = Instant::now();
    let mut ready = None;
    loop {
        if ready.is_none()
            && super::controller::http_get(admin, "/readyz")
                .await
                .is_ok_and(|r| r.starts_with("HTTP/1.1 200"))
        {
            ready = spawned.elapsed().ok();
        }
        let started = proxy
            .requests()
            .into_iter()
            .filter(|r| r.action.as_deref() == Some("StartInstances") && r.status < 300)
            .find(|r| r.resource_ids.iter().any(|id| id == instance));
        if let Some(r) = started {
            let at = r.at.duration_since(spawned).unwrap_or_default();
            // Ready may come after the start; wait for it too.
            while ready.is_none() && t0.elapsed() < limit {
                if super::controller::http_get(admin, "/readyz")
                    .await
                    .is_ok_and(|r| r.starts_with("HTTP/1.1 200"))
                {
                    ready = spawned.elapsed().ok();
                } else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            return Ok((ready, at));
        }
        if t0.elapsed() > limit {
            bail!(
                "no StartInstances of {instance} within {}s of the controller's start",
                limit.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn run(args: &Args, dir: &TestDir, results: &mut Results) -> anyhow::Result<()> {
    if !args.client_cpus.is_empty() {
        sys::pin(std::process::id(), &sys::all_cpus())?;
    }
    let stored = if args.smoke { 20 } else { 10_000 };
    let World {
        cluster,
        kubeconfig,
        moto,
        proxy,
        instance: late,
        ..
    } = world(args, dir, "startup", "late").await?;
    let client = cluster.client.clone();
    let ec2 = moto.ec2();
    store_future_bookings(args, &client, results, "startup_bookings", stored).await?;
    // The late booking: its slot begins now, with no controller running, and lasts an hour.
    let now = Utc::now();
    create_all(
        args,
        &client,
        "bookings",
        "Booking",
        vec![fixtures::booking(
            "late",
            "ec2.late",
            now,
            now + chrono::Duration::hours(1),
        )],
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let (mut starts, mut readies) = (Vec::new(), Vec::new());
    for round in 0..args.rounds {
        ensure!(
            instance_state(&ec2, &late).await? == "stopped",
            "{late} is not stopped before round {round}"
        );
        let admin = free_port()?;
        let builder = controller_process(args, &kubeconfig, &proxy, admin, &[])?;
        proxy.clear_requests();
        let spawned = SystemTime::now();
        let mut controller = builder.spawn(dir)?;
        let (ready, started) =
            time_to_start(&proxy, admin, &late, spawned, Duration::from_secs(120)).await?;
        eprintln!(
            "startup round {round}: StartInstances of the late booking's instance {:.3}s after the spawn, /readyz {:?}",
            started.as_secs_f64(),
            ready.map(|d| d.as_secs_f64())
        );
        starts.push(started.as_secs_f64());
        if let Some(r) = ready {
            readies.push(r.as_secs_f64());
        }
        controller.stop()?;
        // Stopped again for the next round, as if the slot had just begun with no controller.
        let stop = ec2.stop_instances().instance_ids(&late).send();
        stop.await.with_context(|| format!("stopping {late}"))?;
        let t0 = Instant::now();
        while instance_state(&ec2, &late).await? != "stopped" && t0.elapsed().as_secs() < 30 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    results.insert(
        "controller_startup_seconds_10k_bookings".into(),
        round3(median(&starts).context("no start-up round")?),
    );
    if let Some(r) = median(&readies) {
        results.insert(
            "controller_startup_readyz_seconds_10k_bookings".into(),
            round3(r),
        );
    }
    results.insert("controller_startup_rounds".into(), starts.len() as f64);
    drop(proxy);
    drop(moto);
    drop(cluster);
    Ok(())
}
