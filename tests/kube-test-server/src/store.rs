//! The in-memory object store: objects by storage key, one global increasing resourceVersion, and
//! a bounded event history that watches replay from (older versions answer 410 Gone).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::registry::{Conversion, Registry, ResourceType};

/// Key of a stored object: storage group, plural, namespace (empty for cluster-scoped), name.
pub type ObjectKey = (String, String, String, String);

/// A change to one stored object.
#[derive(Clone, Debug)]
pub struct StoredEvent {
    /// The resourceVersion the change produced.
    pub rv: u64,
    /// Storage group and plural.
    pub storage: (String, String),
    /// Namespace of the object (empty for cluster-scoped).
    pub namespace: String,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    /// The object in storage form.
    pub object: Value,
    /// The object before a MODIFIED change (for selector transitions in watches).
    pub prev: Option<Value>,
}

/// The state behind the server's single lock.
pub struct State {
    /// The latest resourceVersion handed out.
    pub rv: u64,
    /// Served types.
    pub registry: Registry,
    /// Objects in storage form.
    pub objects: BTreeMap<ObjectKey, Value>,
    /// Recent events, oldest first.
    pub history: VecDeque<Arc<StoredEvent>>,
    /// How many events the history keeps.
    pub history_limit: usize,
    /// Watches from a resourceVersion older than this answer 410 Gone.
    pub oldest_watchable: u64,
    /// Live event feed for watches (sent while the lock is held, so order is total).
    pub tx: broadcast::Sender<Arc<StoredEvent>>,
}

impl State {
    /// An empty store.
    pub fn new(history_limit: usize) -> Self {
        let (tx, _) = broadcast::channel(8192);
        State {
            rv: 1,
            registry: Registry::default(),
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit,
            oldest_watchable: 1,
            tx,
        }
    }

    /// The key of an object of type `t`.
    pub fn key(t: &ResourceType, namespace: &str, name: &str) -> ObjectKey {
        (
            t.storage.0.clone(),
            t.storage.1.clone(),
            if t.namespaced {
                namespace.to_string()
            } else {
                String::new()
            },
            name.to_string(),
        )
    }

    /// Store `obj` (storage form), giving it a new resourceVersion; returns the stored object.
    pub fn put(&mut self, key: ObjectKey, mut obj: Value, created: bool) -> Value {
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let prev = self.objects.insert(key.clone(), obj.clone());
        self.record(
            key,
            if created { "ADDED" } else { "MODIFIED" },
            obj.clone(),
            prev,
        );
        obj
    }

    /// Remove an object; the DELETED event carries a new resourceVersion.
    pub fn remove(&mut self, key: &ObjectKey) -> Option<Value> {
        let mut obj = self.objects.remove(key)?;
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.record(key.clone(), "DELETED", obj.clone(), None);
        Some(obj)
    }

    fn record(&mut self, key: ObjectKey, kind: &'static str, object: Value, prev: Option<Value>) {
        let ev = Arc::new(StoredEvent {
            rv: self.rv,
            storage: (key.0, key.1),
            namespace: key.2,
            kind,
            object,
            prev,
        });
        self.history.push_back(ev.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.oldest_watchable = old.rv;
            }
        }
        let _ = self.tx.send(ev);
    }

    /// Forget all history: every watch from an existing resourceVersion then answers 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.oldest_watchable = self.rv + 1;
    }

    /// Objects of a storage key, optionally in one namespace, in key order.
    pub fn list(&self, storage: &(String, String), namespace: Option<&str>) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((g, p, ns, _), _)| {
                *g == storage.0 && *p == storage.1 && namespace.is_none_or(|n| n == ns)
            })
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The stored object at `key`.
    pub fn get(&self, key: &ObjectKey) -> Option<&Value> {
        self.objects.get(key)
    }
}

/// Storage form → the form served as `t` in `version`.
pub fn to_served(t: &ResourceType, version: &str, obj: &Value) -> Value {
    let mut out = match t.conversion {
        Conversion::ApiVersionOnly => obj.clone(),
        Conversion::EventsV1 => core_event_to_v1(obj),
    };
    if let Some(m) = out.as_object_mut() {
        m.insert("apiVersion".into(), json!(t.api_version(version)));
        m.insert("kind".into(), json!(t.kind));
    }
    out
}

/// The served form → storage form.
pub fn to_storage(t: &ResourceType, obj: &Value) -> Value {
    let mut out = match t.conversion {
        Conversion::ApiVersionOnly => obj.clone(),
        Conversion::EventsV1 => v1_event_to_core(obj),
    };
    if let Some(m) = out.as_object_mut() {
        let (api_version, kind) = match t.conversion {
            Conversion::EventsV1 => ("v1".to_string(), "Event".to_string()),
            Conversion::ApiVersionOnly => (t.api_version(t.storage_version()), t.kind.clone()),
        };
        m.insert("apiVersion".into(), json!(api_version));
        m.insert("kind".into(), json!(kind));
    }
    out
}

const EVENT_RENAMES: [(&str, &str); 6] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(obj: &Value, pairs: &[(&str, &str)], forward: bool) -> Value {
    let mut out = obj.clone();
    if let (Some(m), Some(src)) = (out.as_object_mut(), obj.as_object()) {
        for (a, b) in pairs {
            let (from, to) = if forward { (a, b) } else { (b, a) };
            m.remove(*from);
            if let Some(v) = src.get(*from) {
                m.insert(to.to_string(), v.clone());
            }
        }
    }
    out
}

fn core_event_to_v1(obj: &Value) -> Value {
    let mut v = rename(obj, &EVENT_RENAMES, true);
    if let Some(m) = v.as_object_mut()
        && let Some(rc) = m.remove("reportingComponent")
    {
        m.insert("reportingController".into(), rc);
    }
    v
}

fn v1_event_to_core(obj: &Value) -> Value {
    let mut v = rename(obj, &EVENT_RENAMES, false);
    if let Some(m) = v.as_object_mut()
        && let Some(rc) = m.remove("reportingController")
    {
        m.insert("reportingComponent".into(), rc);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::builtins;

    #[test]
    fn versions_and_history() {
        let mut s = State::new(2);
        let t = builtins()
            .into_iter()
            .find(|t| t.plural == "configmaps")
            .unwrap();
        let mut rx = s.tx.subscribe();
        let k = State::key(&t, "ns", "a");
        let a = s.put(k.clone(), json!({"metadata": {"name": "a"}}), true);
        assert_eq!(a["metadata"]["resourceVersion"], "2");
        s.put(k.clone(), json!({"metadata": {"name": "a"}}), false);
        s.remove(&k).unwrap();
        assert_eq!(s.rv, 4);
        assert_eq!(s.history.len(), 2);
        assert_eq!(s.oldest_watchable, 2);
        assert_eq!(rx.try_recv().unwrap().kind, "ADDED");
        s.compact();
        assert_eq!(s.oldest_watchable, 5);
    }

    #[test]
    fn events_convert_between_versions() {
        let t = builtins()
            .into_iter()
            .find(|t| t.group == "events.k8s.io")
            .unwrap();
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "regarding": {"name": "x"},
            "note": "hello", "reportingController": "c", "reason": "R"});
        let core = to_storage(&t, &v1);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "x");
        assert_eq!(core["message"], "hello");
        assert_eq!(core["reportingComponent"], "c");
        let back = to_served(&t, "v1", &core);
        assert_eq!(back, v1);
    }
}
