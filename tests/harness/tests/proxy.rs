//! The fault-injecting proxy, driven by the real AWS SDK clients against moto.

use std::time::Duration;

use aws_sdk_ec2::error::ProvideErrorMetadata;
use booking_harness::TestDir;
use booking_harness::aws_query::Service;
use booking_harness::moto::{MotoServer, seed_ec2_instances, seed_rds_instance};
use booking_harness::proxy::{AwsError, Fault, FaultProxy};

fn no_retry() -> aws_config::retry::RetryConfig {
    aws_config::retry::RetryConfig::standard().with_max_attempts(1)
}

fn fast_retry() -> aws_config::retry::RetryConfig {
    aws_config::retry::RetryConfig::standard()
        .with_max_attempts(3)
        .with_initial_backoff(Duration::from_millis(5))
        .with_max_backoff(Duration::from_millis(20))
}

fn ec2_with(proxy: &FaultProxy, retry: aws_config::retry::RetryConfig) -> aws_sdk_ec2::Client {
    let conf = aws_sdk_ec2::config::Builder::from(&proxy.sdk_config())
        .retry_config(retry)
        .build();
    aws_sdk_ec2::Client::from_conf(conf)
}

fn rds_with(proxy: &FaultProxy, retry: aws_config::retry::RetryConfig) -> aws_sdk_rds::Client {
    let conf = aws_sdk_rds::config::Builder::from(&proxy.sdk_config())
        .retry_config(retry)
        .build();
    aws_sdk_rds::Client::from_conf(conf)
}

#[tokio::test]
async fn injects_aws_shaped_faults_and_forwards_the_rest() {
    let dir = TestDir::new("proxy").expect("test dir");
    let moto = MotoServer::start(&dir).await.expect("moto");
    let proxy = FaultProxy::start(&moto.endpoint_url())
        .await
        .expect("proxy");
    let ec2 = ec2_with(&proxy, no_retry());
    let rds = rds_with(&proxy, no_retry());

    // Seeding goes through the proxy unchanged.
    let ids = seed_ec2_instances(&ec2, 2, &[("resource-booking-application", "web")])
        .await
        .expect("seed");
    seed_rds_instance(&rds, "web-db", &[("resource-booking-application", "web")])
        .await
        .expect("seed rds");
    ec2.stop_instances()
        .set_instance_ids(Some(ids.clone()))
        .send()
        .await
        .expect("stop");

    // EC2 throttling, twice, then success.
    proxy.inject(Fault::throttle(Service::Ec2, "StartInstances").times(2));
    for attempt in 0..2 {
        let err = ec2
            .start_instances()
            .instance_ids(&ids[0])
            .send()
            .await
            .expect_err("throttled");
        assert_eq!(
            err.code(),
            Some("RequestLimitExceeded"),
            "attempt {attempt}"
        );
        assert_eq!(err.message(), Some("Request limit exceeded."));
        assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(503));
    }
    assert!(proxy.pending_faults().is_empty());
    ec2.start_instances()
        .instance_ids(&ids[0])
        .send()
        .await
        .expect("third call forwarded");
    assert_eq!(proxy.count("StartInstances"), 3);

    // An error tied to one instance: requests without it pass.
    proxy.inject(Fault::incorrect_instance_state("StartInstances", &ids[1]));
    ec2.start_instances()
        .instance_ids(&ids[0])
        .send()
        .await
        .expect("other instance unaffected");
    let err = ec2
        .start_instances()
        .set_instance_ids(Some(ids.clone()))
        .send()
        .await
        .expect_err("names the faulty instance");
    assert_eq!(err.code(), Some("IncorrectInstanceState"));
    assert!(err.message().unwrap_or_default().contains(&ids[1]));
    assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(400));

    // RDS throttling has RDS's shape and status; other RDS actions are forwarded.
    proxy.inject(Fault::throttle(Service::Rds, "StopDBInstance"));
    let err = rds
        .stop_db_instance()
        .db_instance_identifier("web-db")
        .send()
        .await
        .expect_err("throttled");
    assert_eq!(err.code(), Some("Throttling"));
    assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(400));
    proxy.inject(Fault::new(
        "StartDBInstance",
        AwsError::invalid_db_instance_state("web-db"),
    ));
    let err = rds
        .start_db_instance()
        .db_instance_identifier("web-db")
        .send()
        .await
        .expect_err("invalid state");
    assert_eq!(err.code(), Some("InvalidDBInstanceState"));
    let dbs = rds.describe_db_instances().send().await.expect("forwarded");
    assert_eq!(dbs.db_instances().len(), 1);

    // The log has every request, in order, with what was injected.
    let log = proxy.requests();
    let injected: Vec<_> = log.iter().filter_map(|r| r.injected.as_deref()).collect();
    assert_eq!(
        injected,
        vec![
            "RequestLimitExceeded",
            "RequestLimitExceeded",
            "IncorrectInstanceState",
            "Throttling",
            "InvalidDBInstanceState"
        ]
    );
    assert!(log.windows(2).all(|w| w[0].since_start <= w[1].since_start));
    let rds_stop = log
        .iter()
        .find(|r| r.action.as_deref() == Some("StopDBInstance"))
        .expect("recorded");
    assert_eq!(rds_stop.service, Some(Service::Rds));
    assert_eq!(rds_stop.resource_ids, vec!["web-db".to_owned()]);
    assert_eq!(rds_stop.status, 400);

    // moto only saw the forwarded calls.
    proxy.clear_requests();
    assert!(proxy.requests().is_empty());
}

#[tokio::test]
async fn sdk_retries_through_injected_throttling() {
    let dir = TestDir::new("proxy-retry").expect("test dir");
    let moto = MotoServer::start(&dir).await.expect("moto");
    moto.start_recording().await.expect("recording");
    let proxy = FaultProxy::start(&moto.endpoint_url())
        .await
        .expect("proxy");
    let ec2 = ec2_with(&proxy, fast_retry());
    let ids = seed_ec2_instances(&ec2, 1, &[]).await.expect("seed");

    proxy.inject(Fault::throttle(Service::Ec2, "StopInstances").times(2));
    ec2.stop_instances()
        .instance_ids(&ids[0])
        .send()
        .await
        .expect("succeeds on the third attempt");
    assert_eq!(proxy.count("StopInstances"), 3);
    let counts = moto.action_counts().await.expect("counts");
    assert_eq!(counts.get(Service::Ec2, "StopInstances"), 1, "{counts:?}");

    // An upstream that is gone gives 502, not a hang or a panic.
    let dead = FaultProxy::start("http://127.0.0.1:1")
        .await
        .expect("proxy");
    let err = ec2_with(&dead, no_retry())
        .describe_instances()
        .send()
        .await
        .expect_err("no upstream");
    assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(502));
}

/// A delay holds the matching action that many times, then forwards it unchanged; other actions
/// are not held. The request is recorded with its arrival time and the wait in its duration.
#[tokio::test]
async fn delays_hold_an_action_then_forward_it() {
    let dir = TestDir::new("proxy-delay").expect("test dir");
    let moto = MotoServer::start(&dir).await.expect("moto");
    let proxy = FaultProxy::start(&moto.endpoint_url())
        .await
        .expect("proxy");
    let ec2 = ec2_with(&proxy, no_retry());
    let ids = seed_ec2_instances(&ec2, 1, &[("resource-booking-application", "slow")])
        .await
        .expect("seed");
    proxy.delay("StartInstances", Duration::from_millis(1500), 1);
    assert_eq!(proxy.pending_delays().len(), 1);
    let began = std::time::Instant::now();
    ec2.describe_instances().send().await.expect("not delayed");
    assert!(
        began.elapsed() < Duration::from_millis(1000),
        "describe not held"
    );
    let start = ec2
        .start_instances()
        .set_instance_ids(Some(ids.clone()))
        .send();
    let started = tokio::spawn(start);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(proxy.pending_delays().is_empty(), "used up on arrival");
    assert!(!started.is_finished(), "still held");
    started.await.unwrap().expect("forwarded after the delay");
    let took = began.elapsed();
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    let start = proxy
        .requests()
        .into_iter()
        .find(|r| r.action.as_deref() == Some("StartInstances"))
        .expect("recorded");
    assert_eq!((start.status, start.injected.as_deref()), (200, None));
    assert!(start.duration >= Duration::from_millis(1500), "{start:?}");
    let again = std::time::Instant::now();
    ec2.start_instances()
        .set_instance_ids(Some(ids))
        .send()
        .await
        .expect("second start");
    assert!(again.elapsed() < Duration::from_millis(1000), "only once");
}
