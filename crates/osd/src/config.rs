//! How to run one OSD: its settings, their defaults and its identity for authentication.
//!
//! Plain data shared by the daemon and the modules it starts, kept apart from the daemon so
//! that those modules never depend on the process that runs them.

use std::net::SocketAddr;
use std::path::PathBuf;

use cairn_qos::{DeviceCapacity, PolicyConfig};
use cairn_store::StoreConfig;

use crate::throttle::DeviceKind;

/// How to run one OSD.
#[derive(Clone, Debug)]
pub struct OsdConfig {
    /// Stable identity (keeps the OSD id across restarts).
    pub uuid: String,
    /// The id to ask for at the first boot (see the monitor's `Boot`); None: the lowest free.
    pub want_id: Option<i32>,
    /// Host name (CRUSH failure domain).
    pub host: String,
    /// Address to serve on (port 0 = any free port).
    pub listen: SocketAddr,
    /// Address of the Prometheus metrics page (None: no metrics endpoint).
    pub metrics_listen: Option<SocketAddr>,
    /// Monitor address.
    pub mon: SocketAddr,
    /// Directory holding `block` (the data device file) and `kv.redb` (metadata).
    pub data_dir: PathBuf,
    /// Size of the data device file when it is created.
    pub device_bytes: u64,
    /// CRUSH weight (16.16).
    pub crush_weight: u32,
    /// Emulate this device profile over the data file (`hdd-7200`, `nvme-p3700`, ... or a
    /// TOML path): the store then sees that device's latency and throughput, and the cost
    /// model takes the profile's capacity. None: the file as it is.
    pub device_profile: Option<String>,
    /// An SSD cache in front of the data device (its file `cache` in the data directory);
    /// None: the store runs on the data device itself.
    pub cache: Option<crate::cached::OsdCacheConfig>,
    /// The store's superblock and log on a device of their own (`block.db` in the data
    /// directory; BlueStore's WAL/DB device); None: on the data device. Fixed when the store
    /// is made, and exclusive with `cache`.
    pub db: Option<crate::db_device::OsdDbConfig>,
    /// Scheduler policy.
    pub policy: PolicyConfig,
    /// Device capacity for the cost model (the profile's when there is one; replaced by the
    /// store's measured capacity with `measure_capacity`).
    pub capacity: DeviceCapacity,
    /// Measure the capacity through the store at boot (Ceph's boot-time `osd bench`; see
    /// [`crate::capacity`]) instead of taking the profile's raw device figures; a measurement
    /// refused (out of its plausible bounds, or the store too full for it) is logged and the
    /// configured capacity kept. The first boot's measurement is kept in the data directory
    /// and reused by later boots.
    pub measure_capacity: bool,
    /// Most scheduled requests running at once (explicit limit), divided between the op
    /// shards.
    pub max_inflight_ops: usize,
    /// Most device time, by the cost model, of scheduled requests released and not finished, in
    /// ms (0: no limit), divided between the op shards: beyond it requests wait in the
    /// scheduler, where the policy orders them, not in the device's queue where it cannot (a
    /// returning OSD's 4 MiB recovery writes would otherwise sit in front of every client write
    /// whatever the policy: Ceph's BlueStore throttle, which seed 000 lowered for mClock to
    /// work). One request per shard always runs, however costly. Default 40 ms (20 per shard
    /// of the default 2): one 4-MiB write or about 7 4-KiB writes per shard on a 7200 rpm
    /// disk, so a client write waits for at most one recovery write per shard there; about 7
    /// 4-MiB writes per shard on the plain files' model, more than 64 small requests.
    pub max_inflight_cost_ms: u64,
    /// Scheduler shards (Ceph's `osd_op_num_shards`, 1..=64): each PG's work runs in one, each
    /// shard has its own queue, lock and dispatcher, and the policy's QoS holds OSD-wide.
    pub op_shards: usize,
    /// Most client ops accepted and not yet answered (explicit limit; beyond it ops are
    /// refused with a retryable error).
    pub max_pending_ops: usize,
    /// Most data bytes of client ops accepted and not yet answered (Ceph's
    /// `osd_client_message_size_cap`, 500 MiB): beyond it ops are refused with the same
    /// retryable error, so a burst of large writes cannot hold more memory than this.
    pub max_pending_op_bytes: u64,
    /// Most admin commands (`cairn tell`) running at once; one more is refused.
    pub max_admin_requests: usize,
    /// Requests of other OSDs (peering queries, recovery and backfill pieces, scrub maps)
    /// served at once; one more is answered "osd busy" and its sender tries again later, so a
    /// peer can never make this OSD hold unbounded work.
    pub max_peer_requests: usize,
    /// Most key and value bytes one omap listing reply carries (Ceph's
    /// `osd_max_omap_bytes_per_request`); the reply then says there is more, and the client
    /// asks for the next page. Default 4 MiB, well under the messenger's frame limit.
    pub max_omap_bytes_per_request: u64,
    /// Beacon period to the monitor.
    pub beacon_interval_ms: u64,
    /// How often the OSD reports the usage of the PGs it leads to the monitor (Ceph's
    /// `osd_mon_report_interval`, 5 s), which judges pool quotas from it: a pool can go past
    /// its quota by what is written in about this long.
    pub pg_usage_interval_ms: u64,
    /// How long the primary waits for a replica's acknowledgement.
    pub repop_timeout_ms: u64,
    /// Heartbeat period to peers.
    pub heartbeat_interval_ms: u64,
    /// A peer silent this long is reported to the monitor (Ceph: 20 s).
    pub heartbeat_grace_ms: u64,
    /// Report a peer whose address refuses connections (its host answers, no process
    /// listens) at once, and the monitor marks it down on that one report, instead of waiting
    /// out the heartbeat grace (Ceph's `osd_fast_fail_on_connection_refused`, on by default).
    pub fast_fail_on_connection_refused: bool,
    /// Most entries in a PG log (Ceph's osd_min_pg_log_entries is 250..3000).
    pub max_log_entries: usize,
    /// How long a client op waits for its PG to become active before failing (retryable).
    pub op_wait_active_ms: u64,
    /// Write zeros over a new device file before mkfs, so data lands on allocated blocks as
    /// on a raw device instead of paying the file system's block allocation on first write
    /// (what `cairn store bench` does to its file; 4 MiB writes on one OSD are ~1.2-1.5x
    /// faster on a prefilled file here, see docs/results/2026-11-24-osd-aio-device-io.md). Costs
    /// one full write of the file.
    pub prefill: bool,
    /// Store group commits whose writes may be in flight at once (1 or 2; see
    /// `cairn_store::StoreConfig::max_groups_in_flight`): with 2, large copy-on-write groups
    /// are pipelined.
    pub store_groups_in_flight: usize,
    /// Whether the store paces commits to its running checkpoint
    /// (`cairn_store::StoreConfig::commit_pacing`).
    pub store_commit_pacing: bool,
    /// A client write is refused with NoSpace, before it is given a version, when it would
    /// fill this OSD's store beyond this fraction (Ceph's `mon_osd_full_ratio`, 0.95): the rest
    /// is kept for recovery and metadata, and a write refused here reaches no copy. 1.0 turns
    /// the check off (a write then fails only when the store itself is out of space).
    pub full_ratio: f64,
    /// Past this fraction of its store the OSD's beacons say it is nearfull and `cairn status`
    /// warns (Ceph's `mon_osd_nearfull_ratio`, 0.85); nothing is refused. At most
    /// `full_ratio`.
    pub nearfull_ratio: f64,
    /// A recovery or backfill push to this OSD is refused as too full when it would fill its
    /// store beyond this fraction (Ceph's `mon_osd_backfillfull_ratio`, 0.90), so what a
    /// returning copy takes back leaves room for the client writes of the PGs it serves: the
    /// copy waits out of the acting set instead. Between `nearfull_ratio` and `full_ratio`,
    /// and below 1.0 even when `full_ratio` turns the client check off.
    pub backfillfull_ratio: f64,
    /// Largest object a write may make (Ceph's `osd_max_object_size`): a client's write_full
    /// carries the whole object in one message, so this stays well under the messenger's frame
    /// limit (64 MiB).
    pub max_object_bytes: u64,
    /// Recovery moves an object in pieces of about this many bytes (Ceph's
    /// `osd_recovery_max_chunk`): data first, then the omap in key order, so that no message
    /// nears the frame limit however large the object's omap (a piece overshoots by at most 16
    /// omap entries). At most a quarter of the frame limit. None: by the device
    /// ([`recovery_chunk_bytes_for`]).
    pub recovery_chunk_bytes: Option<u64>,
    /// Most bytes (names and values) of one object's xattrs together; a setxattr past it is
    /// refused. Recovery carries an object's xattrs in its first piece, so this bounds that
    /// piece (each value is also at most the store's `max_value_bytes`). At most a quarter of
    /// the frame limit. Default 4 MiB.
    pub max_xattr_bytes_per_object: u64,
    /// How often the OSD looks for stray PG copies (held here, outside the acting set) whose
    /// primary reports the PG active+clean without them, and for PGs of removed pools, and
    /// deletes them (see `strays`).
    pub stray_check_ms: u64,
    /// A copy whose recovery would move at least this many objects (or a whole backfill) is
    /// filled in the background while a temporary acting set of complete copies serves the PG
    /// (see `remap`; Ceph's `osd_async_recovery_min_cost`, default 100 as there); a shorter
    /// log recovery runs after the PG activates, in the background, a client op waiting only
    /// for the object it touches (see `recovery`).
    pub remap_min_objects: usize,
    /// Each PG this OSD leads active+clean is scrubbed (metadata of every copy compared) about
    /// this often (Ceph's `osd_scrub_min_interval`, a day); 0 never. A primary spreads its PGs'
    /// first scrubs over one interval after it starts.
    pub scrub_interval_s: u64,
    /// Each such PG is deep-scrubbed (data and omap of every copy compared) about this often
    /// (Ceph's `osd_deep_scrub_interval`, a week); 0 never. A deep scrub counts as a scrub.
    pub deep_scrub_interval_s: u64,
    /// Wrap the data device in a fault-injecting device driven by `cairn tell osd.N inject
    /// ...` (EIO on reads, writes or flushes, on one object's blocks, or a power loss), for
    /// tests of failure handling. Off by default: the wrapper serializes writes and keeps a
    /// copy of each unflushed write's old contents.
    pub fault_injection: bool,
    /// The OSD's own entity and key (`osd.N`): it authenticates to the monitor with them, and
    /// boots as id N. None: the monitor does not authenticate (`auth none`).
    pub auth: Option<OsdAuth>,
}

/// An OSD's identity for authentication.
#[derive(Clone, Debug)]
pub struct OsdAuth {
    /// Its entity, `osd.N`.
    pub entity: cairn_auth::EntityName,
    /// Its key (from its keyring).
    pub key: cairn_auth::SecretKey,
    /// The wire mode it asks for.
    pub mode: cairn_msgr::protect::WireMode,
}

impl OsdConfig {
    /// Defaults for a test or laptop OSD in `data_dir` talking to `mon`.
    pub fn local(uuid: &str, host: &str, mon: SocketAddr, data_dir: PathBuf) -> Self {
        OsdConfig {
            uuid: uuid.into(),
            want_id: None,
            host: host.into(),
            listen: "127.0.0.1:0".parse().expect("literal address"),
            metrics_listen: None,
            mon,
            data_dir,
            device_bytes: 1 << 30,
            crush_weight: 0x10000,
            device_profile: None,
            cache: None,
            db: None,
            policy: PolicyConfig::Mclock(Default::default()),
            capacity: DeviceCapacity {
                random_4k_iops: 21500.0,
                seq_bandwidth_bytes_per_s: 1.5e9,
            },
            measure_capacity: false,
            max_inflight_ops: 64,
            max_inflight_cost_ms: DEFAULT_MAX_INFLIGHT_COST_MS,
            op_shards: DEFAULT_OP_SHARDS,
            max_pending_ops: 4096,
            max_pending_op_bytes: 500 << 20,
            max_admin_requests: 16,
            max_peer_requests: 1024,
            max_omap_bytes_per_request: 4 << 20,
            beacon_interval_ms: 1000,
            pg_usage_interval_ms: DEFAULT_PG_USAGE_INTERVAL_MS,
            repop_timeout_ms: 10_000,
            heartbeat_interval_ms: 1000,
            heartbeat_grace_ms: 20_000,
            fast_fail_on_connection_refused: true,
            max_log_entries: 3000,
            op_wait_active_ms: 3000,
            prefill: false,
            store_groups_in_flight: StoreConfig::default().max_groups_in_flight,
            store_commit_pacing: StoreConfig::default().commit_pacing,
            fault_injection: false,
            auth: None,
            full_ratio: 0.95,
            nearfull_ratio: 0.85,
            backfillfull_ratio: 0.90,
            max_object_bytes: 32 << 20,
            recovery_chunk_bytes: None,
            max_xattr_bytes_per_object: 4 << 20,
            stray_check_ms: 5000,
            remap_min_objects: DEFAULT_REMAP_MIN_OBJECTS,
            scrub_interval_s: DEFAULT_SCRUB_INTERVAL_S,
            deep_scrub_interval_s: DEFAULT_DEEP_SCRUB_INTERVAL_S,
        }
    }
}

/// Default `OsdConfig::remap_min_objects`.
pub const DEFAULT_REMAP_MIN_OBJECTS: usize = 100;

/// Default `pg_usage_interval_ms`: 2 s, a little under Ceph's 5 s (a report is one small
/// request per OSD, the counts come from the store without a listing).
pub const DEFAULT_PG_USAGE_INTERVAL_MS: u64 = 2000;

/// Default `OsdConfig::recovery_chunk_bytes` on an HDD, with or without a fast device beside
/// it (Ceph's `osd_recovery_max_chunk`): few, long reads keep the head streaming.
pub const DEFAULT_RECOVERY_CHUNK_BYTES: u64 = 8 << 20;
/// Default `OsdConfig::recovery_chunk_bytes` on an SSD: a piece is one scheduler grant and
/// one commit on the copy it fills, and pieces of 1 MiB let client ops in between where
/// whole 4 MiB objects held them back (docs/design/peering-and-recovery.md).
pub const DEFAULT_RECOVERY_CHUNK_BYTES_SSD: u64 = 1 << 20;

/// The recovery piece size an OSD uses: `configured`, else by the kind of its device.
pub fn recovery_chunk_bytes_for(configured: Option<u64>, device: DeviceKind) -> u64 {
    configured.unwrap_or(match device {
        DeviceKind::Ssd => DEFAULT_RECOVERY_CHUNK_BYTES_SSD,
        DeviceKind::Hdd | DeviceKind::Hybrid => DEFAULT_RECOVERY_CHUNK_BYTES,
    })
}
/// Default device time in flight below the scheduler, ms (see `OsdConfig::max_inflight_cost_ms`).
pub const DEFAULT_MAX_INFLIGHT_COST_MS: u64 = 40;

/// Default scheduler shards: Ceph's ceph-mini runs 2 (`osd_op_num_shards`); on a small
/// machine an OSD runs its tasks on one worker thread, where more shards only add dispatchers.
pub const DEFAULT_OP_SHARDS: usize = 2;

/// Default seconds between scrubs of a PG (Ceph's `osd_scrub_min_interval`: a day).
pub const DEFAULT_SCRUB_INTERVAL_S: u64 = 24 * 3600;

/// Default seconds between deep scrubs of a PG (Ceph's `osd_deep_scrub_interval`: a week).
pub const DEFAULT_DEEP_SCRUB_INTERVAL_S: u64 = 7 * 24 * 3600;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recovery_piece_is_the_configured_one_else_the_devices_default() {
        assert_eq!(recovery_chunk_bytes_for(None, DeviceKind::Ssd), 1 << 20);
        assert_eq!(recovery_chunk_bytes_for(None, DeviceKind::Hdd), 8 << 20);
        assert_eq!(recovery_chunk_bytes_for(None, DeviceKind::Hybrid), 8 << 20);
        assert_eq!(recovery_chunk_bytes_for(Some(4096), DeviceKind::Ssd), 4096);
        assert_eq!(recovery_chunk_bytes_for(Some(4096), DeviceKind::Hdd), 4096);
    }
}
