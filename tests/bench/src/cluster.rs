//! The benchmarks' Kubernetes control planes: a private etcd and kube-apiserver (the harness's
//! [`ControlPlane`], the real binaries of the tested release), the booking operator's CRDs and
//! the bench namespace in it; creation of many objects through the API; and the shipped
//! webhook configurations registered against a webhook on 127.0.0.1.

use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use booking_harness::{
    TestDir,
    control_plane::{ControlPlane, ControlPlaneOptions},
};
use futures::StreamExt as _;
use k8s_openapi::{
    api::core::v1::Namespace,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api,
    api::{ListParams, PostParams},
    core::{DynamicObject, GroupVersionKind},
    discovery::ApiResource,
    runtime::wait::{await_condition, conditions},
};
use serde_json::Value;

use crate::{fixtures, stats::Samples, sys};

/// One private control plane with the CRDs and the bench namespace.
pub struct Cluster {
    /// etcd and kube-apiserver (no kube-controller-manager: nothing measured needs it, and its
    /// informers over every resource would only add load beside the load client).
    pub plane: ControlPlane,
    /// An admin client.
    pub client: kube::Client,
    /// Where its data, certificates and logs are.
    pub dir: TestDir,
}

impl Cluster {
    /// Starts etcd and kube-apiserver, installs the CRDs (waiting until they are established
    /// and served) and creates the bench namespace. Returns it with its start-up time.
    pub async fn start(label: &str) -> anyhow::Result<(Cluster, Duration)> {
        Self::start_with(label, Vec::new()).await
    }

    /// [`start`](Self::start) with extra kube-apiserver flags (`--name=value`).
    pub async fn start_with(
        label: &str,
        apiserver_args: Vec<String>,
    ) -> anyhow::Result<(Cluster, Duration)> {
        let dir = TestDir::new(&format!("bench-{label}"))?;
        let t0 = Instant::now();
        let plane = ControlPlane::start(
            &dir,
            ControlPlaneOptions {
                controller_manager: false,
                apiserver_args,
            },
        )
        .await
        .with_context(|| format!("starting the control plane {label}"))?;
        let ready = t0.elapsed();
        let client = plane.client().await?;
        install_crds(&client).await?;
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": fixtures::NAMESPACE}
        }))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .context("creating the bench namespace")?;
        Ok((Cluster { plane, client, dir }, ready))
    }

    /// The admin kubeconfig.
    pub fn kubeconfig_path(&self) -> &Path {
        self.plane.kubeconfig_path()
    }

    /// Sets the CPU affinity of every component (a taskset list).
    pub fn pin(&self, cpus: &str) -> anyhow::Result<()> {
        for pid in self.plane.pids().values() {
            sys::pin(*pid, cpus)?;
        }
        Ok(())
    }

    /// Resident memory of each component, in MiB.
    pub fn rss_mib(&self) -> BTreeMap<&'static str, f64> {
        self.plane
            .pids()
            .into_iter()
            .filter_map(|(name, pid)| Some((name, sys::rss_mib(pid).ok()?)))
            .collect()
    }
}

/// Creates the CRDs and waits until each is established and its resource answers a list.
async fn install_crds(client: &kube::Client) -> anyhow::Result<()> {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let all = booking_shared::crd::all();
    for crd in &all {
        crds.create(&PostParams::default(), crd).await?;
    }
    for crd in &all {
        let name = crd.metadata.name.clone().unwrap_or_default();
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(crds.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .with_context(|| format!("CRD {name} not established in 60 s"))??;
        let plural = &crd.spec.names.plural;
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&crd.spec.group, "v1", &crd.spec.names.kind),
            plural,
        );
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
        let until = Instant::now() + Duration::from_secs(30);
        while let Err(e) = api.list(&ListParams::default().limit(1)).await {
            if Instant::now() >= until {
                bail!("{plural} not served 30 s after its CRD was established: {e}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

/// The API of one of the operator's kinds in the bench namespace.
pub fn api(client: &kube::Client, plural: &str, kind: &str) -> Api<DynamicObject> {
    api_in(client, fixtures::NAMESPACE, plural, kind)
}

/// [`api`] in `namespace`.
pub fn api_in(
    client: &kube::Client,
    namespace: &str,
    plural: &str,
    kind: &str,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(booking_shared::api::GROUP, "v1", kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    Api::namespaced_with(client.clone(), namespace, &ar)
}

/// Creates [`fixtures::OPTED_OUT_NAMESPACE`], labelled so that the shipped webhook
/// configurations skip it ([`fixtures::ADMISSION_OPT_OUT`]).
///
/// # Errors
/// The API server's answer.
pub async fn create_opted_out_namespace(client: &kube::Client) -> anyhow::Result<()> {
    let (key, value) = fixtures::ADMISSION_OPT_OUT;
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": fixtures::OPTED_OUT_NAMESPACE, "labels": {key: value}}
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .context("creating the namespace that opts out of the webhooks")?;
    Ok(())
}

/// What creating many objects cost.
#[derive(Debug, Clone)]
pub struct Created {
    /// Objects created.
    pub count: usize,
    /// Wall time of the whole creation.
    pub elapsed: Duration,
    /// Latency of each create request.
    pub latencies: Samples,
}

impl Created {
    /// Objects created per second.
    pub fn per_second(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Creates `objects` of `kind` (plural `plural`) in the bench namespace through the API,
/// `concurrency` requests in flight.
pub async fn create_all(
    client: &kube::Client,
    plural: &str,
    kind: &str,
    objects: Vec<Value>,
    concurrency: usize,
) -> anyhow::Result<Created> {
    let api = api(client, plural, kind);
    let count = objects.len();
    let t0 = Instant::now();
    let mut stream = futures::stream::iter(objects.into_iter().map(|o| {
        let api = api.clone();
        async move {
            let obj: DynamicObject = serde_json::from_value(o)?;
            let name = obj.metadata.name.clone().unwrap_or_default();
            let t = Instant::now();
            api.create(&PostParams::default(), &obj)
                .await
                .with_context(|| format!("creating {kind} {name}"))?;
            anyhow::Ok(t.elapsed())
        }
    }))
    .buffer_unordered(concurrency.max(1));
    let mut latencies = Samples::default();
    while let Some(r) = stream.next().await {
        latencies.push(r?);
    }
    Ok(Created {
        count,
        elapsed: t0.elapsed(),
        latencies,
    })
}
