//! End to end: Aurora DB clusters through the real `booking-controller` binary, the real
//! control plane and the real moto server, with the harness's AWS proxy recording every call the
//! controller makes.
//!
//! One `rds` group holds a tagged Aurora cluster (aurora-postgresql, two DB instances, one of
//! them tagged too), a plain DB instance, and a tagged DB instance of an untagged cluster. A
//! booking starts the cluster with StartDBCluster (retried after AWS first refuses it with
//! `InvalidDBClusterStateFault`) and the plain instance with StartDBInstance; its end stops them; no instance of a cluster is ever started or stopped alone, and the untagged
//! cluster is never touched but reported in the `UntaggedCluster` condition. A ResourceMonitor
//! creates the group's Resource, and that of a group made of one cluster alone.
//!
//! moto 5.2.5 differs from AWS in one way that matters here: StartDBCluster/StopDBCluster change
//! the cluster's status but not (or, for stop, only the first of) its DB instances' statuses.
//! So the test reads `status.running` against what moto reports for the instances, and checks
//! the cluster's own status for the start and stop.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_rds::types::Tag;
use booking_harness::aws_query::Service;
use booking_harness::moto;
use booking_harness::process::Readiness;
use booking_harness::proxy::{AwsError as ProxyAwsError, Fault, FaultProxy};
use booking_shared::api::{
    Booking, Resource, ResourceMonitor, ResourceMonitorSpec, ResourceState, ResourceStatus,
};
use booking_tests::e2e::*;
use chrono::Utc;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};

const TAG: &str = "ledger";

fn group_tags() -> Vec<Tag> {
    [
        ("resource-booking/managed", "true"),
        ("resource-booking/application", TAG),
    ]
    .iter()
    .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
    .collect()
}

/// Creates the Aurora cluster `id` (tagged into the group when `tagged`) with `members` DB
/// instances (each tagged into the group when its flag is set); returns the cluster's ARN.
async fn aurora(
    rds: &aws_sdk_rds::Client,
    id: &str,
    tagged: bool,
    members: &[(&str, bool)],
) -> String {
    let out = rds
        .create_db_cluster()
        .db_cluster_identifier(id)
        .engine("aurora-postgresql")
        .master_username("booking")
        .master_user_password("booking-test-password")
        .set_tags(tagged.then(group_tags))
        .send()
        .await
        .expect("CreateDBCluster");
    for (member, tagged) in members {
        rds.create_db_instance()
            .db_instance_identifier(*member)
            .db_cluster_identifier(id)
            .engine("aurora-postgresql")
            .db_instance_class("db.r5.large")
            .set_tags(tagged.then(group_tags))
            .send()
            .await
            .expect("CreateDBInstance in a cluster");
    }
    out.db_cluster()
        .and_then(|c| c.db_cluster_arn())
        .expect("cluster ARN")
        .to_owned()
}

async fn cluster_status(rds: &aws_sdk_rds::Client, id: &str) -> String {
    let out = rds
        .describe_db_clusters()
        .db_cluster_identifier(id)
        .send()
        .await
        .expect("DescribeDBClusters");
    out.db_clusters()[0].status().unwrap_or_default().to_owned()
}

/// How many of `ids` moto reports `available`.
async fn available(rds: &aws_sdk_rds::Client, ids: &[&str]) -> u32 {
    let mut n = 0;
    for id in ids {
        if db_status(rds, id).await == "available" {
            n += 1;
        }
    }
    n
}

async fn tags_of(rds: &aws_sdk_rds::Client, arn: &str) -> BTreeMap<String, String> {
    let out = rds
        .list_tags_for_resource()
        .resource_name(arn)
        .send()
        .await
        .expect("ListTagsForResource");
    out.tag_list()
        .iter()
        .filter_map(|t| Some((t.key()?.to_owned(), t.value()?.to_owned())))
        .collect()
}

async fn status(api: &Api<Resource>) -> ResourceStatus {
    api.get("rds.ledger")
        .await
        .ok()
        .and_then(|r| r.status)
        .unwrap_or_default()
}

/// The group's status is the one given, `running` being what moto reports for the instances.
async fn counts_are(
    api: &Api<Resource>,
    rds: &aws_sdk_rds::Client,
    clusters_running: u32,
    state: ResourceState,
) -> Result<(), String> {
    let instances = ["ledger-1", "ledger-2", "ledger-plain", "bare-1"];
    let s = status(api).await;
    let want = (
        4,
        available(rds, &instances).await,
        Some(1),
        Some(clusters_running),
        Some(state),
    );
    let got = (
        s.instances,
        s.running,
        s.clusters,
        s.clusters_running,
        s.status,
    );
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "(instances, running, clusters, clustersRunning, status) {got:?}, want {want:?}; status {}",
            serde_json::to_string(&s).unwrap_or_default()
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_booking_starts_and_stops_an_aurora_cluster_as_a_whole_with_its_group() {
    let e = env("controller-aurora").await;
    let rds = e.moto.rds();
    let proxy = FaultProxy::start(&e.moto.endpoint_url())
        .await
        .expect("proxy");
    let ledger_arn = aurora(
        &rds,
        "ledger",
        true,
        &[("ledger-1", true), ("ledger-2", false)],
    )
    .await;
    // A tagged DB instance whose cluster does not carry the group's tags.
    aurora(&rds, "bare", false, &[("bare-1", true)]).await;
    // A group of one cluster alone (tagged `solo`, its instance not): a monitor finds it.
    let solo_tags = vec![
        Tag::builder()
            .key("resource-booking/managed")
            .value("true")
            .build(),
        Tag::builder()
            .key("resource-booking/application")
            .value("solo")
            .build(),
    ];
    let solo_arn = aurora(&rds, "solo", false, &[("solo-1", false)]).await;
    rds.add_tags_to_resource()
        .resource_name(&solo_arn)
        .set_tags(Some(solo_tags))
        .send()
        .await
        .expect("AddTagsToResource on the solo cluster");
    let managed = [
        ("resource-booking/managed", "true"),
        ("resource-booking/application", TAG),
    ];
    moto::seed_rds_instance(&rds, "ledger-plain", &managed)
        .await
        .unwrap();
    rds.stop_db_cluster()
        .db_cluster_identifier("ledger")
        .send()
        .await
        .expect("StopDBCluster");
    rds.stop_db_instance()
        .db_instance_identifier("ledger-plain")
        .send()
        .await
        .expect("StopDBInstance");
    assert_eq!(cluster_status(&rds, "ledger").await, "stopped");

    let port = booking_harness::free_port().unwrap();
    let admin = format!("127.0.0.1:{port}");
    let endpoint = proxy.endpoint_url();
    let mut controller = start_controller(
        &e,
        port,
        "replica-a",
        &[("AWS_ENDPOINT_URL", endpoint.as_str())],
    );
    controller
        .wait_ready(
            &Readiness::Http(format!("http://{admin}/readyz")),
            Duration::from_secs(30),
        )
        .await
        .expect("controller ready");
    let resources: Api<Resource> = Api::namespaced(e.client.clone(), &e.ns);
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let pp = PostParams::default();
    // A ResourceMonitor creates the Resources of both groups, the cluster-only one included.
    let monitors: Api<ResourceMonitor> = Api::namespaced(e.client.clone(), &e.ns);
    monitors
        .create(
            &pp,
            &ResourceMonitor {
                metadata: ObjectMeta {
                    name: Some("rds".into()),
                    ..Default::default()
                },
                spec: ResourceMonitorSpec {
                    type_: "rds".into(),
                    ..Default::default()
                },
                status: None,
            },
        )
        .await
        .unwrap();
    wait_for(
        "the monitor's Resources",
        Duration::from_secs(30),
        || async {
            let names: Vec<String> = resources
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter_map(|r| r.metadata.name)
                .collect();
            if names.iter().any(|n| n == "rds.ledger") && names.iter().any(|n| n == "rds.solo") {
                Ok(())
            } else {
                Err(format!("{names:?}"))
            }
        },
    )
    .await;
    // Its Resource, unbooked, stops the solo cluster and counts it.
    wait_for(
        "the solo cluster stopped",
        Duration::from_secs(30),
        || async {
            let s = resources
                .get("rds.solo")
                .await
                .ok()
                .and_then(|r| r.status)
                .unwrap_or_default();
            let c = cluster_status(&rds, "solo").await;
            if c == "stopped" && (s.instances, s.clusters) == (1, Some(1)) {
                Ok(())
            } else {
                Err(format!("cluster {c}, status {s:?}"))
            }
        },
    )
    .await;

    // Unbooked: counted, nothing started; the untagged cluster is named with the fix.
    // (bare-1 runs, so the group is PENDING.)
    wait_for("the group counted", Duration::from_secs(30), || {
        counts_are(&resources, &rds, 0, ResourceState::Pending)
    })
    .await;
    let s = status(&resources).await;
    let untagged = s
        .conditions
        .iter()
        .find(|c| c.type_ == "UntaggedCluster")
        .unwrap_or_else(|| panic!("no UntaggedCluster condition: {:?}", s.conditions));
    assert_eq!(
        (untagged.status.as_str(), untagged.reason.as_str()),
        ("True", "ClusterNotTagged")
    );
    for part in [
        "DB instance bare-1",
        "DB cluster bare",
        "resource-booking/managed=true",
        "resource-booking/application=ledger",
    ] {
        assert!(
            untagged.message.contains(part),
            "{part}: {}",
            untagged.message
        );
    }

    // Booked: the cluster starts as a whole, the plain instance with it, both locked. AWS
    // first refuses the cluster's start (a cluster-level state error): retried after backoff.
    proxy.inject(
        Fault::new(
            "StartDBCluster",
            ProxyAwsError::new(
                Service::Rds,
                400,
                "InvalidDBClusterStateFault",
                "DbCluster ledger is in stopping state but expected it to be one of stopped.",
            ),
        )
        .for_resource("ledger"),
    );
    let now = Utc::now();
    let end = now + chrono::Duration::seconds(45);
    bookings
        .create(&pp, &booking("close-books", "rds.ledger", now, end))
        .await
        .unwrap();
    wait_for(
        "the cluster and the instance up",
        Duration::from_secs(30),
        || async {
            let (c, i) = (
                cluster_status(&rds, "ledger").await,
                db_status(&rds, "ledger-plain").await,
            );
            if c == "available" && i == "available" {
                Ok(())
            } else {
                Err(format!("cluster {c}, instance {i}"))
            }
        },
    )
    .await;
    wait_for(
        "the counts of a running group",
        Duration::from_secs(30),
        || counts_are(&resources, &rds, 1, ResourceState::Running),
    )
    .await;
    let tags = tags_of(&rds, &ledger_arn).await;
    assert_eq!(
        (
            tags.get("resource-booking/locked-by").map(String::as_str),
            tags.get("resource-booking/lock-owner").map(String::as_str),
        ),
        (
            Some("user-of-close-books"),
            Some(format!("{}/rds.ledger", e.ns).as_str())
        ),
        "lock tags on the cluster: {tags:?}"
    );
    assert_eq!(cluster_status(&rds, "bare").await, "available");
    let events: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    let failed: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|ev| ev.reason.as_deref() == Some("StartFailed"))
        .filter_map(|ev| ev.message)
        .collect();
    assert!(
        failed
            .iter()
            .any(|m| m.contains("ledger: InvalidDBClusterStateFault")),
        "{failed:?}"
    );

    // The booking's end stops them and removes the lock.
    wait_for(
        "the cluster and the instance stopped",
        Duration::from_secs(90),
        || async {
            let (c, i) = (
                cluster_status(&rds, "ledger").await,
                db_status(&rds, "ledger-plain").await,
            );
            if c == "stopped" && i == "stopped" {
                Ok(())
            } else {
                Err(format!("cluster {c}, instance {i}"))
            }
        },
    )
    .await;
    assert!(Utc::now() >= end, "stopped before the booking's end");
    wait_for(
        "the lock removed from the cluster",
        Duration::from_secs(30),
        || async {
            let tags = tags_of(&rds, &ledger_arn).await;
            if tags.keys().any(|k| k.starts_with("resource-booking/lock")) {
                Err(format!("{tags:?}"))
            } else {
                Ok(())
            }
        },
    )
    .await;
    wait_for(
        "the counts of a stopped group",
        Duration::from_secs(30),
        || counts_are(&resources, &rds, 0, ResourceState::Pending),
    )
    .await;
    assert_eq!(cluster_status(&rds, "bare").await, "available");

    // What the controller asked AWS: the cluster by cluster calls, once each way; the plain
    // instance by instance calls; no cluster member, and nothing of the untagged cluster.
    let calls: Vec<(String, Vec<String>)> = proxy
        .requests()
        .into_iter()
        .filter(|r| r.injected.is_none())
        .filter_map(|r| Some((r.action?, r.resource_ids)))
        .filter(|(a, _)| a.starts_with("Start") || a.starts_with("Stop"))
        .collect();
    let of = |action: &str| -> Vec<Vec<String>> {
        calls
            .iter()
            .filter(|(a, _)| a == action)
            .map(|(_, ids)| ids.clone())
            .collect()
    };
    assert_eq!(
        of("StartDBCluster"),
        [vec!["ledger".to_string()]],
        "{calls:?}"
    );
    let mut stops = of("StopDBCluster");
    stops.sort();
    assert_eq!(
        stops,
        [vec!["ledger".to_string()], vec!["solo".to_string()]],
        "{calls:?}"
    );
    assert_eq!(
        of("StartDBInstance"),
        [vec!["ledger-plain".to_string()]],
        "{calls:?}"
    );
    assert_eq!(
        of("StopDBInstance"),
        [vec!["ledger-plain".to_string()]],
        "{calls:?}"
    );
    assert!(proxy.count("AddTagsToResource") >= 2, "{calls:?}");
    assert!(proxy.pending_faults().is_empty(), "the refusal was served");
    controller.stop().expect("stop");
}
