//! The cluster map and its encoding.
//!
//! Encoding: an envelope of magic `CMAP`, format version (u16), payload length (u32) and the
//! payload's crc32c (u32), all little-endian, then a JSON payload in which the CRUSH map is
//! crushtool text and the exceptions are their text form. Decoding verifies all of it.

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`).
#![deny(clippy::cast_possible_truncation)]

use std::collections::{BTreeMap, BTreeSet};

use crate::{Exceptions, OsdMap, OsdState, PgId, Pool};
use cairn_crush::CrushMap;
use serde::{Deserialize, Serialize};

use crate::error::MapError;
use crate::flags::MapFlag;
use crate::quota::PoolQuota;

const MAGIC: &[u8; 4] = b"CMAP";
const FORMAT_VERSION: u16 = 1;
/// Largest encoded map accepted (explicit limit on what a peer can make us allocate).
pub const MAX_ENCODED_BYTES: usize = 64 << 20;

/// Identity and liveness of one OSD, beyond what placement needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdEntry {
    /// OSD id.
    pub id: i32,
    /// Stable identity chosen by the OSD (survives restarts; an id is reused for it).
    pub uuid: String,
    /// Host (CRUSH failure domain) it runs on.
    pub host: String,
    /// Address clients and peers reach it at.
    pub addr: String,
    /// Running and reachable.
    pub up: bool,
    /// In/out reweight (16.16): 0 = out.
    pub reweight: u32,
    /// When it was marked down (ms since the Unix epoch, by the monitor's clock), for the
    /// down -> out timer: a wall-clock time, so a restarted monitor keeps counting.
    pub down_since_ms: Option<u64>,
    /// Marked out by the monitor (not by an operator): marked in again when it boots.
    pub auto_out: bool,
    /// Its store is past its full ratio (as its last beacon said): primaries refuse client
    /// writes to the PGs it holds, so that no write reaches some copies and not this one.
    #[serde(default)]
    pub full: bool,
    /// Its store is past its nearfull ratio (Ceph's `mon_osd_nearfull_ratio`, 0.85): a
    /// warning for the operator, nothing is refused.
    #[serde(default)]
    pub nearfull: bool,
    /// Ceph's up_thru: the newest interval start (epoch) at which the monitor knows this OSD
    /// was alive to serve as a primary. A primary asks for it before its PG goes active, so an
    /// interval whose primary's up_thru (in the interval's last map) is older than the
    /// interval's start never went active and took no writes. `None` in maps written before
    /// it was kept: every interval counts as possibly written.
    #[serde(default)]
    pub up_thru: Option<u64>,
    /// The epoch at which the operator declared its data lost (Ceph's `osd lost`): intervals
    /// that began before it no longer wait for this OSD's copy.
    #[serde(default)]
    pub lost_at: Option<u64>,
    /// Ceph's up_from: the epoch at which this OSD last booted (was marked up at its
    /// address). It names one incarnation of the OSD: a peer's report that the OSD refused a
    /// connection counts only for the incarnation the peer was watching, never for one that
    /// booted after it. `None` in maps written before it was kept.
    #[serde(default)]
    pub up_from: Option<u64>,
    /// This OSD alone is never marked out while down (Ceph's `osd add-noout`): maintenance of
    /// one host without holding the whole cluster's down -> out timer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub noout: bool,
    /// This OSD alone stays down when it boots (Ceph's `osd add-noup`): a flapping OSD kept
    /// out of its PGs' acting sets until the operator lets it up.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub noup: bool,
    /// This OSD alone is never marked down on failure reports or missing beacons (Ceph's
    /// `osd add-nodown`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nodown: bool,
    /// This OSD alone is not marked in when it boots after the monitor marked it out (Ceph's
    /// `osd add-noin`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub noin: bool,
}

impl OsdEntry {
    /// A newly registered OSD: up, in, no flags.
    pub fn booted(id: i32, uuid: String, host: String, addr: String) -> OsdEntry {
        OsdEntry {
            id,
            uuid,
            host,
            addr,
            up: true,
            reweight: 0x10000,
            down_since_ms: None,
            auto_out: false,
            full: false,
            nearfull: false,
            up_thru: Some(0),
            lost_at: None,
            up_from: None,
            noout: false,
            noup: false,
            nodown: false,
            noin: false,
        }
    }

    /// Whether the operator set `flag` on this OSD alone (one of [`MapFlag::PER_OSD`]).
    pub fn has_own(&self, flag: MapFlag) -> bool {
        match flag {
            MapFlag::NoOut => self.noout,
            MapFlag::NoUp => self.noup,
            MapFlag::NoDown => self.nodown,
            MapFlag::NoIn => self.noin,
            _ => false,
        }
    }

    /// The flags set on this OSD alone, in [`MapFlag::PER_OSD`]'s order.
    pub fn own_flags(&self) -> Vec<MapFlag> {
        MapFlag::PER_OSD
            .into_iter()
            .filter(|f| self.has_own(*f))
            .collect()
    }

    /// Sets (`on`) or clears `flag` on this OSD alone; false for a flag that is cluster-wide
    /// only.
    pub fn set_own(&mut self, flag: MapFlag, on: bool) -> bool {
        let field = match flag {
            MapFlag::NoOut => &mut self.noout,
            MapFlag::NoUp => &mut self.noup,
            MapFlag::NoDown => &mut self.nodown,
            MapFlag::NoIn => &mut self.noin,
            _ => return false,
        };
        *field = on;
        true
    }
}

/// The whole cluster map at one epoch.
#[derive(Clone, Debug)]
pub struct ClusterMap {
    /// Cluster identity.
    pub fsid: String,
    /// Map epoch; every change makes a new one.
    pub epoch: u64,
    /// OSDs by id.
    pub osds: BTreeMap<i32, OsdEntry>,
    /// Placement view: CRUSH, OSD states, pools, exceptions (kept in sync with `osds`).
    pub placement: OsdMap,
    /// Highest pool id ever created (Ceph's `pool_max`): ids are never reused, so copies of a
    /// removed pool's PGs that an OSD has not deleted yet can never be taken for a new pool's.
    pub pool_max: i64,
    /// The epoch each pool was created in: no PG of a pool has a past before it (where an
    /// OSD computes a PG's past intervals, it starts there).
    pub pool_created: BTreeMap<i64, u64>,
    /// Cluster flags the operator set (Ceph's `osd set`): what each holds back is on
    /// [`MapFlag`].
    pub flags: BTreeSet<MapFlag>,
    /// Pool quotas (Ceph's `osd pool set-quota`) and whether each is reached, by pool id;
    /// pools without one are absent.
    pub quotas: BTreeMap<i64, PoolQuota>,
    /// Fenced client instances (Ceph's OSD blocklist): the OSDs refuse every op of an
    /// instance here until its expiry (seconds since the Unix epoch), so a client that lost
    /// what it held (a lease taken over) can no longer write after the taker's first op.
    pub blocklist: BTreeMap<u64, u64>,
}

/// Most client instances the blocklist holds at once (explicit limit; Ceph's is unbounded).
pub const MAX_BLOCKLIST_ENTRIES: usize = 65_536;

#[derive(Serialize, Deserialize)]
struct Encoded {
    fsid: String,
    epoch: u64,
    crush: String,
    osds: Vec<OsdEntry>,
    pools: Vec<Pool>,
    exceptions: String,
    /// Absent in maps written before it: the highest id of their pools then.
    #[serde(default)]
    pool_max: i64,
    /// Absent in maps written before it: their pools' creation epochs are not known.
    #[serde(default)]
    pool_created: BTreeMap<i64, u64>,
    /// Temporary acting sets; absent in maps written before them (none then).
    #[serde(default)]
    pg_temp: Vec<(PgId, Vec<i32>)>,
    /// Cluster flags; absent when none is set (and in maps written before them).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    flags: BTreeSet<MapFlag>,
    /// Pool quotas; absent when no pool has one (and in maps written before them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    quotas: BTreeMap<i64, PoolQuota>,
    /// Fenced client instances; absent when none is (and in maps written before it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    blocklist: BTreeMap<u64, u64>,
}

impl ClusterMap {
    /// An empty map (epoch 1) with a root bucket named `default`.
    pub fn new(fsid: &str) -> Result<Self, MapError> {
        let crush = CrushMap::new_cluster("default")?;
        let mut placement = OsdMap::all_up_in(crush);
        placement.epoch = 1;
        Ok(ClusterMap {
            fsid: fsid.to_string(),
            epoch: 1,
            osds: BTreeMap::new(),
            placement,
            pool_max: 0,
            pool_created: BTreeMap::new(),
            flags: BTreeSet::new(),
            quotas: BTreeMap::new(),
            blocklist: BTreeMap::new(),
        })
    }

    /// Whether the operator set `flag`.
    pub fn has(&self, flag: MapFlag) -> bool {
        self.flags.contains(&flag)
    }

    /// Whether `flag` holds for OSD `id`: set cluster-wide, or on that OSD alone.
    pub fn holds_for(&self, id: i32, flag: MapFlag) -> bool {
        self.has(flag) || self.osds.get(&id).is_some_and(|o| o.has_own(flag))
    }

    /// Pool `pool`'s name, or its id as text when the map has no such pool.
    pub fn pool_name(&self, pool: i64) -> String {
        self.placement
            .pools
            .get(&pool)
            .map_or_else(|| pool.to_string(), |p| p.name.clone())
    }

    /// Whether pool `pool` reached its quota: writes to it are refused, except those that
    /// only free space.
    pub fn pool_full(&self, pool: i64) -> bool {
        self.quotas.get(&pool).is_some_and(|q| q.full)
    }

    /// Whether client instance `instance` is fenced at `now_unix_s` (its entry has not
    /// expired). Instance 0 (a client that does not name one) is never fenced.
    pub fn is_blocklisted(&self, instance: u64, now_unix_s: u64) -> bool {
        instance != 0
            && self
                .blocklist
                .get(&instance)
                .is_some_and(|until| *until > now_unix_s)
    }

    /// Refreshes the placement view's OSD states from the OSD entries.
    pub(crate) fn sync_states(&mut self) {
        self.placement.osds = self
            .osds
            .values()
            .map(|o| {
                (
                    o.id,
                    OsdState {
                        exists: true,
                        up: o.up,
                        reweight: o.reweight,
                    },
                )
            })
            .collect();
        self.placement.epoch = self.epoch;
    }

    /// Encodes the map (envelope + JSON payload).
    pub fn encode(&self) -> Vec<u8> {
        let enc = Encoded {
            fsid: self.fsid.clone(),
            epoch: self.epoch,
            crush: cairn_crush::text::write(&self.placement.crush),
            osds: self.osds.values().cloned().collect(),
            pools: self.placement.pools.values().cloned().collect(),
            exceptions: self.placement.exceptions.to_text(),
            pool_max: self.pool_max,
            pool_created: self.pool_created.clone(),
            pg_temp: self
                .placement
                .pg_temp
                .iter()
                .map(|(pg, acting)| (*pg, acting.clone()))
                .collect(),
            flags: self.flags.clone(),
            quotas: self.quotas.clone(),
            blocklist: self.blocklist.clone(),
        };
        envelope(&serde_json::to_vec(&enc).unwrap_or_default())
    }

    /// Decodes and verifies an encoded map.
    pub fn decode(bytes: &[u8]) -> Result<Self, MapError> {
        let payload = open_envelope(bytes)?;
        let enc: Encoded =
            serde_json::from_slice(payload).map_err(|e| MapError::Encoding(e.to_string()))?;
        let crush =
            cairn_crush::text::parse(&enc.crush).map_err(|e| MapError::Encoding(e.to_string()))?;
        let mut placement = OsdMap::all_up_in(crush);
        for pool in enc.pools {
            placement.add_pool(pool)?;
        }
        placement.exceptions =
            Exceptions::parse(&enc.exceptions).map_err(|e| MapError::Encoding(e.to_string()))?;
        placement.pg_temp = enc.pg_temp.into_iter().collect();
        let highest = placement.pools.keys().next_back().copied().unwrap_or(0);
        let mut map = ClusterMap {
            fsid: enc.fsid,
            epoch: enc.epoch,
            osds: enc.osds.into_iter().map(|o| (o.id, o)).collect(),
            placement,
            pool_max: enc.pool_max.max(highest),
            pool_created: enc.pool_created,
            flags: enc.flags,
            quotas: enc.quotas,
            blocklist: enc.blocklist,
        };
        map.sync_states();
        Ok(map)
    }
}

/// Wraps a payload: magic, version, length, crc32c, payload.
pub(crate) fn envelope(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    let len = u32::try_from(payload.len())
        .unwrap_or_else(|_| panic!("a map of {} bytes cannot be framed", payload.len()));
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc_fast::crc32_iscsi(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Verifies an envelope and returns its payload.
pub(crate) fn open_envelope(bytes: &[u8]) -> Result<&[u8], MapError> {
    let bad = |m: &str| MapError::Encoding(m.to_string());
    if bytes.len() < 14 || &bytes[..4] != MAGIC {
        return Err(bad("not a cairn map (bad magic or too short)"));
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != FORMAT_VERSION {
        return Err(MapError::Encoding(format!(
            "unsupported map format version {version}"
        )));
    }
    let len = u32::from_le_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]) as usize;
    if len > MAX_ENCODED_BYTES || bytes.len() != 14 + len {
        return Err(bad("length does not match"));
    }
    let crc = u32::from_le_bytes([bytes[10], bytes[11], bytes[12], bytes[13]]);
    let payload = &bytes[14..];
    if crc_fast::crc32_iscsi(payload) != crc {
        return Err(bad("checksum mismatch"));
    }
    Ok(payload)
}
