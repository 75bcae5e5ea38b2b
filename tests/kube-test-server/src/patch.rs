//! Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902, via the `json-patch` crate), a
//! simplified strategic merge patch, and server-side apply with `managedFields` bookkeeping.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

/// The patch formats the server accepts (by request `Content-Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchKind {
    /// The patch kind of a request content type.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or_default().trim();
        match base {
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchKind::Apply)
            }
            _ => None,
        }
    }
}

/// Apply a JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Apply a JSON patch (RFC 6902). As on the real server, a `test` of `null` against a missing
/// path succeeds (kube-runtime's finalizer helper relies on it).
pub fn json(target: &mut Value, patch: &Value) -> Result<(), String> {
    let mut p: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| e.to_string())?;
    p.0.retain(|op| match op {
        json_patch::PatchOperation::Test(t) => {
            !(t.value.is_null() && target.pointer(t.path.as_str()).is_none())
        }
        _ => true,
    });
    json_patch::patch(target, &p).map_err(|e| e.to_string())
}

/// Apply a strategic merge patch, simplified: merge semantics plus the directives `$patch`
/// (`replace`, `delete`), `$retainKeys`, `$deleteFromPrimitiveList/<field>` and
/// `$setElementOrder/<field>` (whose entries name the merge key of a list of objects). Lists
/// without a `$setElementOrder` directive are replaced.
pub fn strategic(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => strategic_map(t, p),
        _ => *target = strip_directives(patch),
    }
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

fn strategic_map(t: &mut Map<String, Value>, p: &Map<String, Value>) {
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        *t = match strip_directives(&Value::Object(p.clone())) {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        return;
    }
    if let Some(keep) = p.get("$retainKeys").and_then(Value::as_array) {
        let keep: BTreeSet<&str> = keep.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(k.as_str()));
    }
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(del)) = (t.get_mut(field), v.as_array()) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match v {
            Value::Object(pm) => {
                if pm.get("$patch").and_then(Value::as_str) == Some("delete") {
                    t.remove(k);
                    continue;
                }
                match t.get_mut(k) {
                    Some(Value::Object(tm)) => strategic_map(tm, pm),
                    _ => {
                        t.insert(k.clone(), strip_directives(v));
                    }
                }
            }
            Value::Array(items) => {
                let order = p
                    .get(&format!("$setElementOrder/{k}"))
                    .and_then(Value::as_array);
                let merged = merge_list(t.get(k), items, order);
                t.insert(k.clone(), merged);
            }
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
}

fn merge_list(current: Option<&Value>, patch: &[Value], order: Option<&Vec<Value>>) -> Value {
    let Some(order) = order else {
        return Value::Array(patch.iter().map(strip_directives).collect());
    };
    let current: Vec<Value> = current
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // The merge key is the single field of the order entries.
    let key = order
        .first()
        .and_then(Value::as_object)
        .and_then(|m| m.keys().next().cloned());
    let Some(key) = key else {
        // Primitive list: union, ordered as `order`.
        let mut all: Vec<Value> = current;
        for p in patch {
            if !all.contains(p) {
                all.push(p.clone());
            }
        }
        let mut out: Vec<Value> = order.iter().filter(|o| all.contains(o)).cloned().collect();
        out.extend(all.into_iter().filter(|x| !order.contains(x)));
        return Value::Array(out);
    };
    let mut by_key: Vec<(Value, Value)> = current
        .into_iter()
        .map(|item| (item.get(&key).cloned().unwrap_or(Value::Null), item))
        .collect();
    for p in patch {
        let id = p.get(&key).cloned().unwrap_or(Value::Null);
        let delete = p.get("$patch").and_then(Value::as_str) == Some("delete");
        let pos = by_key.iter().position(|(k, _)| *k == id);
        match (pos, delete) {
            (Some(i), true) => {
                by_key.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic(&mut by_key[i].1, p),
            (None, false) => by_key.push((id, strip_directives(p))),
        }
    }
    let mut out = Vec::new();
    for o in order {
        let id = o.get(&key).cloned().unwrap_or(Value::Null);
        if let Some(i) = by_key.iter().position(|(k, _)| *k == id) {
            out.push(by_key.remove(i).1);
        }
    }
    out.extend(by_key.into_iter().map(|(_, v)| v));
    Value::Array(out)
}

/// A set of owned field paths; lists and scalars are leaves.
pub type FieldSet = BTreeSet<Vec<String>>;

/// The leaf paths of an object (excluding `apiVersion`, `kind`, and `metadata` other than
/// labels, annotations, finalizers and ownerReferences).
pub fn leaves(obj: &Value) -> BTreeMap<Vec<String>, Value> {
    let mut out = BTreeMap::new();
    if let Some(m) = obj.as_object() {
        for (k, v) in m {
            match k.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => {
                    for mk in ["labels", "annotations", "finalizers", "ownerReferences"] {
                        if let Some(mv) = v.get(mk) {
                            collect(mv, vec!["metadata".into(), mk.into()], &mut out);
                        }
                    }
                }
                _ => collect(v, vec![k.clone()], &mut out),
            }
        }
    }
    out
}

fn collect(v: &Value, path: Vec<String>, out: &mut BTreeMap<Vec<String>, Value>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, sub) in m {
                let mut p = path.clone();
                p.push(k.clone());
                collect(sub, p, out);
            }
        }
        other => {
            out.insert(path, other.clone());
        }
    }
}

/// A field set as `fieldsV1` (`{"f:spec": {"f:type": {}}}`).
pub fn to_fields_v1(set: &FieldSet) -> Value {
    fn insert(m: &mut Map<String, Value>, path: &[String]) {
        if let Some((first, rest)) = path.split_first() {
            let entry = m
                .entry(format!("f:{first}"))
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(child) = entry {
                insert(child, rest);
            }
        }
    }
    let mut root = Map::new();
    for path in set {
        insert(&mut root, path);
    }
    Value::Object(root)
}

/// Parse `fieldsV1` back into leaf paths.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    fn walk(v: &Value, path: &mut Vec<String>, out: &mut FieldSet) {
        let Some(m) = v.as_object() else { return };
        let children: Vec<(&String, &Value)> =
            m.iter().filter(|(k, _)| k.starts_with("f:")).collect();
        if children.is_empty() && !path.is_empty() {
            out.insert(path.clone());
        }
        for (k, sub) in children {
            path.push(k[2..].to_string());
            walk(sub, path, out);
            path.pop();
        }
    }
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// One entry of `metadata.managedFields`.
#[derive(Clone, Debug)]
pub struct ManagedEntry {
    /// Field manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The apiVersion the fields were set through.
    pub api_version: String,
    /// `status` or empty.
    pub subresource: String,
    /// Owned field paths.
    pub fields: FieldSet,
}

/// Read `metadata.managedFields`.
pub fn managed_entries(obj: &Value) -> Vec<ManagedEntry> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| ManagedEntry {
                    manager: e["manager"].as_str().unwrap_or_default().into(),
                    operation: e["operation"].as_str().unwrap_or("Update").into(),
                    api_version: e["apiVersion"].as_str().unwrap_or_default().into(),
                    subresource: e["subresource"].as_str().unwrap_or_default().into(),
                    fields: from_fields_v1(&e["fieldsV1"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Write `metadata.managedFields` (entries without fields are dropped, as the real server).
pub fn set_managed_entries(obj: &mut Value, entries: &[ManagedEntry], now: &str) {
    let arr: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": now,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if arr.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(arr));
        }
    }
}

fn under(path: &[String], scope: Scope) -> bool {
    match scope {
        Scope::Main => path.first().map(String::as_str) != Some("status"),
        Scope::Status => path.first().map(String::as_str) == Some("status"),
        Scope::All => true,
    }
}

/// Which part of the object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everything but `status` (main endpoint of a type with a status subresource).
    Main,
    /// Only `status` (the `/status` subresource).
    Status,
    /// Everything (types without a status subresource).
    All,
}

/// Record an `Update` by `manager`: it takes ownership of the fields whose values changed.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    subresource: &str,
    now: &str,
) {
    let mut entries = old.map(managed_entries).unwrap_or_default();
    let old_leaves = old.map(leaves).unwrap_or_default();
    let new_leaves = leaves(new);
    let changed: FieldSet = new_leaves
        .iter()
        .filter(|(p, v)| old_leaves.get(*p) != Some(*v))
        .map(|(p, _)| p.clone())
        .collect();
    let removed: FieldSet = old_leaves
        .keys()
        .filter(|p| !new_leaves.contains_key(*p))
        .cloned()
        .collect();
    for e in entries.iter_mut() {
        e.fields
            .retain(|p| !changed.contains(p) && !removed.contains(p));
    }
    if !changed.is_empty() {
        match entries.iter_mut().find(|e| {
            e.manager == manager && e.operation == "Update" && e.subresource == subresource
        }) {
            Some(e) => {
                e.fields.extend(changed);
                e.api_version = api_version.into();
            }
            None => entries.push(ManagedEntry {
                manager: manager.into(),
                operation: "Update".into(),
                api_version: api_version.into(),
                subresource: subresource.into(),
                fields: changed,
            }),
        }
    }
    set_managed_entries(new, &entries, now);
}

/// A server-side apply conflict: the field and the manager owning it.
#[derive(Clone, Debug, PartialEq)]
pub struct Conflict {
    /// The manager that owns the field.
    pub manager: String,
    /// Its apiVersion.
    pub api_version: String,
    /// The field, as `.spec.type`.
    pub field: String,
}

/// Server-side apply, simplified: the applied configuration is merged into `current` (maps
/// merged, lists and scalars replaced); fields the same manager applied before and no longer
/// applies are removed; fields owned by other managers with a different value conflict unless
/// `force`, and are taken over when forced.
pub fn apply(
    current: &Value,
    applied: &Value,
    manager: &str,
    api_version: &str,
    scope: Scope,
    force: bool,
    now: &str,
) -> Result<Value, Vec<Conflict>> {
    let subresource = if scope == Scope::Status { "status" } else { "" };
    let mut entries = managed_entries(current);
    let cur_leaves = leaves(current);
    let applied_leaves: BTreeMap<Vec<String>, Value> = leaves(applied)
        .into_iter()
        .filter(|(p, _)| under(p, scope))
        .collect();
    let applied_set: FieldSet = applied_leaves.keys().cloned().collect();
    let mut conflicts = Vec::new();
    for e in &entries {
        if e.manager == manager && e.operation == "Apply" {
            continue;
        }
        for p in e.fields.intersection(&applied_set) {
            if cur_leaves.get(p) != applied_leaves.get(p) {
                conflicts.push(Conflict {
                    manager: e.manager.clone(),
                    api_version: e.api_version.clone(),
                    field: format!(".{}", p.join(".")),
                });
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    let mut result = current.clone();
    // Remove what this manager applied before and no longer applies (unless others own it).
    let previous: FieldSet = entries
        .iter()
        .find(|e| e.manager == manager && e.operation == "Apply" && e.subresource == subresource)
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    for p in previous.difference(&applied_set) {
        let owned_elsewhere = entries
            .iter()
            .any(|e| !(e.manager == manager && e.operation == "Apply") && e.fields.contains(p));
        if !owned_elsewhere {
            remove_path(&mut result, p);
        }
    }
    let mut filtered = applied.clone();
    if let Some(m) = filtered.as_object_mut() {
        match scope {
            Scope::Main => {
                m.remove("status");
            }
            Scope::Status => m.retain(|k, _| k == "status" || k == "metadata"),
            Scope::All => {}
        }
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.retain(|k, _| {
                matches!(
                    k.as_str(),
                    "labels"
                        | "annotations"
                        | "finalizers"
                        | "ownerReferences"
                        | "name"
                        | "namespace"
                        | "generateName"
                )
            });
        }
    }
    deep_merge(&mut result, &filtered);
    for e in entries.iter_mut() {
        if !(e.manager == manager && e.operation == "Apply") {
            e.fields
                .retain(|p| !applied_set.contains(p) || !force && !conflicts.is_empty());
        }
    }
    match entries
        .iter_mut()
        .find(|e| e.manager == manager && e.operation == "Apply" && e.subresource == subresource)
    {
        Some(e) => {
            e.fields = applied_set;
            e.api_version = api_version.into();
        }
        None => entries.push(ManagedEntry {
            manager: manager.into(),
            operation: "Apply".into(),
            api_version: api_version.into(),
            subresource: subresource.into(),
            fields: applied_set,
        }),
    }
    set_managed_entries(&mut result, &entries, now);
    Ok(result)
}

fn deep_merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                match t.get_mut(k) {
                    Some(tv) if tv.is_object() && v.is_object() => deep_merge(tv, v),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

fn remove_path(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for p in parents {
        match cur.get_mut(p) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategic_merge_by_key_and_directives() {
        let mut t = json!({"webhooks": [{"name": "a", "x": 1}, {"name": "b", "x": 2}], "keep": [1, 2], "drop": 1});
        strategic(
            &mut t,
            &json!({"$setElementOrder/webhooks": [{"name": "b"}, {"name": "c"}],
                "webhooks": [{"name": "a", "$patch": "delete"}, {"name": "b", "y": 3}, {"name": "c"}],
                "$deleteFromPrimitiveList/keep": [1], "drop": null}),
        );
        assert_eq!(
            t,
            json!({"webhooks": [{"name": "b", "x": 2, "y": 3}, {"name": "c"}], "keep": [2]})
        );
    }

    #[test]
    fn json_patch_test_of_null_matches_a_missing_path() {
        let mut t = json!({"metadata": {}});
        json(
            &mut t,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]),
        )
        .unwrap();
        assert_eq!(t["metadata"]["finalizers"], json!(["f"]));
        assert!(
            json(
                &mut t,
                &json!([{"op": "test", "path": "/metadata/finalizers", "value": ["g"]}])
            )
            .is_err()
        );
    }

    #[test]
    fn field_sets_round_trip() {
        let obj = json!({"metadata": {"name": "x", "labels": {"a": "b"}}, "spec": {"t": 1, "l": [1]}, "kind": "K"});
        let set: FieldSet = leaves(&obj).into_keys().collect();
        let v1 = to_fields_v1(&set);
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:spec": {"f:l": {}, "f:t": {}}})
        );
        assert_eq!(from_fields_v1(&v1), set);
    }

    #[test]
    fn apply_merges_removes_and_conflicts() {
        let now = "2024-01-01T00:00:00Z";
        let a1 = json!({"metadata": {"name": "x"}, "spec": {"a": 1, "b": 2}});
        let obj = apply(
            &json!({"metadata": {"name": "x"}}),
            &a1,
            "m1",
            "v1",
            Scope::Main,
            false,
            now,
        )
        .unwrap();
        assert_eq!(obj["spec"], json!({"a": 1, "b": 2}));
        // Same manager drops b: b is removed.
        let obj = apply(
            &obj,
            &json!({"spec": {"a": 1}}),
            "m1",
            "v1",
            Scope::Main,
            false,
            now,
        )
        .unwrap();
        assert_eq!(obj["spec"], json!({"a": 1}));
        // Another manager changing a conflicts, unless forced.
        let err = apply(
            &obj,
            &json!({"spec": {"a": 5}}),
            "m2",
            "v1",
            Scope::Main,
            false,
            now,
        )
        .unwrap_err();
        assert_eq!(
            err,
            vec![Conflict {
                manager: "m1".into(),
                api_version: "v1".into(),
                field: ".spec.a".into()
            }]
        );
        let forced = apply(
            &obj,
            &json!({"spec": {"a": 5}}),
            "m2",
            "v1",
            Scope::Main,
            true,
            now,
        )
        .unwrap();
        assert_eq!(forced["spec"]["a"], 5);
        let entries = managed_entries(&forced);
        assert_eq!(entries.len(), 1, "m1 lost its only field: {entries:?}");
        assert_eq!(entries[0].manager, "m2");
    }

    #[test]
    fn updates_take_ownership_of_changed_fields() {
        let now = "2024-01-01T00:00:00Z";
        let mut created = json!({"metadata": {}, "spec": {"a": 1, "b": 1}});
        record_update(None, &mut created, "c", "v1", "", now);
        let mut updated = created.clone();
        updated["spec"]["b"] = json!(2);
        record_update(Some(&created), &mut updated, "u", "v1", "", now);
        let e = managed_entries(&updated);
        assert_eq!(e.len(), 2);
        assert!(
            e[1].fields
                .contains(&vec!["spec".to_string(), "b".to_string()])
        );
        assert!(
            !e[0]
                .fields
                .contains(&vec!["spec".to_string(), "b".to_string()])
        );
    }
}
