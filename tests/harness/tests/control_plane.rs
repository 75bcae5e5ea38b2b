//! The harness's real control plane: the release it reports, RBAC, the controllers of
//! kube-controller-manager, and the real means that replace an imitation's fault hooks
//! (restarting kube-apiserver and compacting etcd make a resumed watch see `410 Gone`).

use std::time::Duration;

use booking_harness::TestDir;
use booking_harness::control_plane::{ControlPlane, ControlPlaneOptions, TestCluster};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, PostParams, WatchParams};
use kube::core::WatchEvent;
use serde_json::json;

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_control_plane_is_real_kubernetes_and_its_faults_are_real() {
    let dir = TestDir::new("control-plane").unwrap();
    let mut plane = ControlPlane::start(&dir, ControlPlaneOptions::default())
        .await
        .expect("control plane starts");
    let admin = plane.client().await.unwrap();
    let version = admin.apiserver_version().await.unwrap();
    assert_eq!(version.git_version, "v1.37.2", "{version:?}");

    // RBAC: an impersonated user without bindings is refused by the real authorizer.
    let cluster = TestCluster::attach(plane.kubeconfig_path(), "rbac")
        .await
        .unwrap();
    let nobody = cluster.client_as("nobody", &[]).await.unwrap();
    let err = Api::<ConfigMap>::namespaced(nobody, cluster.namespace())
        .list(&Default::default())
        .await
        .expect_err("no permission");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err:?}"
    );

    // kube-controller-manager: a deleted namespace goes away with its contents.
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), cluster.namespace());
    cms.create(&PostParams::default(), &config_map("a"))
        .await
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .delete(cluster.namespace(), &DeleteParams::default())
        .await
        .unwrap();
    booking_harness::wait_for("the namespace is deleted", Duration::from_secs(60), || {
        let namespaces = namespaces.clone();
        let name = cluster.namespace().to_owned();
        async move {
            match namespaces.get_opt(&name).await {
                Ok(None) => Ok(()),
                Ok(Some(ns)) => Err(format!("{:?}", ns.status)),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await;

    // Restart kube-apiserver and compact etcd: a watch resumed from an old resourceVersion
    // gets 410 Gone, as after a long disconnection in a cluster.
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    let old = cms
        .create(&PostParams::default(), &config_map("old"))
        .await
        .unwrap();
    let old_rv = old.metadata.resource_version.unwrap();
    for i in 0..5 {
        cms.create(&PostParams::default(), &config_map(&format!("n{i}")))
            .await
            .unwrap();
    }
    plane.stop_apiserver().unwrap();
    let revision = plane.compact_etcd().await.expect("etcd compacts");
    assert!(revision > 1);
    plane.start_apiserver().await.expect("API server restarts");
    let admin = plane.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin, "default");
    use futures::StreamExt as _;
    let mut stream = cms
        .watch(&WatchParams::default().timeout(10), &old_rv)
        .await
        .expect("watch request")
        .boxed();
    let first = stream.next().await;
    match first {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410, "{e:?}"),
        Some(Err(kube::Error::Api(e))) => assert_eq!(e.code, 410, "{e:?}"),
        other => panic!("expected 410 Gone for a compacted resourceVersion, got {other:?}"),
    }
}
