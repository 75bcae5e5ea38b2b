//! What an operator installs beside the operator to watch it (all off by default): the chart's
//! metrics Services, ServiceMonitor, PrometheusRule and Grafana dashboard ConfigMap
//! (`monitoring.*` values), the kustomize component `components/monitoring`, and their one
//! source, `manifests/helm/monitoring/` (`prometheusrule.yaml`, `dashboard.json`).
//!
//! Checked with the real tools that `tests/monitoring/build.sh` provides (`make test` runs it
//! first; it builds promtool from its Go module once): `promtool check rules` and `promtool test
//! rules` (`tests/monitoring/rules-test.yaml`) on the alerts, prometheus-operator's own
//! CustomResourceDefinitions on the shared control plane for the rendered objects, and scrapes of
//! the real controller and webhook for every metric (and label) the alerts and the dashboard
//! name: histograms are served as `_bucket`, `_sum`, `_count` and counters as `_total`, which is
//! what the queries must name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use booking_harness::process::Readiness;
use booking_harness::smtp::{SmtpOptions, SmtpServer};
use booking_harness::tls::TestCa;
use booking_harness::{free_port, wait_for};
use booking_shared::api::{Booking, Notification, Resource};
use booking_tests::admission_client::{booking_object, h1_post, review, tls_config};
use booking_tests::e2e::*;
use booking_tests::packaging::*;
use booking_tests::{output_with_stdin, repo_root};
use bytes::Bytes;
use chrono::Utc;
use kube::api::{Api, PostParams};
use promql_parser::parser::{self, Expr};
use promql_parser::util::{ExprVisitor, walk_expr};
use serde_json::Value;

/// The folder with `promtool` and prometheus-operator's `crds/`, from tests/monitoring/build.sh.
fn tools() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = run(
            Command::new("bash").arg(repo_root().join("tests/monitoring/build.sh")),
            "the monitoring tools come from tests/monitoring/build.sh (bash and Go 1.26; `make test` runs it)",
        );
        PathBuf::from(out.trim())
    })
}

fn promtool(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(tools().join("promtool"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool starts")
}

fn monitoring_file(name: &str) -> PathBuf {
    repo_root().join("manifests/helm/monitoring").join(name)
}

/// The source PrometheusRule, as JSON.
fn source_rule() -> Value {
    let text = std::fs::read_to_string(monitoring_file("prometheusrule.yaml")).unwrap();
    serde_yaml::from_str(&text).expect("prometheusrule.yaml is YAML")
}

/// The source dashboard.
fn source_dashboard() -> Value {
    let text = std::fs::read_to_string(monitoring_file("dashboard.json")).unwrap();
    serde_json::from_str(&text).expect("dashboard.json is JSON")
}

/// Writes the PrometheusRule's spec to `dir/rules.yaml`, a Prometheus rule file.
fn write_rule_file(dir: &Path, rule: &Value) -> PathBuf {
    let path = dir.join("rules.yaml");
    std::fs::write(&path, serde_yaml::to_string(&rule["spec"]).unwrap()).unwrap();
    path
}

/// Every alerting rule of a PrometheusRule.
fn alerts(rule: &Value) -> Vec<&Value> {
    rule["spec"]["groups"]
        .as_array()
        .expect("spec.groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").iter())
        .collect()
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

// === the rules ================================================================================

#[test]
fn promtool_checks_the_rules_and_refuses_a_broken_copy() {
    let dir = tempfile::tempdir().unwrap();
    let rule = source_rule();
    let file = write_rule_file(dir.path(), &rule);
    let out = promtool(&["check", "rules", file.to_str().unwrap()], dir.path());
    let n = alerts(&rule).len();
    assert!(out.status.success(), "promtool check rules: {}", text(&out));
    assert!(
        text(&out).contains(&format!("SUCCESS: {n} rules found")),
        "{}",
        text(&out)
    );

    // The same file with one expression cut short: promtool must refuse it, naming the rule.
    let mut broken = rule.clone();
    broken["spec"]["groups"][0]["rules"][1]["expr"] =
        Value::String("max by (namespace (booking_controller_leader) < 1".into());
    let file = write_rule_file(dir.path(), &broken);
    let out = promtool(&["check", "rules", file.to_str().unwrap()], dir.path());
    assert!(
        !out.status.success(),
        "a broken rule passed: {}",
        text(&out)
    );
    assert!(
        text(&out).contains("BookingControllerNoLeader") || text(&out).contains("parse error"),
        "{}",
        text(&out)
    );
}

#[test]
fn every_alert_waits_names_its_severity_and_says_what_to_look_at() {
    let runbook = std::fs::read_to_string(repo_root().join("docs/monitoring.md")).unwrap();
    let headings: BTreeSet<String> = runbook
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(|h| h.trim().to_lowercase())
        .collect();
    let rule = source_rule();
    for alert in alerts(&rule) {
        let name = alert["alert"].as_str().expect("an alerting rule");
        assert!(alert["for"].as_str().is_some(), "{name}: no `for`");
        let severity = alert["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            ["warning", "critical"].contains(&severity),
            "{name}: severity {severity:?}"
        );
        for key in ["summary", "description", "runbook_url"] {
            assert!(
                alert["annotations"][key]
                    .as_str()
                    .is_some_and(|s| s.len() > 10),
                "{name}: annotation {key}"
            );
        }
        let anchor = alert["annotations"]["runbook_url"]
            .as_str()
            .unwrap()
            .rsplit_once("docs/monitoring.md#")
            .map(|(_, a)| a.to_owned())
            .unwrap_or_else(|| panic!("{name}: runbook_url points into docs/monitoring.md"));
        assert_eq!(anchor, name.to_lowercase(), "{name}: runbook anchor");
        assert!(
            headings.contains(&anchor),
            "{name}: docs/monitoring.md has no heading `### {name}`"
        );
    }
}

#[test]
fn promtool_unit_tests_of_the_alerts_pass_and_catch_a_changed_rule() {
    let dir = tempfile::tempdir().unwrap();
    let tests = repo_root().join("tests/monitoring/rules-test.yaml");
    std::fs::copy(&tests, dir.path().join("rules-test.yaml")).unwrap();
    let rule = source_rule();

    // Every alert has a unit test.
    let tested: BTreeSet<String> = {
        let t: Value = serde_yaml::from_str(&std::fs::read_to_string(&tests).unwrap()).unwrap();
        t["tests"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["alert_rule_test"].as_array().unwrap().iter())
            .map(|a| a["alertname"].as_str().unwrap().to_owned())
            .collect()
    };
    for alert in alerts(&rule) {
        let name = alert["alert"].as_str().unwrap();
        assert!(tested.contains(name), "{name} has no test in {tests:?}");
    }

    write_rule_file(dir.path(), &rule);
    let out = promtool(&["test", "rules", "rules-test.yaml"], dir.path());
    assert!(out.status.success(), "promtool test rules: {}", text(&out));
    assert!(text(&out).contains("SUCCESS"), "{}", text(&out));

    // A start failure that must last an hour no longer fires at 30 minutes: the tests see it.
    let mut slower = rule.clone();
    slower["spec"]["groups"][0]["rules"][0]["for"] = Value::String("60m".into());
    write_rule_file(dir.path(), &slower);
    let out = promtool(&["test", "rules", "rules-test.yaml"], dir.path());
    assert!(
        !out.status.success(),
        "a changed rule passed: {}",
        text(&out)
    );
    assert!(
        text(&out).contains("BookingStartStopFailing"),
        "{}",
        text(&out)
    );
}

// === the renders ==============================================================================

const ALL_ON: &str = "monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true";

/// `helm template rbo manifests/helm -n <namespace> <args>`.
fn helm_template(namespace: &str, args: &[&str]) -> Vec<Value> {
    let home = tempfile::tempdir().unwrap();
    let out = run(
        helm_cmd(home.path())
            .args(["template", "rbo"])
            .arg(repo_root().join("manifests/helm"))
            .args(["--namespace", namespace, "--kube-version", kube_version()])
            .args(args),
        "helm",
    );
    yaml_documents(&out)
}

fn metrics_services(objects: &[Value]) -> Vec<&Value> {
    all_of(objects, "Service")
        .into_iter()
        .filter(|s| s["spec"]["ports"][0]["name"] == "metrics")
        .collect()
}

/// The ServiceMonitor selects exactly the metrics Services, each of which selects the pods of one
/// Deployment and targets its container's admin port by name.
fn assert_scrapes_both_deployments(objects: &[Value]) {
    let monitor = only(objects, "ServiceMonitor");
    let services = metrics_services(objects);
    assert_eq!(services.len(), 2, "a metrics Service per Deployment");
    let selects = |labels: &Value| {
        let sel = &monitor["spec"]["selector"];
        let by_labels = sel["matchLabels"]
            .as_object()
            .is_none_or(|m| m.iter().all(|(k, v)| labels[k] == *v));
        let by_expressions = sel["matchExpressions"].as_array().is_none_or(|all| {
            all.iter().all(|e| {
                assert_eq!(e["operator"], "In");
                e["values"]
                    .as_array()
                    .unwrap()
                    .contains(&labels[e["key"].as_str().unwrap()])
            })
        });
        by_labels && by_expressions
    };
    for s in all_of(objects, "Service") {
        assert_eq!(
            selects(&s["metadata"]["labels"]),
            s["spec"]["ports"][0]["name"] == "metrics",
            "the ServiceMonitor selects {} only if it is a metrics Service",
            name_of(s)
        );
    }
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    let deployments = all_of(objects, "Deployment");
    let mut scraped = BTreeSet::new();
    for s in services {
        let selector = s["spec"]["selector"].as_object().unwrap();
        let matching: Vec<&&Value> = deployments
            .iter()
            .filter(|d| {
                let labels = &d["spec"]["template"]["metadata"]["labels"];
                selector.iter().all(|(k, v)| labels[k] == *v)
            })
            .collect();
        assert_eq!(
            matching.len(),
            1,
            "{} selects one Deployment's pods",
            name_of(s)
        );
        let target = s["spec"]["ports"][0]["targetPort"].as_str().unwrap();
        let ports = matching[0]["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_array()
            .unwrap();
        assert!(
            ports.iter().any(|p| p["name"] == target),
            "{} targets port {target} of {}",
            name_of(s),
            name_of(matching[0])
        );
        scraped.insert(name_of(matching[0]).to_owned());
    }
    assert_eq!(
        scraped.len(),
        2,
        "both Deployments are scraped: {scraped:?}"
    );
}

fn only<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let all = all_of(objects, kind);
    assert_eq!(all.len(), 1, "one {kind}");
    all[0]
}

fn dashboards(objects: &[Value]) -> Vec<&Value> {
    all_of(objects, "ConfigMap")
        .into_iter()
        .filter(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1")
        .collect()
}

/// The dashboard of a ConfigMap, parsed.
fn dashboard_of(config_map: &Value) -> Value {
    let data = config_map["data"].as_object().expect("data");
    assert_eq!(data.len(), 1, "one dashboard file");
    let (key, json) = data.iter().next().unwrap();
    assert!(key.ends_with(".json"), "{key}");
    serde_json::from_str(json.as_str().unwrap()).expect("the dashboard is JSON")
}

#[test]
fn the_chart_renders_monitoring_only_when_asked() {
    let off = helm_template(NAMESPACE, &[]);
    assert!(all_of(&off, "ServiceMonitor").is_empty());
    assert!(all_of(&off, "PrometheusRule").is_empty());
    assert!(dashboards(&off).is_empty());
    assert!(metrics_services(&off).is_empty());

    let on = helm_template(
        NAMESPACE,
        &[
            "--set",
            ALL_ON,
            "--set",
            "monitoring.serviceMonitor.interval=15s,monitoring.serviceMonitor.labels.release=kps",
            "--set",
            "monitoring.prometheusRule.labels.role=alerts,monitoring.dashboard.namespace=grafana",
            "--set",
            "monitoring.dashboard.annotations.grafana_folder=Operators",
        ],
    );
    for o in &on {
        assert_well_formed(o);
    }
    assert_scrapes_both_deployments(&on);
    let monitor = only(&on, "ServiceMonitor");
    assert_eq!(monitor["metadata"]["labels"]["release"], "kps");
    assert_eq!(monitor["spec"]["endpoints"][0]["interval"], "15s");
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        serde_json::json!([NAMESPACE])
    );

    let rule = only(&on, "PrometheusRule");
    assert_eq!(rule["metadata"]["labels"]["role"], "alerts");
    assert_eq!(
        rule["spec"],
        source_rule()["spec"],
        "the chart's rules are the source's"
    );

    let dashboard = dashboards(&on);
    assert_eq!(dashboard.len(), 1);
    assert_eq!(dashboard[0]["metadata"]["namespace"], "grafana");
    assert_eq!(
        dashboard[0]["metadata"]["annotations"]["grafana_folder"],
        "Operators"
    );
    assert_eq!(dashboard_of(dashboard[0]), source_dashboard());

    let home = tempfile::tempdir().unwrap();
    let lint = run(
        helm_cmd(home.path())
            .args(["lint", "--strict"])
            .arg(repo_root().join("manifests/helm"))
            .args(["--namespace", NAMESPACE, "--kube-version", kube_version()])
            .args(["--set", ALL_ON]),
        "helm",
    );
    assert!(
        lint.contains("1 chart(s) linted, 0 chart(s) failed"),
        "{lint}"
    );

    // Each switch alone.
    let rules_only = helm_template(
        NAMESPACE,
        &["--set", "monitoring.prometheusRule.enabled=true"],
    );
    assert!(all_of(&rules_only, "ServiceMonitor").is_empty());
    assert!(metrics_services(&rules_only).is_empty());
    assert!(dashboards(&rules_only).is_empty());
    assert_eq!(all_of(&rules_only, "PrometheusRule").len(), 1);
}

#[test]
fn the_kustomize_component_adds_the_same_rules_and_dashboard() {
    let base = base();
    assert!(all_of(&base, "ServiceMonitor").is_empty());
    assert!(all_of(&base, "PrometheusRule").is_empty());
    assert!(dashboards(&base).is_empty());

    let on = base_with_components(&["monitoring"]);
    for o in &on {
        assert_well_formed(o);
    }
    assert_scrapes_both_deployments(&on);
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert_eq!(
            only(&on, kind)["metadata"]["namespace"],
            NAMESPACE,
            "{kind}"
        );
    }
    assert_eq!(
        only(&on, "PrometheusRule")["spec"],
        source_rule()["spec"],
        "the component's rules are the source's"
    );
    let dashboard = dashboards(&on);
    assert_eq!(dashboard.len(), 1);
    assert_eq!(dashboard[0]["metadata"]["namespace"], NAMESPACE);
    assert_eq!(dashboard_of(dashboard[0]), source_dashboard());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rendered_objects_apply_against_prometheus_operators_crds() {
    let cluster = booking_harness::control_plane::TestCluster::shared("monitoring-apply")
        .await
        .expect("the run's shared control plane");
    let crds: Vec<PathBuf> = ["servicemonitors", "prometheusrules"]
        .iter()
        .map(|c| tools().join(format!("crds/monitoring.coreos.com_{c}.yaml")))
        .collect();
    let crds: Vec<&Path> = crds.iter().map(PathBuf::as_path).collect();
    cluster
        .apply_files(&crds)
        .expect("prometheus-operator's CRDs apply");
    let ns = cluster.namespace().to_owned();

    let monitoring_kinds = |objects: Vec<Value>| -> Vec<Value> {
        objects
            .into_iter()
            .filter(|o| {
                ["ServiceMonitor", "PrometheusRule"].contains(&kind_of(o))
                    || (kind_of(o) == "ConfigMap"
                        && o["metadata"]["labels"]["grafana_dashboard"] == "1")
                    || (kind_of(o) == "Service" && o["spec"]["ports"][0]["name"] == "metrics")
            })
            .collect()
    };
    let from_chart = monitoring_kinds(helm_template(&ns, &["--set", ALL_ON]));
    assert_eq!(
        from_chart.len(),
        5,
        "2 Services, a ServiceMonitor, a PrometheusRule, a ConfigMap"
    );
    let mut from_component = monitoring_kinds(base_with_components(&["monitoring"]));
    assert_eq!(from_component.len(), 5);
    for o in &mut from_component {
        o["metadata"]["namespace"] = Value::String(ns.clone());
        o["metadata"]["name"] = Value::String(format!("kustomize-{}", name_of(o)));
    }
    for (source, objects) in [("chart", from_chart), ("component", from_component)] {
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
        let mut apply = cluster.kubectl().unwrap();
        apply.args([
            "apply",
            "--server-side",
            "--field-manager=booking-tests",
            "-f",
            "-",
        ]);
        let out = output_with_stdin(&mut apply, &list.to_string());
        assert!(
            out.status.success(),
            "the {source}'s monitoring objects apply: {}",
            text(&out)
        );
        let applied = String::from_utf8_lossy(&out.stdout);
        assert_eq!(applied.lines().count(), 5, "{source}: {applied}");
    }
    // The schema is enforced: a ServiceMonitor endpoint with a mistyped scheme is refused.
    let mut wrong = helm_template(&ns, &["--set", ALL_ON])
        .into_iter()
        .find(|o| kind_of(o) == "ServiceMonitor")
        .unwrap();
    wrong["metadata"]["name"] = Value::String("wrong".into());
    wrong["spec"]["endpoints"][0]["scheme"] = Value::String("htp".into());
    let mut apply = cluster.kubectl().unwrap();
    apply.args([
        "apply",
        "--server-side",
        "--field-manager=booking-tests",
        "-f",
        "-",
    ]);
    let out = output_with_stdin(&mut apply, &wrong.to_string());
    assert!(!out.status.success(), "a wrong scheme was accepted");
    assert!(text(&out).contains("scheme"), "{}", text(&out));
}

// === the names ================================================================================

/// The series of a scrape: each sample's name and label names.
#[derive(Default)]
struct Scrape {
    series: BTreeMap<String, Vec<BTreeSet<String>>>,
}

impl Scrape {
    fn add(&mut self, text: &str) {
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let labels = line[name_end..]
                .strip_prefix('{')
                .map(label_names)
                .unwrap_or_default();
            self.series
                .entry(line[..name_end].to_owned())
                .or_default()
                .push(labels);
        }
    }
}

/// The label names of a sample's `name="value",…}` (values quoted, with `\"` and `\\` escapes).
fn label_names(labels: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = labels;
    while let Some((name, after)) = rest.split_once("=\"") {
        names.insert(name.trim_start_matches(',').to_owned());
        let mut escaped = false;
        let end = after
            .char_indices()
            .find(|&(_, c)| {
                let closes = c == '"' && !escaped;
                escaped = c == '\\' && !escaped;
                closes
            })
            .map(|(i, _)| i)
            .expect("a closed label value");
        rest = &after[end + 1..];
        if rest.starts_with('}') {
            break;
        }
    }
    names
}

#[test]
fn sample_label_names_are_read_past_quoted_commas() {
    assert_eq!(
        label_names(r#"a="x,y=\"z",b="",c="\\"} 1"#),
        ["a", "b", "c"].map(String::from).into()
    );
}

/// Labels a Prometheus scrape adds from the target (the ServiceMonitor's), not the binaries.
const TARGET_LABELS: [&str; 7] = [
    "namespace",
    "job",
    "pod",
    "instance",
    "service",
    "endpoint",
    "container",
];

/// Every metric selector of a PromQL expression: the name and the label names it matches on.
#[derive(Default)]
struct Selectors(Vec<(String, Vec<String>)>);

impl ExprVisitor for Selectors {
    type Error = String;
    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, String> {
        let vs = match expr {
            Expr::VectorSelector(vs) => vs,
            Expr::MatrixSelector(ms) => &ms.vs,
            _ => return Ok(true),
        };
        let name = vs
            .name
            .clone()
            .or_else(|| {
                vs.matchers
                    .matchers
                    .iter()
                    .find(|m| m.name == "__name__")
                    .map(|m| m.value.clone())
            })
            .ok_or_else(|| format!("a selector without a metric name: {vs}"))?;
        let labels = vs
            .matchers
            .matchers
            .iter()
            .map(|m| m.name.clone())
            .filter(|n| n != "__name__")
            .collect();
        self.0.push((name, labels));
        Ok(true)
    }
}

/// A dashboard query as PromQL: Grafana's variables replaced by values of their kind.
fn grafana_to_promql(query: &str) -> String {
    let mut q = query
        .replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h");
    // Template variables ($namespace, ${namespace}) stand inside label values here.
    let variable = |q: &str| -> Option<(usize, usize)> {
        let start = q.find('$')?;
        let rest = &q[start + 1..];
        let len = if let Some(inner) = rest.strip_prefix('{') {
            inner.find('}')? + 2
        } else {
            rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len())
        };
        Some((start, start + 1 + len))
    };
    while let Some((a, b)) = variable(&q) {
        q.replace_range(a..b, "x");
    }
    q
}

/// The PromQL of every dashboard query: panel targets (rows' nested panels too) and query
/// variables (`label_values(<selector>, label)` names a selector).
fn dashboard_queries(d: &Value) -> Vec<String> {
    let mut out = Vec::new();
    fn panels(list: &Value, out: &mut Vec<String>) {
        for p in list.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                out.push(t["expr"].as_str().expect("a target's expr").to_owned());
            }
            panels(&p["panels"], out);
        }
    }
    panels(&d["panels"], &mut out);
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            let q = v["query"]["query"]
                .as_str()
                .or(v["query"].as_str())
                .unwrap();
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .and_then(|q| q.rsplit_once(','))
                .map(|(selector, _)| selector.to_owned())
                .unwrap_or_else(|| panic!("variable {}: not label_values(…): {q}", v["name"]));
            out.push(inner);
        }
    }
    out
}

#[test]
fn grafana_variables_become_promql() {
    assert_eq!(
        grafana_to_promql(r#"rate(x{namespace=~"$namespace",a="${b}"}[$__rate_interval])"#),
        r#"rate(x{namespace=~"x",a="x"}[5m])"#
    );
    let mut found = Selectors::default();
    walk_expr(
        &mut found,
        &parser::parse(&grafana_to_promql(
            r#"histogram_quantile(0.9, sum by (le) (rate(h_bucket{a="1"}[$__rate_interval]))) / on() g"#,
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        found.0,
        vec![
            ("h_bucket".to_owned(), vec!["a".to_owned()]),
            ("g".to_owned(), vec![])
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_metric_of_the_alerts_and_the_dashboard_is_served() {
    // The controller: moto, the shared control plane, an SMTP server; a Resource of one stopped
    // instance, booked from now with a mail when it started.
    let e = env("monitoring-scrape").await;
    let smtp = SmtpServer::start(&e.dir, SmtpOptions::default())
        .await
        .expect("SMTP server");
    stopped_group(&e.moto.ec2(), 1, "watched").await;
    let controller_port = free_port().unwrap();
    let controller_admin = format!("127.0.0.1:{controller_port}");
    let smtp_port = smtp.port().to_string();
    let mut controller = start_controller(
        &e,
        controller_port,
        "scraped",
        &[
            ("SMTP_HOST", "127.0.0.1"),
            ("SMTP_PORT", smtp_port.as_str()),
            ("SMTP_SENDER", "booking@example.com"),
            ("SMTP_SECURITY", "none"),
        ],
    );
    controller
        .wait_ready(
            &Readiness::Http(format!("http://{controller_admin}/readyz")),
            Duration::from_secs(60),
        )
        .await
        .expect("controller ready");
    Api::<Resource>::namespaced(e.client.clone(), &e.ns)
        .create(
            &PostParams::default(),
            &resource("ec2.watched", "ec2", "watched", None),
        )
        .await
        .unwrap();
    let now = Utc::now();
    let mut b = booking(
        "watched",
        "ec2.watched",
        now,
        now + chrono::Duration::minutes(30),
    );
    b.spec.notifications = vec![Notification {
        type_: "email".into(),
        recipient: "ann@example.com".into(),
        recipient_from: None,
        lead_minutes: None,
        events: vec!["started".into()],
    }];
    Api::<Booking>::namespaced(e.client.clone(), &e.ns)
        .create(&PostParams::default(), &b)
        .await
        .unwrap();

    // The webhook: one validation and one mutation of a booking, and a wrong path.
    let ca = TestCa::new(&e.dir, "webhook").unwrap();
    let cert = ca
        .issue_server_cert("booking-webhook", &["127.0.0.1"])
        .unwrap();
    let (port, webhook_port) = (free_port().unwrap(), free_port().unwrap());
    let webhook_admin = format!("127.0.0.1:{webhook_port}");
    let mut webhook = webhook_process(&cert, port, webhook_port, e.cluster.kubeconfig_path())
        .spawn(&e.dir)
        .expect("booking-webhook starts");
    webhook
        .wait_ready(
            &Readiness::Http(format!("http://{webhook_admin}/readyz")),
            Duration::from_secs(60),
        )
        .await
        .expect("webhook ready");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let object = booking_object(
        &e.ns,
        "reviewed",
        "ec2.elsewhere",
        "2031-05-01T10:00:00Z",
        "2031-05-01T11:00:00Z",
    );
    for path in ["/validate", "/mutate", "/nowhere"] {
        let config = tls_config(&ca, None, &[b"http/1.1"]);
        let (status, _) = h1_post(
            addr,
            config,
            path,
            Bytes::from(review(&object, "ann", true)),
        )
        .await
        .unwrap_or_else(|err| panic!("POST {path}: {err}"));
        assert_eq!(status == 200, path != "/nowhere", "POST {path}: {status}");
    }

    // Wait for the activity's samples: the start, the mail, the Resource's running instance.
    wait_for("the booked instance started and the mail sent", Duration::from_secs(90), || {
        let admin = controller_admin.clone();
        async move {
            let started = metric(&admin, "booking_controller_member_actions_total", &[r#"action="start""#, r#"result="ok""#]).await;
            let mailed = metric(&admin, "booking_controller_notifications_total", &[r#"result="sent""#]).await;
            let running = metric(&admin, "booking_controller_resource_instances_running", &[r#"resource="ec2.watched""#]).await;
            let in_progress = metric(&admin, "booking_controller_bookings", &[r#"phase="in_progress""#]).await;
            if started >= 1.0 && mailed >= 1.0 && running >= 1.0 && in_progress >= 1.0 {
                Ok(())
            } else {
                Err(format!("started {started}, mailed {mailed}, running {running}, in progress {in_progress}"))
            }
        }
    })
    .await;

    let mut scrape = Scrape::default();
    for admin in [&controller_admin, &webhook_admin] {
        scrape.add(&http_get(admin, "/metrics").await);
    }
    controller.stop().expect("the controller stops");
    webhook.stop().expect("the webhook stops");

    let mut queries: Vec<(String, String)> = Vec::new();
    for alert in alerts(&source_rule()) {
        queries.push((
            format!("alert {}", alert["alert"].as_str().unwrap()),
            alert["expr"].as_str().unwrap().to_owned(),
        ));
    }
    for q in dashboard_queries(&source_dashboard()) {
        queries.push((format!("dashboard query {q}"), grafana_to_promql(&q)));
    }
    let mut missing = Vec::new();
    let mut used = BTreeSet::new();
    for (what, q) in &queries {
        let expr = parser::parse(q).unwrap_or_else(|err| panic!("{what}: {err}"));
        let mut found = Selectors::default();
        walk_expr(&mut found, &expr).unwrap_or_else(|err| panic!("{what}: {err}"));
        assert!(!found.0.is_empty(), "{what} names no metric");
        for (name, labels) in found.0 {
            used.insert(name.clone());
            let Some(series) = scrape.series.get(&name) else {
                missing.push(format!("{what}: no sample of {name}"));
                continue;
            };
            for label in labels
                .iter()
                .filter(|l| !TARGET_LABELS.contains(&l.as_str()))
            {
                if !series.iter().any(|s| s.contains(label)) {
                    missing.push(format!("{what}: {name} has no label {label}"));
                }
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    // The dashboard shows the new families.
    for name in [
        "booking_controller_bookings",
        "booking_controller_resource_instances_running",
        "booking_controller_member_action_duration_seconds_bucket",
        "booking_controller_aws_calls_total",
        "booking_webhook_admission_duration_seconds_bucket",
        "booking_webhook_admission_decisions_total",
        "booking_controller_heap_allocated_bytes",
        "booking_controller_heap_resident_bytes",
        "booking_webhook_heap_allocated_bytes",
        "booking_webhook_heap_resident_bytes",
    ] {
        assert!(used.contains(name), "no query uses {name}");
    }
}
