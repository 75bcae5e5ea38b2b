//! BookingSchedulers and notifications end to end against a real Kubernetes control plane
//! (the run's shared kube-apiserver and etcd, a namespace per test) and a real SMTP server, with the reconcilers' clock injected so that minutes pass in
//! milliseconds: one booking per fire starting on the fire time, no duplicate after a restart or
//! a crash between creating and recording, missed fires, an invalid schedule reported without a
//! crash, the history limit; one email per notification even across restarts, failures as a
//! condition with retries until the SMTP server comes back.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use booking_controller::{
    context::{Caches, Context, Settings},
    metrics::Metrics,
    notify::{Notifiers, SmtpSecurity, SmtpSettings},
    reconcile::{notification, scheduler},
    tags::TagKeys,
};
use booking_harness::{
    TestDir,
    control_plane::TestCluster,
    smtp::{SmtpOptions, SmtpServer},
    tls::TestCa,
};
use booking_shared::time::Clock;
use booking_shared::{
    api::{Booking, BookingScheduler, BookingSpec, Notification},
    scheduling::SCHEDULER_LABEL,
};
use chrono::{DateTime, Utc};
use kube::{
    Api, ResourceExt,
    api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams},
    runtime::controller::Action,
};

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// A clock the test moves by hand.
#[derive(Clone)]
struct TestClock(Arc<Mutex<DateTime<Utc>>>);

impl TestClock {
    fn new(at: &str) -> Self {
        Self(Arc::new(Mutex::new(t(at))))
    }
    fn set(&self, at: &str) {
        *self.0.lock().unwrap() = t(at);
    }
    fn clock(&self) -> Clock {
        let inner = self.0.clone();
        Arc::new(move || *inner.lock().unwrap())
    }
}

struct Cluster {
    client: kube::Client,
    /// The test's own namespace on the shared control plane.
    ns: String,
    /// The admin kubeconfig of the shared control plane.
    kubeconfig: std::path::PathBuf,
}

/// The run's shared control plane (`booking-control-plane run -- …`), the shipped CRDs applied
/// (`manifests/crds`), and a fresh namespace named after `label`.
async fn cluster(label: &str) -> Cluster {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cluster = TestCluster::shared(label)
        .await
        .expect("the run's shared control plane");
    cluster.apply_shipped_crds().expect("CRDs applied");
    Cluster {
        client: cluster.client().await.expect("client"),
        ns: cluster.namespace().to_owned(),
        kubeconfig: cluster.kubeconfig_path().to_path_buf(),
    }
}

/// The controller's one context, with the test's clock and notification senders (the AWS
/// layer is built but never called by these reconcilers).
fn context(c: &Cluster, clock: &TestClock, notifiers: Notifiers) -> Arc<Context> {
    let (resources, _writer) = kube::runtime::reflector::store();
    let (schedulers, _writer) = kube::runtime::reflector::store();
    let caches = Caches {
        index: Default::default(),
        resources,
        resources_synced: Default::default(),
        schedulers,
        booking_wakeups: Default::default(),
        notification_wakeups: Default::default(),
        resource_wakeups: Default::default(),
        resource_turns: Default::default(),
    };
    let aws = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("eu-west-1"))
        .build();
    let settings = Settings {
        identity: "test".into(),
        aws,
        default_region: "eu-west-1".into(),
        tag_keys: TagKeys::new(String::new()),
        targeted_min_interval: chrono::Duration::seconds(30),
        max_concurrent_writes: 0,
        notifiers,
        leadership: booking_controller::leader::Leadership::unfenced(),
        allowed_regions: Default::default(),
        prune_after_listings: 3,
        untagged_claim_namespaces: Vec::new(),
        dry_run: false,
    };
    Context::new(
        c.client.clone(),
        clock.clock(),
        Metrics::new(),
        caches,
        settings,
    )
}

fn scheduler_ctx(c: &Cluster, clock: &TestClock) -> Arc<Context> {
    context(
        c,
        clock,
        Notifiers::new(&SmtpSettings::default(), &[]).unwrap(),
    )
}

async fn reconcile_scheduler(c: &Cluster, ctx: &Arc<Context>, name: &str) {
    let api: Api<BookingScheduler> = Api::namespaced(c.client.clone(), &c.ns);
    let sched = api.get(name).await.expect("scheduler");
    scheduler::reconcile(Arc::new(sched), ctx.clone())
        .await
        .expect("reconcile");
}

async fn bookings(c: &Cluster) -> Vec<Booking> {
    let api: Api<Booking> = Api::namespaced(c.client.clone(), &c.ns);
    let mut items = api.list(&ListParams::default()).await.expect("list").items;
    items.sort_by_key(|b| b.name_any());
    items
}

async fn create_scheduler(c: &Cluster, name: &str, spec: serde_json::Value) {
    let api: Api<BookingScheduler> = Api::namespaced(c.client.clone(), &c.ns);
    let obj: BookingScheduler = serde_json::from_value(serde_json::json!({
        "apiVersion": "manager.kotaico.de/v1",
        "kind": "BookingScheduler",
        "metadata": {"name": name, "namespace": c.ns},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj)
        .await
        .expect("scheduler created");
}

#[tokio::test]
async fn a_per_minute_scheduler_creates_one_booking_per_fire_on_the_fire_time() {
    let c = cluster("sched").await;
    // The scheduler is created "now" per the server's clock; the reconcilers' clock starts
    // well after that, so the fires the test walks through are all after its creation.
    create_scheduler(
        &c,
        "every-minute",
        serde_json::json!({"schedule": "* * * * *", "duration": 1, "bookingTemplate": {"resource_name": "ec2.analytics", "user_id": "ann"}}),
    )
    .await;
    let clock = TestClock::new("2099-01-01T10:00:00.250Z");
    let ctx = scheduler_ctx(&c, &clock);

    // The status has no last fire yet, so the creation time bounds the look-back: the fire at
    // 10:00 is due and created with start_at exactly on the minute.
    reconcile_scheduler(&c, &ctx, "every-minute").await;
    let all = bookings(&c).await;
    assert_eq!(
        all.len(),
        1,
        "{:?}",
        all.iter().map(|b| b.name_any()).collect::<Vec<_>>()
    );
    assert_eq!(all[0].name_any(), "every-minute-209901011000");
    assert_eq!(all[0].spec.start_at, "2099-01-01T10:00:00Z");
    assert_eq!(all[0].spec.end_at, "2099-01-01T10:01:00Z");
    assert_eq!(
        all[0].labels().get(SCHEDULER_LABEL).map(String::as_str),
        Some("every-minute")
    );
    assert!(
        all[0].owner_references().is_empty(),
        "deleting the scheduler keeps its bookings"
    );

    let api: Api<BookingScheduler> = Api::namespaced(c.client.clone(), &c.ns);
    let status = api.get("every-minute").await.unwrap().status.unwrap();
    assert_eq!(status.next.as_deref(), Some("2099-01-01T10:01:00Z"));
    assert_eq!(
        status.last_fire_time.as_deref(),
        Some("2099-01-01T10:00:00Z")
    );
    assert_eq!(
        status.last_booking.as_deref(),
        Some("every-minute-209901011000")
    );
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );

    // Later in the same minute: nothing new.
    clock.set("2099-01-01T10:00:40Z");
    reconcile_scheduler(&c, &ctx, "every-minute").await;
    assert_eq!(bookings(&c).await.len(), 1);

    // A restart (fresh context) at the next fire creates exactly the next booking.
    clock.set("2099-01-01T10:01:00Z");
    let restarted = scheduler_ctx(&c, &clock);
    reconcile_scheduler(&c, &restarted, "every-minute").await;
    reconcile_scheduler(&c, &restarted, "every-minute").await;
    let names: Vec<_> = bookings(&c).await.iter().map(|b| b.name_any()).collect();
    assert_eq!(
        names,
        ["every-minute-209901011000", "every-minute-209901011001"]
    );

    // A crash between creating a booking and recording the fire: the booking exists, the
    // status does not know it. The next reconcile finds AlreadyExists and creates nothing else.
    clock.set("2099-01-01T10:02:00Z");
    let crashed = Booking {
        metadata: ObjectMeta {
            name: Some("every-minute-209901011002".into()),
            namespace: Some(c.ns.clone()),
            ..ObjectMeta::default()
        },
        spec: BookingSpec {
            resource_name: "ec2.analytics".into(),
            start_at: "2099-01-01T10:02:00Z".into(),
            end_at: "2099-01-01T10:03:00Z".into(),
            user_id: "ann".into(),
            notifications: vec![],
        },
        status: None,
    };
    Api::<Booking>::namespaced(c.client.clone(), &c.ns)
        .create(&PostParams::default(), &crashed)
        .await
        .unwrap();
    reconcile_scheduler(&c, &restarted, "every-minute").await;
    assert_eq!(bookings(&c).await.len(), 3);
    let status = api.get("every-minute").await.unwrap().status.unwrap();
    assert_eq!(
        status.last_fire_time.as_deref(),
        Some("2099-01-01T10:02:00Z")
    );

    // Downtime beyond the starting deadline: the missed fire is skipped and reported, not
    // created. (An edit of the scheduler applies at once.)
    api.patch(
        "every-minute",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"startingDeadlineSeconds": 10}})),
    )
    .await
    .unwrap();
    clock.set("2099-01-01T10:05:30Z");
    reconcile_scheduler(&c, &restarted, "every-minute").await;
    assert_eq!(bookings(&c).await.len(), 3);
    let status = api.get("every-minute").await.unwrap().status.unwrap();
    assert_eq!(
        status.last_fire_time.as_deref(),
        Some("2099-01-01T10:05:00Z")
    );
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason, "MissedFire", "{ready:?}");
}

/// Through the harness's API proxy in front of the real API server: a fire whose booking create
/// is answered 429, 500 or 401 stays pending and is retried (each failed reconcile goes back to
/// `reconcile::drive`'s per-object backoff) until the booking exists; a 422 (a validation or
/// webhook refusal) is recorded once as refused and not retried.
#[tokio::test]
async fn only_400_403_and_422_refuse_a_fire_for_good() {
    use booking_harness::kube_proxy::{KubeFault, KubeProxy, Method, Upstream};
    let c = cluster("sched-faults").await;
    let dir = TestDir::new("sched-faults").unwrap();
    let proxy = KubeProxy::start(&dir, &Upstream::from_kubeconfig(&c.kubeconfig).unwrap())
        .await
        .expect("API proxy");
    // kube's client itself retries 429, 503 and 504 up to 15 times (its default retry layer);
    // without that layer, each injected answer reaches the reconciler, as one that outlasts
    // those retries (or a 500 or 401, which the client never retries) does.
    let kubeconfig = kube::config::Kubeconfig::read_from(proxy.kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.default_retry = false;
    let through_proxy = Cluster {
        client: booking_shared::client::client(config).expect("a client through the proxy"),
        ns: c.ns.clone(),
        kubeconfig: proxy.kubeconfig_path().to_path_buf(),
    };
    create_scheduler(
        &c,
        "hourly",
        serde_json::json!({"schedule": "0 * * * *", "duration": 30, "bookingTemplate": {"resource_name": "ec2.analytics", "user_id": "ann"}}),
    )
    .await;
    let clock = TestClock::new("2099-01-01T10:00:00.250Z");
    let ctx = scheduler_ctx(&through_proxy, &clock);
    let sched: Api<BookingScheduler> = Api::namespaced(c.client.clone(), &c.ns);
    let creates = |path: &str| {
        proxy
            .requests()
            .iter()
            .filter(|r| r.method == Method::POST && r.path.contains(path))
            .count()
    };
    let path = format!("/namespaces/{}/bookings", c.ns);
    for status in [429, 500, 401] {
        proxy.inject(KubeFault::new(Method::POST, &path, status));
        let obj = sched.get("hourly").await.unwrap();
        let r = scheduler::reconcile(Arc::new(obj), ctx.clone()).await;
        assert!(
            r.is_err(),
            "HTTP {status} fails the reconcile, to be retried: {r:?}"
        );
        assert!(bookings(&c).await.is_empty());
        let status_now = sched
            .get("hourly")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        assert_eq!(status_now.last_fire_time, None, "the fire is still pending");
    }
    clock.set("2099-01-01T10:00:09Z");
    reconcile_scheduler(&through_proxy, &ctx, "hourly").await;
    let names: Vec<_> = bookings(&c).await.iter().map(|b| b.name_any()).collect();
    assert_eq!(
        names,
        ["hourly-209901011000"],
        "the fire's booking, created late"
    );
    assert_eq!(creates(&path), 4);

    // The next fire is refused by validation (422): recorded once, never retried.
    proxy.inject(
        KubeFault::new(Method::POST, &path, 422)
            .message("admission webhook denied the request: overlaps"),
    );
    clock.set("2099-01-01T11:00:00.100Z");
    reconcile_scheduler(&through_proxy, &ctx, "hourly").await;
    clock.set("2099-01-01T11:00:30Z");
    reconcile_scheduler(&through_proxy, &ctx, "hourly").await;
    reconcile_scheduler(&through_proxy, &ctx, "hourly").await;
    assert_eq!(creates(&path), 5, "one create for the refused fire");
    assert_eq!(bookings(&c).await.len(), 1);
    let status = sched.get("hourly").await.unwrap().status.unwrap();
    assert_eq!(
        status.last_fire_time.as_deref(),
        Some("2099-01-01T11:00:00Z")
    );
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "BookingRefused"),
        "{ready:?}"
    );
    assert!(ready.message.contains("overlaps"), "{}", ready.message);
}

#[tokio::test]
async fn history_limit_and_invalid_schedules() {
    let c = cluster("hist").await;
    create_scheduler(
        &c,
        "hourly",
        serde_json::json!({"schedule": "@hourly", "duration": 10, "finishedBookingsHistoryLimit": 1, "bookingTemplate": {"resource_name": "ec2.web", "user_id": "bob"}}),
    )
    .await;
    let clock = TestClock::new("2099-01-01T10:00:00Z");
    let ctx = scheduler_ctx(&c, &clock);
    for at in [
        "2099-01-01T10:00:00Z",
        "2099-01-01T11:00:00Z",
        "2099-01-01T12:00:00Z",
    ] {
        clock.set(at);
        reconcile_scheduler(&c, &ctx, "hourly").await;
    }
    // 10:00 and 11:00 have finished; only the newest finished one is kept, plus the running one.
    let names: Vec<_> = bookings(&c).await.iter().map(|b| b.name_any()).collect();
    assert_eq!(names, ["hourly-209901011100", "hourly-209901011200"]);

    // A schedule that got past admission (no webhook here): a condition, no bookings, no error.
    create_scheduler(
        &c,
        "broken",
        serde_json::json!({"schedule": "61 * * * *", "duration": 10, "bookingTemplate": {"resource_name": "ec2.web", "user_id": "bob"}}),
    )
    .await;
    reconcile_scheduler(&c, &ctx, "broken").await;
    let api: Api<BookingScheduler> = Api::namespaced(c.client.clone(), &c.ns);
    let status = api.get("broken").await.unwrap().status.unwrap();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "InvalidSchedule")
    );
    assert!(ready.message.contains("61 * * * *"), "{}", ready.message);
    assert_eq!(bookings(&c).await.len(), 2);
}

fn smtp_settings(port: u16, ca: &TestCa) -> SmtpSettings {
    SmtpSettings {
        host: Some("localhost".into()),
        port,
        username: Some("booker".into()),
        password: Some("s3cret".into()),
        password_file: None,
        sender: Some("booking@example.com".into()),
        security: SmtpSecurity::Starttls,
        ca_file: Some(ca.cert_path().to_path_buf()),
    }
}

fn notification_ctx(c: &Cluster, clock: &TestClock, smtp: &SmtpSettings) -> Arc<Context> {
    context(c, clock, Notifiers::new(smtp, &[]).unwrap())
}

/// Reconciles the notifications of booking `name`; returns the wait until the instant it asked
/// to run again at (`None`: only on a change), which the controller's timer keeps.
async fn reconcile_notifications(c: &Cluster, ctx: &Arc<Context>, name: &str) -> Option<Duration> {
    let api: Api<Booking> = Api::namespaced(c.client.clone(), &c.ns);
    let b = api.get(name).await.expect("booking");
    let action = notification::reconcile(Arc::new(b), ctx.clone())
        .await
        .expect("reconcile");
    assert_eq!(
        action,
        Action::await_change(),
        "instants are kept in the timer"
    );
    ctx.caches
        .notification_wakeups
        .get(&c.ns, name)
        .map(|at| ctx.until(at))
}

fn requeue(secs: u64) -> Option<Duration> {
    Some(Duration::from_secs(secs))
}

async fn create_booking(c: &Cluster, name: &str, notifications: Vec<Notification>) {
    let booking = Booking {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(c.ns.clone()),
            ..ObjectMeta::default()
        },
        spec: BookingSpec {
            resource_name: "ec2.analytics".into(),
            start_at: "2099-01-01T10:00:00Z".into(),
            end_at: "2099-01-01T11:00:00Z".into(),
            user_id: "ann".into(),
            notifications,
        },
        status: None,
    };
    Api::<Booking>::namespaced(c.client.clone(), &c.ns)
        .create(&PostParams::default(), &booking)
        .await
        .unwrap();
}

fn email(to: &str) -> Notification {
    Notification {
        type_: "email".into(),
        recipient: to.into(),
        lead_minutes: None,
        events: vec![],
        recipient_from: None,
    }
}

#[tokio::test]
async fn each_notification_is_sent_once_even_across_restarts() {
    let c = cluster("notify").await;
    let dir = TestDir::new("notify-once").unwrap();
    let ca = TestCa::new(&dir, "smtp").unwrap();
    let cert = ca
        .issue_server_cert("smtp", &["localhost", "127.0.0.1"])
        .unwrap();
    let smtp = SmtpServer::start(
        &dir,
        SmtpOptions::default()
            .require_auth("booker", "s3cret")
            .require_starttls(&cert),
    )
    .await
    .unwrap();
    let settings = smtp_settings(smtp.port(), &ca);
    create_booking(
        &c,
        "etl",
        vec![
            email("ann@example.com"),
            Notification {
                lead_minutes: Some(5),
                events: vec![],
                recipient_from: None,
                ..email("ops@example.com")
            },
            Notification {
                type_: "pigeon".into(),
                recipient: "loft-3".into(),
                lead_minutes: None,
                events: vec![],
                recipient_from: None,
            },
        ],
    )
    .await;

    // Before the lead time: nothing, and the requeue is exactly at 10:40 (20 min before 11:00).
    let clock = TestClock::new("2099-01-01T10:30:00Z");
    let ctx = notification_ctx(&c, &clock, &settings);
    let wait = reconcile_notifications(&c, &ctx, "etl").await;
    assert_eq!(wait, requeue(600));
    assert!(smtp.messages().unwrap().is_empty());

    // At 10:40 the first email goes out; the unknown type is reported, not a crash.
    clock.set("2099-01-01T10:40:00Z");
    let wait = reconcile_notifications(&c, &ctx, "etl").await;
    assert_eq!(wait, requeue(15 * 60), "next: the 5-minute notification");
    let mail = smtp
        .wait_for_messages(1, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(mail[0].header("To").as_deref(), Some("ann@example.com"));
    let b = Api::<Booking>::namespaced(c.client.clone(), &c.ns)
        .get("etl")
        .await
        .unwrap();
    let status = b.status.unwrap();
    assert_eq!(
        status.notifications_sent,
        ["0:email:ann@example.com", "2:pigeon:loft-3"]
    );
    assert!(!status.notification_sent);
    let failed = status
        .conditions
        .iter()
        .find(|c| c.type_ == "NotificationFailed")
        .unwrap();
    assert_eq!(failed.status, "True");
    assert!(failed.message.contains("pigeon"), "{}", failed.message);

    // Reconciling again, or after a restart, sends nothing twice.
    reconcile_notifications(&c, &ctx, "etl").await;
    let restarted = notification_ctx(&c, &clock, &settings);
    reconcile_notifications(&c, &restarted, "etl").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(smtp.messages().unwrap().len(), 1);

    // The second email at 10:55; then everything is sent.
    clock.set("2099-01-01T10:55:00Z");
    assert_eq!(reconcile_notifications(&c, &restarted, "etl").await, None);
    assert_eq!(
        smtp.wait_for_messages(2, Duration::from_secs(10))
            .await
            .unwrap()
            .len(),
        2
    );
    let status = Api::<Booking>::namespaced(c.client.clone(), &c.ns)
        .get("etl")
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(status.notification_sent);

    // After the end, a booking that still had unsent notifications sends nothing.
    create_booking(&c, "late", vec![email("late@example.com")]).await;
    clock.set("2099-01-01T11:00:00Z");
    assert_eq!(reconcile_notifications(&c, &restarted, "late").await, None);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(smtp.messages().unwrap().len(), 2);
}

#[tokio::test]
async fn a_failing_smtp_server_yields_a_condition_and_retries_until_it_comes_back() {
    let c = cluster("retry").await;
    let dir = TestDir::new("notify-retry").unwrap();
    let ca = TestCa::new(&dir, "smtp").unwrap();
    let cert = ca
        .issue_server_cert("smtp", &["localhost", "127.0.0.1"])
        .unwrap();
    // First a server that refuses AUTH: the controller must not send without it.
    let refusing = SmtpServer::start(
        &dir,
        SmtpOptions::default().refuse_auth().require_starttls(&cert),
    )
    .await
    .unwrap();
    let port = refusing.port();
    let settings = smtp_settings(port, &ca);
    create_booking(&c, "etl", vec![email("ann@example.com")]).await;
    let clock = TestClock::new("2099-01-01T10:45:00Z");
    let ctx = notification_ctx(&c, &clock, &settings);
    let wait = reconcile_notifications(&c, &ctx, "etl").await;
    assert_eq!(wait, requeue(30), "first retry after 30 s");
    assert!(refusing.messages().unwrap().is_empty());
    let status = Api::<Booking>::namespaced(c.client.clone(), &c.ns)
        .get("etl")
        .await
        .unwrap()
        .status
        .unwrap();
    let failed = status
        .conditions
        .iter()
        .find(|c| c.type_ == "NotificationFailed")
        .unwrap();
    assert_eq!(failed.status, "True");
    assert!(status.notifications_sent.is_empty());

    // Within the backoff, another event does not trigger a retry.
    clock.set("2099-01-01T10:45:10Z");
    assert_eq!(reconcile_notifications(&c, &ctx, "etl").await, requeue(20));

    // The server comes back, working, on the same port; the retry succeeds.
    drop(refusing);
    let working = SmtpServer::start(
        &dir,
        SmtpOptions::default()
            .require_auth("booker", "s3cret")
            .require_starttls(&cert)
            .on_port(port),
    )
    .await
    .unwrap();
    clock.set("2099-01-01T10:45:30Z");
    assert_eq!(reconcile_notifications(&c, &ctx, "etl").await, None);
    assert_eq!(
        working
            .wait_for_messages(1, Duration::from_secs(10))
            .await
            .unwrap()
            .len(),
        1
    );
    let status = Api::<Booking>::namespaced(c.client.clone(), &c.ns)
        .get("etl")
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(status.notification_sent);
    let failed = status
        .conditions
        .iter()
        .find(|c| c.type_ == "NotificationFailed")
        .unwrap();
    assert_eq!(failed.status, "False");
}

/// The error policy of every reconciler (`reconcile::drive`): a failed reconcile is retried
/// after 1 s doubling to 5 min, counted per object, and a success resets the count.
#[tokio::test]
async fn failed_reconciles_back_off_exponentially_per_object() {
    let c = cluster("backoff").await;
    let clock = TestClock::new("2099-01-01T10:00:00Z");
    let ctx = scheduler_ctx(&c, &clock);
    let secs: Vec<u64> = (0..10)
        .map(|_| ctx.retry_after_failure("BookingScheduler/ns/a").as_secs())
        .collect();
    assert_eq!(secs, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
    assert_eq!(
        ctx.retry_after_failure("BookingScheduler/ns/b").as_secs(),
        1,
        "another object has its own count"
    );
    ctx.reconciled_ok("BookingScheduler/ns/a");
    assert_eq!(
        ctx.retry_after_failure("BookingScheduler/ns/a").as_secs(),
        1
    );
}

/// Keys recorded by earlier versions held a webhook's whole URL: they still count as sent (no
/// second POST) and are rewritten to the form that shows only scheme and host, in a booking
/// that lasts and in one that has ended.
#[tokio::test]
async fn webhook_keys_of_earlier_versions_count_as_sent_and_are_rewritten() {
    let c = cluster("notify-keys").await;
    let url = "https://127.0.0.1:9/services/T000/B000/XXXXSECRET";
    let hook = Notification {
        type_: "webhook".into(),
        recipient: url.into(),
        lead_minutes: Some(60),
        events: vec![],
        recipient_from: None,
    };
    let api: Api<Booking> = Api::namespaced(c.client.clone(), &c.ns);
    for name in ["lasting", "ended"] {
        create_booking(&c, name, vec![hook.clone()]).await;
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"status": {"notificationsSent": [format!("0:webhook:{url}")]}}),
            ),
        )
        .await
        .unwrap();
    }
    let clock = TestClock::new("2099-01-01T10:30:00Z");
    let ctx = notification_ctx(&c, &clock, &SmtpSettings::default());
    let want = booking_controller::notify::notification_key(0, &hook);
    assert!(!want.contains("SECRET"), "{want}");
    reconcile_notifications(&c, &ctx, "lasting").await;
    clock.set("2099-01-01T11:30:00Z");
    reconcile_notifications(&c, &ctx, "ended").await;
    for name in ["lasting", "ended"] {
        let status = api.get(name).await.unwrap().status.unwrap();
        assert_eq!(
            status.notifications_sent,
            std::slice::from_ref(&want),
            "{name}"
        );
        // Nothing was sent to the (unreachable) URL: no failure recorded.
        assert!(
            !status
                .conditions
                .iter()
                .any(|c| c.type_ == "NotificationFailed" && c.status == "True"),
            "{name}: {:?}",
            status.conditions
        );
    }
}
