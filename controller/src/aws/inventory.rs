//! Inventories: one per (type, region), shared by every Resource and ResourceMonitor.
//!
//! A refresh is a paginated listing — EC2 DescribeInstances filtered on the managed tag key
//! (both key forms in one `tag-key` filter), RDS DescribeDBInstances and DescribeDBClusters
//! with tags from `TagList` (neither filters on tags) —
//! so the AWS calls per refresh are the number of pages, independent of how many Resources
//! exist. Reconcilers only read snapshots. A targeted refresh of one group (one filtered describe
//! for EC2) makes a freshly tagged group visible at once.
//!
//! A listing that fails part-way leaves the previous snapshot in place and marks it not
//! `complete`, so nothing (e.g. pruning) acts on a listing that was cut short.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, broadcast, watch};

use super::{AwsResult, Ec2Api, Ec2Filter, MAX_FILTER_VALUES, RdsApi, paginate};
use crate::metrics::Metrics;
use crate::model::{InventoryKey, Member, ProviderType};
use crate::tags::{Key, TagKeys};

/// The last observation of one (type, region).
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Managed members with their group tag.
    members: Vec<Member>,
    /// The positions in `members` of each group's members (see [`Snapshot::group`]), made
    /// with the members: reading one group does not scan the whole region.
    by_group: HashMap<String, Vec<usize>>,
    /// When the listing that produced `members` began.
    pub observed_at: DateTime<Utc>,
    /// Whether the last full listing completed (every page read).
    pub complete: bool,
    /// The error of the last full listing, when it failed.
    pub error: Option<String>,
    /// Groups refreshed on their own since the last full listing, and when.
    pub group_observed_at: BTreeMap<String, DateTime<Utc>>,
}

impl Snapshot {
    fn new(members: Vec<Member>, keys: &TagKeys, observed_at: DateTime<Utc>) -> Self {
        Self {
            by_group: by_group(&members, keys),
            members,
            observed_at,
            complete: true,
            error: None,
            group_observed_at: BTreeMap::new(),
        }
    }

    fn set_members(&mut self, members: Vec<Member>, keys: &TagKeys) {
        self.by_group = by_group(&members, keys);
        self.members = members;
    }

    /// Every managed member of the (type, region).
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The members of one group: those tagged with it, and the DB instances of its Aurora DB
    /// clusters (tagged or not: they are counted with their cluster, never acted on alone).
    pub fn group(&self, tag: &str) -> Vec<Member> {
        self.by_group
            .get(tag)
            .map(|at| at.iter().map(|&i| self.members[i].clone()).collect())
            .unwrap_or_default()
    }

    /// When the members of group `tag` were last observed.
    pub fn observed_at(&self, tag: &str) -> DateTime<Utc> {
        self.group_observed_at
            .get(tag)
            .copied()
            .unwrap_or(self.observed_at)
            .max(self.observed_at)
    }

    /// The group tags present on members that are not gone (terminated or being deleted).
    pub fn groups(&self, keys: &TagKeys) -> BTreeSet<String> {
        self.members
            .iter()
            .filter(|m| {
                !ProviderType::Ec2.is_gone(&m.state) && !ProviderType::Rds.is_gone(&m.state)
            })
            .filter_map(|m| m.application(keys).map(str::to_owned))
            .collect()
    }
}

/// The groups of each tagged Aurora DB cluster of `members`, by cluster identifier.
fn cluster_groups<'a>(members: &'a [Member], keys: &TagKeys) -> HashMap<&'a str, Vec<&'a str>> {
    let mut clusters: HashMap<&str, Vec<&str>> = HashMap::new();
    for m in members.iter().filter(|m| m.is_cluster) {
        if let Some(tag) = m.application(keys) {
            clusters.entry(m.id.as_str()).or_default().push(tag);
        }
    }
    clusters
}

/// The groups member `m` counts in: its own tag's, and for a DB instance of a DB cluster, its
/// cluster's (`clusters`, from [`cluster_groups`] over the same listing). Sorted, once each.
fn groups_of<'a>(
    m: &'a Member,
    keys: &TagKeys,
    clusters: &HashMap<&'a str, Vec<&'a str>>,
) -> Vec<&'a str> {
    let mut groups: Vec<&str> = m.application(keys).into_iter().collect();
    if m.in_cluster()
        && let Some(of_cluster) = m.db_cluster.as_deref().and_then(|c| clusters.get(c))
    {
        groups.extend(of_cluster.iter().copied());
    }
    groups.sort_unstable();
    groups.dedup();
    groups
}

/// The positions of each group's members in `members`, in listing order.
fn by_group(members: &[Member], keys: &TagKeys) -> HashMap<String, Vec<usize>> {
    let clusters = cluster_groups(members, keys);
    let mut by_group: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, m) in members.iter().enumerate() {
        for tag in groups_of(m, keys, &clusters) {
            by_group.entry(tag.to_owned()).or_default().push(i);
        }
    }
    by_group
}

/// The groups whose members differ between listings `old` and `new`: a member added, gone or
/// changed (its state, its tags) changes the groups it counted in before and after; a DB
/// cluster's change also changes the group of its DB instances. Pure.
pub fn changed_groups(old: &[Member], new: &[Member], keys: &TagKeys) -> BTreeSet<String> {
    let ids = |members: &[Member]| -> HashMap<(bool, String), usize> {
        members
            .iter()
            .enumerate()
            .map(|(i, m)| ((m.is_cluster, m.id.clone()), i))
            .collect()
    };
    let (old_ids, new_ids) = (ids(old), ids(new));
    let (old_clusters, new_clusters) = (cluster_groups(old, keys), cluster_groups(new, keys));
    let mut changed = BTreeSet::new();
    let mut differ = |from: &[Member],
                      clusters: &HashMap<&str, Vec<&str>>,
                      other: &[Member],
                      other_ids: &HashMap<(bool, String), usize>| {
        for m in from {
            let same = other_ids
                .get(&(m.is_cluster, m.id.clone()))
                .is_some_and(|&i| &other[i] == m);
            if !same {
                changed.extend(groups_of(m, keys, clusters).into_iter().map(str::to_owned));
            }
        }
    };
    differ(old, &old_clusters, new, &new_ids);
    differ(new, &new_clusters, old, &old_ids);
    changed
}

/// What a listing changed in one inventory: the Resources of those groups are reconciled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The inventory.
    pub key: InventoryKey,
    /// The groups whose members changed; `None` when every group of the inventory may have
    /// (its first listing, a listing failing or recovering).
    pub groups: Option<BTreeSet<String>>,
}

impl Change {
    /// Whether the change concerns `group` (of a Resource, see [`booking_shared::claims::group_of`]).
    pub fn touches(&self, group: &booking_shared::claims::Group<'_>) -> bool {
        group.kind == self.key.kind
            && group.region == Some(self.key.region.as_str())
            && self.groups.as_ref().is_none_or(|g| g.contains(group.tag))
    }
}

/// How many changes a slow subscriber may fall behind before it is told it missed some (and
/// then reconciles every Resource).
const CHANGES_BACKLOG: usize = 256;

/// The shared inventories.
pub struct Inventory {
    ec2: Arc<dyn Ec2Api>,
    rds: Arc<dyn RdsApi>,
    keys: TagKeys,
    metrics: Metrics,
    /// Shared with readers: a reconcile takes an `Arc`, never a copy of every member.
    snapshots: RwLock<HashMap<InventoryKey, Arc<Snapshot>>>,
    /// Groups waiting for a targeted refresh, per inventory.
    pending_groups: Mutex<HashMap<InventoryKey, BTreeSet<String>>>,
    /// One targeted refresh at a time per inventory: the groups asked for meanwhile join the
    /// next one (one DescribeInstances for up to [`MAX_FILTER_VALUES`] groups).
    group_locks: Mutex<HashMap<InventoryKey, Arc<tokio::sync::Mutex<()>>>>,
    wanted: Mutex<BTreeSet<InventoryKey>>,
    refresh_now: Notify,
    changed: broadcast::Sender<Arc<Change>>,
    scanned: watch::Sender<u64>,
    first_refresh: tokio::sync::Mutex<()>,
}

impl Inventory {
    /// Inventories over the given APIs.
    pub fn new(
        ec2: Arc<dyn Ec2Api>,
        rds: Arc<dyn RdsApi>,
        keys: TagKeys,
        metrics: Metrics,
    ) -> Self {
        Self {
            ec2,
            rds,
            keys,
            metrics,
            snapshots: RwLock::default(),
            pending_groups: Mutex::default(),
            group_locks: Mutex::default(),
            wanted: Mutex::default(),
            refresh_now: Notify::new(),
            changed: broadcast::channel(CHANGES_BACKLOG).0,
            scanned: watch::channel(0).0,
            first_refresh: tokio::sync::Mutex::new(()),
        }
    }

    /// The tag keys.
    pub fn keys(&self) -> &TagKeys {
        &self.keys
    }

    /// Registers interest in `key`; returns whether it is new (then a refresh is requested).
    pub fn want(&self, key: &InventoryKey) -> bool {
        let new = self
            .wanted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone());
        if new {
            self.refresh_now.notify_one();
        }
        new
    }

    /// The current snapshot of `key`, if one was ever taken.
    pub fn snapshot(&self, key: &InventoryKey) -> Option<Arc<Snapshot>> {
        self.snapshots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    /// Applies tags this controller just wrote (`set`) or removed (`removed`) on member `id` to
    /// the snapshot of `key`, so that the reconciles before the next listing do not write them
    /// again. Nothing is published: the writer's own reconcile already knows.
    pub fn amend_tags(
        &self,
        key: &InventoryKey,
        id: &str,
        set: &[(String, String)],
        removed: &[String],
    ) {
        let mut snaps = self.snapshots.write().unwrap_or_else(|p| p.into_inner());
        let Some(snap) = snaps.get_mut(key) else {
            return;
        };
        if !snap.members.iter().any(|m| m.id == id) {
            return;
        }
        let snap = Arc::make_mut(snap);
        let mut members = std::mem::take(&mut snap.members);
        for m in members.iter_mut().filter(|m| m.id == id) {
            for (k, v) in set {
                m.tags.insert(k.clone(), v.clone());
            }
            for k in removed {
                m.tags.remove(k);
            }
        }
        snap.set_members(members, &self.keys);
    }

    /// Registers `key` and makes sure a snapshot of it exists, refreshing once if none does.
    /// Concurrent callers (many Resources of a new region at start-up) share that one refresh.
    pub async fn ensure(&self, key: &InventoryKey) -> AwsResult<()> {
        self.want(key);
        if self.snapshot(key).is_some() {
            return Ok(());
        }
        let _one_at_a_time = self.first_refresh.lock().await;
        if self.snapshot(key).is_some() {
            return Ok(());
        }
        self.refresh(key).await
    }

    /// Asks the refresh loop to refresh every wanted inventory now (after a start or stop).
    pub fn request_refresh(&self) {
        self.refresh_now.notify_one();
    }

    /// The changes of every later listing that changed a snapshot. A receiver that falls more
    /// than [`CHANGES_BACKLOG`] changes behind is told it lagged.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.changed.subscribe()
    }

    /// A receiver that changes after every full refresh, changed or not (monitors report their
    /// last scan time).
    pub fn subscribe_scans(&self) -> watch::Receiver<u64> {
        self.scanned.subscribe()
    }

    fn publish(&self, key: &InventoryKey, groups: Option<BTreeSet<String>>) {
        if groups.as_ref().is_some_and(BTreeSet::is_empty) {
            return;
        }
        // No subscriber (tests, start-up) is not an error.
        let _ = self.changed.send(Arc::new(Change {
            key: key.clone(),
            groups,
        }));
    }

    async fn list_all(
        &self,
        key: &InventoryKey,
        filter: Option<&Ec2Filter>,
    ) -> AwsResult<Vec<Member>> {
        match key.kind {
            ProviderType::Ec2 => {
                let all = Ec2Filter::TagKeys(self.keys.read_forms(Key::Managed));
                let filter = filter.unwrap_or(&all);
                let pages =
                    paginate(|token| self.ec2.describe_instances(&key.region, filter, token));
                Ok(pages
                    .await?
                    .into_iter()
                    .filter(|m| self.keys.is_managed(&m.tags))
                    .collect())
            }
            ProviderType::Rds => self.list_rds(&key.region).await,
        }
    }

    /// Every managed DB instance and Aurora DB cluster of `region`, and the (possibly untagged)
    /// DB instances of the managed clusters, which count as their cluster's members.
    async fn list_rds(&self, region: &str) -> AwsResult<Vec<Member>> {
        let instances = paginate(|m| self.rds.describe_db_instances(region, m)).await?;
        let clusters: Vec<Member> = paginate(|m| self.rds.describe_db_clusters(region, m))
            .await?
            .into_iter()
            .filter(|c| self.keys.is_managed(&c.tags))
            .collect();
        let managed_clusters: BTreeSet<&str> = clusters.iter().map(|c| c.id.as_str()).collect();
        let mut out: Vec<Member> = instances
            .into_iter()
            .filter(|m| {
                self.keys.is_managed(&m.tags)
                    || m.db_cluster
                        .as_deref()
                        .is_some_and(|c| managed_clusters.contains(c))
            })
            .collect();
        out.extend(clusters);
        Ok(out)
    }

    /// A full, paginated refresh of `key`. On failure the previous members stay, marked
    /// incomplete, and the error is returned.
    pub async fn refresh(&self, key: &InventoryKey) -> AwsResult<()> {
        let began = Utc::now();
        let timer = Instant::now();
        let result = self.list_all(key, None).await;
        self.metrics.refresh_took(
            key.kind.as_str(),
            &key.region,
            timer.elapsed().as_secs_f64(),
        );
        // What changed: `None` nothing, `Some(None)` possibly every group.
        let (changed, outcome) = {
            let mut snaps = self.snapshots.write().unwrap_or_else(|p| p.into_inner());
            match result {
                Ok(members) => {
                    let changed = match snaps.get(key) {
                        Some(old) if old.complete => {
                            Some(Some(changed_groups(&old.members, &members, &self.keys)))
                        }
                        _ => Some(None),
                    };
                    let fresh = Snapshot::new(members, &self.keys, began);
                    snaps.insert(key.clone(), Arc::new(fresh));
                    (changed, Ok(()))
                }
                Err(e) => {
                    let snap = Arc::make_mut(snaps.entry(key.clone()).or_insert_with(|| {
                        Arc::new(Snapshot {
                            complete: false,
                            ..Snapshot::new(Vec::new(), &self.keys, began)
                        })
                    }));
                    let changed = (snap.complete || snap.error.is_none()).then_some(None);
                    snap.complete = false;
                    snap.error = Some(e.to_string());
                    (changed, Err(e))
                }
            }
        };
        if let Some(groups) = changed {
            self.publish(key, groups);
        }
        self.scanned.send_modify(|n| *n = n.wrapping_add(1));
        outcome
    }

    /// A targeted refresh of one group: for EC2 one DescribeInstances filtered on the tag value;
    /// for RDS (whose listing cannot filter on tags) a full refresh of the region.
    ///
    /// Concurrent callers share calls: one targeted refresh runs at a time per inventory, and
    /// the groups asked for while it runs are refreshed together by the next one (up to
    /// [`MAX_FILTER_VALUES`] per call). A caller whose group was observed by a listing that
    /// began after it asked returns at once. So 1,000 Resources created together cost a
    /// handful of calls, not 1,000.
    pub async fn refresh_group(&self, key: &InventoryKey, tag: &str) -> AwsResult<()> {
        if key.kind == ProviderType::Rds || self.snapshot(key).is_none() {
            return self.refresh(key).await;
        }
        let asked = Utc::now();
        self.pending_groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.clone())
            .or_default()
            .insert(tag.to_owned());
        let lock = self
            .group_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        let _one_at_a_time = lock.lock().await;
        if self
            .snapshot(key)
            .is_some_and(|s| s.observed_at(tag) >= asked)
        {
            return Ok(());
        }
        // This caller's group, then as many waiting ones as one call can filter on. A group
        // taken by a call that failed is asked for again by its own caller.
        let batch: BTreeSet<String> = {
            let mut pending = self
                .pending_groups
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let waiting = pending.entry(key.clone()).or_default();
            waiting.remove(tag);
            let mut batch = BTreeSet::from([tag.to_owned()]);
            while batch.len() < MAX_FILTER_VALUES {
                let Some(next) = waiting.pop_first() else {
                    break;
                };
                batch.insert(next);
            }
            batch
        };
        let began = Utc::now();
        let filter = Ec2Filter::TagValues(batch.iter().cloned().collect());
        let in_batch = |m: &Member| m.application(&self.keys).is_some_and(|a| batch.contains(a));
        let fresh: Vec<Member> = self
            .list_all(key, Some(&filter))
            .await?
            .into_iter()
            .filter(|m| in_batch(m))
            .collect();
        let changed = {
            let mut snaps = self.snapshots.write().unwrap_or_else(|p| p.into_inner());
            let Some(snap) = snaps.get_mut(key) else {
                return Ok(());
            };
            let snap = Arc::make_mut(snap);
            let (batch_before, mut members): (Vec<Member>, Vec<Member>) =
                std::mem::take(&mut snap.members)
                    .into_iter()
                    .partition(|m| in_batch(m));
            let changed = changed_groups(&batch_before, &fresh, &self.keys);
            members.extend(fresh);
            snap.set_members(members, &self.keys);
            for tag in &batch {
                snap.group_observed_at.insert(tag.clone(), began);
            }
            changed
        };
        self.publish(key, Some(changed));
        Ok(())
    }

    /// Refreshes every wanted inventory every `interval`, and at once when asked. Runs forever.
    pub async fn run(self: Arc<Self>, interval: Duration) {
        loop {
            let keys: Vec<InventoryKey> = self
                .wanted
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned()
                .collect();
            let this = &self;
            let refreshes = keys.iter().map(|k| async move {
                if let Err(e) = this.refresh(k).await {
                    tracing::warn!(kind = %k.kind, region = %k.region, error = %e, "inventory refresh failed; keeping the previous snapshot");
                }
            });
            futures::future::join_all(refreshes).await;
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = self.refresh_now.notified() => {
                    // Coalesce bursts of requests (many groups acting at once).
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use futures::FutureExt;
    use futures::future::BoxFuture;

    use super::*;
    use crate::aws::{AwsError, Page};

    /// EC2 whose listing has `pages` pages; page `fail_at` fails when set.
    struct Pages {
        pages: Vec<Vec<Member>>,
        fail_at: StdMutex<Option<usize>>,
        calls: StdMutex<Vec<Option<String>>>,
    }

    fn m(id: &str, tag: &str) -> Member {
        Member {
            id: id.into(),
            arn: None,
            state: "running".into(),
            state_reason: None,
            tags: [
                ("resource-booking/managed".to_string(), "true".to_string()),
                ("resource-booking/application".to_string(), tag.to_string()),
            ]
            .into(),
            ..Default::default()
        }
    }

    impl Ec2Api for Pages {
        fn describe_instances<'a>(
            &'a self,
            _: &'a str,
            _: &'a Ec2Filter,
            token: Option<String>,
        ) -> BoxFuture<'a, AwsResult<Page>> {
            async move {
                self.calls.lock().unwrap().push(token.clone());
                let i: usize = token.as_deref().map_or(0, |t| t.parse().unwrap());
                if *self.fail_at.lock().unwrap() == Some(i) {
                    return Err(AwsError::new("RequestLimitExceeded", "slow down"));
                }
                let next = (i + 1 < self.pages.len()).then(|| (i + 1).to_string());
                Ok((self.pages[i].clone(), next))
            }
            .boxed()
        }
        fn start_instances<'a>(
            &'a self,
            _: &'a str,
            _: &'a [String],
        ) -> BoxFuture<'a, AwsResult<()>> {
            async { Ok(()) }.boxed()
        }
        fn stop_instances<'a>(
            &'a self,
            _: &'a str,
            _: &'a [String],
            _: bool,
        ) -> BoxFuture<'a, AwsResult<()>> {
            async { Ok(()) }.boxed()
        }
        fn create_tags<'a>(
            &'a self,
            _: &'a str,
            _: &'a [String],
            _: &'a [(String, String)],
        ) -> BoxFuture<'a, AwsResult<()>> {
            async { Ok(()) }.boxed()
        }
        fn delete_tags<'a>(
            &'a self,
            _: &'a str,
            _: &'a [String],
            _: &'a [String],
        ) -> BoxFuture<'a, AwsResult<()>> {
            async { Ok(()) }.boxed()
        }
    }

    /// An EC2 inventory over `pages`, with the key of its region.
    fn ec2_inventory(pages: Vec<Vec<Member>>) -> (Arc<Pages>, Inventory, InventoryKey) {
        let fake = Arc::new(Pages {
            pages,
            fail_at: StdMutex::new(None),
            calls: StdMutex::new(vec![]),
        });
        let inv = Inventory::new(
            fake.clone(),
            Arc::new(crate::aws::test_fakes::NoRds),
            TagKeys::default(),
            Metrics::new(),
        );
        let key = InventoryKey {
            kind: ProviderType::Ec2,
            region: "eu-central-1".into(),
        };
        (fake, inv, key)
    }

    #[tokio::test]
    async fn every_page_is_read_and_a_failed_page_keeps_the_last_complete_listing() {
        let (fake, inv, key) = ec2_inventory(vec![
            vec![m("i-1", "a"), m("i-2", "b")],
            vec![m("i-3", "c")],
            vec![m("i-4", "a")],
        ]);
        inv.refresh(&key).await.unwrap();
        assert_eq!(fake.calls.lock().unwrap().len(), 3, "one call per page");
        let snap = inv.snapshot(&key).unwrap();
        assert!(snap.complete);
        assert_eq!(
            snap.group("a").len(),
            2,
            "members from the first and last page"
        );
        let groups: Vec<String> = snap.groups(inv.keys()).into_iter().collect();
        assert_eq!(groups, vec!["a", "b", "c"]);

        // The listing is cut short on page 2: the previous listing stays, marked incomplete
        // (a monitor must not prune group "c" on its strength).
        *fake.fail_at.lock().unwrap() = Some(1);
        let err = inv.refresh(&key).await.unwrap_err();
        assert_eq!(err.code, "RequestLimitExceeded");
        let snap = inv.snapshot(&key).unwrap();
        assert!(!snap.complete);
        assert!(
            snap.error
                .as_deref()
                .unwrap()
                .contains("RequestLimitExceeded")
        );
        assert!(snap.groups(inv.keys()).contains("c"));
    }

    /// RDS whose DB instances and DB clusters each come in two pages.
    struct RdsPages {
        instances: Vec<Vec<Member>>,
        clusters: Vec<Vec<Member>>,
        calls: StdMutex<Vec<(&'static str, Option<String>)>>,
    }

    impl RdsPages {
        fn page(
            &self,
            op: &'static str,
            pages: &[Vec<Member>],
            token: Option<String>,
        ) -> AwsResult<Page> {
            self.calls.lock().unwrap().push((op, token.clone()));
            let i: usize = token.as_deref().map_or(0, |t| t.parse().unwrap());
            let next = (i + 1 < pages.len()).then(|| (i + 1).to_string());
            Ok((pages[i].clone(), next))
        }
    }

    impl RdsApi for RdsPages {
        fn describe_db_instances<'a>(
            &'a self,
            _: &'a str,
            token: Option<String>,
        ) -> BoxFuture<'a, AwsResult<Page>> {
            async move { self.page("DescribeDBInstances", &self.instances, token) }.boxed()
        }
        fn describe_db_clusters<'a>(
            &'a self,
            _: &'a str,
            token: Option<String>,
        ) -> BoxFuture<'a, AwsResult<Page>> {
            async move { self.page("DescribeDBClusters", &self.clusters, token) }.boxed()
        }
        fn start_db_cluster<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
            async { Ok(()) }.boxed()
        }
        fn stop_db_cluster<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
            async { Ok(()) }.boxed()
        }
        fn start_db_instance<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
            async { Ok(()) }.boxed()
        }
        fn stop_db_instance<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
            async { Ok(()) }.boxed()
        }
        fn add_tags<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: &'a [(String, String)],
        ) -> BoxFuture<'a, AwsResult<()>> {
            async { Ok(()) }.boxed()
        }
        fn remove_tags<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: &'a [String],
        ) -> BoxFuture<'a, AwsResult<()>> {
            async { Ok(()) }.boxed()
        }
    }

    #[test]
    fn the_groups_changed_between_two_listings_are_those_of_members_added_gone_or_changed() {
        let keys = TagKeys::default();
        let stopped = |id: &str, tag: &str| Member {
            state: "stopped".into(),
            ..m(id, tag)
        };
        let old = [m("i-1", "a"), m("i-2", "b"), m("i-3", "c")];
        let changed = |new: &[Member]| -> Vec<String> {
            changed_groups(&old, new, &keys).into_iter().collect()
        };
        assert!(changed(&old).is_empty(), "the same listing");
        let reordered = [m("i-3", "c"), m("i-1", "a"), m("i-2", "b")];
        assert!(changed(&reordered).is_empty(), "another order");
        assert_eq!(
            changed(&[m("i-1", "a"), stopped("i-2", "b"), m("i-3", "c")]),
            ["b"],
            "a state"
        );
        assert_eq!(
            changed(&[m("i-1", "a"), m("i-2", "d"), m("i-3", "c")]),
            ["b", "d"],
            "a member moved to another group"
        );
        assert_eq!(
            changed(&[m("i-1", "a"), m("i-3", "c"), m("i-4", "e")]),
            ["b", "e"],
            "a member gone, one added"
        );

        // A DB cluster moved to another group takes its untagged DB instances along.
        let cluster = |tag: &str| Member {
            is_cluster: true,
            ..m("aurora", tag)
        };
        let instance = Member {
            id: "aurora-1".into(),
            db_cluster: Some("aurora".into()),
            ..Default::default()
        };
        let before = [cluster("x"), instance.clone(), m("plain", "z")];
        let after = [cluster("y"), instance.clone(), m("plain", "z")];
        assert_eq!(
            changed_groups(&before, &after, &keys)
                .into_iter()
                .collect::<Vec<_>>(),
            ["x", "y"]
        );
        let stopping = Member {
            state: "stopping".into(),
            ..instance
        };
        assert_eq!(
            changed_groups(&before, &[cluster("x"), stopping, m("plain", "z")], &keys)
                .into_iter()
                .collect::<Vec<_>>(),
            ["x"],
            "a DB instance's change is its cluster's group's"
        );
    }

    #[tokio::test]
    async fn a_listing_announces_what_it_changed_and_nothing_when_it_changed_nothing() {
        let (fake, inv, key) = ec2_inventory(vec![vec![m("i-1", "a"), m("i-2", "b")]]);
        let mut changes = inv.subscribe();
        inv.refresh(&key).await.unwrap();
        let first = changes.try_recv().unwrap();
        assert_eq!(
            (&first.key, &first.groups),
            (&key, &None),
            "the first listing: every group"
        );
        inv.refresh(&key).await.unwrap();
        assert!(changes.try_recv().is_err(), "nothing changed");
        // A listing that fails, then one that succeeds: every group each time.
        *fake.fail_at.lock().unwrap() = Some(0);
        inv.refresh(&key).await.unwrap_err();
        assert_eq!(changes.try_recv().unwrap().groups, None);
        inv.refresh(&key).await.unwrap_err();
        assert!(changes.try_recv().is_err(), "the same failure again");
        *fake.fail_at.lock().unwrap() = None;
        inv.refresh(&key).await.unwrap();
        assert_eq!(changes.try_recv().unwrap().groups, None);
        // A targeted refresh that changed nothing announces nothing either.
        inv.refresh_group(&key, "a").await.unwrap();
        assert!(changes.try_recv().is_err());
        // Reading a group reads its members only.
        let snap = inv.snapshot(&key).unwrap();
        assert_eq!(
            snap.group("a")
                .iter()
                .map(|m| m.id.as_str())
                .collect::<Vec<_>>(),
            ["i-1"]
        );
        assert!(snap.group("nope").is_empty());
    }

    #[tokio::test]
    async fn written_tags_show_in_the_snapshot_until_the_next_listing() {
        let (_fake, inv, key) = ec2_inventory(vec![vec![m("i-1", "a"), m("i-2", "a")]]);
        inv.refresh(&key).await.unwrap();
        let before = inv.snapshot(&key).unwrap();
        let lock = [("resource-booking/locked-by".to_string(), "ann".to_string())];
        inv.amend_tags(&key, "i-1", &lock, &[]);
        let tags_of = |id: &str| {
            let snap = inv.snapshot(&key).unwrap();
            snap.members()
                .iter()
                .find(|m| m.id == id)
                .unwrap()
                .tags
                .clone()
        };
        assert_eq!(
            tags_of("i-1")
                .get("resource-booking/locked-by")
                .map(String::as_str),
            Some("ann")
        );
        assert!(!tags_of("i-2").contains_key("resource-booking/locked-by"));
        // A reader's snapshot taken before stays as it was.
        assert!(
            !before.members()[0]
                .tags
                .contains_key("resource-booking/locked-by")
        );
        inv.amend_tags(
            &key,
            "i-1",
            &[],
            &["resource-booking/locked-by".to_string()],
        );
        assert!(!tags_of("i-1").contains_key("resource-booking/locked-by"));
        // An unknown member or inventory changes nothing.
        inv.amend_tags(&key, "i-9", &lock, &[]);
        assert_eq!(inv.snapshot(&key).unwrap().members().len(), 2);
        // The next listing is what AWS says.
        inv.amend_tags(&key, "i-2", &lock, &[]);
        inv.refresh(&key).await.unwrap();
        assert!(!tags_of("i-2").contains_key("resource-booking/locked-by"));
    }

    #[tokio::test]
    async fn rds_lists_every_page_of_instances_and_clusters_and_groups_cluster_members() {
        let cluster = |id: &str, tag: Option<&str>| Member {
            is_cluster: true,
            state: "available".into(),
            ..tag.map_or_else(
                || Member {
                    id: id.into(),
                    ..Default::default()
                },
                |t| m(id, t),
            )
        };
        let untagged_in = |id: &str, c: &str| Member {
            id: id.into(),
            state: "available".into(),
            db_cluster: Some(c.into()),
            ..Default::default()
        };
        let fake = Arc::new(RdsPages {
            instances: vec![
                vec![untagged_in("aurora-1", "aurora"), m("plain", "a")],
                vec![
                    untagged_in("aurora-2", "aurora"),
                    untagged_in("foreign-1", "foreign"),
                    Member {
                        db_cluster: Some("foreign".into()),
                        ..m("tagged-1", "a")
                    },
                ],
            ],
            clusters: vec![
                vec![cluster("foreign", None), cluster("solo", Some("solo"))],
                vec![cluster("aurora", Some("a"))],
            ],
            calls: StdMutex::new(vec![]),
        });
        let inv = Inventory::new(
            Arc::new(Pages {
                pages: vec![vec![]],
                fail_at: StdMutex::new(None),
                calls: StdMutex::new(vec![]),
            }),
            fake.clone(),
            TagKeys::default(),
            Metrics::new(),
        );
        let key = InventoryKey {
            kind: ProviderType::Rds,
            region: "eu-west-1".into(),
        };
        inv.refresh(&key).await.unwrap();
        assert_eq!(
            fake.calls.lock().unwrap().clone(),
            [
                ("DescribeDBInstances", None),
                ("DescribeDBInstances", Some("1".to_string())),
                ("DescribeDBClusters", None),
                ("DescribeDBClusters", Some("1".to_string())),
            ]
        );
        let snap = inv.snapshot(&key).unwrap();
        let mut ids: Vec<String> = snap.group("a").into_iter().map(|m| m.id).collect();
        ids.sort();
        // The untagged members of the tagged cluster belong to its group; those of the
        // untagged cluster are not kept, its tagged member is (to be reported).
        assert_eq!(ids, ["aurora", "aurora-1", "aurora-2", "plain", "tagged-1"]);
        assert!(!snap.members().iter().any(|m| m.id.starts_with("foreign")));
        // A group of a cluster alone is found too (a ResourceMonitor creates its Resource).
        assert_eq!(
            snap.groups(inv.keys()).into_iter().collect::<Vec<_>>(),
            ["a", "solo"]
        );
    }
}
