//! The served resource types: the built-in kinds and those defined by CustomResourceDefinitions.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

/// How objects of a type are converted between their storage form and a served version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conversion {
    /// Only `apiVersion` differs (built-ins with one version; CRDs with `strategy: None`).
    ApiVersionOnly,
    /// `events.k8s.io/v1` Events, stored as core/v1 Events.
    EventsV1,
}

/// Behaviour special to some built-in kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    /// No special behaviour.
    None,
    /// `Namespace`: phase, deletion of contents.
    Namespace,
    /// `CustomResourceDefinition`: serves new types.
    Crd,
    /// `Secret`: `stringData` folded into `data`.
    Secret,
    /// A webhook configuration (not itself subject to admission webhooks).
    WebhookConfiguration,
}

/// One printer column of a CRD version (`additionalPrinterColumns`).
#[derive(Clone, Debug)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// OpenAPI type: string, integer, number, boolean, date.
    pub type_: String,
    /// Optional format.
    pub format: String,
    /// Simple JSONPath into the object, e.g. `.spec.type`.
    pub json_path: String,
    /// Description.
    pub description: String,
    /// 0 = shown by default, >0 = only with `-o wide`.
    pub priority: i64,
}

/// The schema and columns of one served version of a custom resource.
#[derive(Clone, Debug, Default)]
pub struct VersionInfo {
    /// `openAPIV3Schema` of the version, if any.
    pub schema: Option<Value>,
    /// The CEL rules compiled once.
    pub compiled: Option<Arc<kube::core::cel::CompiledSchema>>,
    /// `additionalPrinterColumns`.
    pub columns: Vec<PrinterColumn>,
    /// Whether the status subresource is enabled.
    pub status: bool,
}

/// A resource type served under one group and one or more versions.
#[derive(Clone, Debug)]
pub struct ResourceType {
    /// API group (`""` for core).
    pub group: String,
    /// Served versions; the first is the storage and preferred version.
    pub versions: Vec<String>,
    /// Kind.
    pub kind: String,
    /// Plural resource name.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Short names (`cm`, `ns`).
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// `metadata.generation` is maintained.
    pub generation: bool,
    /// Whether `/status` is served (for built-ins; CRDs per version).
    pub status: bool,
    /// Storage key: group and plural where objects are kept.
    pub storage: (String, String),
    /// Conversion from storage.
    pub conversion: Conversion,
    /// Special behaviour.
    pub special: Special,
    /// For custom resources: per-version schema information.
    pub crd_versions: Option<BTreeMap<String, VersionInfo>>,
    /// Top-level fields of a built-in kind (for strict field validation); `None` = unchecked.
    pub known_fields: Option<Vec<&'static str>>,
}

impl ResourceType {
    /// `group/version` or `version` for core.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// Whether `/status` is served for `version`.
    pub fn has_status(&self, version: &str) -> bool {
        match &self.crd_versions {
            Some(v) => v.get(version).map(|v| v.status).unwrap_or(false),
            None => self.status,
        }
    }

    /// The CRD schema of `version`, if any.
    pub fn version_info(&self, version: &str) -> Option<&VersionInfo> {
        self.crd_versions.as_ref().and_then(|v| v.get(version))
    }

    /// The storage version.
    pub fn storage_version(&self) -> &str {
        &self.versions[0]
    }

    /// Whether this is a custom resource.
    pub fn is_custom(&self) -> bool {
        self.crd_versions.is_some()
    }
}

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    short: &[&str],
    namespaced: bool,
    generation: bool,
    status: bool,
    special: Special,
    known: Option<&[&'static str]>,
) -> ResourceType {
    ResourceType {
        group: group.into(),
        versions: vec![version.into()],
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: vec![],
        namespaced,
        generation,
        status,
        storage: (group.into(), plural.into()),
        conversion: Conversion::ApiVersionOnly,
        special,
        crd_versions: None,
        known_fields: known.map(|k| k.to_vec()),
    }
}

const TOP: [&str; 3] = ["apiVersion", "kind", "metadata"];

fn fields(extra: &[&'static str]) -> Vec<&'static str> {
    TOP.iter().chain(extra.iter()).copied().collect()
}

/// The built-in kinds this server stores.
pub fn builtins() -> Vec<ResourceType> {
    use Special as S;
    let mut v = vec![
        builtin(
            "",
            "v1",
            "Namespace",
            "namespaces",
            &["ns"],
            false,
            false,
            true,
            S::Namespace,
            Some(&fields(&["spec", "status"])),
        ),
        builtin(
            "",
            "v1",
            "Secret",
            "secrets",
            &[],
            true,
            false,
            false,
            S::Secret,
            Some(&fields(&["data", "stringData", "type", "immutable"])),
        ),
        builtin(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            &["cm"],
            true,
            false,
            false,
            S::None,
            Some(&fields(&["data", "binaryData", "immutable"])),
        ),
        builtin(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            &["sa"],
            true,
            false,
            false,
            S::None,
            Some(&fields(&[
                "secrets",
                "imagePullSecrets",
                "automountServiceAccountToken",
            ])),
        ),
        builtin(
            "",
            "v1",
            "Event",
            "events",
            &["ev"],
            true,
            false,
            false,
            S::None,
            Some(&fields(&[
                "involvedObject",
                "reason",
                "message",
                "source",
                "firstTimestamp",
                "lastTimestamp",
                "count",
                "type",
                "eventTime",
                "series",
                "action",
                "related",
                "reportingComponent",
                "reportingInstance",
            ])),
        ),
        builtin(
            "",
            "v1",
            "Service",
            "services",
            &["svc"],
            true,
            false,
            true,
            S::None,
            None,
        ),
        builtin(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            &["deploy"],
            true,
            true,
            true,
            S::None,
            None,
        ),
        builtin(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            &[],
            true,
            false,
            false,
            S::None,
            Some(&fields(&["spec"])),
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            &["crd", "crds"],
            false,
            true,
            true,
            S::Crd,
            Some(&fields(&["spec", "status"])),
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            &[],
            false,
            true,
            false,
            S::WebhookConfiguration,
            Some(&fields(&["webhooks"])),
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
            &[],
            false,
            true,
            false,
            S::WebhookConfiguration,
            Some(&fields(&["webhooks"])),
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
            "roles",
            &[],
            true,
            false,
            false,
            S::None,
            None,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            &[],
            true,
            false,
            false,
            S::None,
            None,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            &[],
            false,
            false,
            false,
            S::None,
            None,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            &[],
            false,
            false,
            false,
            S::None,
            None,
        ),
        builtin(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            &["pdb"],
            true,
            true,
            true,
            S::None,
            None,
        ),
    ];
    let mut ev = builtin(
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        &["ev"],
        true,
        false,
        false,
        S::None,
        Some(&fields(&[
            "regarding",
            "reason",
            "note",
            "deprecatedSource",
            "deprecatedFirstTimestamp",
            "deprecatedLastTimestamp",
            "deprecatedCount",
            "type",
            "eventTime",
            "series",
            "action",
            "related",
            "reportingController",
            "reportingInstance",
        ])),
    );
    ev.storage = ("".into(), "events".into());
    ev.conversion = Conversion::EventsV1;
    v.push(ev);
    for r in v.iter_mut() {
        if r.plural == "deployments" || r.plural == "services" {
            r.categories = vec!["all".into()];
        }
    }
    v
}

/// The resource type a CustomResourceDefinition defines, or an error message.
pub fn from_crd(crd: &Value) -> Result<ResourceType, String> {
    let spec = crd.get("spec").ok_or("spec: Required value")?;
    let group = spec["group"].as_str().ok_or("spec.group: Required value")?;
    let names = &spec["names"];
    let plural = names["plural"]
        .as_str()
        .ok_or("spec.names.plural: Required value")?;
    let kind = names["kind"]
        .as_str()
        .ok_or("spec.names.kind: Required value")?;
    let singular = names["singular"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let namespaced = spec["scope"].as_str().unwrap_or("Namespaced") == "Namespaced";
    let mut served: Vec<(bool, String)> = Vec::new();
    let mut infos = BTreeMap::new();
    for v in spec["versions"]
        .as_array()
        .ok_or("spec.versions: Required value")?
    {
        let name = v["name"]
            .as_str()
            .ok_or("spec.versions.name: Required value")?;
        if !v["served"].as_bool().unwrap_or(false) {
            continue;
        }
        let schema = v["schema"]["openAPIV3Schema"].clone();
        let schema = (!schema.is_null()).then_some(schema);
        let compiled = schema
            .as_ref()
            .map(|s| Arc::new(crate::schema::compile_cel(s)));
        let columns = v["additionalPrinterColumns"]
            .as_array()
            .map(|cols| {
                cols.iter()
                    .map(|c| PrinterColumn {
                        name: c["name"].as_str().unwrap_or_default().to_string(),
                        type_: c["type"].as_str().unwrap_or("string").to_string(),
                        format: c["format"].as_str().unwrap_or_default().to_string(),
                        json_path: c["jsonPath"].as_str().unwrap_or_default().to_string(),
                        description: c["description"].as_str().unwrap_or_default().to_string(),
                        priority: c["priority"].as_i64().unwrap_or(0),
                    })
                    .collect()
            })
            .unwrap_or_default();
        infos.insert(
            name.to_string(),
            VersionInfo {
                schema,
                compiled,
                columns,
                status: v["subresources"].get("status").is_some(),
            },
        );
        served.push((v["storage"].as_bool().unwrap_or(false), name.to_string()));
    }
    if served.is_empty() {
        return Err("spec.versions: Invalid value: must have at least one served version".into());
    }
    // Storage version first.
    served.sort_by_key(|(storage, _)| !storage);
    Ok(ResourceType {
        group: group.into(),
        versions: served.into_iter().map(|(_, n)| n).collect(),
        kind: kind.into(),
        plural: plural.into(),
        singular,
        short_names: strs(&names["shortNames"]),
        categories: strs(&names["categories"]),
        namespaced,
        generation: true,
        status: false,
        storage: (group.into(), plural.into()),
        conversion: Conversion::ApiVersionOnly,
        special: Special::None,
        crd_versions: Some(infos),
        known_fields: None,
    })
}

/// The registry of served types.
#[derive(Clone, Debug)]
pub struct Registry {
    types: Vec<Arc<ResourceType>>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            types: builtins().into_iter().map(Arc::new).collect(),
        }
    }
}

impl Registry {
    /// All served types.
    pub fn all(&self) -> &[Arc<ResourceType>] {
        &self.types
    }

    /// The type served at `group/version/plural`.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.types
            .iter()
            .find(|t| {
                t.group == group && t.plural == plural && t.versions.iter().any(|v| v == version)
            })
            .cloned()
    }

    /// The type of kind `kind` in `group` (any version).
    pub fn by_kind(&self, group: &str, kind: &str) -> Option<Arc<ResourceType>> {
        self.types
            .iter()
            .find(|t| t.group == group && t.kind == kind)
            .cloned()
    }

    /// Whether `group/version` is served.
    pub fn serves_group_version(&self, group: &str, version: &str) -> bool {
        self.types
            .iter()
            .any(|t| t.group == group && t.versions.iter().any(|v| v == version))
    }

    /// Groups with their versions (in preference order), core group excluded.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for t in &self.types {
            if t.group.is_empty() {
                continue;
            }
            match out.iter_mut().find(|(g, _)| g == &t.group) {
                Some((_, vs)) => {
                    for v in &t.versions {
                        if !vs.contains(v) {
                            vs.push(v.clone());
                        }
                    }
                }
                None => out.push((t.group.clone(), t.versions.clone())),
            }
        }
        for (_, vs) in out.iter_mut() {
            vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        out
    }

    /// Replace or add the type defined by a CRD named `crd_name`.
    pub fn upsert_custom(&mut self, t: ResourceType) {
        self.types
            .retain(|x| !(x.is_custom() && x.group == t.group && x.plural == t.plural));
        self.types.push(Arc::new(t));
    }

    /// Remove the custom type `group/plural`.
    pub fn remove_custom(&mut self, group: &str, plural: &str) {
        self.types
            .retain(|x| !(x.is_custom() && x.group == group && x.plural == plural));
    }
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first.
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let rest = match v.strip_prefix('v') {
        Some(r) => r,
        None => return (0, 0, 0),
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        (3, major, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, major, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, major, n.parse().unwrap_or(0))
    } else {
        (0, major, 0)
    }
}

/// The discovery `APIResource` entries of `t` for `version`.
pub fn api_resources(t: &ResourceType, version: &str) -> Vec<Value> {
    let verbs = json!([
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch"
    ]);
    let mut main = json!({
        "name": t.plural,
        "singularName": t.singular,
        "namespaced": t.namespaced,
        "kind": t.kind,
        "verbs": verbs,
    });
    if !t.short_names.is_empty() {
        main["shortNames"] = json!(t.short_names);
    }
    if !t.categories.is_empty() {
        main["categories"] = json!(t.categories);
    }
    let mut out = vec![main];
    if t.has_status(version) {
        out.push(json!({
            "name": format!("{}/status", t.plural),
            "singularName": "",
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ordering() {
        let mut v = vec!["v1alpha1", "v2beta1", "v1", "v2", "v1beta2"];
        v.sort_by_key(|x| std::cmp::Reverse(version_priority(x)));
        assert_eq!(v, vec!["v2", "v1", "v2beta1", "v1beta2", "v1alpha1"]);
    }

    #[test]
    fn crd_types_are_derived() {
        let crd = json!({"spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [
                {"name": "v1beta1", "served": true, "storage": false},
                {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}},
                {"name": "v0", "served": false, "storage": false}]}});
        let t = from_crd(&crd).unwrap();
        assert_eq!(t.versions, vec!["v1", "v1beta1"]);
        assert!(t.has_status("v1"));
        assert!(!t.has_status("v1beta1"));
        assert_eq!(t.singular, "widget");
        assert!(from_crd(&json!({"spec": {}})).is_err());
    }
}
