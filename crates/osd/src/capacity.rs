//! Measures, at boot, what this OSD's store sustains, for the scheduler's cost model (Ceph's
//! boot-time `osd bench`, which sets `osd_mclock_max_capacity_iops_*`).
//!
//! A device profile gives the raw device's rate of random 4 KiB writes, but the store turns a
//! group of small writes into one sequential log write: on an emulated 7200 rpm disk the
//! profile says 330 IOPS where the store takes well over a thousand, and mClock's `balanced` and
//! `high_recovery_ops` profiles, whose limits are shares of that capacity, held clients to a
//! fraction of what the OSD could serve (docs/design/peering-and-recovery.md). Measured through the
//! store, the capacity counts what the device really does per client write.
//!
//! The probe writes new 4 KiB objects and then 4 MiB objects in a collection of its own (not a
//! PG's: those are named `pg.*`), removes them after each run, and removes what an earlier
//! probe left if the OSD stopped in the middle of one. Its runs are bounded in count and in
//! time; the estimate (median of the runs, checked against plausible bounds) is
//! `cairn_qos::capacity::estimate`'s. The first boot's measurement is kept in the data
//! directory ([`SAVED_FILE`]) and reused, as Ceph keeps its in the configuration: a restart,
//! often during recovery, neither waits for the probe nor adds its writes; deleting the file
//! measures again.

use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use cairn_qos::capacity::{estimate, CapacityBounds, CapacitySamples};
use cairn_qos::DeviceCapacity;
use cairn_store::{Store, Transaction};
use futures_util::future::join_all;

use crate::error::OsdError;

/// File in the OSD's data directory keeping the capacity measured at its first boot.
pub const SAVED_FILE: &str = "capacity.json";

/// The capacity an earlier boot measured and kept in `dir`: `None` when there is none, an
/// error when the file cannot be read or does not hold a valid capacity.
pub fn load_saved(dir: &Path) -> Result<Option<DeviceCapacity>, OsdError> {
    let path = dir.join(SAVED_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(OsdError::Config(format!("{}: {e}", path.display()))),
    };
    let c: DeviceCapacity = serde_json::from_str(&text)
        .map_err(|e| OsdError::Config(format!("{}: {e}", path.display())))?;
    c.validate()
        .map_err(|e| OsdError::Config(format!("{}: {e}", path.display())))?;
    Ok(Some(c))
}

/// Keeps `c` in `dir` for the next boots (written aside, then renamed over the old file, so
/// a crash leaves the old file or the new one, never part of one).
pub fn save(dir: &Path, c: &DeviceCapacity) -> Result<(), OsdError> {
    let path = dir.join(SAVED_FILE);
    let aside = dir.join(format!("{SAVED_FILE}.new"));
    let text = serde_json::to_string(c).map_err(|e| OsdError::Protocol(e.to_string()))?;
    std::fs::write(&aside, text)
        .and_then(|()| std::fs::rename(&aside, &path))
        .map_err(|e| OsdError::Config(format!("{}: {e}", path.display())))
}

/// Collection the probe writes in.
pub const PROBE_COLLECTION: &str = "capacity-probe";
/// Size of a small write: the cost model's reference I/O.
#[allow(clippy::cast_possible_truncation)] // 4 KiB, a constant.
const SMALL_BYTES: usize = cairn_qos::cost::REFERENCE_IO_BYTES as usize;
/// Most runs of each kind a plan may ask for (as `cairn_qos::capacity::measure`).
const MAX_REPEATS: usize = 15;
/// Objects removed per transaction when a run is cleaned up.
const REMOVALS_PER_TXN: usize = 256;

/// How much the probe writes (explicit limits).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProbePlan {
    /// New 4 KiB objects written per small run.
    pub small_writes: usize,
    /// Writes in flight in a small run (a large run has a quarter of them, at least 1).
    pub in_flight: usize,
    /// Bytes per large run, written as objects of `large_object_bytes`.
    pub large_bytes: u64,
    /// Size of a large object.
    pub large_object_bytes: usize,
    /// Runs of each kind (odd): the median is used.
    pub repeats: usize,
    /// Longest a run may take: it stops there and its rate counts what it wrote.
    pub max_run: Duration,
}

impl Default for ProbePlan {
    fn default() -> Self {
        ProbePlan {
            small_writes: 2000,
            in_flight: 16,
            large_bytes: 32 << 20,
            large_object_bytes: 4 << 20,
            repeats: 3,
            max_run: Duration::from_secs(2),
        }
    }
}

impl ProbePlan {
    fn check(&self) -> Result<(), OsdError> {
        if self.small_writes == 0
            || self.in_flight == 0
            || self.large_object_bytes == 0
            || self.large_bytes < self.large_object_bytes as u64
            || self.repeats.is_multiple_of(2)
            || self.repeats > MAX_REPEATS
            || self.max_run.is_zero()
        {
            return Err(OsdError::Config(format!(
                "capacity probe plan {self:?}: counts must be > 0, large_bytes at least one \
                 object, repeats odd and at most {MAX_REPEATS}, max_run > 0"
            )));
        }
        Ok(())
    }
}

/// The capacity the store sustains: as measured at this OSD's first boot (kept in its data
/// directory), else measured now and kept; `configured` (logged) when the measurement is
/// refused: out of its plausible bounds, or the store too full for it. A store that failed
/// fails the boot.
pub async fn at_boot(
    store: &Store,
    configured: DeviceCapacity,
    data_dir: &Path,
) -> Result<DeviceCapacity, OsdError> {
    match load_saved(data_dir) {
        Ok(Some(c)) => {
            tracing::info!(
                iops = c.random_4k_iops.round(),
                mb_s = (c.seq_bandwidth_bytes_per_s / 1e6).round(),
                "capacity as measured at the first boot"
            );
            return Ok(c);
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "kept capacity unreadable: measuring again"),
    }
    let t = Instant::now();
    let plan = ProbePlan::default();
    let bounds = CapacityBounds::default();
    match measure(store, &plan, &bounds).await {
        Ok(c) => {
            tracing::info!(
                iops = c.random_4k_iops.round(),
                mb_s = (c.seq_bandwidth_bytes_per_s / 1e6).round(),
                configured_iops = configured.random_4k_iops.round(),
                ms = crate::convert::millis(t.elapsed()),
                "capacity measured through the store"
            );
            if let Err(e) = save(data_dir, &c) {
                tracing::warn!(error = %e, "measured capacity not kept: the next boot measures again");
            }
            Ok(c)
        }
        // A store that failed fails the boot; any other refusal (the runs out of bounds or
        // apart, a store too full for the probe's objects) leaves the configured capacity.
        Err(OsdError::Store(e)) if e.is_fatal() => Err(OsdError::Store(e)),
        Err(e) => {
            tracing::warn!(error = %e, iops = configured.random_4k_iops, "capacity not measured: keeping the configured one");
            Ok(configured)
        }
    }
}

/// Measures the store's capacity with `plan`: 4 KiB IOPS and sequential bandwidth, refused
/// (`OsdError::Qos`) when outside `bounds` or when the runs disagree by more than they allow.
pub async fn measure(
    store: &Store,
    plan: &ProbePlan,
    bounds: &CapacityBounds,
) -> Result<DeviceCapacity, OsdError> {
    plan.check()?;
    remove_probe(store).await?;
    let mut txn = Transaction::new();
    txn.create_collection(PROBE_COLLECTION);
    store.queue_transaction_owned(txn).await?;
    let measured = sample(store, plan).await;
    // The probe's objects go whether or not the runs succeeded.
    let removed = remove_probe(store).await;
    let samples = measured?;
    removed?;
    Ok(estimate(&samples, bounds)?)
}

/// Runs a warm-up and then `plan.repeats` small and large runs.
async fn sample(store: &Store, plan: &ProbePlan) -> Result<CapacitySamples, OsdError> {
    let small = Bytes::from(vec![0xa5u8; SMALL_BYTES]);
    let large = Bytes::from(vec![0x5au8; plan.large_object_bytes]);
    let large_objects = crate::convert::usize_of(plan.large_bytes / plan.large_object_bytes as u64);
    let large_in_flight = (plan.in_flight / 4).max(1);
    let warm_up = Run {
        name: "warm-up",
        data: &small,
        objects: (plan.small_writes / 10).max(1),
        in_flight: plan.in_flight,
        max: plan.max_run,
    };
    warm_up.write(store).await?;
    let mut samples = CapacitySamples::default();
    for r in 0..plan.repeats {
        let (n, ns) = Run {
            name: &format!("small-{r}"),
            data: &small,
            objects: plan.small_writes,
            in_flight: plan.in_flight,
            max: plan.max_run,
        }
        .write(store)
        .await?;
        samples.random.push((n, ns));
        let (n, ns) = Run {
            name: &format!("large-{r}"),
            data: &large,
            objects: large_objects,
            in_flight: large_in_flight,
            max: plan.max_run,
        }
        .write(store)
        .await?;
        samples
            .sequential
            .push((n * plan.large_object_bytes as u64, ns));
    }
    Ok(samples)
}

/// One run: new objects named `{name}-N`, each written whole.
struct Run<'a> {
    name: &'a str,
    data: &'a Bytes,
    objects: usize,
    in_flight: usize,
    max: Duration,
}

impl Run<'_> {
    /// Writes the run's objects from `in_flight` writers until all are written or `max` has
    /// passed, removes them, and returns (objects written, elapsed ns until the last write).
    async fn write(&self, store: &Store) -> Result<(u64, u64), OsdError> {
        let next = &std::sync::atomic::AtomicUsize::new(0);
        let start = Instant::now();
        let writer = move || async move {
            let mut written = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= self.objects || start.elapsed() >= self.max {
                    return Ok::<_, OsdError>(written);
                }
                let obj = format!("{}-{i}", self.name);
                let mut txn = Transaction::new();
                txn.write_bytes(PROBE_COLLECTION, &obj, 0, self.data.clone());
                store.queue_transaction_owned(txn).await?;
                written.push(obj);
            }
        };
        let results = join_all((0..self.in_flight).map(|_| writer())).await;
        let elapsed = start.elapsed();
        let mut names = Vec::new();
        let mut first_error = None;
        for r in results {
            match r {
                Ok(w) => names.extend(w),
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        remove_objects(store, &names).await?;
        if let Some(e) = first_error {
            return Err(e);
        }
        let ns = crate::convert::nanos(elapsed);
        Ok((names.len() as u64, ns))
    }
}

async fn remove_objects(store: &Store, names: &[String]) -> Result<(), OsdError> {
    for chunk in names.chunks(REMOVALS_PER_TXN) {
        let mut txn = Transaction::new();
        for obj in chunk {
            txn.remove(PROBE_COLLECTION, obj);
        }
        store.queue_transaction_owned(txn).await?;
    }
    Ok(())
}

/// Removes the probe's collection and whatever is left in it.
async fn remove_probe(store: &Store) -> Result<(), OsdError> {
    if !store
        .list_collections()
        .await?
        .iter()
        .any(|c| c == PROBE_COLLECTION)
    {
        return Ok(());
    }
    loop {
        let left = store
            .list_objects(PROBE_COLLECTION, None, REMOVALS_PER_TXN)
            .await?;
        if left.is_empty() {
            break;
        }
        remove_objects(store, &left).await?;
    }
    let mut txn = Transaction::new();
    txn.push(cairn_store::Op::RemoveCollection {
        coll: PROBE_COLLECTION.into(),
    });
    store.queue_transaction_owned(txn).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cairn_blockdev::mem::MemDevice;
    use cairn_store::{KvLocation, StoreConfig};

    use super::*;

    async fn store(dir: &std::path::Path) -> Store {
        store_of(dir, 256 << 20).await
    }

    async fn store_of(dir: &std::path::Path, bytes: u64) -> Store {
        let dev: Arc<dyn cairn_blockdev::BlockDevice> =
            Arc::new(MemDevice::new(bytes, 4096).unwrap());
        let kv = dir.join("kv.redb");
        let cfg = StoreConfig::default();
        Store::mkfs(dev.clone(), KvLocation::File(kv.clone()), &cfg)
            .await
            .unwrap();
        Store::mount(dev, KvLocation::File(kv), cfg).await.unwrap()
    }

    fn small_plan() -> ProbePlan {
        ProbePlan {
            small_writes: 300,
            large_bytes: 8 << 20,
            large_object_bytes: 1 << 20,
            ..ProbePlan::default()
        }
    }

    /// The probe measures a positive capacity within the plausible bounds, and leaves neither
    /// objects nor its collection behind, even when an earlier probe was cut short.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn measures_the_store_and_leaves_nothing_behind() {
        let dir = tempdir("measure");
        let store = store(&dir).await;
        // What a probe cut short by a crash leaves: its collection with objects in it.
        let mut txn = Transaction::new();
        txn.create_collection(PROBE_COLLECTION);
        txn.write(PROBE_COLLECTION, "small-0-7", 0, &[1u8; 4096]);
        store.queue_transaction_owned(txn).await.unwrap();
        let before = store.stats().await;

        // Runs may disagree on a busy test machine; the production bounds are checked below.
        let lenient = CapacityBounds {
            max_spread: 100.0,
            ..CapacityBounds::default()
        };
        let cap = measure(&store, &small_plan(), &lenient).await.unwrap();

        let bounds = CapacityBounds::default();
        assert!(
            (bounds.min_iops..=bounds.max_iops).contains(&cap.random_4k_iops),
            "{cap:?}"
        );
        assert!(
            cap.seq_bandwidth_bytes_per_s >= bounds.min_bytes_per_s,
            "{cap:?}"
        );
        assert!(!store
            .list_collections()
            .await
            .unwrap()
            .contains(&PROBE_COLLECTION.to_string()));
        let after = store.stats().await;
        assert_eq!(
            after.objects,
            before.objects - 1,
            "the left-over object is gone too"
        );
        assert!(
            after.commits > before.commits + 300,
            "the runs wrote through the store"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A kept measurement loads back as it was saved; a missing file is no measurement; a
    /// malformed or invalid one is an error naming the file, never a panic or a made-up value.
    #[test]
    fn a_saved_capacity_loads_back_and_a_bad_file_is_refused() {
        let dir = tempdir("saved");
        assert_eq!(load_saved(&dir).unwrap(), None);
        let c = DeviceCapacity {
            random_4k_iops: 3946.5,
            seq_bandwidth_bytes_per_s: 115e6,
        };
        save(&dir, &c).unwrap();
        assert_eq!(load_saved(&dir).unwrap(), Some(c));
        assert!(!dir.join(format!("{SAVED_FILE}.new")).exists());
        for bad in [
            "{\"random_4k_iops\": 3946",
            "{\"random_4k_iops\": -1.0, \"seq_bandwidth_bytes_per_s\": 1e8}",
            "\u{0}\u{ff}",
        ] {
            std::fs::write(dir.join(SAVED_FILE), bad).unwrap();
            let err = load_saved(&dir).unwrap_err().to_string();
            assert!(err.contains(SAVED_FILE), "{bad:?}: {err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A store too small for the probe's objects refuses them: the probe fails with that
    /// (non-fatal) error, removes what it wrote, and the store goes on working.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_too_full_for_the_probe_is_left_as_it_was() {
        let dir = tempdir("full");
        let store = store_of(&dir, 24 << 20).await;
        let plan = ProbePlan {
            large_bytes: 64 << 20,
            ..small_plan()
        };
        let err = measure(&store, &plan, &CapacityBounds::default())
            .await
            .unwrap_err();
        assert!(matches!(&err, OsdError::Store(e) if !e.is_fatal()), "{err}");
        assert!(store.list_collections().await.unwrap().is_empty());
        assert_eq!(store.stats().await.objects, 0);
        let mut txn = Transaction::new();
        txn.create_collection("after");
        txn.write("after", "x", 0, &[3u8; 4096]);
        store.queue_transaction_owned(txn).await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A plan that cannot measure anything is refused before anything is written.
    #[tokio::test]
    async fn refuses_an_empty_plan() {
        let dir = tempdir("plan");
        let store = store(&dir).await;
        let plan = ProbePlan {
            repeats: 2,
            ..ProbePlan::default()
        };
        let err = measure(&store, &plan, &CapacityBounds::default())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("repeats odd"), "{err}");
        assert!(store.list_collections().await.unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempdir(what: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "cairn-capacity-{what}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
