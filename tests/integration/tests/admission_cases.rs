//! End to end: every case of `../shared/cases/admission/` through the real `kubectl`, against
//! the in-repo Kubernetes API test server, with the real `booking-webhook` binary registered by
//! the project's own webhook configurations (`manifests/webhook/`).
//!
//! The case format is documented in `../shared/cases/README.md`. The runner reads every
//! `*.yaml` file of the folder (cases are added over time), gives each case fresh namespaces,
//! and fails — never skips — when anything it needs is missing: the cases folder, `kubectl`, the
//! webhook binary, or a key of a case it does not understand.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use base64::Engine as _;
use booking_harness::{
    TestDir, free_port,
    process::{ManagedProcess, ProcessBuilder, Readiness},
};
use chrono::{DateTime, Utc};
use kube_test_server::{Options, TestServer, TokenUser};
use serde::Deserialize;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

/// Namespace and Service of the webhook named by the manifests.
const WEBHOOK_SERVICE: &str = "resource-booking-operator-system/booking-webhook";

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

struct System {
    server: TestServer,
    webhook: ManagedProcess,
    dir: TestDir,
}

/// `target/debug/booking-webhook`, beside the test executable's `deps` folder; fails when it is
/// missing or older than any source file it was built from (per cargo's dep-info file beside
/// it, `booking-webhook.d`).
fn webhook_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in target/<profile>/deps");
    let bin = dir.join("booking-webhook");
    let rebuild = "build it first: cargo build -p booking-webhook";
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{} is missing ({e}); {rebuild}", bin.display()));
    let dep_info = dir.join("booking-webhook.d");
    let deps = std::fs::read_to_string(&dep_info)
        .unwrap_or_else(|e| panic!("{} is missing ({e}); {rebuild}", dep_info.display()));
    let sources = deps
        .split_once(": ")
        .map(|(_, list)| list)
        .unwrap_or_default()
        .split_whitespace()
        .map(PathBuf::from)
        .filter(|p| p.starts_with(booking_tests::repo_root().canonicalize().unwrap()));
    for source in sources {
        let changed = std::fs::metadata(&source).and_then(|m| m.modified());
        if let Ok(changed) = changed {
            assert!(
                changed <= built,
                "{} is older than {}; {rebuild}",
                bin.display(),
                source.display()
            );
        }
    }
    bin
}

async fn start_system() -> System {
    let dir = TestDir::new("admission-cases").expect("a test directory");
    let webhook_bin = webhook_binary();

    // The serving certificate, for the name the test server calls it by.
    let cert = rcgen::generate_simple_self_signed(vec![
        "localhost".to_owned(),
        "booking-webhook.resource-booking-operator-system.svc".to_owned(),
    ])
    .expect("a generated certificate");
    let cert_pem = cert.cert.pem();
    std::fs::write(dir.join("tls.crt"), &cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), cert.signing_key.serialize_pem()).unwrap();

    let port = free_port().expect("a free port");
    let admin_port = free_port().expect("a free port");
    let server = TestServer::start(Options {
        service_endpoints: [(
            WEBHOOK_SERVICE.to_owned(),
            format!("https://localhost:{port}"),
        )]
        .into(),
        https: true,
        users: vec![TokenUser::new("ann", &["system:masters"])],
        ..Options::default()
    })
    .await
    .expect("the test API server starts");
    let kubeconfig = server.kubeconfig_path().to_owned();

    // CRDs and webhook configurations, applied with kubectl as an operator would.
    let root = booking_tests::repo_root();
    let out = kubectl(
        &kubeconfig,
        &[
            "apply",
            "-f",
            &root.join("manifests/crds").to_string_lossy(),
        ],
        None,
    )
    .await;
    assert!(out.ok, "installing the CRDs failed:\n{}", out.stderr);
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(cert_pem.as_bytes());
    let manifests = root.join("manifests/webhook/webhook-configurations.yaml");
    let mut configs = booking_tests::read_yaml_documents(&manifests);
    assert!(
        !configs.is_empty(),
        "{} holds no webhook configuration",
        manifests.display()
    );
    for config in &mut configs {
        for webhook in config["webhooks"].as_array_mut().expect("webhooks") {
            webhook["clientConfig"]["caBundle"] = Value::String(ca_bundle.clone());
        }
    }
    for config in &configs {
        let out = kubectl(
            &kubeconfig,
            &["apply", "-f", "-"],
            Some(&config.to_string()),
        )
        .await;
        assert!(
            out.ok,
            "registering {} failed:\n{}",
            config["kind"], out.stderr
        );
    }

    let mut webhook = ProcessBuilder::new("booking-webhook", webhook_bin)
        .arg("--tls-cert-file")
        .arg(dir.join("tls.crt"))
        .arg("--tls-key-file")
        .arg(dir.join("tls.key"))
        .arg("--listen-addr")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--admin-addr")
        .arg(format!("127.0.0.1:{admin_port}"))
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "info,booking_webhook=debug")
        .spawn(&dir)
        .expect("booking-webhook starts");
    webhook
        .wait_ready(
            &Readiness::Http(format!("http://127.0.0.1:{admin_port}/readyz")),
            Duration::from_secs(60),
        )
        .await
        .expect("booking-webhook becomes ready (its caches synced)");
    System {
        server,
        webhook,
        dir,
    }
}

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

async fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = tokio::process::Command::new("kubectl")
        .args(args)
        .arg("--request-timeout=30s")
        .env("KUBECONFIG", kubeconfig)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl is installed and on PATH (the end-to-end tests use the real kubectl)");
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

async fn run_case(system: &System, number: usize, path: &Path) -> Result<String, String> {
    let kubeconfig = system.server.kubeconfig_path();
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
        let out = kubectl(kubeconfig, &["create", "namespace", ns], None).await;
        if !out.ok {
            return Err(format!("creating namespace {ns} failed: {}", out.stderr));
        }
    }
    for g in &given {
        let out = kubectl(kubeconfig, &["apply", "-f", "-"], Some(&g.to_string())).await;
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
    let out = kubectl(kubeconfig, &[verb, "-f", "-"], Some(&object.to_string())).await;
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
        // kubectl prints a webhook denial as `Error from server (Forbidden): ... admission
        // webhook "..." denied the request: ...` and a schema violation as `The Booking "x" is
        // invalid: ...`, as against a real cluster.
        let printed_as_server_error =
            out.stderr.contains("Error from server") || out.stderr.contains(" is invalid: ");
        if !printed_as_server_error {
            return Err(format!(
                "the denial is not printed as a server error {}",
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
        let got = kubectl(
            kubeconfig,
            &["get", "-f", "-", "-o", "yaml"],
            Some(&object.to_string()),
        )
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
    let system = start_system().await;
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
    let mut system = start_system().await;
    let kubeconfig = system.server.kubeconfig_path();
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
        kubectl(kubeconfig, &["create", "namespace", "dry"], None)
            .await
            .ok
    );
    // A dry run of a free slot is admitted and reserves nothing: a real booking of the same
    // slot right after is admitted too.
    let out = kubectl(
        kubeconfig,
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&booking("ghost", 1, 2)),
    )
    .await;
    assert!(out.ok, "{}", out.stderr);
    let out = kubectl(
        kubeconfig,
        &["apply", "-f", "-"],
        Some(&booking("real", 1, 2)),
    )
    .await;
    assert!(out.ok, "{}", out.stderr);
    // A dry run of an overlapping booking is denied exactly like the real request.
    let dry = kubectl(
        kubeconfig,
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&booking("late", 1, 3)),
    )
    .await;
    let real = kubectl(
        kubeconfig,
        &["apply", "-f", "-"],
        Some(&booking("late", 1, 3)),
    )
    .await;
    assert!(!dry.ok && !real.ok);
    assert!(
        dry.stderr.contains("denied the request") && dry.stderr.contains("\"real\""),
        "{}",
        dry.stderr
    );
    assert!(real.stderr.contains("\"real\""), "{}", real.stderr);
    // Extending the existing booking never collides with itself; the defaults are visible.
    let out = kubectl(
        kubeconfig,
        &["apply", "-f", "-"],
        Some(&booking("real", 1, 4)),
    )
    .await;
    assert!(out.ok, "{}", out.stderr);
    let got = kubectl(
        kubeconfig,
        &["get", "booking", "real", "-n", "dry", "-o", "yaml"],
        None,
    )
    .await;
    assert!(
        got.stdout
            .contains("manager.kotaico.de/resource: ec2.analytics"),
        "{}",
        got.stdout
    );
    // SIGTERM: the webhook stops its listeners and watches and exits cleanly.
    let status = system.webhook.stop().expect("booking-webhook stops");
    assert!(status.success(), "booking-webhook exited with {status}");
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
            "bookings",
            "bookingschedulers",
            "resourcemonitors",
            "resources"
        ]
    );
    assert_eq!(mutated, ["bookings", "bookingschedulers"]);
}
