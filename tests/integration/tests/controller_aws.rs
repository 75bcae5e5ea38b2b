//! The controller's AWS layer against the real moto server: inventories per (type, region) over
//! both tag-key forms, targeted refresh, batched starts and stops, lock tags, RDS.

use std::sync::Arc;

use booking_controller::aws::executor::{Executor, Target};
use booking_controller::aws::inventory::Inventory;
use booking_controller::aws::sdk::SdkClients;
use booking_controller::metrics::Metrics;
use booking_controller::model::{InventoryKey, ProviderType};
use booking_controller::tags::TagKeys;
use booking_harness::TestDir;
use booking_harness::aws_query::Service;
use booking_harness::moto::{self, MotoServer};
use booking_tests::e2e::{ec2_in, instances};

use booking_tests::e2e::OTHER_REGION;

fn key(kind: ProviderType, region: &str) -> InventoryKey {
    InventoryKey {
        kind,
        region: region.to_owned(),
    }
}

/// The state of each instance, in the order of `ids`.
async fn states(client: &aws_sdk_ec2::Client, ids: &[String]) -> Vec<String> {
    instances(client, ids)
        .await
        .into_iter()
        .map(|(state, _)| state)
        .collect()
}

/// The tags of one instance, sorted.
async fn tags_of(client: &aws_sdk_ec2::Client, id: &str) -> Vec<(String, String)> {
    let (_, mut tags) = instances(client, &[id.to_owned()]).await.remove(0);
    tags.sort();
    tags
}

struct Setup {
    _dir: TestDir,
    moto: MotoServer,
    inventory: Inventory,
    executor: Executor,
}

async fn setup(label: &str) -> Setup {
    let dir = TestDir::new(label).expect("test dir");
    let moto = MotoServer::start(&dir).await.expect("moto starts");
    let clients = Arc::new(SdkClients::new(moto.sdk_config(), Metrics::new()));
    let inventory = Inventory::new(
        clients.clone(),
        clients.clone(),
        TagKeys::default(),
        Metrics::new(),
    );
    let executor = Executor::new(clients.clone(), clients);
    Setup {
        _dir: dir,
        moto,
        inventory,
        executor,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_covers_both_key_forms_two_regions_and_rds_with_one_call_per_page() {
    let s = setup("controller-aws-inventory").await;
    let home = s.moto.ec2();
    let away = ec2_in(&s.moto, OTHER_REGION);
    let analytics = moto::seed_ec2_instances(
        &home,
        3,
        &[
            ("resource-booking/managed", "true"),
            ("resource-booking/application", "analytics"),
        ],
    )
    .await
    .unwrap();
    let web = moto::seed_ec2_instances(
        &home,
        2,
        &[
            ("resource-booking-managed", "true"),
            ("resource-booking-application", "web"),
        ],
    )
    .await
    .unwrap();
    moto::seed_ec2_instances(&home, 1, &[("resource-booking/application", "unmanaged")])
        .await
        .unwrap();
    moto::seed_ec2_instances(
        &home,
        1,
        &[
            ("resource-booking/managed", "false"),
            ("resource-booking/application", "off"),
        ],
    )
    .await
    .unwrap();
    let remote = moto::seed_ec2_instances(
        &away,
        2,
        &[
            ("resource-booking/managed", "true"),
            ("resource-booking/application", "analytics"),
        ],
    )
    .await
    .unwrap();
    let arn = moto::seed_rds_instance(
        &s.moto.rds(),
        "reports-db",
        &[
            ("resource-booking-managed", "true"),
            ("resource-booking-application", "reports"),
        ],
    )
    .await
    .unwrap();
    moto::seed_rds_instance(&s.moto.rds(), "unmanaged-db", &[("team", "x")])
        .await
        .unwrap();

    s.moto.start_recording().await.unwrap();
    let keys = TagKeys::default();
    for k in [
        key(ProviderType::Ec2, moto::REGION),
        key(ProviderType::Ec2, OTHER_REGION),
        key(ProviderType::Rds, moto::REGION),
    ] {
        s.inventory.refresh(&k).await.expect("refresh");
    }
    let counts = s.moto.action_counts().await.unwrap();
    assert_eq!(
        counts.get(Service::Ec2, "DescribeInstances"),
        2,
        "one page per EC2 region"
    );
    assert_eq!(
        counts.get(Service::Rds, "DescribeDBInstances"),
        1,
        "one page of RDS"
    );
    assert_eq!(
        counts.get(Service::Rds, "DescribeDBClusters"),
        1,
        "one page of Aurora DB clusters"
    );
    assert_eq!(counts.total(), 4, "no other calls");

    let home_snap = s
        .inventory
        .snapshot(&key(ProviderType::Ec2, moto::REGION))
        .unwrap();
    assert!(home_snap.complete);
    let groups: Vec<String> = home_snap.groups(&keys).into_iter().collect();
    assert_eq!(groups, vec!["analytics", "web"]);
    let mut ids: Vec<String> = home_snap
        .group("analytics")
        .into_iter()
        .map(|m| m.id)
        .collect();
    ids.sort();
    let mut want = analytics.clone();
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(home_snap.group("web").len(), web.len());
    assert!(
        home_snap
            .group("analytics")
            .iter()
            .all(|m| m.state == "running")
    );

    let away_snap = s
        .inventory
        .snapshot(&key(ProviderType::Ec2, OTHER_REGION))
        .unwrap();
    let away_ids: Vec<String> = away_snap
        .group("analytics")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(away_ids.len(), remote.len());

    let rds = s
        .inventory
        .snapshot(&key(ProviderType::Rds, moto::REGION))
        .unwrap();
    let reports = rds.group("reports");
    assert_eq!(reports.len(), 1, "{:?}", rds.members());
    assert_eq!(reports[0].id, "reports-db");
    assert_eq!(reports[0].arn.as_deref(), Some(arn.as_str()));
    assert_eq!(reports[0].state, "available");
    assert_eq!(rds.members().len(), 1, "the untagged DB is not managed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targeted_refresh_sees_a_freshly_tagged_group_with_one_call() {
    let s = setup("controller-aws-targeted").await;
    let home = s.moto.ec2();
    moto::seed_ec2_instances(
        &home,
        2,
        &[
            ("resource-booking/managed", "true"),
            ("resource-booking/application", "old"),
        ],
    )
    .await
    .unwrap();
    let k = key(ProviderType::Ec2, moto::REGION);
    s.inventory.refresh(&k).await.unwrap();
    let fresh = moto::seed_ec2_instances(
        &home,
        2,
        &[
            ("resource-booking-managed", "true"),
            ("resource-booking-application", "fresh"),
        ],
    )
    .await
    .unwrap();
    assert!(s.inventory.snapshot(&k).unwrap().group("fresh").is_empty());
    s.moto.start_recording().await.unwrap();
    s.inventory.refresh_group(&k, "fresh").await.unwrap();
    let counts = s.moto.action_counts().await.unwrap();
    assert_eq!(counts.total(), 1, "one filtered DescribeInstances");
    let snap = s.inventory.snapshot(&k).unwrap();
    assert_eq!(snap.group("fresh").len(), fresh.len());
    assert_eq!(snap.group("old").len(), 2, "other groups are kept");

    // Many groups asked for at once (Resources created together) share their calls: the
    // first call takes one group, the next takes every group that waited meanwhile.
    let tags: Vec<String> = (0..12).map(|i| format!("new-{i}")).collect();
    for tag in &tags {
        moto::seed_ec2_instances(
            &home,
            1,
            &[
                ("resource-booking/managed", "true"),
                ("resource-booking/application", tag.as_str()),
            ],
        )
        .await
        .unwrap();
    }
    s.moto.clear_recording().await.unwrap();
    let results = futures::future::join_all(
        tags.iter()
            .map(|tag| s.inventory.refresh_group(&k, tag.as_str())),
    )
    .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let counts = s.moto.action_counts().await.unwrap();
    let describes = counts.get(Service::Ec2, "DescribeInstances");
    assert!(
        (1..=2).contains(&describes) && counts.total() == describes,
        "12 groups refreshed together in at most two calls: {counts:?}"
    );
    let snap = s.inventory.snapshot(&k).unwrap();
    for tag in &tags {
        assert_eq!(snap.group(tag).len(), 1, "group {tag}");
    }
    assert_eq!(snap.group("fresh").len(), fresh.len());
    assert_eq!(snap.group("old").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_stops_starts_and_tags_ec2_in_batches_and_rds_per_db() {
    let s = setup("controller-aws-executor").await;
    let home = s.moto.ec2();
    let a = moto::seed_ec2_instances(&home, 3, &[("resource-booking/managed", "true")])
        .await
        .unwrap();
    let b = moto::seed_ec2_instances(&home, 2, &[("resource-booking/managed", "true")])
        .await
        .unwrap();
    s.moto.start_recording().await.unwrap();
    // Two groups stopping at the same moment share one StopInstances call.
    let (ra, rb) = tokio::join!(
        s.executor.stop(ProviderType::Ec2, moto::REGION, &a, false),
        s.executor.stop(ProviderType::Ec2, moto::REGION, &b, true),
    );
    assert!(
        ra.iter().chain(&rb).all(|(_, r)| r.is_ok()),
        "{ra:?} {rb:?}"
    );
    let (ra, rb) = tokio::join!(
        s.executor.start(ProviderType::Ec2, moto::REGION, &a[..2]),
        s.executor.start(ProviderType::Ec2, moto::REGION, &b),
    );
    assert!(ra.iter().chain(&rb).all(|(_, r)| r.is_ok()));
    let counts = s.moto.action_counts().await.unwrap();
    // The two groups' starts are sent together and share one call, unless the batcher ran
    // between the two sends (a thread preempted on a loaded machine): then the second waits for
    // the first's answer and goes out alone. Never one call per instance: each group's members
    // reach the batcher in one message. That callers sent together share one call is the
    // executor's unit tests' claim and the bench's figure (1,000 starts, one call).
    let starts = counts.get(Service::Ec2, "StartInstances");
    assert!(
        (1..=2).contains(&starts),
        "batched starts: {starts} StartInstances for 2 groups of 4 instances"
    );
    assert_eq!(
        counts.get(Service::Ec2, "StopInstances"),
        2,
        "plain and hibernating stops are different calls"
    );
    assert_eq!(
        states(&home, &a).await,
        vec!["running", "running", "stopped"]
    );
    assert_eq!(states(&home, &b).await, vec!["running", "running"]);

    let targets: Vec<Target> = a
        .iter()
        .map(|id| Target {
            id: id.clone(),
            arn: None,
        })
        .collect();
    let lock = vec![
        (
            "resource-booking/locked-by".to_string(),
            "alice".to_string(),
        ),
        (
            "resource-booking/locked-until".to_string(),
            "2031-01-10T11:00:00Z".to_string(),
        ),
    ];
    let out = s
        .executor
        .tag(ProviderType::Ec2, moto::REGION, &targets, &lock)
        .await;
    assert!(out.iter().all(|(_, r)| r.is_ok()));
    let tags = tags_of(&home, &a[0]).await;
    assert!(
        tags.contains(&lock[0]) && tags.contains(&lock[1]),
        "{tags:?}"
    );
    s.executor
        .untag(
            ProviderType::Ec2,
            moto::REGION,
            &targets[0],
            &[
                "resource-booking/locked-by".into(),
                "resource-booking/locked-until".into(),
            ],
        )
        .await
        .unwrap();
    let tags = tags_of(&home, &a[0]).await;
    assert!(!tags.iter().any(|(k, _)| k.contains("locked")), "{tags:?}");

    // RDS: one call per DB, tags by ARN.
    let rds = s.moto.rds();
    let arn = moto::seed_rds_instance(&rds, "db-one", &[("resource-booking/managed", "true")])
        .await
        .unwrap();
    let out = s
        .executor
        .stop(ProviderType::Rds, moto::REGION, &["db-one".into()], false)
        .await;
    assert!(out[0].1.is_ok(), "{out:?}");
    let target = Target {
        id: "db-one".into(),
        arn: Some(arn.clone()),
    };
    let out = s
        .executor
        .tag(
            ProviderType::Rds,
            moto::REGION,
            std::slice::from_ref(&target),
            &lock,
        )
        .await;
    assert!(out[0].1.is_ok(), "{out:?}");
    let status = rds
        .describe_db_instances()
        .db_instance_identifier("db-one")
        .send()
        .await
        .unwrap();
    let db = &status.db_instances()[0];
    assert_eq!(db.db_instance_status(), Some("stopped"));
    assert!(
        db.tag_list()
            .iter()
            .any(|t| t.key() == Some("resource-booking/locked-by"))
    );
    let out = s
        .executor
        .start(ProviderType::Rds, moto::REGION, &["db-one".into()])
        .await;
    assert!(out[0].1.is_ok());
    // Starting a DB that is not stopped is refused with AWS's code, for the plan to retry.
    let out = s
        .executor
        .start(ProviderType::Rds, moto::REGION, &["db-one".into()])
        .await;
    let err = out[0].1.as_ref().expect_err("start of an available DB");
    assert!(err.code.starts_with("InvalidDBInstanceState"), "{err:?}");
    assert!(err.is_retryable());
}
