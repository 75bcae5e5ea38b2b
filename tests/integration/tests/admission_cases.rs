//! End to end: every case of `../shared/cases/admission/` through the real `kubectl`, against a
//! real kube-apiserver (with etcd and kube-controller-manager) that calls the real
//! `booking-webhook` binary, registered by the project's own webhook configurations
//! (`manifests/webhook/`) with only their Service reference replaced by the local webhook's URL.
//!
//! Every test here starts a control plane of its own rather than using the run's shared one: the
//! webhook configurations are cluster-wide, so on a shared API server they would intercept (and,
//! failing closed for Bookings, refuse while this test's webhook is stopped) the Bookings of
//! every other test.
//!
//! The case format is documented in `../shared/cases/README.md`. The runner reads every
//! `*.yaml` file of the folder (cases are added over time), gives each case fresh namespaces,
//! and fails — never skips — when anything it needs is missing: the cases folder, the control
//! plane's binaries, the webhook binary, or a key of a case it does not understand.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use booking_harness::{
    TestDir,
    control_plane::{self, ControlPlane, ControlPlaneOptions, LocalWebhooks},
    free_port,
    process::{ManagedProcess, Readiness},
    tls::TestCa,
};
use booking_tests::e2e::webhook_process;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

// === The case format ==========================================================================

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    description: String,
    #[serde(default)]
    given: Vec<Value>,
    when: When,
    object: Value,
    expect: Expect,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum When {
    Apply,
    Delete,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    allowed: bool,
    #[serde(default)]
    message_contains: Vec<String>,
    #[serde(default)]
    warning: Option<bool>,
    #[serde(default)]
    fields_present: Vec<String>,
    #[serde(default)]
    fields: BTreeMap<String, Value>,
}

/// Replaces `{{now}}`, `{{now+90m}}`, `{{now-2h}}`, `{{now+1d}}` (units s, m, h, d) by RFC 3339
/// UTC timestamps with second precision.
fn substitute_times(text: &str, now: DateTime<Utc>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let close = after
            .find("}}")
            .ok_or_else(|| format!("unclosed placeholder at {:?}", &rest[open..]))?;
        let inner = after[..close].trim();
        let offset = inner
            .strip_prefix("now")
            .ok_or_else(|| format!("unknown placeholder {{{{{inner}}}}}"))?;
        let delta = if offset.is_empty() {
            chrono::Duration::zero()
        } else {
            let (sign, amount) = match offset.split_at(1) {
                ("+", a) => (1, a),
                ("-", a) => (-1, a),
                _ => {
                    return Err(format!(
                        "placeholder {{{{{inner}}}}}: expected now+N<unit> or now-N<unit>"
                    ));
                }
            };
            let (digits, unit) = amount.split_at(amount.len().saturating_sub(1));
            let n: i64 = digits
                .parse()
                .map_err(|_| format!("placeholder {{{{{inner}}}}}: {digits:?} is not a number"))?;
            let unit = match unit {
                "s" => chrono::Duration::seconds(1),
                "m" => chrono::Duration::minutes(1),
                "h" => chrono::Duration::hours(1),
                "d" => chrono::Duration::days(1),
                u => {
                    return Err(format!(
                        "placeholder {{{{{inner}}}}}: unit {u:?} is not s, m, h or d"
                    ));
                }
            };
            unit * i32::try_from(sign * n)
                .map_err(|_| format!("placeholder {{{{{inner}}}}} is too large"))?
        };
        out.push_str(&(now + delta).to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

// === The system under test ====================================================================

/// The user the cases act as: impersonated by the admin in `system:masters`, so that the API
/// server authorizes the requests as a cluster admin and sends the webhook the user's name and
/// groups in `userInfo`.
const CASE_USER: (&str, &str) = ("ann", "system:masters");

struct System {
    /// Stopped first (fields drop in order), while the API server it watches still runs.
    webhook: Option<ManagedProcess>,
    /// Names of the registered webhooks, as the API server quotes them in denials.
    webhook_names: Vec<String>,
    /// Stops kube-controller-manager, kube-apiserver and etcd when dropped.
    plane: ControlPlane,
    dir: TestDir,
}

/// A control plane of the test's own with the CRDs installed, as an operator installs them
/// (`kubectl apply -f manifests/crds`), and established; no webhook yet.
async fn start_cluster(label: &str) -> System {
    let dir = TestDir::new(label).expect("a test directory");
    let started = Instant::now();
    let plane = ControlPlane::start(&dir, ControlPlaneOptions::default())
        .await
        .expect("the control plane starts");
    eprintln!(
        "control plane at {} ready in {:.1} s",
        plane.url(),
        started.elapsed().as_secs_f64()
    );
    let system = System {
        webhook: None,
        webhook_names: Vec::new(),
        plane,
        dir,
    };
    let crds = booking_tests::repo_root().join("manifests/crds");
    let out = system
        .kubectl_admin(&["apply", "-f", &crds.to_string_lossy()], None)
        .await;
    assert!(out.ok, "installing the CRDs failed:\n{}", out.stderr);
    assert!(
        warnings(&out.stderr).is_empty(),
        "the API server warns about the CRDs:\n{}",
        out.stderr
    );
    let out = system
        .kubectl_admin(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "-f",
                &crds.to_string_lossy(),
            ],
            None,
        )
        .await;
    assert!(out.ok, "the CRDs are not established:\n{}", out.stderr);
    system
}

impl System {
    /// Starts the real `booking-webhook` with a serving certificate for 127.0.0.1 generated now,
    /// registers it through the shipped configurations, and waits until the API server calls it.
    async fn register_webhook(&mut self) {
        let ca = TestCa::new(&self.dir, "webhook").expect("a test CA");
        let cert = ca
            .issue_server_cert("booking-webhook", &["127.0.0.1"])
            .expect("a serving certificate for 127.0.0.1");
        let port = free_port().expect("a free port");
        let admin_port = free_port().expect("a free port");
        let mut webhook = webhook_process(&cert, port, admin_port, self.plane.kubeconfig_path())
            .spawn(&self.dir)
            .expect("booking-webhook starts");
        webhook
            .wait_ready(
                &Readiness::Http(format!("http://127.0.0.1:{admin_port}/readyz")),
                Duration::from_secs(60),
            )
            .await
            .expect("booking-webhook becomes ready (its caches synced)");
        self.webhook = Some(webhook);

        let manifest =
            booking_tests::repo_root().join("manifests/webhook/webhook-configurations.yaml");
        let local = LocalWebhooks::from_manifest(
            &manifest,
            &format!("https://127.0.0.1:{port}"),
            &ca.cert_pem(),
        )
        .expect("the shipped webhook configurations");
        for config in local.documents() {
            for w in config["webhooks"].as_array().into_iter().flatten() {
                self.webhook_names
                    .push(w["name"].as_str().unwrap_or_default().to_owned());
            }
            let out = self
                .kubectl_admin(&["apply", "-f", "-"], Some(&config.to_string()))
                .await;
            assert!(
                out.ok,
                "registering {} failed:\n{}",
                config["kind"], out.stderr
            );
        }
        self.wait_until_webhook_called().await;
    }

    /// The API server picks up webhook configurations from its own watch, a moment after they
    /// are stored: wait until a dry-run Booking without `user_id` comes back defaulted.
    async fn wait_until_webhook_called(&self) {
        let probe = serde_json::json!({
            "apiVersion": "manager.kotaico.de/v1", "kind": "Booking",
            "metadata": {"name": "webhook-probe", "namespace": "default"},
            "spec": {"resource_name": "ec2.probe", "start_at": "2031-01-10T22:35:00Z",
                     "end_at": "2031-01-10T23:35:00Z"},
        })
        .to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self
                .kubectl_admin(
                    &["create", "--dry-run=server", "-o", "json", "-f", "-"],
                    Some(&probe),
                )
                .await;
            let defaulted = out.ok
                && serde_json::from_str::<Value>(&out.stdout)
                    .is_ok_and(|v| v["spec"]["user_id"].as_str().is_some_and(|u| !u.is_empty()));
            if defaulted {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the API server does not call the webhook 30 s after its registration:\n{}{}",
                out.stdout,
                out.stderr
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn kubeconfig(&self) -> &Path {
        self.plane.kubeconfig_path()
    }

    /// The real kubectl as the admin (client certificate in `system:masters`).
    async fn kubectl_admin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        kubectl(self.kubeconfig(), None, args, stdin).await
    }

    /// The real kubectl as [`CASE_USER`].
    async fn kubectl_user(&self, args: &[&str], stdin: Option<&str>) -> Output {
        kubectl(self.kubeconfig(), Some(CASE_USER), args, stdin).await
    }
}

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

async fn kubectl(
    kubeconfig: &Path,
    user: Option<(&str, &str)>,
    args: &[&str],
    stdin: Option<&str>,
) -> Output {
    let bin = control_plane::binary("kubectl").expect("the control plane's kubectl");
    let mut command = tokio::process::Command::new(bin);
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=30s");
    if let Some((name, group)) = user {
        command
            .arg(format!("--as={name}"))
            .arg(format!("--as-group={group}"));
    }
    let mut child = command
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl runs");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        pipe.write_all(input.as_bytes()).await.unwrap();
        drop(pipe);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("kubectl finished within 60 s")
        .expect("kubectl ran");
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

// === Running one case =========================================================================

/// Puts an object into the case's namespaces: none given → the case's own; `X` → `<own>-X`.
fn place(mut object: Value, namespace: &str, extra: &mut Vec<String>) -> Value {
    let ns = match object["metadata"]["namespace"].as_str() {
        None => namespace.to_owned(),
        Some(other) => {
            let mapped = format!("{namespace}-{other}");
            if !extra.contains(&mapped) {
                extra.push(mapped.clone());
            }
            mapped
        }
    };
    object["metadata"]["namespace"] = Value::String(ns);
    object
}

fn lookup<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(object, |v, key| match v {
        Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
        Value::Object(map) => map.get(key),
        _ => None,
    })
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Kubernetes prints an admission warning as a `Warning: ` line on stderr.
fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("Warning: "))
        .collect()
}

/// Who refused a request, as the real API server prints it.
#[derive(Debug, PartialEq, Eq)]
enum Denial {
    /// The CRD's schema or CEL rules: `The Booking "x" is invalid: <field>: ...`.
    Schema,
    /// A webhook: `Error from server (...): ... admission webhook "<name>" denied the request: ...`.
    Webhook(String),
}

/// Reads the denial from kubectl's stderr; `None` when it is neither form, or when it names a
/// webhook that is not registered.
fn denial(stderr: &str, webhook_names: &[String]) -> Option<Denial> {
    if let Some(rest) = stderr.split("admission webhook \"").nth(1) {
        let name = rest.split('"').next().unwrap_or_default();
        let wrapped = rest
            .strip_prefix(name)
            .is_some_and(|r| r.starts_with("\" denied the request: "));
        return (stderr.contains("Error from server")
            && wrapped
            && webhook_names.iter().any(|n| n == name))
        .then(|| Denial::Webhook(name.to_owned()));
    }
    (stderr.contains(" is invalid: ")).then_some(Denial::Schema)
}

async fn run_case(system: &System, number: usize, path: &Path) -> Result<String, String> {
    let raw = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let text = substitute_times(&raw, Utc::now())?;
    let case: Case = serde_yaml::from_str(&text).map_err(|e| format!("not a valid case: {e}"))?;
    if !case.expect.allowed && case.expect.message_contains.is_empty() {
        return Err("a denied case must say what the message contains".into());
    }
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("case")
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect::<String>();
    let namespace = format!("c{number:02}-{}", stem.trim_matches('-'));
    let mut extra = Vec::new();
    let given: Vec<Value> = case
        .given
        .iter()
        .map(|o| place(o.clone(), &namespace, &mut extra))
        .collect();
    let object = place(case.object.clone(), &namespace, &mut extra);
    for ns in std::iter::once(&namespace).chain(&extra) {
        let out = system
            .kubectl_admin(&["create", "namespace", ns], None)
            .await;
        if !out.ok {
            return Err(format!("creating namespace {ns} failed: {}", out.stderr));
        }
    }
    for g in &given {
        let out = system
            .kubectl_user(&["apply", "-f", "-"], Some(&g.to_string()))
            .await;
        if !out.ok {
            return Err(format!(
                "given object {} was not admitted: {}",
                g["metadata"]["name"], out.stderr
            ));
        }
    }
    let verb = match case.when {
        When::Apply => "apply",
        When::Delete => "delete",
    };
    let out = system
        .kubectl_user(&[verb, "-f", "-"], Some(&object.to_string()))
        .await;
    let context = || {
        format!(
            "({})\n--- kubectl {verb} stdout:\n{}--- stderr:\n{}",
            case.description, out.stdout, out.stderr
        )
    };
    if out.ok != case.expect.allowed {
        return Err(format!(
            "expected allowed={}, kubectl {verb} {} {}",
            case.expect.allowed,
            if out.ok { "succeeded" } else { "failed" },
            context()
        ));
    }
    if !case.expect.allowed {
        // The real API server wraps a webhook's denial as `Error from server (...): error when
        // creating "STDIN": admission webhook "<name>" denied the request: <message>`, and
        // prints a violation of the CRD's schema or CEL rules as `The Booking "x" is invalid:
        // <field>: Invalid value: ...`.
        if denial(&out.stderr, &system.webhook_names).is_none() {
            return Err(format!(
                "the denial is printed neither as a registered webhook's nor as the schema's {}",
                context()
            ));
        }
        let lower = out.stderr.to_lowercase();
        for want in &case.expect.message_contains {
            if !lower.contains(&want.to_lowercase()) {
                return Err(format!(
                    "the denial does not contain {want:?} {}",
                    context()
                ));
            }
        }
    }
    match case.expect.warning {
        Some(true) if warnings(&out.stderr).is_empty() => {
            return Err(format!("expected a warning {}", context()));
        }
        Some(false) if !warnings(&out.stderr).is_empty() => {
            return Err(format!("expected no warning {}", context()));
        }
        _ => {}
    }
    if !case.expect.fields_present.is_empty() || !case.expect.fields.is_empty() {
        let got = system
            .kubectl_user(&["get", "-f", "-", "-o", "yaml"], Some(&object.to_string()))
            .await;
        if !got.ok {
            return Err(format!("kubectl get -o yaml failed: {}", got.stderr));
        }
        let printed: Value = serde_yaml::from_str(&got.stdout)
            .map_err(|e| format!("kubectl get -o yaml printed no YAML object: {e}"))?;
        // `kubectl get -f` prints a List of the objects of the file: here, one.
        let stored = match printed["kind"].as_str() {
            Some("List") => printed["items"][0].clone(),
            _ => printed,
        };
        for path in &case.expect.fields_present {
            if lookup(&stored, path).is_none_or(is_empty) {
                return Err(format!(
                    "{path} is empty in the stored object:\n{}",
                    got.stdout
                ));
            }
        }
        for (path, want) in &case.expect.fields {
            let have = lookup(&stored, path);
            // YAML may write `20` or `"20"`; compare scalars by their text.
            let equal = have.is_some_and(|h| h == want || scalar_text(h) == scalar_text(want));
            if !equal {
                return Err(format!(
                    "{path} is {have:?}, expected {want} in the stored object:\n{}",
                    got.stdout
                ));
            }
        }
    }
    Ok(format!("kubectl {verb}: {}{}", out.stdout, out.stderr))
}

fn case_files() -> Vec<PathBuf> {
    let dir = booking_tests::shared_dir().join("cases/admission");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no case", dir.display());
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shared_admission_case_passes_through_kubectl() {
    let files = case_files();
    let mut system = start_cluster("admission-cases").await;
    system.register_webhook().await;
    let mut failures = Vec::new();
    for (i, path) in files.iter().enumerate() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        match run_case(&system, i + 1, path).await {
            Ok(printed) => eprintln!(
                "case {name}: ok\n  {}",
                printed.trim().replace('\n', "\n  ")
            ),
            Err(e) => failures.push(format!("case {name}: {e}")),
        }
    }
    if !failures.is_empty() {
        system.dir.keep();
    }
    assert!(
        failures.is_empty(),
        "{} of {} admission cases failed (logs in {}):\n\n{}",
        failures.len(),
        files.len(),
        system.dir.path().display(),
        failures.join("\n\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_dry_run_answers_like_a_real_request_and_reserves_nothing() {
    let mut system = start_cluster("admission-dry-run").await;
    system.register_webhook().await;
    let now = Utc::now();
    let t = |h: i64| {
        (now + chrono::Duration::hours(h)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let booking = |name: &str, start: i64, end: i64| {
        serde_json::json!({
            "apiVersion": "manager.kotaico.de/v1", "kind": "Booking",
            "metadata": {"name": name, "namespace": "dry"},
            "spec": {"resource_name": "ec2.analytics", "start_at": t(start), "end_at": t(end), "user_id": "ann"},
        })
        .to_string()
    };
    assert!(
        system
            .kubectl_admin(&["create", "namespace", "dry"], None)
            .await
            .ok
    );
    // A dry run of a free slot is admitted and reserves nothing: a real booking of the same
    // slot right after is admitted too.
    let out = system
        .kubectl_user(
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&booking("ghost", 1, 2)),
        )
        .await;
    assert!(out.ok, "{}", out.stderr);
    let out = system
        .kubectl_user(&["apply", "-f", "-"], Some(&booking("real", 1, 2)))
        .await;
    assert!(out.ok, "{}", out.stderr);
    // A dry run of an overlapping booking is denied exactly like the real request.
    let dry = system
        .kubectl_user(
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&booking("late", 1, 3)),
        )
        .await;
    let real = system
        .kubectl_user(&["apply", "-f", "-"], Some(&booking("late", 1, 3)))
        .await;
    assert!(!dry.ok && !real.ok);
    assert!(
        dry.stderr.contains(
            "admission webhook \"bookings.validate.manager.kotaico.de\" denied the request: "
        ) && dry.stderr.contains("\"real\""),
        "{}",
        dry.stderr
    );
    assert!(real.stderr.contains("\"real\""), "{}", real.stderr);
    // Extending the existing booking never collides with itself; the defaults are visible.
    let out = system
        .kubectl_user(&["apply", "-f", "-"], Some(&booking("real", 1, 4)))
        .await;
    assert!(out.ok, "{}", out.stderr);
    let got = system
        .kubectl_user(&["get", "booking", "real", "-n", "dry", "-o", "yaml"], None)
        .await;
    assert!(
        got.stdout
            .contains("manager.kotaico.de/resource: ec2.analytics"),
        "{}",
        got.stdout
    );
    // SIGTERM: the webhook stops its listeners and watches and exits cleanly.
    let status = system
        .webhook
        .as_mut()
        .expect("the webhook runs")
        .stop()
        .expect("booking-webhook stops");
    assert!(status.success(), "booking-webhook exited with {status}");
}

/// A Booking whose `field` (`start_at` or `end_at`) holds `value`, the other time valid.
fn booking_with_time(name: &str, field: &str, value: &str) -> String {
    let mut spec = serde_json::json!({
        "resource_name": "ec2.analytics",
        "start_at": "2031-05-01T10:00:00+01:00",
        "end_at": "2031-05-01T12:00:00+01:00",
        "user_id": "ann",
    });
    spec[field] = Value::String(value.to_owned());
    serde_json::json!({
        "apiVersion": "manager.kotaico.de/v1", "kind": "Booking",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
    .to_string()
}

/// Times that are not RFC 3339 as Kubernetes reads it, each refused naming its own field and
/// the fix, never with a CEL evaluation error on another field.
async fn assert_bad_times_name_their_field(system: &System, phase: &str) {
    for field in ["start_at", "end_at"] {
        let other = if field == "start_at" {
            "end_at"
        } else {
            "start_at"
        };
        for value in [
            // Seen by a user: the offset without its colon.
            "2031-05-01T11:00:00+0100",
            // RFC 3339 allows a lower-case t and z, Kubernetes' timestamp parser does not.
            "2031-05-01t11:00:00Z",
            "2031-05-01T11:00:00z",
            "2031-05-01 11:00",
            "2031-02-30T11:00:00Z",
            // Beyond CEL's timestamp range once the offset is applied.
            "9999-12-31T23:00:00-05:00",
        ] {
            let out = system
                .kubectl_user(
                    &["create", "--dry-run=server", "-f", "-"],
                    Some(&booking_with_time("bad-time", field, value)),
                )
                .await;
            let context = format!("{phase}: spec.{field} = {value:?}:\n{}", out.stderr);
            assert!(!out.ok, "admitted; {context}");
            assert_eq!(
                denial(&out.stderr, &system.webhook_names),
                Some(Denial::Schema),
                "{context}"
            );
            let named = format!("spec.{field}: Invalid value: \"{value}\": must be an RFC 3339");
            assert!(out.stderr.contains(&named), "expected {named:?}; {context}");
            for fix in ["2031-01-10T22:35:00Z", "2031-01-10T23:35:00+01:00", "colon"] {
                assert!(
                    out.stderr.contains(fix),
                    "the fix {fix:?} is missing; {context}"
                );
            }
            for wrong in [
                format!("spec.{other}"),
                "spec: ".to_owned(),
                "rule evaluation error".to_owned(),
                "evaluating rule".to_owned(),
                "No such overload".to_owned(),
                "not checked".to_owned(),
            ] {
                assert!(!out.stderr.contains(&wrong), "{wrong:?} printed; {context}");
            }
        }
    }
}

/// The times the real API server admits are exactly those the product's own parser reads.
async fn assert_server_and_parser_agree_on_times(system: &System) {
    for value in [
        "2031-05-01T11:00:00Z",
        "2031-05-01T11:00:00+01:00",
        "2031-05-01T11:00:00.5-05:30",
        "2031-05-01T11:00:00.123456789+01:00",
        "1000-01-01T00:00:01+23:59",
        "9998-12-31T23:59:59-23:59",
        "2032-02-29T11:00:00Z",
        "2031-02-29T11:00:00Z",
        "2031-05-01T11:00:00+0100",
        "2031-05-01T11:00:00+01",
        "2031-05-01t11:00:00Z",
        "2031-05-01T11:00:00z",
        "2031-05-01T11:00Z",
        "2031-05-01T24:00:00Z",
        "2031-05-01T11:00:60Z",
        "2031-05-01T11:00:00,5Z",
        "2031-05-01T11:00:00+24:00",
        "0999-05-01T11:00:00Z",
        "9999-01-01T11:00:00Z",
        "2031-05-01",
        "",
    ] {
        // The earliest start admitted, so that only the value's own form decides.
        let mut booking: Value =
            serde_json::from_str(&booking_with_time("agree", "end_at", value)).unwrap();
        booking["spec"]["start_at"] = Value::String("1000-01-01T00:00:00+23:59".into());
        let out = system
            .kubectl_user(
                &["create", "--dry-run=server", "-f", "-"],
                Some(&booking.to_string()),
            )
            .await;
        let parsed = booking_shared::time::parse_rfc3339("spec.end_at", value);
        assert_eq!(
            out.ok,
            parsed.is_ok(),
            "{value:?}: the API server {} it, the product's parser {:?}\n{}",
            if out.ok { "admits" } else { "refuses" },
            parsed,
            out.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_that_are_not_rfc3339_are_refused_naming_their_field_with_and_without_the_webhook() {
    let mut system = start_cluster("admission-times").await;
    // The CRD alone, as on a cluster where the webhook is not (yet) installed.
    assert_bad_times_name_their_field(&system, "without the webhook").await;
    assert_server_and_parser_agree_on_times(&system).await;
    // With the webhook registered: the mutating webhook runs first and lets the object through
    // (it never rewrites a time), the schema refuses it before the validating webhook is asked,
    // so the message is the same.
    system.register_webhook().await;
    assert_bad_times_name_their_field(&system, "with the webhook").await;
    let out = system
        .kubectl_user(
            &["create", "--dry-run=server", "-f", "-"],
            Some(&booking_with_time(
                "good-time",
                "start_at",
                "2031-05-01T10:00:00+01:00",
            )),
        )
        .await;
    assert!(out.ok, "a well-formed booking is refused:\n{}", out.stderr);
}

#[test]
fn placeholders_are_replaced_with_rfc3339_seconds() {
    let now = DateTime::parse_from_rfc3339("2031-01-10T22:35:00.123Z")
        .unwrap()
        .with_timezone(&Utc);
    assert_eq!(
        substitute_times(
            "a: \"{{now}}\" b: {{now+90m}} c: {{now-2h}} d: {{ now+1d }} e: {{now+5s}}",
            now
        )
        .unwrap(),
        "a: \"2031-01-10T22:35:00Z\" b: 2031-01-11T00:05:00Z c: 2031-01-10T20:35:00Z d: 2031-01-11T22:35:00Z e: 2031-01-10T22:35:05Z"
    );
    for bad in [
        "{{later}}",
        "{{now+5y}}",
        "{{now*5m}}",
        "{{now+m}}",
        "{{now",
    ] {
        assert!(substitute_times(bad, now).is_err(), "{bad}");
    }
}

#[test]
fn webhook_configurations_follow_the_registration_rules() {
    let path = booking_tests::repo_root().join("manifests/webhook/webhook-configurations.yaml");
    let docs = booking_tests::read_yaml_documents(&path);
    let mut validated = Vec::new();
    let mut mutated = Vec::new();
    for doc in &docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        assert!(
            kind == "ValidatingWebhookConfiguration" || kind == "MutatingWebhookConfiguration",
            "{kind}"
        );
        for w in doc["webhooks"].as_array().expect("webhooks") {
            let name = w["name"].as_str().unwrap_or_default();
            assert_eq!(w["sideEffects"], "None", "{name}");
            assert_eq!(
                w["admissionReviewVersions"],
                serde_json::json!(["v1"]),
                "{name}"
            );
            let timeout = w["timeoutSeconds"].as_u64().expect("timeoutSeconds");
            assert!(
                (1..=5).contains(&timeout),
                "{name}: timeoutSeconds {timeout}"
            );
            let opt_out = &w["namespaceSelector"]["matchExpressions"][0];
            assert_eq!(opt_out["key"], "manager.kotaico.de/admission", "{name}");
            assert_eq!(opt_out["operator"], "NotIn", "{name}");
            let path = w["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap_or_default();
            let expected_path = if kind.starts_with("Mutating") {
                "/mutate"
            } else {
                "/validate"
            };
            assert_eq!(path, expected_path, "{name}");
            for rule in w["rules"].as_array().expect("rules") {
                assert_eq!(rule["apiGroups"], serde_json::json!(["manager.kotaico.de"]));
                for r in rule["resources"].as_array().unwrap() {
                    let r = r.as_str().unwrap().to_owned();
                    if r == "bookings" {
                        assert_eq!(w["failurePolicy"], "Fail", "{name}: bookings fail closed");
                    }
                    if kind.starts_with("Mutating") {
                        mutated.push(r);
                    } else {
                        validated.push(r);
                    }
                }
            }
        }
    }
    validated.sort();
    mutated.sort();
    assert_eq!(
        validated,
        [
            "bookingcalendars",
            "bookings",
            "bookingschedulers",
            "resourcemonitors",
            "resources"
        ]
    );
    assert_eq!(
        mutated,
        ["bookingcalendars", "bookings", "bookingschedulers"]
    );
}
