//! The tenancy options of the installs: off by default, and one value of the chart
//! (`tenancy.restrictUserId`) or one kustomize component (`components/restrict-user-id`) turns
//! on the webhook's `--restrict-user-id` with the RBAC it needs (SubjectAccessReviews, the
//! `book-for-others` ClusterRole, the controller's binding for scheduled bookings). Rendered
//! with the release's `helm template` and `kubectl kustomize`. Helpers:
//! [`booking_tests::packaging`].

use booking_tests::packaging::*;
use booking_tests::repo_root;
use serde_json::Value;

fn helm(args: &[&str]) -> Vec<Value> {
    let home = tempfile::tempdir().unwrap();
    let out = run(
        helm_cmd(home.path())
            .args(["template", "rbo"])
            .arg(repo_root().join("manifests/helm"))
            .args(["--namespace", NAMESPACE, "--kube-version", kube_version()])
            .args(args),
        "helm",
    );
    yaml_documents(&out)
}

/// The value of env `name` of the first container of Deployment `deployment`.
fn env(objects: &[Value], deployment: &str, name: &str) -> Option<String> {
    pod_spec(&self::deployment(objects, deployment)).containers[0]
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

/// Whether ClusterRole `name` lets its subjects `verb` `resource`.
fn grants(objects: &[Value], name: &str, resource: &str, verb: &str) -> bool {
    find(objects, "ClusterRole", name)["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == resource))
                && r["verbs"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x == verb))
        })
}

#[test]
fn the_chart_turns_tenancy_on_with_one_value_and_binds_gitops_accounts() {
    let defaults = helm(&[]);
    assert_eq!(
        env(
            &defaults,
            "rbo-resource-booking-operator-webhook",
            "RESTRICT_USER_ID"
        ),
        None
    );
    assert_eq!(
        env(
            &defaults,
            "rbo-resource-booking-operator-webhook",
            "MAX_BOOKING_MINUTES"
        )
        .as_deref(),
        Some("43200")
    );
    assert_eq!(
        env(
            &defaults,
            "rbo-resource-booking-operator-controller",
            "UNTAGGED_CLAIM_NAMESPACES"
        ),
        None
    );
    assert!(!grants(
        &defaults,
        "rbo-resource-booking-operator-webhook",
        "subjectaccessreviews",
        "create"
    ));
    assert!(grants(
        &defaults,
        "rbo-book-for-others",
        "bookings",
        "book-for-others"
    ));

    let on = helm(&[
        "--set",
        "tenancy.restrictUserId=true",
        "--set",
        "tenancy.untaggedClaimNamespaces={ops,infra}",
        "--set",
        "tenancy.bookForOthers[0].namespace=team-a",
        "--set",
        "tenancy.bookForOthers[0].serviceAccount.name=argocd-application-controller",
        "--set",
        "tenancy.bookForOthers[0].serviceAccount.namespace=argocd",
    ]);
    assert_eq!(
        env(
            &on,
            "rbo-resource-booking-operator-webhook",
            "RESTRICT_USER_ID"
        )
        .as_deref(),
        Some("true")
    );
    assert_eq!(
        env(
            &on,
            "rbo-resource-booking-operator-controller",
            "UNTAGGED_CLAIM_NAMESPACES"
        )
        .as_deref(),
        Some("ops,infra")
    );
    assert!(grants(
        &on,
        "rbo-resource-booking-operator-webhook",
        "subjectaccessreviews",
        "create"
    ));
    let binding = all_of(&on, "RoleBinding")
        .into_iter()
        .find(|b| b["metadata"]["namespace"] == "team-a")
        .expect("a RoleBinding in team-a");
    assert_eq!(binding["roleRef"]["name"], "rbo-book-for-others");
    assert_eq!(
        binding["subjects"][0]["name"],
        "argocd-application-controller"
    );
    assert_eq!(binding["subjects"][0]["namespace"], "argocd");
    let controller = find(&on, "ClusterRoleBinding", "rbo-controller-books-for-others");
    assert_eq!(controller["roleRef"]["name"], "rbo-book-for-others");
}

#[test]
fn the_kustomize_component_turns_tenancy_on() {
    let base = base();
    let webhook = "booking-webhook";
    assert_eq!(env(&base, webhook, "RESTRICT_USER_ID"), None);
    let on = base_with_components(&["restrict-user-id"]);
    assert_eq!(
        env(&on, webhook, "RESTRICT_USER_ID").as_deref(),
        Some("true")
    );
    assert!(grants(
        &on,
        "resource-booking-operator-webhook-authorizer",
        "subjectaccessreviews",
        "create"
    ));
    assert!(grants(
        &on,
        "resource-booking-operator-book-for-others",
        "bookings",
        "book-for-others"
    ));
    // The bindings name the install's own ServiceAccounts.
    let service_accounts: Vec<String> = all_of(&on, "ServiceAccount")
        .iter()
        .map(|s| {
            format!(
                "{}/{}",
                s["metadata"]["namespace"].as_str().unwrap_or_default(),
                name_of(s)
            )
        })
        .collect();
    for binding in [
        "resource-booking-operator-webhook-authorizer",
        "resource-booking-operator-controller-books-for-others",
    ] {
        let b = find(&on, "ClusterRoleBinding", binding);
        let subject = format!(
            "{}/{}",
            b["subjects"][0]["namespace"].as_str().unwrap_or_default(),
            b["subjects"][0]["name"].as_str().unwrap_or_default()
        );
        assert!(
            service_accounts.contains(&subject),
            "{binding}: {subject} not in {service_accounts:?}"
        );
    }
}
