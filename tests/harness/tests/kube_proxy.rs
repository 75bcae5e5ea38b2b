//! The fault-injecting API proxy in front of a real kube-apiserver: it forwards as the admin
//! (impersonation still authorized by the API server), streams watches, answers injected
//! faults with `metav1.Status` bodies only for what they match, and cuts open watches.

use std::time::Duration;

use booking_harness::TestDir;
use booking_harness::control_plane::{ControlPlane, ControlPlaneOptions, client_from};
use booking_harness::kube_proxy::{KubeFault, KubeProxy, Upstream};
use futures::StreamExt as _;
use http::Method;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchParams};
use kube::core::WatchEvent;
use serde_json::json;

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_proxy_forwards_streams_injects_faults_and_cuts_watches() {
    let dir = TestDir::new("kube-proxy").unwrap();
    let plane = ControlPlane::start(
        &dir,
        ControlPlaneOptions {
            controller_manager: false,
            ..ControlPlaneOptions::default()
        },
    )
    .await
    .expect("control plane starts");
    let upstream = Upstream::of(&plane);
    assert_eq!(
        Upstream::from_kubeconfig(plane.kubeconfig_path()).unwrap(),
        upstream,
        "the admin kubeconfig names the same server and identity"
    );
    let proxy = KubeProxy::start(&dir, &upstream).await.expect("proxy");
    let through = client_from(proxy.kubeconfig_path(), None).await.unwrap();
    let direct = plane.client().await.unwrap();

    // Forwarded as the admin to the real API server.
    let version = through.apiserver_version().await.unwrap();
    assert_eq!(version.git_version, "v1.37.2");
    let cms: Api<ConfigMap> = Api::namespaced(through.clone(), "default");
    cms.create(&PostParams::default(), &config_map("first"))
        .await
        .expect("create through the proxy");
    assert!(
        Api::<ConfigMap>::namespaced(direct.clone(), "default")
            .get_opt("first")
            .await
            .unwrap()
            .is_some(),
        "stored in the real API server"
    );

    // Impersonation headers pass through; the API server authorizes the impersonated user.
    let nobody = client_from(proxy.kubeconfig_path(), Some(("nobody", &[])))
        .await
        .unwrap();
    let err = Api::<ConfigMap>::namespaced(nobody, "default")
        .list(&ListParams::default())
        .await
        .expect_err("nobody may not list");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403 && s.message.contains("nobody")),
        "{err:?}"
    );

    // Injected faults: only GETs of config maps, exactly twice, as a Status.
    proxy.inject(
        KubeFault::new(Method::GET, "/configmaps", 500)
            .times(2)
            .message("config maps unavailable"),
    );
    cms.create(&PostParams::default(), &config_map("second"))
        .await
        .expect("a POST does not match a GET fault");
    for _ in 0..2 {
        let err = cms
            .list(&ListParams::default())
            .await
            .expect_err("injected");
        match &err {
            kube::Error::Api(s) => {
                assert_eq!(
                    (s.code, s.reason.as_str(), s.message.as_str()),
                    (500, "InternalError", "config maps unavailable")
                );
            }
            other => panic!("expected an API error, got {other:?}"),
        }
    }
    let names: Vec<_> = cms
        .list(&ListParams::default())
        .await
        .expect("the third list is forwarded")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert!(names.contains(&"first".to_owned()) && names.contains(&"second".to_owned()));
    assert!(proxy.pending_faults().is_empty());
    let injected: Vec<_> = proxy
        .requests()
        .into_iter()
        .filter(|r| r.injected)
        .collect();
    assert_eq!(injected.len(), 2, "{injected:?}");
    assert!(
        injected
            .iter()
            .all(|r| r.method == Method::GET && r.status == 500)
    );

    // A watch streams through the proxy: events arrive while the response is still open.
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = cms
        .watch(&WatchParams::default().timeout(290), &rv)
        .await
        .expect("watch through the proxy")
        .boxed();
    Api::<ConfigMap>::namespaced(direct.clone(), "default")
        .create(&PostParams::default(), &config_map("watched"))
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("the event is streamed, not held back");
    match event {
        Some(Ok(WatchEvent::Added(cm))) => {
            assert_eq!(cm.metadata.name.as_deref(), Some("watched"));
        }
        other => panic!("expected the Added event, got {other:?}"),
    }
    assert!(proxy.open_streams() >= 1, "the watch is open");

    // Cutting open streams ends the watch at once, long before its timeout.
    assert!(proxy.drop_streams() >= 1);
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match events.next().await {
                None | Some(Err(_)) => break,
                Some(Ok(WatchEvent::Bookmark(_))) => {}
                Some(Ok(other)) => panic!("unexpected event {other:?}"),
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch was not cut");
    assert!(
        cms.get_opt("watched").await.unwrap().is_some(),
        "requests after the cut are served"
    );

    // A stall holds matching requests unanswered (neither success nor error) while others are
    // served; clearing the faults forwards the held one at once.
    proxy.inject(KubeFault::stall(
        "/configmaps/first",
        Duration::from_secs(60),
    ));
    let held = tokio::time::timeout(Duration::from_secs(2), cms.get("first")).await;
    assert!(held.is_err(), "the stalled GET was answered: {held:?}");
    assert!(
        cms.get_opt("watched").await.unwrap().is_some(),
        "a request the stall does not match is served meanwhile"
    );
    let pending = {
        let cms = cms.clone();
        tokio::spawn(async move { cms.get("first").await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!pending.is_finished(), "still held");
    let released = std::time::Instant::now();
    proxy.clear_faults();
    let first = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("forwarded once the stall is cleared")
        .unwrap()
        .expect("answered by the API server");
    assert_eq!(first.metadata.name.as_deref(), Some("first"));
    assert!(released.elapsed() < Duration::from_secs(5));
    let stalled_then_served = proxy
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/configmaps/first") && !r.injected && r.status == 200)
        .count();
    assert!(
        stalled_then_served >= 1,
        "recorded as forwarded, not injected"
    );
}
