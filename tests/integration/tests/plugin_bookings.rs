//! The booking subcommands of `kubectl booking`, end to end: the real `kubectl-booking` binary
//! against the real control plane.
//!
//! - `status` and `timeline` read Resources and Bookings of the run's shared control plane;
//!   the holder is computed from the Bookings before the controller ever runs, and the group's
//!   state appears once the real controller (against moto) has written the Resources' status.
//!   The bookings lie in a fixed future week, shown with `--from`, so the text is golden.
//! - `book`, `extend` and `release` go through the real admission webhook, registered by the
//!   shipped configurations on a control plane of the test's own: an overlap is refused naming
//!   the booking in the way, as the API server returns it.
//! - kubectl runs the binary as its plugin: `kubectl booking status` with the binary's folder on
//!   `PATH`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use booking_harness::{
    TestDir,
    control_plane::{self, ControlPlane, ControlPlaneOptions, LocalWebhooks},
    free_port,
    process::{ManagedProcess, Readiness},
    tls::TestCa,
};
use booking_shared::api::{Booking, Resource};
use booking_tests::e2e::{
    booking, env, resource, start_controller, stopped_group, wait_for, webhook_process,
    workspace_binary,
};
use booking_tests::kubectl::kubectl;
use chrono::{Datelike, NaiveDate, Utc};
use kube::api::{Api, PostParams};
use serde_json::Value;

/// What one run of the plugin did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "exit code; stderr:\n{}", self.stderr);
        &self.stdout
    }

    fn fails(&self, code: i32, wants: &[&str]) {
        assert_eq!(
            self.code, code,
            "exit code; stdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        for want in wants {
            assert!(
                self.stderr.contains(want),
                "{want:?} missing from stderr:\n{}",
                self.stderr
            );
        }
    }
}

/// Runs `kubectl-booking` with `args` and the environment `env` (nothing of the test's own
/// Kubernetes environment leaks in); at most 60 s.
async fn run_with(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = tokio::process::Command::new(workspace_binary("kubectl-booking"));
    cmd.args(args)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("kubectl-booking finished within 60 s")
        .expect("kubectl-booking runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs the plugin against `kubeconfig` in namespace `ns`.
async fn plugin(kubeconfig: &Path, ns: &str, args: &[&str]) -> Run {
    let mut all = vec!["--kubeconfig", kubeconfig.to_str().unwrap(), "-n", ns];
    all.extend_from_slice(args);
    run_with(&all, &[]).await
}

/// The Monday of the week that starts at least 14 days from now: the fixed future week of the
/// golden texts (written for the week of Monday 2026-12-07, see [`dated`]).
fn future_monday() -> NaiveDate {
    let d = (Utc::now() + chrono::Duration::days(14)).date_naive();
    d - chrono::Duration::days(i64::from(d.weekday().num_days_from_monday()))
}

/// A golden text written for the week of Monday 2026-12-07, moved to the week of `monday`
/// (every date of Sun 2026-12-06 to Thu 2026-12-10 replaced; the weekdays stay).
fn dated(text: &str, monday: NaiveDate) -> String {
    let golden = NaiveDate::from_ymd_opt(2026, 12, 7).unwrap();
    (-1..=3).fold(text.to_owned(), |t, i| {
        let day = |m: NaiveDate| {
            (m + chrono::Duration::days(i))
                .format("%Y-%m-%d")
                .to_string()
        };
        t.replace(&day(golden), &day(monday))
    })
}

fn at(day: NaiveDate, hh_mm: &str) -> chrono::DateTime<Utc> {
    let t = chrono::NaiveTime::parse_from_str(hh_mm, "%H:%M").unwrap();
    day.and_time(t).and_utc()
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

fn yaml(text: &str) -> Value {
    serde_yaml::from_str(text).unwrap_or_else(|e| panic!("not YAML ({e}):\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_timeline_show_holders_next_bookings_and_free_slots() {
    let e = env("plugin-status").await;
    let kc = e.cluster.kubeconfig_path().to_path_buf();
    let ns = e.ns.clone();
    let ec2 = e.moto.ec2();
    stopped_group(&ec2, 2, "web").await;
    let resources: Api<Resource> = Api::namespaced(e.client.clone(), &ns);
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &ns);
    for r in [
        resource("ec2.web", "ec2", "web", None),
        resource("ec2.idle", "ec2", "idle", None),
    ] {
        resources.create(&PostParams::default(), &r).await.unwrap();
    }
    let mon = future_monday();
    let day = |i: i64| mon + chrono::Duration::days(i);
    // In creation order: `late` is created after `night` and overlaps it, so it never holds
    // (no webhook runs on this control plane to refuse it).
    let week = [
        ("web-early", "alice", at(day(-1), "20:00"), at(mon, "02:00")),
        ("web-night", "bob", at(mon, "22:00"), at(day(1), "01:30")),
        ("web-late", "carol", at(mon, "22:30"), at(mon, "23:30")),
        ("web-day", "dave", at(day(1), "09:00"), at(day(1), "12:00")),
        ("web-wed", "erin", at(day(2), "14:00"), at(day(2), "16:00")),
    ];
    for (name, user, start, end) in week {
        let mut b = booking(name, "ec2.web", start, end);
        b.spec.user_id = user.into();
        bookings.create(&PostParams::default(), &b).await.unwrap();
        // Distinct creation times (they have a resolution of a second).
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    // The idle group is held now, for an hour from the last full minute.
    let now_minute =
        chrono::DurationRound::duration_trunc(Utc::now(), chrono::Duration::minutes(1)).unwrap();
    let until = now_minute + chrono::Duration::hours(1);
    let mut held = booking("idle-now", "ec2.idle", now_minute, until);
    held.spec.user_id = "frank".into();
    bookings
        .create(&PostParams::default(), &held)
        .await
        .unwrap();
    let until = booking_shared::time::format_rfc3339(until);

    // Without the controller: holders and next bookings all the same, the group unknown.
    let out = plugin(&kc, &ns, &["status"]).await;
    // The real `until` goes in after the golden week is moved: it may itself fall in that week.
    let want = dated(
        "\
NAME       HELD BY   BOOKING    UNTIL                  NEXT        NEXT START             NEXT USER   GROUP
ec2.idle   frank     idle-now   XXXX-XX-XXTXX:XX:XXZ                                                  unknown
ec2.web                                                web-early   2026-12-06T20:00:00Z   alice       unknown
",
        mon,
    )
    .replace("XXXX-XX-XXTXX:XX:XXZ", &until);
    assert_eq!(out.ok(), want, "\n{}", out.stdout);
    assert!(
        out.stderr.contains(&format!(
            "note: {ns}/ec2.web: the controller has not reported on this Resource yet"
        )),
        "{}",
        out.stderr
    );

    // The controller writes the group's state; the notes go.
    let mut controller = start_controller(&e, free_port().unwrap(), "plugin-status", &[]);
    wait_for("both Resources reported", Duration::from_secs(60), || {
        let resources = resources.clone();
        async move {
            let list = resources
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let ready = list.items.iter().all(|r| {
                r.status.as_ref().is_some_and(|s| {
                    s.status.is_some()
                        && (r.spec.tag != "web" || s.instances == 2)
                        && s.next_booking.is_some() == (r.spec.tag == "web")
                })
            });
            ready.then_some(()).ok_or_else(|| {
                format!(
                    "{:?}",
                    list.items.iter().map(|r| &r.status).collect::<Vec<_>>()
                )
            })
        }
    })
    .await;
    let out = plugin(&kc, &ns, &["status"]).await;
    let want = want.replace("unknown", "STOPPED 0/0").replacen(
        "alice       STOPPED 0/0",
        "alice       STOPPED 0/2",
        1,
    );
    println!("$ kubectl booking status\n{}", out.stdout);
    assert_eq!(out.ok(), want, "\n{}", out.stdout);
    assert_eq!(
        out.stderr, "",
        "no disagreement once the controller has reported"
    );
    controller.stop().unwrap();

    // One Resource, and every namespace.
    let out = plugin(&kc, &ns, &["status", "ec2.web", "-o", "json"]).await;
    let rows = json(out.ok());
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
    assert_eq!(rows[0]["next"]["booking"], "web-early");
    assert_eq!(rows[0]["next"]["user"], "alice");
    assert_eq!(rows[0]["group"]["running"], 0);
    assert_eq!(rows[0]["group"]["instances"], 2);
    assert!(rows[0].get("heldBy").is_none(), "{rows}");
    let out = plugin(&kc, &ns, &["status", "-o", "yaml"]).await;
    let rows = yaml(out.ok());
    assert_eq!(rows[0]["name"], "ec2.idle");
    assert_eq!(rows[0]["heldBy"]["user"], "frank");
    assert_eq!(rows[0]["heldBy"]["booking"], "idle-now");
    assert_eq!(rows[0]["heldBy"]["until"], until.as_str());
    let out = plugin(&kc, "default", &["status", "-A"]).await;
    let text = out.ok();
    assert!(text.starts_with("NAMESPACE "), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with(&format!("{ns} "))
            && l.contains("ec2.idle")
            && l.contains("frank")),
        "{text}"
    );

    // The timeline of the week: a booking from the day before, one over midnight, one that
    // lost to it.
    let from = mon.format("%Y-%m-%d").to_string();
    let out = plugin(
        &kc,
        &ns,
        &["timeline", "ec2.web", "--from", &from, "--days", "3"],
    )
    .await;
    println!(
        "$ kubectl booking timeline ec2.web --from {from} --days 3\n{}",
        out.stdout
    );
    let want = dated(
        &"\
Resource ec2.web in NS, Mon 2026-12-07 to Wed 2026-12-09, times in UTC; one character per 30 min
                 00    03    06    09    12    15    18    21
Mon 2026-12-07   AAAA........................................BBBB
Tue 2026-12-08   BBB...............CCCCCC........................
Wed 2026-12-09   ............................DDDD................

. free   * several holders in one half-hour   blank: a time the zone skips

KEY   BOOKING     USER    START                  END                    PHASE       NOTE
A     web-early   alice   Sun 2026-12-06 20:00   Mon 2026-12-07 02:00   SCHEDULED
B     web-night   bob     Mon 2026-12-07 22:00   Tue 2026-12-08 01:30   SCHEDULED
-     web-late    carol   Mon 2026-12-07 22:30   Mon 2026-12-07 23:30   SCHEDULED   overlaps web-night: never holds
C     web-day     dave    Tue 2026-12-08 09:00   Tue 2026-12-08 12:00   SCHEDULED
D     web-wed     erin    Wed 2026-12-09 14:00   Wed 2026-12-09 16:00   SCHEDULED
"
        .replace(" NS,", &format!(" {ns},")),
        mon,
    );
    assert_eq!(out.ok(), want, "\n{}", out.stdout);
    // In Tokyo (UTC+9, no daylight saving) every bar moves 9 hours right.
    let out = plugin(
        &kc,
        &ns,
        &[
            "timeline",
            "ec2.web",
            "--from",
            &from,
            "--days",
            "1",
            "--tz",
            "Asia/Tokyo",
        ],
    )
    .await;
    let text = out.ok();
    assert!(
        text.contains(&dated(
            "Mon 2026-12-07   ..........AAAAAAAAAAAA..........................\n",
            mon
        )) && text.contains("A     web-early   alice   Mon "),
        "\n{text}"
    );
    let out = plugin(
        &kc,
        &ns,
        &[
            "timeline", "ec2.web", "--from", &from, "--days", "3", "-o", "json",
        ],
    )
    .await;
    let data = json(out.ok());
    assert_eq!(data["timeZone"], "UTC");
    assert_eq!(data["bookings"].as_array().map(Vec::len), Some(5), "{data}");
    assert_eq!(data["bookings"][2]["booking"], "web-late");
    assert_eq!(data["bookings"][2]["conflictsWith"], "web-night");
    let out = plugin(
        &kc,
        &ns,
        &["timeline", "ec2.web", "--from", &from, "-o", "yaml"],
    )
    .await;
    assert_eq!(
        yaml(out.ok())["bookings"][0]["start"],
        format!("{}T20:00:00Z", day(-1).format("%Y-%m-%d"))
    );

    // Its free slots of at least 2 hours.
    let out = plugin(
        &kc,
        &ns,
        &[
            "timeline", "ec2.web", "--from", &from, "--days", "3", "--free", "--for", "2h",
        ],
    )
    .await;
    println!(
        "$ kubectl booking timeline ec2.web --from {from} --days 3 --free --for 2h\n{}",
        out.stdout
    );
    let want = dated(
        "\
START                  END                    LENGTH
Mon 2026-12-07 02:00   Mon 2026-12-07 22:00   20h
Tue 2026-12-08 01:30   Tue 2026-12-08 09:00   7h 30m
Tue 2026-12-08 12:00   Wed 2026-12-09 14:00   26h
Wed 2026-12-09 16:00   Thu 2026-12-10 00:00   8h
",
        mon,
    );
    assert_eq!(out.ok(), want, "\n{}", out.stdout);
    let out = plugin(
        &kc,
        &ns,
        &[
            "timeline", "ec2.web", "--from", &from, "--days", "3", "--free", "--for", "8h", "-o",
            "json",
        ],
    )
    .await;
    let free = json(out.ok());
    let lengths: Vec<_> = free
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["length"].as_str().unwrap())
        .collect();
    assert_eq!(lengths, ["20h", "26h", "8h"]);

    // Errors name what is wrong; usage errors exit 2, failed requests 1.
    plugin(&kc, &ns, &["status", "ec2.nope"]).await.fails(
        1,
        &[&format!(
            "Resource \"ec2.nope\" not found in namespace \"{ns}\""
        )],
    );
    plugin(&kc, &ns, &["timeline", "ec2.nope"])
        .await
        .fails(1, &["Resource \"ec2.nope\" not found"]);
    plugin(&kc, &ns, &["timeline", "ec2.web", "--tz", "Mars/Olympus"])
        .await
        .fails(
            2,
            &[
                "--tz \"Mars/Olympus\" is not an IANA time zone name",
                "Europe/Berlin",
            ],
        );
    plugin(&kc, &ns, &["timeline", "ec2.web", "--from", "next week"])
        .await
        .fails(2, &["--from \"next week\" is not a date", "2026-12-02"]);
    plugin(
        &kc,
        &ns,
        &["timeline", "ec2.web", "--free", "--for", "2 lightyears"],
    )
    .await
    .fails(2, &["--for \"2 lightyears\" is not a duration", "1h30m"]);
    plugin(&kc, &ns, &["book", "ec2.web", "--for", "2x", "--now"])
        .await
        .fails(2, &["--for \"2x\" is not a duration", "2h, 90m or 1h30m"]);
    plugin(
        &kc,
        &ns,
        &["book", "ec2.web", "--for", "1h", "--at", "soon"],
    )
    .await
    .fails(2, &["--at \"soon\" is not a time", "RFC 3339"]);
    plugin(
        &kc,
        &ns,
        &[
            "book",
            "ec2.web",
            "--for",
            "1h",
            "--at",
            "2026-12-02T09:00:00+0100",
        ],
    )
    .await
    .fails(
        2,
        &["the offset needs its colon, as in 2026-12-02T09:00:00+01:00"],
    );
    plugin(
        &kc,
        &ns,
        &[
            "book",
            "ec2.web",
            "--for",
            "1h",
            "--at",
            "2030-03-31 02:30",
            "--tz",
            "Europe/Berlin",
        ],
    )
    .await
    .fails(2, &["2030-03-31 02:30 does not exist in Europe/Berlin"]);
    // An unknown Resource is refused before anything is created.
    plugin(&kc, &ns, &["book", "ec2.nope", "--for", "1h", "--now"])
        .await
        .fails(
            1,
            &[
                "Resource \"ec2.nope\" not found",
                "kubectl get resources.manager.kotaico.de",
            ],
        );
    let none = bookings.list(&Default::default()).await.unwrap();
    assert!(
        none.items
            .iter()
            .all(|b| b.spec.resource_name != "ec2.nope"),
        "a Booking of the unknown Resource was created"
    );
    // No kubeconfig at all: an empty home, no $KUBECONFIG, not in a cluster.
    let home = e.dir.path().join("empty-home");
    std::fs::create_dir_all(&home).unwrap();
    run_with(&["status"], &[("HOME", home.to_str().unwrap())])
        .await
        .fails(1, &["no usable Kubernetes configuration", "--kubeconfig"]);
    run_with(&["status", "--kubeconfig", "/nonexistent/kubeconfig"], &[])
        .await
        .fails(
            1,
            &[
                "--kubeconfig /nonexistent/kubeconfig",
                "give a readable kubeconfig file",
            ],
        );

    // kubectl runs it as its plugin.
    let bin = workspace_binary("kubectl-booking");
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = tokio::process::Command::new(control_plane::binary("kubectl").unwrap())
        .args(["booking", "status", "ec2.web", "-n", &ns])
        .env("PATH", path)
        .env("KUBECONFIG", &kc)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout
            .lines()
            .nth(1)
            .map(|l| l.split_whitespace().collect::<Vec<_>>()),
        Some(vec![
            "ec2.web",
            "web-early",
            &*format!("{}T20:00:00Z", day(-1).format("%Y-%m-%d")),
            "alice",
            "STOPPED",
            "0/2"
        ]),
        "{stdout}"
    );
}

/// A control plane of the test's own with the CRDs and the real webhook registered by the
/// shipped configurations.
struct Admitted {
    /// Stopped first (fields drop in order), while the API server it watches still runs.
    _webhook: ManagedProcess,
    plane: ControlPlane,
    _dir: TestDir,
}

impl Admitted {
    async fn start(label: &str) -> Admitted {
        let dir = TestDir::new(label).expect("a test directory");
        let plane = ControlPlane::start(&dir, ControlPlaneOptions::default())
            .await
            .expect("the control plane starts");
        let kc = plane.kubeconfig_path().to_path_buf();
        let crds = booking_tests::repo_root().join("manifests/crds");
        let crds = crds.to_string_lossy();
        let out = kubectl(&kc, None, &["apply", "-f", &crds], None).await;
        assert!(out.ok, "installing the CRDs failed:\n{}", out.stderr);
        let wait = [
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            &crds,
        ];
        let out = kubectl(&kc, None, &wait, None).await;
        assert!(out.ok, "the CRDs are not established:\n{}", out.stderr);
        let ca = TestCa::new(&dir, "webhook").expect("a test CA");
        let cert = ca
            .issue_server_cert("booking-webhook", &["127.0.0.1"])
            .expect("a certificate");
        let (port, admin_port) = (free_port().unwrap(), free_port().unwrap());
        let mut webhook = webhook_process(&cert, port, admin_port, &kc)
            .spawn(&dir)
            .expect("booking-webhook starts");
        webhook
            .wait_ready(
                &Readiness::Http(format!("http://127.0.0.1:{admin_port}/readyz")),
                Duration::from_secs(60),
            )
            .await
            .expect("booking-webhook becomes ready");
        let manifest =
            booking_tests::repo_root().join("manifests/webhook/webhook-configurations.yaml");
        let local = LocalWebhooks::from_manifest(
            &manifest,
            &format!("https://127.0.0.1:{port}"),
            &ca.cert_pem(),
        )
        .expect("the shipped webhook configurations");
        for config in local.documents() {
            let config = config.to_string();
            let out = kubectl(&kc, None, &["apply", "-f", "-"], Some(&config)).await;
            assert!(out.ok, "registering the webhook failed:\n{}", out.stderr);
        }
        // The API server picks the configurations up from its watch: wait until a dry-run
        // Booking without a user comes back with the webhook's default.
        let probe = serde_json::json!({
            "apiVersion": "manager.kotaico.de/v1", "kind": "Booking",
            "metadata": {"name": "webhook-probe", "namespace": "default"},
            "spec": {"resource_name": "ec2.probe", "start_at": "2031-01-10T22:35:00Z",
                     "end_at": "2031-01-10T23:35:00Z"},
        })
        .to_string();
        let create = ["create", "--dry-run=server", "-o", "json", "-f", "-"];
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = kubectl(&kc, None, &create, Some(&probe)).await;
            if out.ok
                && serde_json::from_str::<Value>(&out.stdout)
                    .is_ok_and(|v| v["spec"]["user_id"].is_string())
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the webhook is not called:\n{}{}",
                out.stdout,
                out.stderr
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Admitted {
            _webhook: webhook,
            plane,
            _dir: dir,
        }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.plane.kubeconfig_path().to_path_buf()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn book_extend_and_release_go_through_the_webhook() {
    let system = Admitted::start("plugin-book").await;
    let kc = system.kubeconfig();
    let ns = "default";
    let out = kubectl(
        &kc,
        None,
        &["apply", "-f", "-"],
        Some(
            &serde_json::json!({"apiVersion": "manager.kotaico.de/v1", "kind": "Resource",
                "metadata": {"name": "ec2.web", "namespace": ns}, "spec": {"type": "ec2", "tag": "web"}})
            .to_string(),
        ),
    )
    .await;
    assert!(out.ok, "{}", out.stderr);
    let mon = future_monday();
    let date = mon.format("%Y-%m-%d").to_string();

    // A wall time in a zone (Tokyo keeps +09:00 all year), with a notification.
    let nine = format!("{date} 09:00");
    let out = plugin(
        &kc,
        ns,
        &[
            "book",
            "ec2.web",
            "--for",
            "2h",
            "--at",
            &nine,
            "--tz",
            "Asia/Tokyo",
            "--name",
            "web-1",
            "--user",
            "alice",
            "--notify",
            "email:alice@example.com",
        ],
    )
    .await;
    println!(
        "$ kubectl booking book ec2.web --for 2h --at '{nine}' --tz Asia/Tokyo --name web-1 --user alice --notify email:alice@example.com\n{}",
        out.stdout
    );
    assert_eq!(
        out.ok(),
        dated(
            "\
NAME    RESOURCE   USER    START                       END
web-1   ec2.web    alice   2026-12-07T09:00:00+09:00   2026-12-07T11:00:00+09:00
",
            mon
        )
    );
    let bookings: Api<Booking> = Api::namespaced(system.plane.client().await.unwrap(), ns);
    let stored = bookings.get("web-1").await.unwrap();
    assert_eq!(stored.spec.start_at, format!("{date}T09:00:00+09:00"));
    assert_eq!(stored.spec.notifications[0].recipient, "alice@example.com");

    // An overlap is refused by the webhook, naming the booking in the way; nothing is created.
    let out = plugin(
        &kc,
        ns,
        &[
            "book",
            "ec2.web",
            "--for",
            "1h",
            "--at",
            &format!("{date}T01:30:00Z"),
            "--name",
            "web-2",
        ],
    )
    .await;
    println!(
        "$ kubectl booking book ec2.web --for 1h --at {date}T01:30:00Z --name web-2\n{}",
        out.stderr
    );
    out.fails(
        1,
        &[
            "admission webhook",
            "denied the request",
            "overlaps booking \"web-1\" of user \"alice\"",
        ],
    );
    assert!(bookings.get_opt("web-2").await.unwrap().is_none());

    // A server dry run prints the Booking, JSON here, and creates nothing.
    let out = plugin(
        &kc,
        ns,
        &[
            "book",
            "ec2.web",
            "--for",
            "90m",
            "--at",
            &format!("{date}T05:00:00Z"),
            "--name",
            "web-dry",
            "--dry-run",
            "-o",
            "json",
        ],
    )
    .await;
    let dry = json(out.ok());
    assert_eq!(dry["spec"]["end_at"], format!("{date}T06:30:00Z"));
    assert!(
        dry["spec"]["user_id"]
            .as_str()
            .is_some_and(|u| !u.is_empty()),
        "the webhook fills the user: {dry}"
    );
    assert!(out.stderr.contains("server dry run"), "{}", out.stderr);
    assert!(bookings.get_opt("web-dry").await.unwrap().is_none());

    // A generated name; YAML.
    let out = plugin(
        &kc,
        ns,
        &[
            "book",
            "ec2.web",
            "--for",
            "1h",
            "--at",
            &format!("{date}T05:00:00Z"),
            "-o",
            "yaml",
        ],
    )
    .await;
    let created = yaml(out.ok());
    let generated = created["metadata"]["name"].as_str().unwrap().to_owned();
    assert!(generated.starts_with("ec2.web-"), "{generated}");

    // Extending moves the end; into the next booking it is refused naming it; shortening
    // below the start is refused before asking.
    let out = plugin(&kc, ns, &["extend", "web-1", "--by", "30m"]).await;
    assert!(
        out.ok().contains(&format!("{date}T02:30:00Z")),
        "{}",
        out.stdout
    );
    assert_eq!(
        bookings.get("web-1").await.unwrap().spec.end_at,
        format!("{date}T02:30:00Z")
    );
    let out = plugin(
        &kc,
        ns,
        &["extend", generated.as_str(), "--by", "1h", "-o", "json"],
    )
    .await;
    assert_eq!(
        json(out.ok())["spec"]["end_at"],
        format!("{date}T07:00:00Z")
    );
    let out = plugin(&kc, ns, &["extend", "web-1", "--by", "3h"]).await;
    out.fails(
        1,
        &[
            "denied the request",
            &format!("overlaps booking \"{generated}\""),
        ],
    );
    plugin(&kc, ns, &["extend", "web-1", "--by=-4h"])
        .await
        .fails(2, &["not after its start"]);
    plugin(&kc, ns, &["extend", "web-nope", "--by", "1h"])
        .await
        .fails(1, &["booking \"web-nope\" not found"]);
    plugin(&kc, ns, &["extend", "web-1", "--by", "a bit"])
        .await
        .fails(2, &["--by \"a bit\" is not a duration"]);

    // Lengths beyond what a time can hold are usage errors, not panics; days are 24 h.
    for huge in ["10000000000000000s", "100000000h"] {
        let out = plugin(&kc, ns, &["book", "ec2.web", "--for", huge, "--now"]).await;
        out.fails(2, &[&format!("--for {huge:?}")]);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    }
    plugin(&kc, ns, &["extend", "web-1", "--by", "100000000h"])
        .await
        .fails(2, &["--by", "after the year 9999"]);
    let out = plugin(
        &kc,
        ns,
        &[
            "book",
            "ec2.web",
            "--for",
            "1d",
            "--at",
            &format!("{date}T12:00:00Z"),
            "--dry-run",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(
        json(out.ok())["spec"]["end_at"],
        format!(
            "{}T12:00:00Z",
            (mon + chrono::Duration::days(1)).format("%Y-%m-%d")
        )
    );
    let out = plugin(
        &kc,
        ns,
        &["timeline", "ec2.web", "--from", "9999-12-30", "--days", "7"],
    )
    .await;
    out.fails(
        2,
        &["--from 9999-12-30 with --days 7", "after the year 9999"],
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    // A name across all namespaces is refused as kubectl refuses it.
    for cmd in [
        &["status", "ec2.web", "-A"][..],
        &["timeline", "ec2.web", "-A"],
    ] {
        plugin(&kc, ns, cmd).await.fails(
            2,
            &["-A with RESOURCE \"ec2.web\"", "give its namespace with -n"],
        );
    }

    // Releasing: not before the start, ends a running booking now, then nothing to release.
    plugin(&kc, ns, &["release", "web-1"]).await.fails(
        1,
        &[
            "booking web-1 has not started yet",
            "kubectl delete bookings.manager.kotaico.de web-1 -n default",
        ],
    );
    let out = plugin(
        &kc,
        ns,
        &[
            "book", "ec2.web", "--for", "1h", "--now", "--name", "web-now",
        ],
    )
    .await;
    out.ok();
    let before = Utc::now();
    let out = plugin(&kc, ns, &["release", "web-now", "-o", "json"]).await;
    let released = json(out.ok());
    let end =
        booking_shared::time::parse_rfc3339("end_at", released["spec"]["end_at"].as_str().unwrap())
            .unwrap();
    assert!(
        end >= before - chrono::Duration::seconds(1)
            && end <= Utc::now() + chrono::Duration::seconds(1),
        "released at {end}, between {before} and now"
    );
    // Booked and released within one second, it ends a second after its start.
    if let Ok(rest) = (end - Utc::now()).to_std() {
        tokio::time::sleep(rest + Duration::from_millis(100)).await;
    }
    plugin(&kc, ns, &["release", "web-now"])
        .await
        .fails(1, &["booking web-now already ended"]);
    plugin(&kc, ns, &["extend", "web-now", "--by", "1h"])
        .await
        .fails(1, &["it cannot be extended"]);
    plugin(&kc, ns, &["release", "web-nope"]).await.fails(
        1,
        &["booking \"web-nope\" not found in namespace \"default\""],
    );
}
