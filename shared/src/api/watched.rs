//! Projections that watches decode objects into: only the fields a cache keeps, the rest of the
//! object (managedFields above all, the `last-applied-configuration` annotation, labels)
//! skipped unread by the decoder instead of decoded and then dropped.
//!
//! Why: the API server sends every object with its `managedFields`, whose `fieldsV1` trees
//! decode into maps of maps; a list page of 500 Bookings decoded whole holds several MiB that
//! the cache throws away, and a relist holds such a page per watch at once. A projection holds
//! its page at the size of what is cached.
//!
//! A projection is its kind's API resource for kube's watcher
//! ([`watched_resource!`](crate::watched_resource)): the
//! same group, version, kind and plural, so it lists and watches the kind's endpoint.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::Deserialize;

/// Reads an object's metadata keeping only what the watches' caches read: name, namespace,
/// uid, resourceVersion (which a watch resumes from), generation, creationTimestamp,
/// deletionTimestamp and deletionGracePeriodSeconds. Every other field (managedFields,
/// annotations, labels, owner references, finalizers) is skipped unread.
pub fn watched_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
        generation: Option<i64>,
        creation_timestamp: Option<Time>,
        deletion_timestamp: Option<Time>,
        deletion_grace_period_seconds: Option<i64>,
    }
    let m = Meta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        generation: m.generation,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        ..ObjectMeta::default()
    })
}

/// Implements `kube::Resource` for projection `$projection` (a struct with a `metadata:
/// ObjectMeta` field) as the API resource of kind `$kind`: same group, version, kind, plural and
/// scope, so that `Api<$projection>` lists and watches `$kind`'s endpoint.
#[macro_export]
macro_rules! watched_resource {
    ($projection:ty, $kind:ty) => {
        impl ::kube::Resource for $projection {
            type DynamicType = ();
            type Scope = <$kind as ::kube::Resource>::Scope;

            fn kind(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::kind(dt)
            }
            fn group(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::group(dt)
            }
            fn version(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::version(dt)
            }
            fn api_version(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::api_version(dt)
            }
            fn plural(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::plural(dt)
            }
            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Object {
        #[serde(deserialize_with = "watched_meta")]
        metadata: ObjectMeta,
    }

    #[test]
    fn only_the_cached_metadata_is_read() {
        let sent = serde_json::json!({"metadata": {
            "name": "b", "namespace": "team", "uid": "0a1b2c3d-1111-4222-8333-0123456789ab",
            "resourceVersion": "17", "generation": 2,
            "creationTimestamp": "2026-12-03T10:00:00Z",
            "deletionTimestamp": "2026-12-03T11:00:00Z", "deletionGracePeriodSeconds": 0,
            "labels": {"app": "etl"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "finalizers": ["x"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "K", "name": "n", "uid": "u"}],
            "managedFields": [{"manager": "m", "operation": "Update",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {".": {}, "f:x": {}}}}],
        }});
        let meta = serde_json::from_value::<Object>(sent).unwrap().metadata;
        let kept = ObjectMeta {
            name: Some("b".into()),
            namespace: Some("team".into()),
            uid: Some("0a1b2c3d-1111-4222-8333-0123456789ab".into()),
            resource_version: Some("17".into()),
            generation: Some(2),
            creation_timestamp: meta.creation_timestamp.clone(),
            deletion_timestamp: meta.deletion_timestamp.clone(),
            deletion_grace_period_seconds: Some(0),
            ..ObjectMeta::default()
        };
        assert_eq!(meta, kept);
        assert!(meta.creation_timestamp.is_some() && meta.deletion_timestamp.is_some());

        // A field of the wrong type is an error, named by serde, as in a whole ObjectMeta.
        let bad = serde_json::json!({"metadata": {"name": 3}});
        assert!(serde_json::from_value::<Object>(bad).is_err());
    }
}
