//! The memory allocator of both binaries (feature `ops`): jemalloc, and what it reports.
//!
//! Why not the system allocator: glibc's malloc keeps memory freed after a burst (the initial
//! list of every Booking, a relist, thousands of reconciles at once) in per-thread arenas, so the
//! process's resident size stays near its peak long after the burst. jemalloc returns unused
//! pages to the kernel on a timer of its own (`background_thread`), so the resident size follows
//! the live heap. [`global_allocator!`](crate::global_allocator) installs it with the options
//! below; `_RJEM_MALLOC_CONF` (jemalloc's own variable, prefixed as this build is) overrides
//! them at start-up without a rebuild.
//!
//! [`HeapCollector`] exports the live heap (`heap_allocated_bytes`: bytes the program holds)
//! and the allocator's resident share (`heap_resident_bytes`: pages jemalloc keeps mapped and
//! touched, live or not), so a dashboard tells a leak (allocated grows) from retention
//! (resident grows, allocated does not).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

pub use tikv_jemallocator::Jemalloc;

/// jemalloc's options for both binaries:
///
/// - `background_thread:true`: a thread of jemalloc's purges unused pages while the process is
///   idle (without it, purging happens only inside later allocations);
/// - `dirty_decay_ms:1000`, `muzzy_decay_ms:0`: freed pages go back to the kernel within about
///   a second, and at once once they are no longer dirty;
/// - `narenas:2`: two arenas (the default is four per CPU), the tokio workers share them, which
///   costs nothing at these allocation rates and keeps fewer partly used pages.
pub const MALLOC_CONF: &str =
    "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,narenas:2";

/// Installs jemalloc as the binary's global allocator with [`MALLOC_CONF`]. Used once, at the
/// top level of each binary's `main.rs` (the options' symbol must be in the binary itself, where
/// it replaces jemalloc's weak default).
#[macro_export]
macro_rules! global_allocator {
    () => {
        #[global_allocator]
        static GLOBAL: $crate::heap::Jemalloc = $crate::heap::Jemalloc;

        /// jemalloc's options ([`booking_shared::heap::MALLOC_CONF`]), as the C string jemalloc
        /// reads at start-up.
        #[unsafe(export_name = "_rjem_malloc_conf")]
        #[used]
        static MALLOC_CONF: &u8 = {
            const CONF: &str = $crate::heap::MALLOC_CONF;
            const BYTES: [u8; CONF.len() + 1] = {
                let mut out = [0u8; CONF.len() + 1];
                let src = CONF.as_bytes();
                let mut i = 0;
                while i < src.len() {
                    out[i] = src[i];
                    i += 1;
                }
                out
            };
            &BYTES[0]
        };
    };
}

/// The least time between two releases of one thread's cache ([`release_thread_cache_when_idle`]).
const CACHE_RELEASE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// For the runtime's `on_thread_park`: when a worker thread goes idle, gives back the blocks its
/// jemalloc thread cache holds (at most once per [`CACHE_RELEASE_INTERVAL`] per thread).
///
/// Each thread keeps a cache of freed blocks for its next allocations (jemalloc's `tcache`),
/// and jemalloc trims it only as the thread allocates more: a thread that goes idle after a
/// burst (10,000 bookings' reconciles) keeps it for as long as it stays idle, and the pages
/// under those blocks stay resident (about 17 MiB in the controller after 10,000 bookings,
/// BENCHMARKS.md). Turning the caches off costs 60–80 % more CPU on every allocation; giving
/// them back when a thread parks costs one flush per thread per second at most, and the
/// background thread then returns the pages (`dirty_decay_ms`). A thread parked within a
/// second of its last release gives its cache back the next time it parks (a timer, a watch
/// event, the Lease's renewal). Nothing happens when the caches are off
/// (`_RJEM_MALLOC_CONF=tcache:false`) or the allocator is not jemalloc.
pub fn release_thread_cache_when_idle() {
    use std::cell::Cell;
    use std::time::Instant;
    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let now = Instant::now();
    let due = LAST.with(|last| {
        let due = last
            .get()
            .is_none_or(|at| now.duration_since(at) >= CACHE_RELEASE_INTERVAL);
        if due {
            last.set(Some(now));
        }
        due
    });
    if due {
        release_thread_cache();
    }
}

/// Gives back the blocks of this thread's jemalloc cache (turning it off flushes it; it is
/// turned on again at once, empty). `false` when the cache is off or cannot be controlled.
pub fn release_thread_cache() -> bool {
    use tikv_jemalloc_ctl::{Access, AsName};
    let enabled = b"thread.tcache.enabled\0".name();
    match Access::<bool>::read(enabled) {
        Ok(true) => enabled
            .write(false)
            .and_then(|()| enabled.write(true))
            .is_ok(),
        _ => false,
    }
}

/// The allocator's figures, read now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapStats {
    /// Bytes allocated by the program and not yet freed (the live heap).
    pub allocated: u64,
    /// Bytes in pages the allocator keeps resident: the live heap, its metadata, and freed
    /// memory not yet returned to the kernel.
    pub resident: u64,
}

/// Reads jemalloc's statistics (after refreshing them); `None` when this process's allocator
/// is not jemalloc (e.g. in tests) or the statistics cannot be read.
pub fn stats() -> Option<HeapStats> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    let allocated = tikv_jemalloc_ctl::stats::allocated::read().ok()?;
    let resident = tikv_jemalloc_ctl::stats::resident::read().ok()?;
    Some(HeapStats {
        allocated: u64::try_from(allocated).ok()?,
        resident: u64::try_from(resident).ok()?,
    })
}

/// Exports [`stats`] at each scrape as `heap_allocated_bytes` and `heap_resident_bytes` (under
/// the registry's prefix). Nothing is exported when the statistics cannot be read.
#[derive(Debug, Default)]
pub struct HeapCollector;

impl Collector for HeapCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = stats() else {
            return Ok(());
        };
        let gauges = [
            (
                "heap_allocated_bytes",
                "Bytes the program has allocated and not freed (jemalloc's stats.allocated).",
                s.allocated,
            ),
            (
                "heap_resident_bytes",
                "Bytes in pages the allocator keeps resident, live or freed and not yet returned (jemalloc's stats.resident).",
                s.resident,
            ),
        ];
        for (name, help, value) in gauges {
            let metric = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            let enc = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            metric.encode(enc)?;
        }
        Ok(())
    }
}
