//! Tenancy at admission, end to end: the real `booking-webhook` (with `--restrict-user-id`,
//! talking to the API server through the harness's API proxy) registered by the shipped webhook
//! configurations on a control plane of the test's own (RBAC enforced), and requests made by
//! real users through the real kubectl (impersonated by the admin: the API server authorizes
//! each as that user and sends the webhook its name).
//!
//! - One owner per AWS group: a second Resource for a claimed group is denied naming the
//!   claimer, on create and on an update that moves a Resource onto the group.
//! - Who booked: the creator is recorded and can never change; booking for someone else, or
//!   changing a booking someone else created, needs the verb `book-for-others` (the shipped
//!   ClusterRole, bound to a GitOps user); a SubjectAccessReview that fails refuses.
//! - Limits: the CRD's schema refuses too many notifications and too long ids and recipients
//!   without any webhook; the webhook refuses control characters and bookings longer than the
//!   default maximum.

use std::time::{Duration, Instant};

use booking_harness::{
    TestDir,
    control_plane::{ControlPlane, ControlPlaneOptions, LocalWebhooks},
    free_port,
    kube_proxy::{KubeFault, KubeProxy, Method, Upstream},
    process::{ManagedProcess, Readiness},
    tls::TestCa,
};
use booking_tests::e2e::webhook_process;
use booking_tests::kubectl::{Output, kubectl};
use chrono::Utc;
use serde_json::{Value, json};

const NS: &str = "tenancy";
const OTHER_NS: &str = "tenancy-other";

struct System {
    webhook: Option<ManagedProcess>,
    proxy: Option<KubeProxy>,
    plane: ControlPlane,
    dir: TestDir,
}

impl System {
    async fn start(label: &str) -> System {
        let dir = TestDir::new(label).expect("a test directory");
        let plane = ControlPlane::start(&dir, ControlPlaneOptions::default())
            .await
            .expect("the control plane starts");
        let system = System {
            webhook: None,
            proxy: None,
            plane,
            dir,
        };
        let crds = booking_tests::repo_root().join("manifests/crds");
        let crds = crds.to_string_lossy();
        let out = system.admin(&["apply", "-f", &crds], None).await;
        assert!(out.ok, "installing the CRDs failed:\n{}", out.stderr);
        let out = system
            .admin(
                &[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=60s",
                    "-f",
                    &crds,
                ],
                None,
            )
            .await;
        assert!(out.ok, "the CRDs are not established:\n{}", out.stderr);
        for ns in [NS, OTHER_NS] {
            assert!(system.admin(&["create", "namespace", ns], None).await.ok);
        }
        system
    }

    async fn admin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        kubectl(self.plane.kubeconfig_path(), None, args, stdin).await
    }

    /// kubectl as `user`, authenticated with no group but `system:authenticated`.
    async fn user(&self, user: &str, args: &[&str], stdin: Option<&str>) -> Output {
        kubectl(self.plane.kubeconfig_path(), Some((user, &[])), args, stdin).await
    }

    /// Starts the webhook (through an API proxy, so that its calls can be faulted) with
    /// `extra` flags and registers it with the shipped configurations.
    async fn register_webhook(&mut self, extra: &[&str]) {
        let proxy = KubeProxy::start(
            &self.dir,
            &Upstream::from_kubeconfig(self.plane.kubeconfig_path()).unwrap(),
        )
        .await
        .expect("API proxy");
        let ca = TestCa::new(&self.dir, "webhook").expect("a test CA");
        let cert = ca
            .issue_server_cert("booking-webhook", &["127.0.0.1"])
            .expect("a serving certificate");
        let port = free_port().unwrap();
        let admin_port = free_port().unwrap();
        let mut builder = webhook_process(&cert, port, admin_port, proxy.kubeconfig_path());
        for a in extra {
            builder = builder.arg(a);
        }
        let mut webhook = builder.spawn(&self.dir).expect("booking-webhook starts");
        webhook
            .wait_ready(
                &Readiness::Http(format!("http://127.0.0.1:{admin_port}/readyz")),
                Duration::from_secs(60),
            )
            .await
            .expect("booking-webhook becomes ready");
        self.webhook = Some(webhook);
        self.proxy = Some(proxy);
        let manifest =
            booking_tests::repo_root().join("manifests/webhook/webhook-configurations.yaml");
        let local = LocalWebhooks::from_manifest(
            &manifest,
            &format!("https://127.0.0.1:{port}"),
            &ca.cert_pem(),
        )
        .unwrap();
        for config in local.documents() {
            let out = self
                .admin(&["apply", "-f", "-"], Some(&config.to_string()))
                .await;
            assert!(out.ok, "registering the webhook failed:\n{}", out.stderr);
        }
        // The API server picks the configurations up from its own watch: wait until a dry-run
        // booking comes back with the requested-by annotation.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let probe = booking("probe", "", 1, 2).to_string();
            let out = self
                .admin(
                    &["create", "--dry-run=server", "-o", "json", "-f", "-"],
                    Some(&probe),
                )
                .await;
            let annotated = serde_json::from_str::<Value>(&out.stdout).is_ok_and(|v| {
                v["metadata"]["annotations"]["manager.kotaico.de/requested-by"].is_string()
            });
            if out.ok && annotated {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the webhook is not called 30 s after its registration:\n{}{}",
                out.stdout,
                out.stderr
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A Booking in [`NS`] from `now + start` to `now + end` hours; no `user_id` when empty.
fn booking(name: &str, user: &str, start: i64, end: i64) -> Value {
    let t = |h: i64| {
        (Utc::now() + chrono::Duration::hours(h)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let mut spec = json!({"resource_name": "ec2.web", "start_at": t(start), "end_at": t(end)});
    if !user.is_empty() {
        spec["user_id"] = json!(user);
    }
    json!({"apiVersion": "manager.kotaico.de/v1", "kind": "Booking",
        "metadata": {"name": name, "namespace": NS}, "spec": spec})
}

fn resource(ns: &str, name: &str, tag: &str) -> String {
    json!({"apiVersion": "manager.kotaico.de/v1", "kind": "Resource",
        "metadata": {"name": name, "namespace": ns}, "spec": {"type": "ec2", "tag": tag}})
    .to_string()
}

fn assert_denied(out: &Output, webhook: &str, wants: &[&str], what: &str) {
    assert!(!out.ok, "{what}: admitted:\n{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "admission webhook \"{webhook}\" denied the request"
        )),
        "{what}: not denied by {webhook}:\n{}",
        out.stderr
    );
    for want in wants {
        assert!(
            out.stderr.contains(want),
            "{what}: {want:?} missing:\n{}",
            out.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_resource_for_a_claimed_group_is_denied_naming_the_claimer() {
    let mut system = System::start("tenancy-claims").await;
    system.register_webhook(&[]).await;
    let out = system
        .admin(&["apply", "-f", "-"], Some(&resource(NS, "ec2.web", "web")))
        .await;
    assert!(out.ok, "{}", out.stderr);
    // The Resource cache of the webhook sees it a moment later.
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = system
            .admin(
                &["apply", "-f", "-"],
                Some(&resource(OTHER_NS, "theirs", "web")),
            )
            .await;
        if !out.ok || Instant::now() > deadline {
            break out;
        }
        // Admitted before the cache saw the claimer: take it back and retry.
        system
            .admin(&["delete", "resource", "theirs", "-n", OTHER_NS], None)
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_denied(
        &out,
        "schedulers.validate.manager.kotaico.de",
        &[
            "spec.tag: the ec2 group \"web\"",
            "claimed by Resource tenancy/ec2.web",
            "book it through that Resource",
        ],
        "a second claimer in another namespace",
    );
    // Another tag is another group; moving that Resource onto the claimed group is denied.
    let out = system
        .admin(
            &["apply", "-f", "-"],
            Some(&resource(OTHER_NS, "theirs", "db")),
        )
        .await;
    assert!(out.ok, "{}", out.stderr);
    let out = system
        .admin(
            &[
                "patch",
                "resource",
                "theirs",
                "-n",
                OTHER_NS,
                "--type",
                "merge",
                "-p",
                r#"{"spec":{"tag":"web"}}"#,
            ],
            None,
        )
        .await;
    assert_denied(
        &out,
        "schedulers.validate.manager.kotaico.de",
        &["claimed by Resource tenancy/ec2.web"],
        "an update onto the claimed group",
    );
    // The claimer itself is still updated freely.
    let out = system
        .admin(
            &[
                "patch",
                "resource",
                "ec2.web",
                "-n",
                NS,
                "--type",
                "merge",
                "-p",
                r#"{"spec":{"hibernate":true}}"#,
            ],
            None,
        )
        .await;
    assert!(out.ok, "{}", out.stderr);
}

/// RBAC of the test: `ann`, `bob` and `gitops` may work with bookings in [`NS`]; `gitops` also
/// holds the shipped `book-for-others` ClusterRole there.
async fn grant_bookers(system: &System) {
    let rbac = booking_tests::repo_root().join("manifests/components/restrict-user-id/rbac.yaml");
    let out = system
        .admin(&["apply", "-f", &rbac.to_string_lossy()], None)
        .await;
    assert!(out.ok, "{}", out.stderr);
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "booker", "namespace": NS},
        "rules": [{"apiGroups": ["manager.kotaico.de"], "resources": ["bookings", "bookingschedulers"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]});
    let subject =
        |u: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u});
    let bookers = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "bookers", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "booker"},
        "subjects": [subject("ann"), subject("bob"), subject("gitops")]});
    let others = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "gitops-books-for-others", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
            "name": "resource-booking-operator-book-for-others"},
        "subjects": [subject("gitops")]});
    for doc in [role, bookers, others] {
        let out = system
            .admin(&["apply", "-f", "-"], Some(&doc.to_string()))
            .await;
        assert!(out.ok, "{}", out.stderr);
    }
}

fn requested_by(out: &Output) -> String {
    let v: Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    v["metadata"]["annotations"]["manager.kotaico.de/requested-by"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_creator_or_a_holder_of_book_for_others_books_for_others() {
    let mut system = System::start("tenancy-requester").await;
    system.register_webhook(&["--restrict-user-id"]).await;
    grant_bookers(&system).await;
    const V: &str = "bookings.validate.manager.kotaico.de";
    let apply = ["apply", "-o", "json", "-f", "-"];

    // RBAC is enforced: a user without a binding cannot even get to the webhook.
    let out = system
        .user(
            "eve",
            &apply,
            Some(&booking("eve", "eve", 1, 2).to_string()),
        )
        .await;
    assert!(
        !out.ok && out.stderr.contains("forbidden"),
        "{}",
        out.stderr
    );

    // Booking for oneself: admitted, and the creator recorded.
    let out = system
        .user(
            "ann",
            &apply,
            Some(&booking("anns", "ann", 1, 2).to_string()),
        )
        .await;
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(requested_by(&out), "ann");
    // For someone else: refused, naming the missing permission.
    let out = system
        .user(
            "ann",
            &apply,
            Some(&booking("for-cd", "cd39ad8bc3", 10, 11).to_string()),
        )
        .await;
    assert_denied(
        &out,
        V,
        &[
            "spec.user_id is \"cd39ad8bc3\", not the requesting user \"ann\"",
            "verb \"book-for-others\" on resource \"bookings\" of group \"manager.kotaico.de\" in namespace \"tenancy\"",
        ],
        "ann books for cd39ad8bc3",
    );
    // The GitOps user holding the shipped ClusterRole may (the original's external ids).
    let out = system
        .user(
            "gitops",
            &apply,
            Some(&booking("for-cd", "cd39ad8bc3", 10, 11).to_string()),
        )
        .await;
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(requested_by(&out), "gitops");

    // A scheduler is no way around it: its template's user_id is checked the same way.
    let scheduler = |name: &str, user: &str| {
        json!({"apiVersion": "manager.kotaico.de/v1", "kind": "BookingScheduler",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"schedule": "0 3 * * *", "duration": 20,
                "bookingTemplate": {"resource_name": "ec2.nightly", "user_id": user}}})
        .to_string()
    };
    let out = system
        .user("ann", &apply, Some(&scheduler("nightly", "cd39ad8bc3")))
        .await;
    assert_denied(
        &out,
        "schedulers.validate.manager.kotaico.de",
        &[
            "spec.bookingTemplate.user_id is \"cd39ad8bc3\", not the requesting user \"ann\"",
            "verb \"book-for-others\"",
        ],
        "ann schedules for cd39ad8bc3",
    );
    for (user, owner) in [("ann", "ann"), ("gitops", "cd39ad8bc3")] {
        let out = system
            .user(
                user,
                &apply,
                Some(&scheduler(&format!("nightly-{user}"), owner)),
            )
            .await;
        assert!(out.ok, "{user}: {}", out.stderr);
    }

    // Someone else changing end_at of ann's booking: refused naming the creator.
    let patch = |end_h: i64| {
        let end = (Utc::now() + chrono::Duration::hours(end_h))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        json!({"spec": {"end_at": end}}).to_string()
    };
    let merge = |p: &str| -> Vec<String> {
        [
            "patch", "booking", "anns", "-n", NS, "--type", "merge", "-p", p,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let run = |user: &'static str, args: Vec<String>| {
        let system = &system;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            system.user(user, &args, None).await
        }
    };
    let p = patch(3);
    let out = run("bob", merge(&p)).await;
    assert_denied(
        &out,
        V,
        &[
            "created by \"ann\"",
            "spec.end_at",
            "verb \"book-for-others\"",
        ],
        "bob extends ann's booking",
    );
    // A field outside user_id, end_at and resource_name is his to change.
    let notify =
        json!({"spec": {"notifications": [{"type": "email", "recipient": "bob@example.com"}]}})
            .to_string();
    let out = run("bob", merge(&notify)).await;
    assert!(out.ok, "{}", out.stderr);
    // The creator and the GitOps user may extend it.
    assert!(run("ann", merge(&p)).await.ok);
    let p = patch(4);
    let out = run("gitops", merge(&p)).await;
    assert!(out.ok, "{}", out.stderr);

    // The annotation never changes, whoever asks, and a create cannot forge it.
    let forged = json!({"metadata": {"annotations": {"manager.kotaico.de/requested-by": "bob"}}})
        .to_string();
    let out = run("ann", merge(&forged)).await;
    assert_denied(
        &out,
        V,
        &["created by \"ann\"", "cannot be changed or removed"],
        "rewrite",
    );
    // Removing it (as a server-side apply that no longer sets it does) puts it back.
    let removed =
        json!({"metadata": {"annotations": {"manager.kotaico.de/requested-by": null}}}).to_string();
    let mut args = merge(&removed);
    args.extend(["-o".to_owned(), "json".to_owned()]);
    let out = run("ann", args).await;
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(requested_by(&out), "ann");
    // GitOps by server-side apply: re-applying the manifest (which never carries the
    // annotation) keeps working and keeps the creator.
    let ssa = ["apply", "--server-side", "-o", "json", "-f", "-"];
    for end in [19, 20] {
        let out = system
            .user(
                "ann",
                &ssa,
                Some(&booking("applied", "ann", 18, end).to_string()),
            )
            .await;
        assert!(
            out.ok,
            "server-side apply ending at +{end} h: {}",
            out.stderr
        );
        assert_eq!(requested_by(&out), "ann");
    }
    let mut b = booking("forged", "ann", 12, 13);
    b["metadata"]["annotations"] = json!({"manager.kotaico.de/requested-by": "bob"});
    let out = system.user("ann", &apply, Some(&b.to_string())).await;
    assert_denied(
        &out,
        V,
        &["\"bob\" is not the user making this request (\"ann\")"],
        "forged create",
    );

    // The SubjectAccessReview fails: the request is refused (fail closed), saying so.
    system.proxy.as_ref().unwrap().inject(KubeFault {
        remaining: 100,
        ..KubeFault::new(Method::POST, "subjectaccessreviews", 500)
    });
    let out = system
        .user(
            "gitops",
            &apply,
            Some(&booking("during-outage", "cd39ad8bc3", 14, 15).to_string()),
        )
        .await;
    assert!(!out.ok, "admitted while the review failed:\n{}", out.stdout);
    assert!(
        out.stderr.contains("could not be checked")
            && out.stderr.contains("the request is refused"),
        "{}",
        out.stderr
    );
    // Booking for oneself needs no review and still works.
    let out = system
        .user(
            "ann",
            &apply,
            Some(&booking("own-during-outage", "ann", 16, 17).to_string()),
        )
        .await;
    assert!(out.ok, "{}", out.stderr);

    // The SubjectAccessReview never answers: refused at the webhook's deadline (2 s), well
    // within the API server's 10 s webhook timeout, saying so.
    let proxy = system.proxy.as_ref().unwrap();
    proxy.clear_faults();
    proxy.inject(KubeFault::stall(
        "subjectaccessreviews",
        Duration::from_secs(60),
    ));
    let began = Instant::now();
    let out = system
        .user(
            "gitops",
            &apply,
            Some(&booking("during-stall", "cd39ad8bc3", 18, 19).to_string()),
        )
        .await;
    let took = began.elapsed();
    proxy.clear_faults();
    assert!(
        !out.ok,
        "admitted while the review stalled:\n{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("did not answer within") && out.stderr.contains("is refused"),
        "{}",
        out.stderr
    );
    assert!(took < Duration::from_secs(8), "refused after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_refused_by_the_schema_and_the_webhook_naming_the_field() {
    let mut system = System::start("tenancy-limits").await;
    // The CRD alone (no webhook): maxItems and maxLength.
    let mut many = booking("many", "ann", 1, 2);
    many["spec"]["notifications"] = json!(vec![
        json!({"type": "email", "recipient": "a@example.com"});
        11
    ]);
    let mut long_user = booking("long-user", &"u".repeat(257), 1, 2);
    long_user["spec"]["notifications"] = json!([]);
    let mut long_recipient = booking("long-recipient", "ann", 1, 2);
    long_recipient["spec"]["notifications"] = json!([{"type": "webhook",
        "recipient": format!("https://hooks.example.com/{}", "a".repeat(2048))}]);
    for (b, wants) in [
        (
            &many,
            &["spec.notifications: Too many: 11: must have at most 10 items"][..],
        ),
        (
            &long_user,
            &["spec.user_id: Too long: may not be more than 256"][..],
        ),
        (
            &long_recipient,
            &["spec.notifications[0].recipient: Too long: may not be more than 2048"][..],
        ),
    ] {
        let out = system
            .admin(&["create", "-f", "-"], Some(&b.to_string()))
            .await;
        assert!(!out.ok, "admitted:\n{}", out.stdout);
        assert!(out.stderr.contains(" is invalid: "), "{}", out.stderr);
        for want in wants {
            assert!(
                out.stderr.contains(want),
                "{want:?} missing:\n{}",
                out.stderr
            );
        }
    }
    // With the webhook, at its defaults: control characters and the 30-day maximum.
    system.register_webhook(&[]).await;
    const V: &str = "bookings.validate.manager.kotaico.de";
    let out = system
        .admin(
            &["create", "-f", "-"],
            Some(&booking("ctl", "ann\u{1b}[2J", 1, 2).to_string()),
        )
        .await;
    assert_denied(
        &out,
        V,
        &["spec.user_id:", "control character"],
        "escape in user_id",
    );
    let mut header = booking("hdr", "ann", 1, 2);
    header["spec"]["notifications"] =
        json!([{"type": "email", "recipient": "a@example.com\r\nBcc: x@example.com"}]);
    let out = system
        .admin(&["create", "-f", "-"], Some(&header.to_string()))
        .await;
    assert_denied(
        &out,
        V,
        &["spec.notifications[0].recipient:", "control character"],
        "CRLF in a recipient",
    );
    let out = system
        .admin(
            &["create", "-f", "-"],
            Some(&booking("month", "ann", 1, 1 + 31 * 24).to_string()),
        )
        .await;
    assert_denied(
        &out,
        V,
        &[
            "spec.end_at:",
            "lasts 31d",
            "longer than the 30d this cluster allows",
        ],
        "31 days",
    );
    let out = system
        .admin(
            &["create", "-f", "-"],
            Some(&booking("fortnight", "ann", 1, 1 + 14 * 24).to_string()),
        )
        .await;
    assert!(out.ok, "{}", out.stderr);
}

/// A notification's `events`: the CRD's enum refuses an unknown event on its own; the webhook
/// refuses one listed twice, naming the field; the four events, once each, are admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_events_are_refused_naming_the_field() {
    let mut system = System::start("tenancy-events").await;
    let with = |name: &str, events: Value| {
        let mut b = booking(name, "ann", 1, 2);
        b["spec"]["notifications"] =
            json!([{"type": "email", "recipient": "a@example.com", "events": events}]);
        b.to_string()
    };
    let out = system
        .admin(
            &["create", "-f", "-"],
            Some(&with("unknown", json!(["started", "exploded"]))),
        )
        .await;
    assert!(!out.ok, "admitted:\n{}", out.stdout);
    for want in [
        "spec.notifications[0].events[1]: Unsupported value: \"exploded\"",
        "\"reminder\", \"started\", \"stopped\", \"failed\"",
    ] {
        assert!(
            out.stderr.contains(want),
            "{want:?} missing:\n{}",
            out.stderr
        );
    }
    system.register_webhook(&[]).await;
    let out = system
        .admin(
            &["create", "-f", "-"],
            Some(&with("twice", json!(["stopped", "stopped"]))),
        )
        .await;
    assert_denied(
        &out,
        "bookings.validate.manager.kotaico.de",
        &[
            "spec.notifications[0].events[1]:",
            "\"stopped\" is listed twice",
        ],
        "an event listed twice",
    );
    let out = system
        .admin(
            &["create", "-f", "-"],
            Some(&with(
                "all",
                json!(["reminder", "started", "stopped", "failed"]),
            )),
        )
        .await;
    assert!(out.ok, "{}", out.stderr);
}
