//! OpenAPI v3 documents: `/openapi/v3` (the index) and one document per group-version.
//!
//! They carry what kubectl needs: a PATCH operation per kind whose `x-kubernetes-group-version-kind`
//! is a single object and which accepts the `fieldValidation` query parameter (so kubectl sends
//! `fieldValidation=Strict` instead of validating client-side), the accepted patch content types
//! (strategic merge is not advertised, see [`gv_document`]), and component schemas with an
//! `x-kubernetes-group-version-kind` list that `kubectl explain` resolves.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use serde_json::{Map, Value, json};

use crate::registry::{Registry, ResourceType};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// The document path of a group-version: `api/v1` or `apis/<group>/<version>`.
pub fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The component schema name of a kind, as the real server names it.
pub fn schema_name(t: &ResourceType, version: &str) -> String {
    if t.is_custom() {
        let reversed: Vec<&str> = t.group.split('.').rev().collect();
        return format!("{}.{}.{}", reversed.join("."), version, t.kind);
    }
    match t.group.as_str() {
        "" => format!("io.k8s.api.core.{version}.{}", t.kind),
        "apiextensions.k8s.io" => format!(
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{version}.{}",
            t.kind
        ),
        g => {
            let short = g.split('.').next().unwrap_or(g);
            format!("io.k8s.api.{short}.{version}.{}", t.kind)
        }
    }
}

/// The `/openapi/v3` index: every served group-version with a content hash in its URL.
pub fn index(reg: &Registry) -> Value {
    let mut paths = Map::new();
    let mut gvs: Vec<(String, String)> = vec![("".into(), "v1".into())];
    for (g, vs) in reg.groups() {
        for v in vs {
            gvs.push((g.clone(), v));
        }
    }
    for (g, v) in gvs {
        let doc = gv_document(reg, &g, &v);
        let mut h = std::collections::hash_map::DefaultHasher::new();
        doc.to_string().hash(&mut h);
        let p = gv_path(&g, &v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={:016X}", h.finish())}),
        );
    }
    json!({"paths": paths})
}

fn param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn common_write_params() -> Vec<Value> {
    vec![
        param(
            "dryRun",
            "When present, indicates that modifications should not be persisted.",
        ),
        param(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        param(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn, Strict.",
        ),
    ]
}

/// The OpenAPI v3 document of one group-version.
pub fn gv_document(reg: &Registry, group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    schemas.insert(
        OBJECT_META.into(),
        json!({"description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "Name must be unique within a namespace."},
                "namespace": {"type": "string", "description": "Namespace defines the space within which each name must be unique."},
                "labels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": "Map of string keys and values that can be used to organize and categorize objects."},
                "annotations": {"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": "Annotations is an unstructured key value map stored with a resource."},
                "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "description": "Must be empty before the object is deleted from the registry."},
                "generateName": {"type": "string", "description": "GenerateName is an optional prefix, used by the server, to generate a unique name."},
                "uid": {"type": "string", "description": "UID is the unique in time and space value for this object."},
                "resourceVersion": {"type": "string", "description": "An opaque value that represents the internal version of this object."},
                "generation": {"type": "integer", "format": "int64", "description": "A sequence number representing a specific generation of the desired state."},
                "creationTimestamp": {"type": "string", "format": "date-time", "description": "CreationTimestamp is a timestamp representing the server time when this object was created."},
                "deletionTimestamp": {"type": "string", "format": "date-time", "description": "DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted."},
                "ownerReferences": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}, "description": "List of objects depended by this object."},
                "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}, "description": "ManagedFields maps workflow-id and version to the set of fields that are managed by that workflow."}
            }}),
    );
    for t in reg
        .all()
        .iter()
        .filter(|t| t.group == group && t.versions.iter().any(|v| v == version))
    {
        let name = schema_name(t, version);
        let reference = json!({"$ref": format!("#/components/schemas/{name}")});
        let gvk = json!({"group": group, "version": version, "kind": t.kind});
        schemas.insert(name.clone(), kind_schema(t, version, &gvk));
        let base = format!("/{}", gv_path(group, version));
        let collection = if t.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", t.plural)
        } else {
            format!("{base}/{}", t.plural)
        };
        let ok = json!({"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}});
        let mut patch_types = Map::new();
        for ct in [
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ] {
            patch_types.insert(ct.into(), json!({"schema": {"type": "object"}}));
        }
        // Strategic merge patch is accepted for built-ins but not advertised: kubectl would then
        // compute it from these (minimal) schemas; without it, kubectl uses its compiled-in types.
        let mut patch_params = common_write_params();
        patch_params.push(param(
            "force",
            "Force is going to \"force\" Apply requests.",
        ));
        let op = |action: &str, params: Vec<Value>| {
            json!({"operationId": format!("{action}{}", t.kind), "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk, "parameters": params, "responses": ok})
        };
        let mut item = Map::new();
        item.insert("get".into(), op("get", vec![]));
        let mut put = op("put", common_write_params());
        put["requestBody"] = json!({"content": {"application/json": {"schema": reference}}});
        item.insert("put".into(), put);
        let mut patch = op("patch", patch_params);
        patch["requestBody"] = json!({"content": patch_types});
        item.insert("patch".into(), patch.clone());
        item.insert("delete".into(), op("delete", vec![param("dryRun", "")]));
        paths.insert(format!("{collection}/{{name}}"), Value::Object(item));
        if t.has_status(version) {
            let mut status = Map::new();
            status.insert("get".into(), op("get", vec![]));
            status.insert("patch".into(), patch);
            paths.insert(
                format!("{collection}/{{name}}/status"),
                Value::Object(status),
            );
        }
        let mut coll = Map::new();
        coll.insert(
            "get".into(),
            op(
                "list",
                vec![
                    param("labelSelector", ""),
                    param("fieldSelector", ""),
                    param("watch", ""),
                ],
            ),
        );
        let mut post = op("post", common_write_params());
        post["requestBody"] = json!({"content": {"application/json": {"schema": reference}}});
        coll.insert("post".into(), post);
        paths.insert(collection, Value::Object(coll));
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::SERVER_GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

fn meta_props() -> BTreeMap<&'static str, Value> {
    let mut m = BTreeMap::new();
    m.insert("apiVersion", json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
    m.insert("kind", json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
    m.insert(
        "metadata",
        json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}], "default": {},
        "description": "Standard object's metadata."}),
    );
    m
}

fn kind_schema(t: &ResourceType, version: &str, gvk: &Value) -> Value {
    let mut schema = match t.version_info(version).and_then(|i| i.schema.clone()) {
        Some(s) => s,
        None => builtin_schema(t),
    };
    if !schema.is_object() {
        schema = json!({"type": "object"});
    }
    if schema.get("properties").is_none() {
        schema["properties"] = json!({});
    }
    for (k, v) in meta_props() {
        schema["properties"][k] = v;
    }
    schema["x-kubernetes-group-version-kind"] = json!([gvk]);
    schema
}

fn builtin_schema(t: &ResourceType) -> Value {
    let string_map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let props = match t.kind.as_str() {
        "ConfigMap" => {
            json!({"data": string_map, "binaryData": string_map, "immutable": {"type": "boolean"}})
        }
        "Secret" => {
            json!({"data": string_map, "stringData": string_map, "type": {"type": "string"}, "immutable": {"type": "boolean"}})
        }
        "Namespace" => json!({"spec": open, "status": open}),
        "Lease" => json!({"spec": {"type": "object", "properties": {
            "holderIdentity": {"type": "string"}, "leaseDurationSeconds": {"type": "integer"},
            "acquireTime": {"type": "string", "format": "date-time"}, "renewTime": {"type": "string", "format": "date-time"},
            "leaseTransitions": {"type": "integer"}, "strategy": {"type": "string"}, "preferredHolder": {"type": "string"}}}}),
        _ => match &t.known_fields {
            Some(fields) => Value::Object(
                fields
                    .iter()
                    .filter(|f| !matches!(**f, "apiVersion" | "kind" | "metadata"))
                    .map(|f| {
                        (
                            f.to_string(),
                            json!({"x-kubernetes-preserve-unknown-fields": true}),
                        )
                    })
                    .collect(),
            ),
            None => {
                return json!({"type": "object", "description": format!("{} (stored without behaviour by the test server).", t.kind), "x-kubernetes-preserve-unknown-fields": true});
            }
        },
    };
    json!({"type": "object", "description": format!("{} of the in-repo test API server.", t.kind), "properties": props})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_operations_carry_a_single_gvk_and_field_validation() {
        let reg = Registry::default();
        let doc = gv_document(&reg, "", "v1");
        let item = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"];
        assert_eq!(
            item["patch"]["x-kubernetes-group-version-kind"]["kind"],
            "ConfigMap"
        );
        assert!(
            item["patch"]["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"]["x-kubernetes-group-version-kind"].is_array());
        let idx = index(&reg);
        assert!(
            idx["paths"]["apis/coordination.k8s.io/v1"]["serverRelativeURL"]
                .as_str()
                .unwrap()
                .starts_with("/openapi/v3/apis/coordination.k8s.io/v1?hash=")
        );
    }
}

/// Protobuf encoding helpers for the OpenAPI v2 document (gnostic `openapi.v2.Document`).
mod pb {
    pub fn varint(buf: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        buf.push(v as u8);
    }

    pub fn bytes(buf: &mut Vec<u8>, field: u64, data: &[u8]) {
        varint(buf, (field << 3) | 2);
        varint(buf, data.len() as u64);
        buf.extend_from_slice(data);
    }

    pub fn string(buf: &mut Vec<u8>, field: u64, s: &str) {
        bytes(buf, field, s.as_bytes());
    }
}

/// A minimal OpenAPI v2 document as protobuf (`/openapi/v2`), for kubectl versions that still
/// read it (1.27 fetches it before every apply): one PATCH operation per kind with its
/// `x-kubernetes-group-version-kind` and the `fieldValidation` query parameter, no definitions
/// (so clients fall back to their built-in types or JSON merge patch).
pub fn v2_protobuf(reg: &Registry) -> Vec<u8> {
    let mut paths = Vec::new();
    for t in reg.all() {
        for version in &t.versions {
            let base = format!("/{}", gv_path(&t.group, version));
            let item_path = if t.namespaced {
                format!("{base}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
            } else {
                format!("{base}/{}/{{name}}", t.plural)
            };
            let mut op = Vec::new();
            pb::string(&mut op, 5, &format!("patch{}", t.kind));
            for name in ["dryRun", "fieldManager", "fieldValidation", "force"] {
                let mut query = Vec::new();
                pb::string(&mut query, 2, "query");
                pb::string(&mut query, 4, name);
                pb::string(&mut query, 6, "string");
                let mut non_body = Vec::new();
                pb::bytes(&mut non_body, 3, &query);
                let mut parameter = Vec::new();
                pb::bytes(&mut parameter, 2, &non_body);
                let mut item = Vec::new();
                pb::bytes(&mut item, 1, &parameter);
                pb::bytes(&mut op, 8, &item);
            }
            let mut response = Vec::new();
            pb::string(&mut response, 1, "OK");
            let mut response_value = Vec::new();
            pb::bytes(&mut response_value, 1, &response);
            let mut named_response = Vec::new();
            pb::string(&mut named_response, 1, "200");
            pb::bytes(&mut named_response, 2, &response_value);
            let mut responses = Vec::new();
            pb::bytes(&mut responses, 1, &named_response);
            pb::bytes(&mut op, 9, &responses);
            let gvk_yaml = serde_yaml::to_string(
                &json!({"group": t.group, "kind": t.kind, "version": version}),
            )
            .unwrap_or_default();
            let mut any = Vec::new();
            pb::string(&mut any, 2, &gvk_yaml);
            let mut ext = Vec::new();
            pb::string(&mut ext, 1, "x-kubernetes-group-version-kind");
            pb::bytes(&mut ext, 2, &any);
            pb::bytes(&mut op, 13, &ext);
            let mut path_item = Vec::new();
            pb::bytes(&mut path_item, 8, &op);
            let mut named = Vec::new();
            pb::string(&mut named, 1, &item_path);
            pb::bytes(&mut named, 2, &path_item);
            pb::bytes(&mut paths, 2, &named);
        }
    }
    let mut info = Vec::new();
    pb::string(&mut info, 1, "Kubernetes");
    pb::string(&mut info, 2, crate::SERVER_GIT_VERSION);
    let mut doc = Vec::new();
    pb::string(&mut doc, 1, "2.0");
    pb::bytes(&mut doc, 2, &info);
    pb::bytes(&mut doc, 8, &paths);
    doc
}
