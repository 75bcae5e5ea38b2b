//! Tenancy in the controller, end to end, for when the webhook was bypassed (none is
//! registered here): the real `booking-controller` watching every namespace of a control plane
//! of the test's own, against the real moto server.
//!
//! - Two Resources of two namespaces claim one group: only the first-created acts; the other
//!   gets `GroupClaimed=False` (`ClaimedByAnother`) and a Warning Event naming the claimer, and
//!   its in-progress booking starts nothing — until the claimer is deleted or moves to another
//!   group.
//! - The operator's restrictions: a group whose instances are tagged for another namespace, and
//!   an untagged group claimed from a namespace not in `UNTAGGED_CLAIM_NAMESPACES`, are refused
//!   (`NamespaceNotAllowed`) and left alone.
//! - A lock of the booking's own `user_id` written by someone else (no `lock-owner` tag naming
//!   the Resource) is foreign: the group is left alone.
//! - A ResourceMonitor creates Resources only for groups its namespace may claim.

use std::time::Duration;

use booking_harness::aws_query::Service;
use booking_harness::control_plane::{ControlPlane, ControlPlaneOptions};
use booking_harness::moto::{self, MotoServer};
use booking_harness::process::{ProcessBuilder, Readiness};
use booking_harness::{TestDir, free_port};
use booking_shared::api::{Booking, Resource, ResourceMonitor, ResourceMonitorSpec};
use booking_tests::e2e::*;
use chrono::Utc;
use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};

const NAMESPACES: [&str; 4] = ["team-a", "team-b", "team-c", "team-d"];

/// `n` stopped instances of group `tag` with the `extra` tags; their IDs.
async fn group(
    ec2: &aws_sdk_ec2::Client,
    n: i32,
    tag: &str,
    extra: &[(&str, &str)],
) -> Vec<String> {
    let mut tags = vec![
        ("resource-booking/managed", "true"),
        ("resource-booking/application", tag),
    ];
    tags.extend_from_slice(extra);
    let ids = moto::seed_ec2_instances(ec2, n, &tags).await.unwrap();
    ec2.stop_instances()
        .set_instance_ids(Some(ids.clone()))
        .send()
        .await
        .unwrap();
    ids
}

fn condition(r: &Resource, type_: &str) -> Option<(String, String, String)> {
    r.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until Resource `ns/name` has condition `type_` with `status` and `reason`, whose
/// message contains `text`.
async fn wait_condition(
    client: &kube::Client,
    ns: &str,
    name: &str,
    type_: &str,
    want: (&str, &str, &str),
) {
    let api: Api<Resource> = Api::namespaced(client.clone(), ns);
    wait_for(
        &format!("{ns}/{name} {type_}={} {}", want.0, want.1),
        Duration::from_secs(30),
        || async {
            let r = api.get(name).await.map_err(|e| e.to_string())?;
            match condition(&r, type_) {
                Some((s, reason, m)) if s == want.0 && reason == want.1 && m.contains(want.2) => {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

async fn lock_tags(ec2: &aws_sdk_ec2::Client, ids: &[String]) -> Vec<(String, String)> {
    instances(ec2, ids)
        .await
        .into_iter()
        .flat_map(|(_, tags)| tags)
        .filter(|(k, _)| k.contains("lock"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_first_claimer_of_a_group_acts_and_operators_restrict_claims() {
    let dir = TestDir::new("tenancy-controller").unwrap();
    let moto = MotoServer::start(&dir).await.expect("moto");
    let plane = ControlPlane::start(&dir, ControlPlaneOptions::default())
        .await
        .expect("the control plane starts");
    let client = plane.client().await.unwrap();
    let crds = booking_tests::repo_root().join("manifests/crds");
    let out = booking_tests::kubectl::kubectl(
        plane.kubeconfig_path(),
        None,
        &["apply", "-f", &crds.to_string_lossy()],
        None,
    )
    .await;
    assert!(out.ok, "{}", out.stderr);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let pp = PostParams::default();
    for ns in NAMESPACES {
        let n = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces.create(&pp, &n).await.unwrap();
    }

    let ec2 = moto.ec2();
    let web = group(&ec2, 2, "web", &[]).await;
    let pair = group(&ec2, 1, "pair", &[]).await;
    let db = group(&ec2, 1, "db", &[("resource-booking/namespace", "team-a")]).await;
    let dbx = group(&ec2, 1, "dbx", &[("resource-booking/namespace", "team-a")]).await;
    let loose = group(&ec2, 1, "loose", &[]).await;
    let until = booking_shared::time::format_rfc3339(Utc::now() + chrono::Duration::hours(2));
    // Another tool's lock for the very user_id of team-a's booking below, without lock-owner.
    let shared = group(
        &ec2,
        1,
        "shared",
        &[
            ("resource-booking/locked-by", "user-of-sh"),
            ("resource-booking/locked-until", until.as_str()),
        ],
    )
    .await;
    group(&ec2, 1, "free", &[]).await;

    let resources = |ns: &str| -> Api<Resource> { Api::namespaced(client.clone(), ns) };
    let bookings = |ns: &str| -> Api<Booking> { Api::namespaced(client.clone(), ns) };
    resources("team-a")
        .create(&pp, &resource("ec2.web", "ec2", "web", None))
        .await
        .unwrap();
    resources("team-a")
        .create(&pp, &resource("ec2.pair", "ec2", "pair", None))
        .await
        .unwrap();
    // A later creationTimestamp (second precision) for the second claimer.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for (ns, name, tag) in [
        ("team-b", "ec2.web", "web"),
        ("team-b", "ec2.pair", "pair"),
        ("team-b", "ec2.db", "db"),
        ("team-d", "ec2.loose", "loose"),
        ("team-a", "ec2.shared", "shared"),
    ] {
        resources(ns)
            .create(&pp, &resource(name, "ec2", tag, None))
            .await
            .unwrap();
    }
    let now = Utc::now();
    let (from, to) = (
        now - chrono::Duration::minutes(1),
        now + chrono::Duration::hours(1),
    );
    for (ns, name, res) in [
        ("team-b", "b-web", "ec2.web"),
        ("team-b", "b-pair", "ec2.pair"),
        ("team-b", "b-db", "ec2.db"),
        ("team-d", "d-loose", "ec2.loose"),
        ("team-a", "sh", "ec2.shared"),
    ] {
        bookings(ns)
            .create(&pp, &booking(name, res, from, to))
            .await
            .unwrap();
    }

    let admin_port = free_port().unwrap();
    let admin = format!("127.0.0.1:{admin_port}");
    let mut controller = ProcessBuilder::new("controller", controller_binary())
        .envs(moto.env())
        .env("KUBECONFIG", plane.kubeconfig_path())
        .env("NAMESPACE", "")
        .env("ADMIN_ADDRESS", &admin)
        .env("INVENTORY_INTERVAL_SECONDS", "2")
        .env("LEADER_ELECT", "false")
        .env("UNTAGGED_CLAIM_NAMESPACES", "team-a,team-b,team-c")
        .env("RUST_LOG", "info,booking_controller=debug")
        .spawn(&dir)
        .expect("controller starts");
    controller
        .wait_ready(
            &Readiness::Http(format!("http://{admin}/readyz")),
            Duration::from_secs(30),
        )
        .await
        .expect("controller ready");

    wait_condition(
        &client,
        "team-a",
        "ec2.web",
        "GroupClaimed",
        ("True", "Claimed", ""),
    )
    .await;
    wait_condition(
        &client,
        "team-b",
        "ec2.web",
        "GroupClaimed",
        (
            "False",
            "ClaimedByAnother",
            "already claimed by Resource team-a/ec2.web",
        ),
    )
    .await;
    wait_condition(
        &client,
        "team-b",
        "ec2.db",
        "GroupClaimed",
        (
            "False",
            "NamespaceNotAllowed",
            "resource-booking/namespace=team-a",
        ),
    )
    .await;
    wait_condition(
        &client,
        "team-d",
        "ec2.loose",
        "GroupClaimed",
        (
            "False",
            "NamespaceNotAllowed",
            "not among the namespaces allowed to claim untagged groups (team-a, team-b, team-c)",
        ),
    )
    .await;
    wait_condition(
        &client,
        "team-a",
        "ec2.shared",
        "LockedByOther",
        ("True", "LockedByOther", "user-of-sh"),
    )
    .await;
    // The Warning Event names the claimer.
    let events: Api<Event> = Api::namespaced(client.clone(), "team-b");
    wait_for(
        "the ClaimedByAnother Event",
        Duration::from_secs(15),
        || async {
            let list = events
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .iter()
                .find(|e| {
                    e.reason.as_deref() == Some("ClaimedByAnother")
                        && e.type_.as_deref() == Some("Warning")
                        && e.message
                            .as_deref()
                            .unwrap_or_default()
                            .contains("team-a/ec2.web")
                })
                .map(|_| ())
                .ok_or_else(|| {
                    format!(
                        "{:?}",
                        list.items.iter().map(|e| &e.reason).collect::<Vec<_>>()
                    )
                })
        },
    )
    .await;

    // A monitor in team-c creates a Resource for the free group only: web is claimed in
    // team-a, db and loose by their refused claimers, shared by team-a, dbx is tagged for
    // team-a.
    let monitors: Api<ResourceMonitor> = Api::namespaced(client.clone(), "team-c");
    monitors
        .create(
            &pp,
            &ResourceMonitor::new(
                "all-ec2",
                ResourceMonitorSpec {
                    type_: "ec2".into(),
                    ..Default::default()
                },
            ),
        )
        .await
        .unwrap();
    wait_for(
        "the monitor's Resource ec2.free",
        Duration::from_secs(30),
        || async {
            resources("team-c")
                .get("ec2.free")
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    // Several inventory rounds later nothing in AWS moved and nothing else was created.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let created: Vec<String> = resources("team-c")
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|r| r.name_any())
        .collect();
    assert_eq!(
        created,
        ["ec2.free"],
        "the monitor created only what team-c may claim"
    );
    for (what, ids) in [
        ("web", &web),
        ("pair", &pair),
        ("db", &db),
        ("dbx", &dbx),
        ("loose", &loose),
        ("shared", &shared),
    ] {
        all_in_state(&ec2, ids, "stopped")
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    assert!(
        lock_tags(&ec2, &web).await.is_empty(),
        "team-b locked the group it does not own"
    );
    assert_eq!(
        lock_tags(&ec2, &shared).await.len(),
        2,
        "the other tool's lock is left as it was"
    );
    let counts = moto.action_counts().await.unwrap();
    assert_eq!(
        counts.get(Service::Ec2, "StartInstances"),
        0,
        "no start at all"
    );
    assert_eq!(
        counts.get(Service::Ec2, "CreateTags"),
        0,
        "no tag written at all"
    );

    // The claimer goes: team-b's Resource takes over and its booking runs the group.
    resources("team-a")
        .delete("ec2.web", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("web running for team-b", Duration::from_secs(30), || {
        all_in_state(&ec2, &web, "running")
    })
    .await;
    wait_condition(
        &client,
        "team-b",
        "ec2.web",
        "GroupClaimed",
        ("True", "Claimed", ""),
    )
    .await;
    let tags = lock_tags(&ec2, &web).await;
    assert!(
        tags.contains(&(
            "resource-booking/lock-owner".into(),
            "team-b/ec2.web".into()
        )),
        "{tags:?}"
    );
    // The claimer moves to another group: team-b's Resource of the group it left takes over.
    resources("team-a")
        .patch(
            "ec2.pair",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"tag": "pair-old"}})),
        )
        .await
        .unwrap();
    wait_for("pair running for team-b", Duration::from_secs(30), || {
        all_in_state(&ec2, &pair, "running")
    })
    .await;
    wait_condition(
        &client,
        "team-b",
        "ec2.pair",
        "GroupClaimed",
        ("True", "Claimed", ""),
    )
    .await;
    let status = controller.stop().expect("the controller stops");
    assert!(status.success(), "booking-controller exited with {status}");
}
