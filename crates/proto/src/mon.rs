//! Monitor protocol: the requests OSDs, clients and operators send the monitor, its replies and
//! refusals, and the frames that carry them as JSON payloads (the frame carries type, sequence
//! and checksums).

use cairn_clustermap::{MapError, MapFlag, PgUsage};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Requests the monitor serves (also the wire form, inside [`RequestBody`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Request {
    /// An OSD starts: register (or recognise by uuid) and mark up.
    Boot {
        /// Stable identity of the OSD's store.
        uuid: String,
        /// Host it runs on (its CRUSH failure domain).
        host: String,
        /// Address to reach it.
        addr: String,
        /// CRUSH weight (16.16; e.g. 1.0 per TiB).
        crush_weight: u32,
        /// The id a new OSD would like (e.g. `cairn up`'s `osdN` directory asks for N, so
        /// directory and id agree); given when free, otherwise the lowest free id. An OSD the
        /// map knows by its uuid keeps its id.
        #[serde(default)]
        want_id: Option<i32>,
    },
    /// `reporter` cannot reach `target` and has not for `failed_for_ms`. Like Ceph's failure
    /// reports it names the incarnation it is about (the target's address and up_from in the
    /// reporter's map): a report that reaches the monitor after the target restarted (sent
    /// before, or while the monitor was frozen) is about the dead process and is ignored.
    FailureReport {
        /// Reporting OSD.
        reporter: i32,
        /// Unreachable OSD.
        target: i32,
        /// How long the target has been unresponsive.
        failed_for_ms: u64,
        /// The address the reporter pings (empty: any incarnation).
        #[serde(default)]
        addr: String,
        /// The target's up_from in the reporter's map (0 when that map did not keep it).
        #[serde(default)]
        up_from: u64,
    },
    /// `reporter` tried to connect to `target` at `addr` and the connection was refused
    /// (nothing listens there: the process is gone although its host answers). Like Ceph's
    /// immediate failure report (`osd_fast_fail_on_connection_refused`), one such report
    /// marks the target down at once, without the heartbeat grace or a second reporter, but
    /// only when it is about the target's current incarnation: the target is up at `addr`
    /// and booted at `up_from`, as the reporter's map said when it started watching it.
    RefusedReport {
        /// Reporting OSD.
        reporter: i32,
        /// The OSD that refused the connection.
        target: i32,
        /// The address that refused it.
        addr: String,
        /// The target's up_from in the reporter's map (0 when that map did not keep it).
        up_from: u64,
    },
    /// An OSD says it is alive, and whether its store is past its full and nearfull ratios.
    Beacon {
        /// OSD id.
        id: i32,
        /// Past its full ratio.
        #[serde(default)]
        full: bool,
        /// Past its nearfull ratio.
        #[serde(default)]
        nearfull: bool,
    },
    /// A primary needs its up_thru at `want` or later (the start of the interval in which it
    /// is about to activate a PG) before the PG may go active.
    Alive {
        /// OSD id.
        id: i32,
        /// The interval start it needs recorded.
        want: u64,
    },
    /// A primary asks that PGs be served by temporary acting sets (Ceph's `pg_temp`, whose
    /// requests an OSD also batches) while their up sets are filled in the background, or,
    /// with an empty set, by their up sets again; all in one epoch.
    PgTemp {
        /// Per PG, its temporary acting set, primary first (empty to remove it).
        temps: Vec<(cairn_clustermap::PgId, Vec<i32>)>,
    },
    /// Operator: mark an OSD out (its data moves away).
    MarkOut {
        /// OSD id.
        id: i32,
    },
    /// Operator: mark an OSD in.
    MarkIn {
        /// OSD id.
        id: i32,
    },
    /// Operator: set an OSD's override weight (Ceph's `osd reweight`): 0x10000 (1.0) keeps its
    /// CRUSH share, less moves that fraction of its PGs to other OSDs, 0 is `out`.
    Reweight {
        /// OSD id.
        id: i32,
        /// 16.16 fixed point, 0..=0x10000.
        reweight: u32,
    },
    /// Operator: set an OSD's CRUSH weight (Ceph's `osd crush reweight`): its share of the
    /// data against the other OSDs' (by convention its capacity in TiB), its host's weight
    /// following.
    CrushReweight {
        /// OSD id.
        id: i32,
        /// 16.16 fixed point, 0..=[`MAX_CRUSH_WEIGHT`].
        weight: u32,
    },
    /// Operator: mark an OSD down (it must re-boot to come back).
    MarkDown {
        /// OSD id.
        id: i32,
    },
    /// Operator: declare a down OSD's data lost (Ceph's `osd lost`): PGs waiting (down) for
    /// an interval that only it could have written go on without it. It stays in the map and
    /// may boot again; what it held that no other copy has is gone.
    MarkLost {
        /// OSD id.
        id: i32,
    },
    /// Operator: remove a down OSD from the cluster for good (Ceph's `osd purge`): out of the
    /// map and CRUSH, its data re-placed on the others; its id may be given to a new OSD.
    RemoveOsd {
        /// OSD id.
        id: i32,
    },
    /// Operator: create a replicated pool with the default rule.
    CreatePool {
        /// Name.
        name: String,
        /// Replicas.
        size: u32,
        /// PG count.
        pg_num: u32,
    },
    /// Operator: remove a pool and every object in it. As Ceph's `osd pool delete NAME NAME
    /// --yes-i-really-really-mean-it`, the monitor refuses unless the name is given twice,
    /// the sender says it is sure, and the monitor allows pool deletion at all
    /// (`mon_allow_pool_delete`, off by default).
    RemovePool {
        /// Name.
        name: String,
        /// The name again (a typo in either one refuses).
        repeated: String,
        /// The sender's confirmation (`--yes-i-really-really-mean-it`).
        sure: bool,
    },
    /// Operator: change one of the monitor's options while it runs, as Ceph's `config set
    /// mon KEY VALUE`; today `mon_allow_pool_delete` (`true`/`false`). It lasts until the
    /// monitor restarts, which then takes its flags or TOML again.
    SetMonOption {
        /// The option's name.
        key: String,
        /// Its new value, as text.
        value: String,
    },
    /// Operator: change a pool's replication (Ceph's `osd pool set NAME size|min_size N`).
    /// A new size also sets min_size to its default for that size (size - size/2), as Ceph
    /// does; a min_size must be in 1..=size. Every PG of the pool starts a new interval: it
    /// peers again, and new copies are backfilled or surplus ones deleted.
    SetPool {
        /// Name.
        name: String,
        /// New replica count (1..=[`MAX_POOL_SIZE`]).
        size: Option<u32>,
        /// New count of copies a PG needs up to serve I/O.
        min_size: Option<u32>,
    },
    /// Operator: set (`on`) or unset a flag of [`MapFlag::PER_OSD`] on single OSDs (Ceph's
    /// `osd add-noout` / `rm-noout`, `add-noup`, `add-nodown`, `add-noin`), all in one epoch;
    /// none when every one already is as asked. Another flag, or an unknown OSD, is refused.
    SetOsdFlag {
        /// OSD ids.
        ids: Vec<i32>,
        /// The flag.
        flag: MapFlag,
        /// Set it (true) or unset it.
        on: bool,
    },
    /// Operator: set a pool's quota (Ceph's `osd pool set-quota`): each limit given replaces
    /// the pool's, 0 removes it, one not given is kept. The pool is judged against the PG
    /// usage known now at once, and then at every usage report.
    SetPoolQuota {
        /// Pool name.
        name: String,
        /// Most client objects (0: no limit).
        #[serde(default)]
        max_objects: Option<u64>,
        /// Most logical bytes, one copy (0: no limit).
        #[serde(default)]
        max_bytes: Option<u64>,
    },
    /// A primary's count of the client objects and bytes of PGs it leads (Ceph's PG stats),
    /// sent every few seconds; entries about PGs it does not lead in the monitor's map are
    /// ignored. At most [`MAX_PG_USAGE_PER_REPORT`] entries.
    PgUsage {
        /// Reporting OSD.
        id: i32,
        /// Per PG, its usage.
        usage: Vec<PgUsage>,
    },
    /// Operator: set (`on`) or unset cluster flags (Ceph's `osd set|unset FLAG`), all in one
    /// epoch; none when every flag already is as asked.
    SetFlags {
        /// The flags.
        flags: Vec<MapFlag>,
        /// Set them (true) or unset them.
        on: bool,
    },
    /// Fence a client instance out of the OSDs for `expire_s` seconds from now (Ceph's `osd
    /// blocklist add`), or lift its fence when `expire_s` is None (`osd blocklist rm`). Sent
    /// by an operator, and by a client taking over a lease whose holder stopped renewing. The
    /// reply's epoch is the first in which the fence holds.
    Blocklist {
        /// The client instance (a client's `instance` in its ops; never 0).
        instance: u64,
        /// How long the fence lasts (1..=[`MAX_BLOCKLIST_EXPIRE_S`]); None lifts it.
        expire_s: Option<u64>,
    },
}

/// Longest fence [`Request::Blocklist`] accepts: a year.
pub const MAX_BLOCKLIST_EXPIRE_S: u64 = 365 * 24 * 3600;

/// The fence a lease taker puts on the holder it replaces: Ceph's
/// `mon_osd_blocklist_default_expire`, an hour.
pub const DEFAULT_BLOCKLIST_EXPIRE_S: u64 = 3600;

impl Request {
    /// A short name of the request's kind (metrics label).
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Boot { .. } => "boot",
            Request::FailureReport { .. } => "failure_report",
            Request::RefusedReport { .. } => "refused_report",
            Request::Beacon { .. } => "beacon",
            Request::Alive { .. } => "alive",
            Request::PgTemp { .. } => "pg_temp",
            Request::MarkOut { .. } => "mark_out",
            Request::MarkIn { .. } => "mark_in",
            Request::MarkDown { .. } => "mark_down",
            Request::Reweight { .. } => "reweight",
            Request::CrushReweight { .. } => "crush_reweight",
            Request::MarkLost { .. } => "mark_lost",
            Request::RemoveOsd { .. } => "remove_osd",
            Request::CreatePool { .. } => "create_pool",
            Request::RemovePool { .. } => "remove_pool",
            Request::SetMonOption { .. } => "set_mon_option",
            Request::SetPool { .. } => "set_pool",
            Request::SetFlags { .. } => "set_flags",
            Request::SetOsdFlag { .. } => "set_osd_flag",
            Request::SetPoolQuota { .. } => "set_pool_quota",
            Request::PgUsage { .. } => "pg_usage",
            Request::Blocklist { .. } => "blocklist",
        }
    }
}

/// Result of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The OSD's id and the epoch in which it is up.
    Booted {
        /// Assigned id.
        id: i32,
        /// Map epoch.
        epoch: u64,
    },
    /// Done; the map is at this epoch (unchanged if nothing needed changing).
    Done {
        /// Map epoch.
        epoch: u64,
    },
}

/// Largest CRUSH weight `CrushReweight` accepts: 1000.0 (16.16), a 1000 TiB device by the
/// usual convention.
pub const MAX_CRUSH_WEIGHT: u32 = 1000 << 16;

/// Largest replica count `SetPool` accepts (Ceph's `osd pool set size` limit).
pub const MAX_POOL_SIZE: u32 = 10;

/// Most PG entries in one pg_temp request (explicit limit).
pub const MAX_PG_TEMPS_PER_REQUEST: usize = 4096;

/// What the monitor refuses or fails to do, as the monitor and its clients both see it.
#[derive(Debug, Error)]
pub enum MonError {
    /// A stored or received map/incremental failed its checks.
    #[error("bad encoding: {0}")]
    Encoding(String),
    /// An incremental does not follow the map's epoch.
    #[error("incremental for epoch {got} cannot apply to epoch {have}")]
    EpochGap {
        /// Epoch of the map.
        have: u64,
        /// Epoch the incremental produces.
        got: u64,
    },
    /// The request names something that does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The request is invalid.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The monitor refused a client's request; its own message says why (it already names
    /// the kind of refusal, so nothing is added in front).
    #[error("{0}")]
    Refused(String),
    /// The monitor could not be reached or did not answer in time (the request may or may not
    /// have been applied).
    #[error("monitor unreachable: {0}")]
    Unreachable(String),
    /// A placement computation failed.
    #[error(transparent)]
    Placement(MapError),
    /// A CRUSH edit failed.
    #[error(transparent)]
    Crush(#[from] cairn_crush::CrushError),
}

impl From<MapError> for MonError {
    /// A map's own refusals keep their kind (a missing OSD is `NotFound` whoever finds it);
    /// placement failures stay placement failures.
    fn from(e: MapError) -> Self {
        match e {
            MapError::Encoding(m) => MonError::Encoding(m),
            MapError::EpochGap { have, got } => MonError::EpochGap { have, got },
            MapError::NotFound(m) => MonError::NotFound(m),
            MapError::Invalid(m) => MonError::Invalid(m),
            MapError::Crush(c) => MonError::Crush(c),
            other => MonError::Placement(other),
        }
    }
}

/// Frame type of a request to the monitor.
pub const MSG_MON_REQUEST: u16 = 0x0100;
/// Frame type of the monitor's reply to a request.
pub const MSG_MON_REPLY: u16 = 0x0101;
/// Frame type of a map update pushed to subscribers.
pub const MSG_MON_MAP: u16 = 0x0102;

/// A request, tagged with an id the reply echoes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonRequest {
    /// Caller-chosen id, echoed in the reply.
    pub tid: u64,
    /// What is asked.
    pub body: RequestBody,
}

/// What a request asks: a monitor operation, or a subscription (handled by the daemon).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestBody {
    /// A request the monitor core serves.
    Op(Request),
    /// Subscribe to maps newer than `have_epoch` (0 = send the full map first).
    Subscribe {
        /// Newest epoch the subscriber already has.
        have_epoch: u64,
    },
    /// The maps from epoch `from` on (see [`MapRange`]), for an OSD rebuilding epochs it missed.
    History {
        /// Oldest epoch wanted.
        from: u64,
    },
    /// Keys, tickets and capabilities (handled by the daemon's authentication database).
    Auth(AuthRequest),
}

/// Requests about entities and keys (Ceph's `auth` commands and cephx's ticket requests).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthRequest {
    /// A ticket for the OSD service, for the asking entity, binding the client id its ops
    /// name ([`crate::op::OpHeader::client`]) when it gives one: the monitor refuses an id
    /// another entity holds, and OSDs schedule the ticket holder's ops by the bound id alone.
    Ticket {
        /// The client id to bind (Ceph's global id, chosen by the client here).
        #[serde(default)]
        client_id: Option<u64>,
    },
    /// The OSD service secret, sealed with the asking OSD's key.
    ServiceSecret,
    /// Operator: the entity's keyring entry, created with `caps` if it does not exist (an
    /// existing entity's caps must equal `caps`, as Ceph's `auth get-or-create` insists).
    GetOrCreate {
        /// Entity name (`client.NAME`, `osd.N`).
        entity: String,
        /// Capability strings by service.
        caps: std::collections::BTreeMap<String, String>,
    },
    /// Operator: add an entity with `caps` and the given key (base64, as in a keyring), or a
    /// new random one; as Ceph's `auth add`, an entity that exists already must have that
    /// key and those caps (the request is then a no-op), else it is refused.
    Add {
        /// Entity name (`client.NAME`, `osd.N`).
        entity: String,
        /// Capability strings by service.
        caps: std::collections::BTreeMap<String, String>,
        /// Its key (base64); None: a new random one.
        key: Option<String>,
    },
    /// Operator: give an entity a new random key (Ceph's `auth rotate`): its old key is
    /// refused at its next connection; tickets already issued run out within their lifetime.
    Rotate {
        /// Entity name.
        entity: String,
    },
    /// Operator: one entity's keyring entry.
    Get {
        /// Entity name.
        entity: String,
    },
    /// Operator: replace an entity's capabilities.
    Caps {
        /// Entity name.
        entity: String,
        /// Capability strings by service.
        caps: std::collections::BTreeMap<String, String>,
    },
    /// Operator: every entity's keyring entry.
    List,
    /// Operator: remove an entity (its key is refused from then on).
    Remove {
        /// Entity name.
        entity: String,
    },
}

/// The answer to an [`AuthRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthAnswer {
    /// A ticket for the OSD service.
    Ticket {
        /// The ticket, sealed with the service secret (opaque to its holder).
        ticket: Vec<u8>,
        /// Its session key, sealed with the holder's key.
        session_key: Vec<u8>,
        /// When it stops being accepted (seconds since the Unix epoch).
        expires_unix_s: u64,
    },
    /// The OSD service secret, sealed with the asking OSD's key.
    ServiceSecret {
        /// The sealed secret.
        sealed: Vec<u8>,
    },
    /// Keyring text (of one entity, or of all).
    Keyring {
        /// In the keyring file layout.
        text: String,
    },
    /// Done.
    Done,
}

/// Past maps: the full map at the oldest epoch asked for (or at the oldest the monitor keeps,
/// if that is newer) and every incremental after it up to the current epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapRange {
    /// Encoded full map (see [`cairn_clustermap::ClusterMap::encode`]).
    pub full: Vec<u8>,
    /// Encoded incrementals in epoch order (see [`cairn_clustermap::Incremental::encode`]).
    pub incrementals: Vec<Vec<u8>>,
}

/// The reply to a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonReply {
    /// The request's id.
    pub tid: u64,
    /// Map epoch after the request.
    pub epoch: u64,
    /// Assigned OSD id for a boot.
    pub osd_id: Option<i32>,
    /// Error text, if the request failed.
    pub error: Option<String>,
    /// Past maps, in reply to [`RequestBody::History`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maps: Option<MapRange>,
    /// The answer to a [`RequestBody::Auth`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthAnswer>,
}

impl MonReply {
    /// A reply to `tid` at `epoch` carrying nothing else.
    pub fn done(tid: u64, epoch: u64) -> MonReply {
        MonReply {
            tid,
            epoch,
            osd_id: None,
            error: None,
            maps: None,
            auth: None,
        }
    }

    /// A refusal of `tid` at `epoch`, saying why.
    pub fn refused(tid: u64, epoch: u64, why: String) -> MonReply {
        MonReply {
            error: Some(why),
            ..MonReply::done(tid, epoch)
        }
    }
}

/// A map update: a full map or the incrementals since the subscriber's epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MapUpdate {
    /// Encoded full map (see [`cairn_clustermap::ClusterMap::encode`]).
    Full(Vec<u8>),
    /// Encoded incrementals in epoch order (see [`cairn_clustermap::Incremental::encode`]).
    Incrementals(Vec<Vec<u8>>),
}

/// Serializes a protocol message.
pub fn to_payload<T: Serialize>(msg: &T) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec(msg).unwrap_or_default())
}

/// Deserializes a protocol message.
pub fn from_payload<'a, T: Deserialize<'a>>(payload: &'a [u8]) -> Result<T, MonError> {
    serde_json::from_slice(payload).map_err(|e| MonError::Encoding(e.to_string()))
}
