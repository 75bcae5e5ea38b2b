//! The consistent reads that confirm planned stops, shared by the stops of one namespace.
//!
//! Before a group is stopped, its Resource's bookings are read from the API server (see
//! `reconcile::resource::safety::stop_is_safe`): the Booking cache may lag the store, and a
//! stop cannot be taken back. The API server answers a read filtered on `spec.resource_name`
//! by scanning the namespace's bookings, so one read per stop does not scale: 1,000 groups
//! ending together over 100,000 bookings made 1,000 scans, which saturated it (BENCHMARKS.md,
//! 2026-12-03). Here the stops of a namespace wait together. One task per namespace reads for
//! all the stops waiting when its read begins (so each answer was read after its stop asked),
//! then for those that came meanwhile, until none waits: at most one read per namespace is in
//! flight, and a wave of stops costs two reads, not one per Resource. A Resource waiting alone
//! is read filtered on the server; several, with one paginated list of the namespace. Across
//! namespaces, a bound keeps the reads in flight few.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use booking_shared::api::{Booking, RESOURCE_FIELD};
use booking_shared::arbitration::BookingView;
use kube::api::{Api, ListParams};
use tokio::sync::{Semaphore, oneshot};

/// Bookings per page of the namespace list.
const PAGE: u32 = 500;

/// The bookings of one Resource, as read for a waiting stop; `None` when the read failed.
type Answer = Option<Vec<BookingView>>;

/// The stops waiting in one namespace, by Resource name.
type Waiting = BTreeMap<String, Vec<oneshot::Sender<Answer>>>;

/// The confirming reads of planned stops (see the module's documentation).
pub struct StopReads {
    inner: Arc<Inner>,
}

struct Inner {
    /// Reads in flight at once, across namespaces.
    turns: Semaphore,
    /// The stops waiting, per namespace; a namespace is present while its reading task runs.
    waiting: Mutex<HashMap<String, Waiting>>,
}

impl Inner {
    fn waiting(&self) -> MutexGuard<'_, HashMap<String, Waiting>> {
        // Only inserts and removals of whole entries: a poisoned lock is still consistent.
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl StopReads {
    /// At most `bound` reads in flight at once (at least one).
    pub fn new(bound: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                turns: Semaphore::new(bound.max(1)),
                waiting: Mutex::default(),
            }),
        }
    }

    /// The bookings of Resource `resource` in namespace `ns`, read from the API server by a
    /// read that began after this call; `None` when that read failed.
    pub async fn bookings_of(&self, client: &kube::Client, ns: &str, resource: &str) -> Answer {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut all = self.inner.waiting();
            let start = !all.contains_key(ns);
            all.entry(ns.to_owned())
                .or_default()
                .entry(resource.to_owned())
                .or_default()
                .push(tx);
            start
        };
        if start {
            tokio::spawn(read_namespace(
                self.inner.clone(),
                client.clone(),
                ns.to_owned(),
            ));
        }
        // A reading task that ended without answering (the runtime shutting down) is a failed
        // read: the stop waits.
        rx.await.ok().flatten()
    }
}

/// Removes its namespace's entry when the reading task ends early (dropped with the runtime,
/// or a panic): the stops still waiting get no answer (their senders are dropped), and the
/// next stop starts a new task. A task that ends because no stop waits removes the entry itself,
/// under the same lock as it found none (a new entry may follow at once, another task's).
struct Reading {
    inner: Arc<Inner>,
    ns: String,
    ended: bool,
}

impl Drop for Reading {
    fn drop(&mut self) {
        if !self.ended {
            self.inner.waiting().remove(&self.ns);
        }
    }
}

/// The reading task of namespace `ns`: reads for every stop waiting, again for those that came
/// during the read, and ends when none waits.
async fn read_namespace(inner: Arc<Inner>, client: kube::Client, ns: String) {
    let mut reading = Reading {
        inner,
        ns,
        ended: false,
    };
    let api = Api::<Booking>::namespaced(client, &reading.ns);
    loop {
        let batch = {
            let mut all = reading.inner.waiting();
            let batch = all
                .get_mut(&reading.ns)
                .map(std::mem::take)
                .unwrap_or_default();
            if batch.is_empty() {
                all.remove(&reading.ns);
                drop(all);
                reading.ended = true;
                return;
            }
            batch
        };
        let answers = {
            // Never closed: a closed semaphore would only lift the bound.
            let _turn = reading.inner.turns.acquire().await.ok();
            read(&api, &batch).await
        };
        if let Err(e) = &answers {
            tracing::debug!(namespace = %reading.ns, resources = batch.len(), error = %e,
                "stops wait: their bookings could not be read");
        }
        for (resource, senders) in batch {
            let answer = answers
                .as_ref()
                .ok()
                .map(|by| by.get(&resource).cloned().unwrap_or_default());
            for tx in senders {
                // A stop no longer waiting (its reconcile ended) needs no answer.
                let _ = tx.send(answer.clone());
            }
        }
    }
}

/// The bookings of the Resources of `batch`, by Resource name, in one consistent read: of the
/// one Resource's bookings, filtered on the server by the CRD's selectable field
/// `spec.resource_name`, or of the namespace's (several Resources, or a CRD installed without
/// that field by an older manifest).
async fn read(
    api: &Api<Booking>,
    batch: &Waiting,
) -> kube::Result<HashMap<String, Vec<BookingView>>> {
    let mut keys = batch.keys();
    let (Some(resource), None) = (keys.next(), keys.next()) else {
        return list_namespace(api, batch).await;
    };
    let selected = ListParams::default().fields(&format!("{RESOURCE_FIELD}={resource}"));
    match api.list(&selected).await {
        Ok(list) => {
            let mut by = HashMap::new();
            keep(&mut by, batch, &list.items);
            Ok(by)
        }
        Err(kube::Error::Api(e)) if e.code == 400 => {
            tracing::debug!(error = %e,
                "the Booking CRD has no selectable spec.resource_name; listing the namespace");
            list_namespace(api, batch).await
        }
        Err(e) => Err(e),
    }
}

/// The whole namespace, page by page (the pages after the first are of the first's snapshot),
/// keeping only the bookings of `batch`'s Resources.
async fn list_namespace(
    api: &Api<Booking>,
    batch: &Waiting,
) -> kube::Result<HashMap<String, Vec<BookingView>>> {
    let mut by = HashMap::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        keep(&mut by, batch, &page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(by),
        }
    }
}

/// Adds the views of `items` whose Resource is one of `batch`'s to `by`.
fn keep(by: &mut HashMap<String, Vec<BookingView>>, batch: &Waiting, items: &[Booking]) {
    for b in items {
        if batch.contains_key(&b.spec.resource_name) {
            by.entry(b.spec.resource_name.clone())
                .or_default()
                .push(BookingView::of(b));
        }
    }
}
