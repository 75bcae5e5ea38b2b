//! kube-rs against the test server: CRUD and errors, custom resources (schema, defaults, CEL,
//! status subresource, generation, finalizers, dry run, server-side apply), watchers,
//! reflectors, a Controller, Lease-based leader election, and the resilience hooks.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use kube::runtime::{Controller, WatchStreamExt, controller::Action, reflector, watcher};
use kube_test_server::FaultRule;
use serde_json::json;

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "demo"}},
        "data": data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()}))
    .unwrap()
}

#[tokio::test]
async fn crud_conflicts_and_status_errors() {
    let server = common::start().await;
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let created = cms
        .create(&PostParams::default(), &cm("a", &[("k", "v")]))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    let rv1: u64 = meta.resource_version.as_deref().unwrap().parse().unwrap();

    // AlreadyExists.
    let e = api_error(
        cms.create(&PostParams::default(), &cm("a", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(e.message, "configmaps \"a\" already exists");

    // Update bumps the resourceVersion; a stale one conflicts.
    let mut changed = created.clone();
    changed
        .data
        .as_mut()
        .unwrap()
        .insert("k".into(), "v2".into());
    let updated = cms
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    let rv2: u64 = updated
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1);
    let e = api_error(
        cms.replace("a", &PostParams::default(), &changed)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains("the object has been modified"),
        "{}",
        e.message
    );

    // A no-op update keeps the resourceVersion.
    let same = cms
        .replace("a", &PostParams::default(), &updated)
        .await
        .unwrap();
    assert_eq!(
        same.metadata.resource_version,
        updated.metadata.resource_version
    );

    // Patches: merge and JSON patch.
    let p = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"m": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(p.data.as_ref().unwrap()["m"], "1");
    let p = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::<()>::Json(
                serde_json::from_value(json!([{"op": "remove", "path": "/data/m"}])).unwrap(),
            ),
        )
        .await
        .unwrap();
    assert!(!p.data.as_ref().unwrap().contains_key("m"));

    // Selectors.
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "b", "labels": {"app": "other"}}}))
            .unwrap(),
    )
    .await
    .unwrap();
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        l.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("app=demo"))
                .await
                .unwrap()
        ),
        vec!["a"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("app in (demo,other),app!=demo"))
                .await
                .unwrap()
        ),
        vec!["b"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().fields("metadata.name=b"))
                .await
                .unwrap()
        ),
        vec!["b"]
    );
    let page = cms.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(page.items.len(), 1);
    let next = cms
        .list(
            &ListParams::default()
                .limit(1)
                .continue_token(page.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(names(next), vec!["b"]);

    // NotFound, and objects in a missing namespace.
    let e = api_error(cms.get("missing").await.unwrap_err());
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (404, "NotFound", "configmaps \"missing\" not found")
    );
    let e = api_error(
        Api::<ConfigMap>::namespaced(client.clone(), "nope")
            .create(&PostParams::default(), &cm("x", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "namespaces \"nope\" not found")
    );

    // Secrets fold stringData into data.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let s = secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "s"}, "stringData": {"password": "hunter2"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(s.data.unwrap()["password"].0, b"hunter2");
    assert_eq!(s.type_.as_deref(), Some("Opaque"));

    // Deleting a namespace removes its contents.
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "tmp"}})).unwrap(),
    )
    .await
    .unwrap();
    let tmp: Api<ConfigMap> = Api::namespaced(client.clone(), "tmp");
    tmp.create(&PostParams::default(), &cm("c", &[]))
        .await
        .unwrap();
    nss.delete("tmp", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_error(nss.get("tmp").await.unwrap_err()).code, 404);
    assert_eq!(api_error(tmp.get("c").await.unwrap_err()).code, 404);

    // Unauthenticated tokens are refused.
    let mut cfg =
        kube::Config::from_custom_kubeconfig(server.kubeconfig().clone(), &Default::default())
            .await
            .unwrap();
    cfg.auth_info.token = Some("wrong".to_string().into());
    let bad = kube::Client::try_from(cfg).unwrap();
    let e = api_error(
        Api::<ConfigMap>::namespaced(bad, "default")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 401);
    server.shutdown().await;
}

#[tokio::test]
async fn custom_resources_follow_their_schema() {
    let server = common::start().await;
    let client = server.client().await.unwrap();
    common::install_widget_crd(&client).await;
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &common::widget_resource());

    // Defaults applied, unknown fields pruned (with a warning by default), generation 1.
    let mut w = common::widget("w1", json!({"color": "red"}));
    w.data["spec"]["extra"] = json!(true);
    let created = widgets.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.data["spec"], json!({"color": "red", "size": 3}));
    assert_eq!(created.metadata.generation, Some(1));

    // Schema errors name the field as the real server does.
    let e = api_error(
        widgets
            .create(
                &PostParams::default(),
                &common::widget("w2", json!({"color": "green", "size": 11})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "Widget.example.com \"w2\" is invalid: [spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\", spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10]"
    );
    let e = api_error(
        widgets
            .create(
                &PostParams::default(),
                &common::widget("w3", json!({"size": 2, "label": "Bad1"})),
            )
            .await
            .unwrap_err(),
    );
    assert!(
        e.message.contains("spec.color: Required value"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains(
            "spec.label: Invalid value: \"Bad1\": spec.label in body should match '^[a-z]+$'"
        ),
        "{}",
        e.message
    );

    // CEL rules.
    let e = api_error(
        widgets
            .create(&PostParams::default(), &common::widget("w4", json!({"color": "red", "start_at": "2030-01-02T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message,
        "Widget.example.com \"w4\" is invalid: spec.end_at: Invalid value: \"string\": end_at must be after start_at"
    );

    // Strict field validation rejects unknown fields, naming them.
    let mut bad = common::widget("w5", json!({"color": "red"}));
    bad.data["spec"]["colour"] = json!("red");
    let req = http::Request::post(
        "/apis/example.com/v1/namespaces/default/widgets?fieldValidation=Strict",
    )
    .header("content-type", "application/json")
    .body(serde_json::to_vec(&bad).unwrap())
    .unwrap();
    let e = client.request::<DynamicObject>(req).await.unwrap_err();
    let e = api_error(e);
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        "Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: unknown field \"spec.colour\""
    );

    // Status subresource: main writes ignore status, /status writes change only status.
    let p = widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ignored"}})),
        )
        .await
        .unwrap();
    assert!(p.data.get("status").is_none());
    let p = widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready"}, "spec": {"color": "blue"}})),
        )
        .await
        .unwrap();
    assert_eq!(p.data["status"]["phase"], "Ready");
    assert_eq!(p.data["spec"]["color"], "red");
    assert_eq!(p.metadata.generation, Some(1));
    let p = widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"color": "blue"}})),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.generation, Some(2));
    let p = widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        p.metadata.generation,
        Some(2),
        "metadata changes do not bump generation"
    );

    // Dry run persists nothing.
    let dry = PostParams {
        dry_run: true,
        field_manager: None,
    };
    widgets
        .create(&dry, &common::widget("dry", json!({"color": "red"})))
        .await
        .unwrap();
    assert_eq!(api_error(widgets.get("dry").await.unwrap_err()).code, 404);

    // Finalizers hold deletion until removed.
    widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/cleanup"]}})),
        )
        .await
        .unwrap();
    let deleted = widgets
        .delete("w1", &DeleteParams::default())
        .await
        .unwrap();
    let marked = deleted.left().expect("object still present");
    assert!(marked.metadata.deletion_timestamp.is_some());
    let e = api_error(
        widgets
            .patch(
                "w1",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/cleanup", "new"]}})),
            )
            .await
            .unwrap_err(),
    );
    assert!(
        e.message
            .contains("no new finalizers can be added if the object is being deleted"),
        "{}",
        e.message
    );
    widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert_eq!(api_error(widgets.get("w1").await.unwrap_err()).code, 404);

    // Server-side apply: create, owned fields, conflicts, force.
    let ssa = PatchParams::apply("tester");
    let applied = widgets
        .patch("w6", &ssa, &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w6"}, "spec": {"color": "red", "label": "abc"}})))
        .await
        .unwrap();
    assert_eq!(applied.data["spec"]["label"], "abc");
    assert_eq!(
        applied.metadata.managed_fields.as_ref().unwrap()[0]
            .manager
            .as_deref(),
        Some("tester")
    );
    let e = api_error(
        widgets
            .patch("w6", &PatchParams::apply("other"), &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"color": "blue"}})))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    assert!(
        e.message.contains("conflict with \"tester\""),
        "{}",
        e.message
    );
    let forced = widgets
        .patch("w6", &PatchParams::apply("other").force(), &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"color": "blue"}})))
        .await
        .unwrap();
    assert_eq!(forced.data["spec"]["color"], "blue");
    // The first manager stops applying `label`: it is removed.
    let dropped = widgets
        .patch(
            "w6",
            &ssa,
            &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {}})),
        )
        .await
        .unwrap();
    assert!(
        dropped.data["spec"].get("label").is_none(),
        "{:?}",
        dropped.data
    );
    assert_eq!(dropped.data["spec"]["color"], "blue");
    // Status via apply on /status.
    let st = widgets
        .patch_status("w6", &PatchParams::apply("ctrl"), &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Widget", "status": {"phase": "Up"}})))
        .await
        .unwrap();
    assert_eq!(st.data["status"]["phase"], "Up");

    // Deleting the CRD removes its objects and stops serving them.
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
            ),
            "customresourcedefinitions",
        ),
    );
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        api_error(widgets.list(&ListParams::default()).await.unwrap_err()).code,
        404
    );
    server.shutdown().await;
}

#[tokio::test]
async fn watchers_and_reflectors_survive_expired_and_closed_watches() {
    let server = common::start().await;
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector(
        writer,
        watcher(cms.clone(), watcher::Config::default().labels("app=demo")),
    )
    .applied_objects()
    .boxed();
    let task = tokio::spawn(async move {
        let mut s = stream;
        while s.next().await.is_some() {}
    });
    cms.create(&PostParams::default(), &cm("one", &[]))
        .await
        .unwrap();
    common::eventually(10, || async { (reader.len() == 1).then_some(()) }).await;

    // The next watch answers 410 Gone; closing the current one forces a re-watch.
    server.controls().expire_next_watches(1);
    server.controls().close_watches();
    cms.create(&PostParams::default(), &cm("two", &[]))
        .await
        .unwrap();
    common::eventually(10, || async { (reader.len() == 2).then_some(()) }).await;

    // A label change out of the selector is a deletion for the watcher.
    cms.patch(
        "one",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "gone"}}})),
    )
    .await
    .unwrap();
    common::eventually(10, || async { (reader.len() == 1).then_some(()) }).await;

    // Watches from a compacted resourceVersion are refused with 410 Expired.
    server.controls().compact_history();
    let raw = client
        .request_text(
            http::Request::get("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=2&timeoutSeconds=1")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(
        raw.contains("\"code\":410") && raw.contains("Expired"),
        "{raw}"
    );
    task.abort();
    server.shutdown().await;
}

#[tokio::test]
async fn a_controller_reconciles_and_events_are_shared_between_versions() {
    let server = common::start().await;
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let reconciles = Arc::new(AtomicUsize::new(0));
    let ctx = Arc::new((client.clone(), reconciles.clone()));
    async fn reconcile(
        obj: Arc<ConfigMap>,
        ctx: Arc<(kube::Client, Arc<AtomicUsize>)>,
    ) -> Result<Action, kube::Error> {
        ctx.1.fetch_add(1, Ordering::SeqCst);
        let api: Api<ConfigMap> = Api::namespaced(
            ctx.0.clone(),
            obj.metadata.namespace.as_deref().unwrap_or("default"),
        );
        if obj.data.as_ref().is_none_or(|d| !d.contains_key("seen")) {
            api.patch(
                obj.metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::apply("test-controller"),
                &Patch::Apply(
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"seen": "yes"}}),
                ),
            )
            .await?;
        }
        let recorder =
            kube::runtime::events::Recorder::new(ctx.0.clone(), "test-controller".into());
        recorder
            .publish(
                &kube::runtime::events::Event {
                    type_: kube::runtime::events::EventType::Normal,
                    reason: "Seen".into(),
                    note: Some("reconciled".into()),
                    action: "Reconcile".into(),
                    secondary: None,
                },
                &obj.object_ref(&()),
            )
            .await?;
        Ok(Action::await_change())
    }
    fn error_policy(
        _: Arc<ConfigMap>,
        _: &kube::Error,
        _: Arc<(kube::Client, Arc<AtomicUsize>)>,
    ) -> Action {
        Action::requeue(Duration::from_millis(200))
    }
    use kube::Resource;
    let controller = tokio::spawn(
        Controller::new(cms.clone(), watcher::Config::default())
            .run(reconcile, error_policy, ctx)
            .for_each(|_| async {}),
    );
    cms.create(&PostParams::default(), &cm("c1", &[]))
        .await
        .unwrap();
    common::eventually(10, || async {
        let c = cms.get("c1").await.ok()?;
        c.data.as_ref()?.get("seen").cloned()
    })
    .await;
    assert!(reconciles.load(Ordering::SeqCst) >= 1);
    // The events.k8s.io/v1 event is visible as a core/v1 Event with involvedObject.
    let core_events: Api<Event> = Api::namespaced(client.clone(), "default");
    let found = common::eventually(10, || async {
        let l = core_events
            .list(
                &ListParams::default()
                    .fields("involvedObject.name=c1,involvedObject.kind=ConfigMap"),
            )
            .await
            .ok()?;
        l.items.into_iter().next()
    })
    .await;
    assert_eq!(found.reason.as_deref(), Some("Seen"));
    assert_eq!(found.message.as_deref(), Some("reconciled"));
    controller.abort();
    server.shutdown().await;
}

/// Try to acquire or renew `lease` for `me`, as a leader-election client does.
async fn try_lead(leases: &Api<Lease>, me: &str) -> Result<bool, kube::Error> {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    match leases.get_opt("leader").await? {
        None => {
            let l: Lease = serde_json::from_value(json!({"metadata": {"name": "leader"},
                "spec": {"holderIdentity": me, "leaseDurationSeconds": 15}}))
            .unwrap();
            match leases.create(&PostParams::default(), &l).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(mut l) => {
            let spec = l.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() != Some(me) {
                return Ok(false);
            }
            spec.renew_time = Some(now);
            match leases.replace("leader", &PostParams::default(), &l).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

#[tokio::test]
async fn lease_leader_election_has_one_winner_and_stale_writes_conflict() {
    let server = common::start().await;
    let client = server.client().await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let (a, b) = tokio::join!(try_lead(&leases, "a"), try_lead(&leases, "b"));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a ^ b, "exactly one candidate leads: a={a} b={b}");
    let leader = if a { "a" } else { "b" };
    assert!(
        try_lead(&leases, leader).await.unwrap(),
        "the leader renews"
    );
    // A takeover from a stale read loses with 409.
    let stale = leases.get("leader").await.unwrap();
    assert!(try_lead(&leases, leader).await.unwrap());
    let mut takeover = stale.clone();
    takeover.spec.as_mut().unwrap().holder_identity = Some("intruder".into());
    let e = api_error(
        leases
            .replace("leader", &PostParams::default(), &takeover)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    server.shutdown().await;
}

#[tokio::test]
async fn injected_faults_fail_matching_requests_a_given_number_of_times() {
    let server = common::start().await;
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    server.controls().fail_requests(FaultRule {
        path_contains: "/configmaps".into(),
        method: Some("POST".into()),
        count: 2,
        // 500: kube-rs retries 429/503/504 by itself.
        code: 500,
        message: Some("try later".into()),
    });
    for _ in 0..2 {
        let e = api_error(
            cms.create(&PostParams::default(), &cm("f", &[]))
                .await
                .unwrap_err(),
        );
        assert_eq!((e.code, e.message.as_str()), (500, "try later"));
    }
    assert!(
        cms.list(&ListParams::default()).await.is_ok(),
        "GETs are not affected"
    );
    cms.create(&PostParams::default(), &cm("f", &[]))
        .await
        .unwrap();
    // Other users see their own name in the server (tokens map to users).
    let alice = server.client_for("alice").await.unwrap();
    Api::<ConfigMap>::namespaced(alice, "default")
        .get("f")
        .await
        .unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn kube_runtime_finalizer_helper_and_streaming_lists_work() {
    use kube::runtime::finalizer::{Event as Finalizer, finalizer};
    let server = common::start().await;
    let client = server.client().await.unwrap();
    common::install_widget_crd(&client).await;
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &common::widget_resource());
    let cleaned = Arc::new(AtomicUsize::new(0));
    let ctx = Arc::new((widgets.clone(), cleaned.clone()));
    type Ctx = (Api<DynamicObject>, Arc<AtomicUsize>);
    async fn reconcile(
        obj: Arc<DynamicObject>,
        ctx: Arc<Ctx>,
    ) -> Result<Action, kube::runtime::finalizer::Error<kube::Error>> {
        let api = ctx.0.clone();
        finalizer(&api, "example.com/cleanup", obj, |event| async {
            match event {
                Finalizer::Apply(o) => {
                    let name = o.metadata.name.clone().unwrap_or_default();
                    api.patch_status(&name, &PatchParams::apply("widget-controller"),
                        &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Widget", "status": {"phase": "Ready"}}))).await?;
                    Ok(Action::await_change())
                }
                Finalizer::Cleanup(_) => {
                    ctx.1.fetch_add(1, Ordering::SeqCst);
                    Ok(Action::await_change())
                }
            }
        })
        .await
    }
    fn error_policy(
        _: Arc<DynamicObject>,
        _: &kube::runtime::finalizer::Error<kube::Error>,
        _: Arc<Ctx>,
    ) -> Action {
        Action::requeue(Duration::from_millis(100))
    }
    let controller = tokio::spawn(
        Controller::new_with(
            widgets.clone(),
            watcher::Config::default().streaming_lists(),
            common::widget_resource(),
        )
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {}),
    );
    widgets
        .create(
            &PostParams::default(),
            &common::widget("fin", json!({"color": "red"})),
        )
        .await
        .unwrap();
    let ready = common::eventually(10, || async {
        let w = widgets.get("fin").await.ok()?;
        (w.data["status"]["phase"] == "Ready").then_some(w)
    })
    .await;
    assert_eq!(
        ready.metadata.finalizers,
        Some(vec!["example.com/cleanup".to_string()])
    );
    widgets
        .delete("fin", &DeleteParams::default())
        .await
        .unwrap();
    common::eventually(10, || async {
        widgets.get_opt("fin").await.ok()?.is_none().then_some(())
    })
    .await;
    assert_eq!(cleaned.load(Ordering::SeqCst), 1);
    controller.abort();
    server.shutdown().await;
}

#[tokio::test]
async fn terminating_namespaces_wait_for_finalizers_and_refuse_new_content() {
    let server = common::start().await;
    let client = server.client().await.unwrap();
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "ending"}})).unwrap(),
    )
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "ending");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    nss.delete("ending", &DeleteParams::default())
        .await
        .unwrap();
    let ns = nss.get("ending").await.unwrap();
    assert_eq!(
        ns.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    assert!(
        cms.get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let e = api_error(
        cms.create(&PostParams::default(), &cm("late", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "configmaps \"late\" is forbidden: unable to create new content in namespace ending because it is being terminated"
    );
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(
        api_error(nss.get("ending").await.unwrap_err()).code,
        404,
        "the namespace goes once empty"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn malformed_requests_get_status_errors_not_crashes() {
    let server = common::start().await;
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("m", &[]))
        .await
        .unwrap();
    let send = |method: &str, path: &str, ct: &str, body: &str| {
        http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", ct)
            .body(body.as_bytes().to_vec())
            .unwrap()
    };
    let cases = [
        (
            "PATCH",
            "/api/v1/namespaces/default/configmaps/m",
            "application/merge-patch+json",
            "[1,2]",
            400,
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default/configmaps/m",
            "application/json-patch+json",
            r#"[{"op":"remove","path":"/nope"}]"#,
            422,
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default/configmaps/m",
            "text/plain",
            "{}",
            415,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            "{not json",
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            r#"{"metadata": 5}"#,
            422,
        ),
        (
            "PUT",
            "/api/v1/namespaces/default/configmaps/m",
            "application/json",
            r#"{"metadata": {"name": "other"}}"#,
            400,
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?labelSelector=a+in+b",
            "application/json",
            "",
            400,
        ),
        (
            "GET",
            "/api/v1/namespaces/default/nothings",
            "application/json",
            "",
            404,
        ),
    ];
    for (method, path, ct, body, code) in cases {
        let e = client
            .request_text(send(method, path, ct, body))
            .await
            .unwrap_err();
        match e {
            kube::Error::Api(s) => {
                assert_eq!(s.code, code, "{method} {path} {body}: {}", s.message)
            }
            other => panic!("{method} {path}: {other:?}"),
        }
    }
    // The server still serves.
    cms.get("m").await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn manifests_apply_through_the_library_handle() {
    let server = common::start().await;
    let crds: String = booking_shared::crd::all()
        .iter()
        .map(|c| booking_shared::crd::to_yaml(c).unwrap())
        .collect::<Vec<_>>()
        .join("---\n");
    let applied = server.apply_yaml(&crds).await.unwrap();
    assert_eq!(applied.len(), 4);
    let sample = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/reference/samples/manager_v1_resource.yaml"
    ))
    .unwrap();
    let objs = server
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n---\n{sample}"
        ))
        .await
        .unwrap();
    assert_eq!(objs[1]["metadata"]["namespace"], "default");
    assert_eq!(objs[1]["spec"]["type"], "ec2");
    let err = server
        .apply_yaml("apiVersion: example.com/v1\nkind: Nothing\nmetadata:\n  name: x\n")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("kind Nothing of example.com/v1 is not served"),
        "{err}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn deleting_an_owner_collects_its_dependents_unless_orphaned() {
    let server = common::start().await;
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owned_by = |name: &str, owner: &ConfigMap| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid}]}}))
        .unwrap()
    };
    let parent = cms
        .create(&PostParams::default(), &cm("parent", &[]))
        .await
        .unwrap();
    let child = cms
        .create(&PostParams::default(), &owned_by("child", &parent))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &owned_by("grandchild", &child))
        .await
        .unwrap();
    cms.delete("parent", &DeleteParams::default())
        .await
        .unwrap();
    assert!(cms.get_opt("child").await.unwrap().is_none());
    assert!(
        cms.get_opt("grandchild").await.unwrap().is_none(),
        "collection cascades"
    );

    let parent = cms
        .create(&PostParams::default(), &cm("parent2", &[]))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &owned_by("kept", &parent))
        .await
        .unwrap();
    cms.delete("parent2", &DeleteParams::orphan())
        .await
        .unwrap();
    assert!(
        cms.get_opt("kept").await.unwrap().is_some(),
        "orphaned dependents stay"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn concurrent_patches_all_land_and_resource_versions_stay_ordered() {
    let server = common::start().await;
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("busy", &[]))
        .await
        .unwrap();
    let before = server.controls().resource_version();
    let patches = (0..20).map(|i| {
        let cms = cms.clone();
        async move {
            cms.patch(
                "busy",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {format!("k{i}"): "v"}})),
            )
            .await
            .unwrap()
        }
    });
    let results = futures::future::join_all(patches).await;
    let mut rvs: Vec<u64> = results
        .iter()
        .map(|c| {
            c.metadata
                .resource_version
                .as_deref()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    rvs.sort();
    rvs.dedup();
    assert_eq!(
        rvs.len(),
        20,
        "every patch produced its own resourceVersion"
    );
    assert!(rvs[0] > before);
    assert_eq!(cms.get("busy").await.unwrap().data.unwrap().len(), 20);
    server.shutdown().await;
}
