//! The client library: follows the cluster map from the monitor, computes each object's PG and
//! primary itself (no metadata server), sends the operation to the primary, and on a stale map,
//! a failed replica or a timeout waits for a newer map and resends, within a per-operation
//! deadline. Every read is checked against the crc32c the OSD computed. [`mon`] is the
//! monitor's client, which daemons use too.

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`), and this crate keeps them so.
#![deny(clippy::cast_possible_truncation)]
#![warn(missing_docs)]

pub mod lease;
pub mod mon;
pub mod service;
pub mod tickets;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use crate::mon::MonClient;
use bytes::Bytes;
use cairn_clustermap::{ClusterMap, MapFlag};
use cairn_clustermap::{MappingCache, PgId};
use cairn_msgr::session::{Policy, Session, SessionSender};
use cairn_msgr::Limits;
use cairn_proto::admin::{AdminReply, AdminRequest, MSG_ADMIN, MSG_ADMIN_REPLY};
use cairn_proto::mon::Request;
use cairn_proto::pairs::{decode_pairs, encode_keys, encode_pairs, Pairs};
use cairn_proto::{
    decode, decode_with_data, encode, OpHeader, OpKind, OpResult, ReplyHeader, ReqId, MSG_OSD_OP,
    MSG_OSD_OP_REPLY,
};
use thiserror::Error;
use tokio::sync::{oneshot, watch};

/// Client errors.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The pool does not exist.
    #[error("no pool `{0}`")]
    NoPool(String),
    /// The object does not exist.
    #[error("no object `{0}`")]
    NotFound(String),
    /// The operation did not complete before its deadline.
    #[error("operation on `{object}` timed out after {timeout_ms} ms (last error: {last})")]
    Timeout {
        /// Object.
        object: String,
        /// Deadline.
        timeout_ms: u64,
        /// The last failure seen.
        last: String,
    },
    /// Data failed its checksum: never returned to the caller.
    #[error("checksum mismatch reading `{0}`")]
    Checksum(String),
    /// The object's data is damaged on its primary and no other copy could replace it; no
    /// bytes are returned, and the request is not retried.
    #[error("object data damaged: {0}")]
    Damaged(String),
    /// The OSD refused the request as invalid (bad name, checksum, limit); not retried.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// An OSD holding the object is out of space; not retried.
    #[error("out of space: {0}")]
    NoSpace(String),
    /// The pool reached its quota (Ceph's EDQUOT): writes other than removals are refused
    /// until removals bring it back under; not retried.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// An admin command failed or its OSD did not answer.
    #[error("osd.{osd}: {reason}")]
    Admin {
        /// The OSD.
        osd: i32,
        /// Why.
        reason: String,
    },
    /// A conditional write's precondition did not hold (RADOS's assert_version): the object
    /// is at another version (0: absent); nothing was applied, and it is not retried.
    #[error("`{object}` is at version {current}, not the one asserted")]
    VersionMismatch {
        /// Object.
        object: String,
        /// Its version now (0: absent).
        current: u64,
    },
    /// This client instance is fenced out of the OSDs (blocklisted in the map): another
    /// client took over what it held. Nothing it sends is served any more; not retried.
    #[error("this client (instance {instance:016x}) is blocklisted: {why}")]
    Blocklisted {
        /// The fenced instance (this client's).
        instance: u64,
        /// The OSD's words.
        why: String,
    },
    /// The monitor failed.
    #[error(transparent)]
    Mon(#[from] cairn_proto::mon::MonError),
}

/// What a request addresses: an object (placed by its name) or a whole PG (listing).
#[derive(Clone, Copy)]
enum Target<'a> {
    Object(&'a str),
    Pg(u32),
}

/// Replies awaited, by tid: the header, the data and the data's crc32c as the messenger
/// verified it on arrival.
type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<(ReplyHeader, Bytes, u32)>>>>;

/// Where an operation goes, by the client's map.
struct Location {
    /// The map's epoch.
    epoch: u64,
    /// The pool's id.
    pool: i64,
    /// The object's PG.
    pg: PgId,
    /// The primary's id, address and incarnation (up_from), if one is up.
    primary: Option<(i32, String, u64)>,
    /// Why the PG cannot serve, by the map: fewer copies up than the pool's min_size (the
    /// OSDs hold such requests until more come up, as Ceph's do).
    inactive: Option<String>,
    /// Why writes to the pool are refused, when the map marks it past its quota.
    quota_full: Option<String>,
}

/// The client's session with one OSD: where it goes, its sender, and the task reading its
/// replies. Dropping it (the OSD moved, or the client is dropped) stops the reader, which ends
/// the session and closes its connection: the OSD then forgets this client.
struct OsdSession {
    addr: String,
    sender: SessionSender,
    reader: tokio::task::AbortHandle,
}

impl Drop for OsdSession {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A connection to a cairn cluster.
pub struct Client {
    _mon: Arc<MonClient>,
    /// Tickets for the OSDs' authenticated listeners; None where nothing authenticates.
    osd_credentials: Option<Arc<dyn cairn_msgr::handshake::CredentialSource>>,
    map: watch::Receiver<Option<ClusterMap>>,
    sessions: tokio::sync::Mutex<HashMap<i32, OsdSession>>,
    pending: Pending,
    next_tid: AtomicU64,
    id: u64,
    /// Random, chosen at connection: with `next_request`, makes the request ids of this
    /// client's writes unique in the cluster (see [`ReqId`]).
    nonce: u64,
    next_request: AtomicU64,
    /// Set once an OSD refused an op of this instance as blocklisted: it stays fenced, even
    /// before its own map says so.
    fenced: std::sync::atomic::AtomicBool,
    /// PG mappings of the current map, so that addressing an op does not run CRUSH.
    mappings: std::sync::Mutex<MappingCache>,
    /// Deadline of one operation, including resends.
    pub op_timeout_ms: u64,
    /// Marks every write as a metadata server's own ([`OpHeader::full_force`]): the OSDs take
    /// it past their full ratio, up to their failsafe ratio. Refused to an entity without the
    /// `mds` monitor profile.
    pub full_force: bool,
}

impl Client {
    /// Connects to the monitor at `mon` and waits for the first map. `client_id` names this
    /// client's sessions on the monitor and every OSD, and its QoS queue there: it must be
    /// unique in the cluster ([`random_client_id`] gives one).
    pub async fn connect(mon: SocketAddr, client_id: u64) -> Result<Client, ClientError> {
        Self::connect_as(mon, client_id, None).await
    }

    /// As [`Client::connect`], authenticating as `auth`: to the monitor with its key, to the
    /// OSDs with tickets from the monitor (none: nothing authenticates).
    pub async fn connect_as(
        mon: SocketAddr,
        client_id: u64,
        auth: Option<tickets::ClientAuth>,
    ) -> Result<Client, ClientError> {
        let mon_creds = auth.as_ref().map(|a| a.mon_credentials());
        let mon_client = Arc::new(MonClient::connect_as(mon, client_id, mon_creds).await);
        let osd_credentials = auth.map(|a| {
            Arc::new(tickets::TicketSource::new(mon_client.clone(), a, client_id))
                as Arc<dyn cairn_msgr::handshake::CredentialSource>
        });
        mon_client.subscribe(30_000).await?;
        mon_client.wait_for_epoch(1, 30_000).await?;
        Ok(Client {
            map: mon_client.watch(),
            _mon: mon_client,
            osd_credentials,
            sessions: tokio::sync::Mutex::new(HashMap::new()),
            pending: Arc::default(),
            next_tid: AtomicU64::new(1),
            id: client_id,
            nonce: random_nonce(client_id),
            mappings: std::sync::Mutex::default(),
            next_request: AtomicU64::new(1),
            fenced: std::sync::atomic::AtomicBool::new(false),
            op_timeout_ms: 30_000,
            full_force: false,
        })
    }

    /// The monitor's client this client follows the map with (daemons built on a client ask
    /// the monitor through it).
    pub fn mon(&self) -> &Arc<MonClient> {
        &self._mon
    }

    /// What this client presents to a daemon that takes tickets (OSDs, the metadata server);
    /// none where the cluster does not authenticate.
    pub fn service_credentials(&self) -> Option<Arc<dyn cairn_msgr::handshake::CredentialSource>> {
        self.osd_credentials.clone()
    }

    /// The current cluster map, if one has arrived.
    pub fn map(&self) -> Option<ClusterMap> {
        self.map.borrow().clone()
    }

    /// The current map epoch.
    pub fn epoch(&self) -> u64 {
        self.map.borrow().as_ref().map_or(0, |m| m.epoch)
    }

    /// This client's instance: random per connection, never 0, sent in every op. It is what
    /// the blocklist fences ([`Client::blocklist`]) and what makes its request ids unique.
    pub fn instance(&self) -> u64 {
        self.nonce
    }

    /// Whether this client's current map fences client instance `instance` now (a daemon
    /// that serves clients refuses the ones the OSDs refuse).
    pub fn is_blocklisted(&self, instance: u64) -> bool {
        let now_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.map
            .borrow()
            .as_ref()
            .is_some_and(|m| m.is_blocklisted(instance, now_unix_s))
    }

    /// Whether this client instance is fenced: an OSD refused one of its ops as blocklisted,
    /// or its map blocklists it. A holder of a lease that finds itself fenced lost it.
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire) || self.is_blocklisted(self.nonce)
    }

    /// Fences client instance `instance` out of the OSDs for `expire_s` seconds (None lifts
    /// its fence), and returns once this client has the map in which that holds. Every op
    /// this client sends afterwards carries that epoch, and an OSD serves an op only once it
    /// has the op's epoch: from then on none of the fenced instance's ops reaches the store
    /// after one of this client's (Ceph's epoch barrier). Returns the epoch.
    pub async fn blocklist(
        &self,
        instance: u64,
        expire_s: Option<u64>,
    ) -> Result<u64, ClientError> {
        let reply = self
            ._mon
            .op(Request::Blocklist { instance, expire_s }, MON_OP_TIMEOUT_MS)
            .await?;
        self._mon
            .wait_for_epoch(reply.epoch, MON_OP_TIMEOUT_MS)
            .await?;
        Ok(reply.epoch)
    }

    /// Replaces an object's content; returns its new version once every replica has it durably.
    pub async fn write_full(
        &self,
        pool: &str,
        name: &str,
        data: &[u8],
    ) -> Result<u64, ClientError> {
        self.write_full_bytes(pool, name, Bytes::copy_from_slice(data))
            .await
    }

    /// [`Client::write_full`] for data the caller already holds as [`Bytes`]: the bytes are
    /// framed from there, without the copy `write_full` makes.
    pub async fn write_full_bytes(
        &self,
        pool: &str,
        name: &str,
        data: Bytes,
    ) -> Result<u64, ClientError> {
        let (h, _) = self.submit(pool, name, OpKind::WriteFull, data).await?;
        Ok(h.version)
    }

    /// [`Client::write_full`] applied only while the object is at version `expected` (0: only
    /// when it does not exist, an exclusive create); [`ClientError::VersionMismatch`]
    /// otherwise. Returns the new version.
    pub async fn write_full_if(
        &self,
        pool: &str,
        name: &str,
        data: &[u8],
        expected: u64,
    ) -> Result<u64, ClientError> {
        let data = Bytes::copy_from_slice(data);
        let (h, _) = self
            .submit_to(
                pool,
                Target::Object(name),
                OpKind::WriteFull,
                data,
                Some(expected),
            )
            .await?;
        Ok(h.version)
    }

    /// [`Client::set_xattr`] applied only while the object is at version `expected` (0: only
    /// when it does not exist): a compare-and-swap on the object, such as a lock's. Returns
    /// the new version.
    pub async fn set_xattr_if(
        &self,
        pool: &str,
        name: &str,
        key: &str,
        value: &[u8],
        expected: u64,
    ) -> Result<u64, ClientError> {
        let kind = OpKind::SetXattr { name: key.into() };
        let data = Bytes::copy_from_slice(value);
        let (h, _) = self
            .submit_to(pool, Target::Object(name), kind, data, Some(expected))
            .await?;
        Ok(h.version)
    }

    /// [`Client::remove_xattr`] applied only while the object is at version `expected`.
    /// Returns the new version.
    pub async fn remove_xattr_if(
        &self,
        pool: &str,
        name: &str,
        key: &str,
        expected: u64,
    ) -> Result<u64, ClientError> {
        let kind = OpKind::RemoveXattr { name: key.into() };
        let (h, _) = self
            .submit_to(
                pool,
                Target::Object(name),
                kind,
                Bytes::new(),
                Some(expected),
            )
            .await?;
        Ok(h.version)
    }

    /// Reads a whole object, verified against its checksum.
    pub async fn read(&self, pool: &str, name: &str) -> Result<Vec<u8>, ClientError> {
        Ok(self.read_bytes(pool, name).await?.to_vec())
    }

    /// [`Client::read`] returning the received buffer itself, without the copy into a `Vec`.
    pub async fn read_bytes(&self, pool: &str, name: &str) -> Result<Bytes, ClientError> {
        let (_, data) = self
            .submit(
                pool,
                name,
                OpKind::Read {
                    offset: 0,
                    len: u64::MAX,
                },
                Bytes::new(),
            )
            .await?;
        Ok(data)
    }

    /// Size and version of an object.
    pub async fn stat(&self, pool: &str, name: &str) -> Result<(u64, u64), ClientError> {
        let (h, _) = self.submit(pool, name, OpKind::Stat, Bytes::new()).await?;
        Ok((h.size, h.version))
    }

    /// Deletes an object; [`ClientError::NotFound`] if it does not exist (as `rados rm`). A
    /// resend of a remove that was applied is answered from the PG log, so it succeeds.
    pub async fn remove(&self, pool: &str, name: &str) -> Result<(), ClientError> {
        self.submit(pool, name, OpKind::Remove, Bytes::new())
            .await
            .map(|_| ())
    }

    /// Writes `data` at `offset` (the object grows as needed); returns the new version.
    pub async fn write(
        &self,
        pool: &str,
        name: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<u64, ClientError> {
        let kind = OpKind::Write { offset };
        let (h, _) = self
            .submit(pool, name, kind, Bytes::copy_from_slice(data))
            .await?;
        Ok(h.version)
    }

    /// Appends `data` at the object's end; returns the new version.
    pub async fn append(&self, pool: &str, name: &str, data: &[u8]) -> Result<u64, ClientError> {
        let (h, _) = self
            .submit(pool, name, OpKind::Append, Bytes::copy_from_slice(data))
            .await?;
        Ok(h.version)
    }

    /// Sets the object's size (cuts or zero-extends).
    pub async fn truncate(&self, pool: &str, name: &str, size: u64) -> Result<u64, ClientError> {
        let (h, _) = self
            .submit(pool, name, OpKind::Truncate { size }, Bytes::new())
            .await?;
        Ok(h.version)
    }

    /// Reads `len` bytes at `offset` (fewer at the object's end), verified.
    pub async fn read_range(
        &self,
        pool: &str,
        name: &str,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, ClientError> {
        Ok(self
            .read_range_bytes(pool, name, offset, len)
            .await?
            .to_vec())
    }

    /// As [`Client::read_range`], returning the received buffer itself (no copy).
    pub async fn read_range_bytes(
        &self,
        pool: &str,
        name: &str,
        offset: u64,
        len: u64,
    ) -> Result<Bytes, ClientError> {
        let (_, data) = self
            .submit(pool, name, OpKind::Read { offset, len }, Bytes::new())
            .await?;
        Ok(data)
    }

    /// Sets an extended attribute (names starting with `_` are reserved).
    pub async fn set_xattr(
        &self,
        pool: &str,
        name: &str,
        key: &str,
        value: &[u8],
    ) -> Result<(), ClientError> {
        let kind = OpKind::SetXattr { name: key.into() };
        self.submit(pool, name, kind, Bytes::copy_from_slice(value))
            .await
            .map(|_| ())
    }

    /// One extended attribute.
    pub async fn get_xattr(
        &self,
        pool: &str,
        name: &str,
        key: &str,
    ) -> Result<Vec<u8>, ClientError> {
        let kind = OpKind::GetXattr { name: key.into() };
        let (_, data) = self.submit(pool, name, kind, Bytes::new()).await?;
        Ok(data.to_vec())
    }

    /// Every user extended attribute, by name.
    pub async fn get_xattrs(
        &self,
        pool: &str,
        name: &str,
    ) -> Result<Vec<(String, Vec<u8>)>, ClientError> {
        let (_, data) = self
            .submit(pool, name, OpKind::GetXattrs, Bytes::new())
            .await?;
        decode_pairs(&data)
            .map_err(|e| ClientError::Invalid(e.to_string()))?
            .into_iter()
            .map(|(k, v)| {
                String::from_utf8(k)
                    .map(|k| (k, v))
                    .map_err(|_| ClientError::Invalid("xattr name is not UTF-8".into()))
            })
            .collect()
    }

    /// Removes an extended attribute.
    pub async fn remove_xattr(&self, pool: &str, name: &str, key: &str) -> Result<(), ClientError> {
        let kind = OpKind::RemoveXattr { name: key.into() };
        self.submit(pool, name, kind, Bytes::new())
            .await
            .map(|_| ())
    }

    /// Sets omap entries (creating the object if needed), atomically.
    pub async fn omap_set(
        &self,
        pool: &str,
        name: &str,
        entries: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<u64, ClientError> {
        let data = Bytes::from(encode_pairs(entries));
        let (h, _) = self.submit(pool, name, OpKind::OmapSet, data).await?;
        Ok(h.version)
    }

    /// [`Client::omap_set`] applied only while the object is at version `expected` (0: only
    /// when it does not exist); [`ClientError::VersionMismatch`] otherwise: a compare-and-swap
    /// of entries against everything else written to the object since it was read. Returns
    /// the new version.
    pub async fn omap_set_if(
        &self,
        pool: &str,
        name: &str,
        entries: &[(Vec<u8>, Vec<u8>)],
        expected: u64,
    ) -> Result<u64, ClientError> {
        let data = Bytes::from(encode_pairs(entries));
        let (h, _) = self
            .submit_to(
                pool,
                Target::Object(name),
                OpKind::OmapSet,
                data,
                Some(expected),
            )
            .await?;
        Ok(h.version)
    }

    /// Removes omap keys, atomically.
    pub async fn omap_remove(
        &self,
        pool: &str,
        name: &str,
        keys: &[Vec<u8>],
    ) -> Result<u64, ClientError> {
        let data = Bytes::from(encode_keys(keys));
        let (h, _) = self.submit(pool, name, OpKind::OmapRemove, data).await?;
        Ok(h.version)
    }

    /// Omap entries in key order after `after` (exclusive; empty = from the start) with
    /// `prefix`, at most `max`; the flag says whether more follow.
    pub async fn omap_list(
        &self,
        pool: &str,
        name: &str,
        after: &[u8],
        prefix: &[u8],
        max: u32,
    ) -> Result<(Pairs, bool), ClientError> {
        let kind = OpKind::OmapList {
            after: after.to_vec(),
            prefix: prefix.to_vec(),
            max,
        };
        let (h, data) = self.submit(pool, name, kind, Bytes::new()).await?;
        let pairs = decode_pairs(&data).map_err(|e| ClientError::Invalid(e.to_string()))?;
        Ok((pairs, h.more))
    }

    /// Every object name of a pool, PG by PG (each PG's names in byte order).
    pub async fn list_objects(&self, pool: &str) -> Result<Vec<String>, ClientError> {
        let pg_num = {
            let guard = self.map.borrow();
            guard
                .as_ref()
                .and_then(|m| m.placement.pool_named(pool))
                .map(|p| p.pg_num)
                .ok_or_else(|| ClientError::NoPool(pool.to_string()))?
        };
        let mut out = Vec::new();
        for seed in 0..pg_num {
            let mut after = String::new();
            loop {
                let kind = OpKind::ListObjects {
                    after: after.clone(),
                    max: 1000,
                };
                let (h, data) = self
                    .submit_to(pool, Target::Pg(seed), kind, Bytes::new(), None)
                    .await?;
                let names = decode_pairs(&data).map_err(|e| ClientError::Invalid(e.to_string()))?;
                let n = names.len();
                for (k, _) in names {
                    let name = String::from_utf8(k)
                        .map_err(|_| ClientError::Invalid("object name is not UTF-8".into()))?;
                    after.clone_from(&name);
                    out.push(name);
                }
                if !h.more || n == 0 {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// A lossy session `sid` to the OSD at `sock`, authenticated with this client's tickets
    /// where the cluster authenticates.
    async fn dial_osd(&self, sock: SocketAddr, sid: u64) -> Session {
        Session::connect_as(
            sock,
            sid,
            Limits::default(),
            100,
            Policy::Lossy,
            self.osd_credentials.clone(),
        )
        .await
    }

    /// Runs an admin command on `osd` (e.g. `config set osd_op_queue wpq`).
    pub async fn tell(&self, osd: i32, args: &[String]) -> Result<String, ClientError> {
        let addr = self
            .map
            .borrow()
            .as_ref()
            .and_then(|m| m.osds.get(&osd).filter(|o| o.up).map(|o| o.addr.clone()))
            .ok_or_else(|| ClientError::Admin {
                osd,
                reason: "not up in the map".into(),
            })?;
        let admin_err = |reason: String| ClientError::Admin { osd, reason };
        let sock: SocketAddr = addr.parse().map_err(|e| admin_err(format!("{e}")))?;
        let sid = (self.id << 20) ^ (osd as u64) ^ 0xad31_0000_0000_0000;
        let mut session = self.dial_osd(sock, sid).await;
        let tid = self.next_tid.fetch_add(1, Ordering::Relaxed);
        let req = AdminRequest {
            tid,
            args: args.to_vec(),
        };
        session
            .send(MSG_ADMIN, encode(&req, &[]))
            .await
            .map_err(|e| admin_err(e.to_string()))?;
        let frame = session
            .recv_timeout(10_000)
            .await
            .map_err(|e| admin_err(e.to_string()))?;
        if frame.header.msg_type != MSG_ADMIN_REPLY {
            return Err(admin_err(format!(
                "unexpected answer type {:#x}",
                frame.header.msg_type
            )));
        }
        let (reply, _) =
            decode::<AdminReply>(&frame.payload).map_err(|e| admin_err(e.to_string()))?;
        reply.result.map_err(admin_err)
    }

    /// Why the cluster holds this client's writes (`write`) or reads now: `pausewr` or
    /// `pauserd` set in its map.
    fn paused(&self, write: bool) -> Option<String> {
        let flag = match write {
            true => MapFlag::PauseWr,
            false => MapFlag::PauseRd,
        };
        let guard = self.map.borrow();
        let map = guard.as_ref()?;
        map.has(flag).then(|| {
            let what = if write { "writes" } else { "reads" };
            format!(
                "{flag} is set at epoch {}: the cluster holds {what}",
                map.epoch
            )
        })
    }

    /// Where an object (or, for `Target::Pg`, a PG) lives now.
    fn locate(&self, pool: &str, target: &Target<'_>) -> Result<Location, ClientError> {
        let guard = self.map.borrow();
        let map = guard
            .as_ref()
            .ok_or_else(|| ClientError::NoPool(pool.to_string()))?;
        let p = map
            .placement
            .pool_named(pool)
            .ok_or_else(|| ClientError::NoPool(pool.to_string()))?;
        let pg = match target {
            Target::Object(name) => p.object_pg(name, "", ""),
            Target::Pg(seed) => PgId {
                pool: p.id,
                seed: *seed,
            },
        };
        let mut mappings = self.mappings.lock().unwrap_or_else(|p| p.into_inner());
        let mapping = mappings.get(map.epoch, &map.placement, pg);
        let primary = mapping
            .as_ref()
            .and_then(|m| m.acting_primary())
            .and_then(|o| {
                map.osds
                    .get(&o)
                    .map(|e| (o, e.addr.clone(), e.up_from.unwrap_or(0)))
            });
        let up = mapping.as_ref().map_or(0, |m| m.acting.len());
        let inactive = (up < p.min_size as usize).then(|| {
            format!(
                "pg {pg} has {up} of min_size {} copies up at epoch {}: it serves nothing until more of its OSDs are up",
                p.min_size, map.epoch
            )
        });
        Ok(Location {
            epoch: map.epoch,
            pool: p.id,
            pg,
            primary,
            inactive,
            quota_full: map
                .pool_full(p.id)
                .then(|| cairn_clustermap::quota::refusal(map, p.id)),
        })
    }

    /// Waits for the answer in `rx`, or until a map newer than `epoch` (the one the operation
    /// was addressed with) makes another OSD (or the same one at another address, or booted
    /// again: another up_from) the primary of `target` than `sent_to`: `None` then, and the
    /// operation is resent at once to the new primary (as Ceph's Objecter does) instead of
    /// after the attempt's timeout; a write resent so is answered from the PG log if it was
    /// applied.
    async fn reply_or_new_primary<T>(
        &self,
        mut rx: oneshot::Receiver<T>,
        pool: &str,
        target: &Target<'_>,
        (epoch, sent_to): (u64, (i32, &str, u64)),
    ) -> Option<Result<T, oneshot::error::RecvError>> {
        let mut maps = self.map.clone();
        let mut seen = epoch;
        loop {
            let now = maps.borrow_and_update().as_ref().map_or(seen, |m| m.epoch);
            if now != seen {
                seen = now;
                let primary = self.locate(pool, target).ok().and_then(|l| l.primary);
                if primary.as_ref().map(|(o, a, u)| (*o, a.as_str(), *u)) != Some(sent_to) {
                    return None;
                }
            }
            tokio::select! {
                r = &mut rx => return Some(r),
                changed = maps.changed() => {
                    if changed.is_err() {
                        return Some(rx.await);
                    }
                }
            }
        }
    }

    async fn session(&self, osd: i32, addr: &str) -> Result<SessionSender, String> {
        let mut sessions = self.sessions.lock().await;
        if let Some(known) = sessions.get(&osd) {
            if known.addr == addr {
                return Ok(known.sender.clone());
            }
        }
        let sock: SocketAddr = addr
            .parse()
            .map_err(|e| format!("osd.{osd} address {addr}: {e}"))?;
        let sid = (self.id << 20) ^ (osd as u64) ^ 0xc11e_0000_0000_0000;
        let mut session = self.dial_osd(sock, sid).await;
        let sender = session.sender();
        let pending = self.pending.clone();
        let reader = tokio::spawn(async move {
            while let Some(frame) = session.recv().await {
                if frame.header.msg_type != MSG_OSD_OP_REPLY {
                    continue;
                }
                let decoded =
                    decode_with_data::<ReplyHeader>(&frame.payload, frame.data(), frame.data_crc());
                if let Ok((h, data, crc)) = decoded {
                    let waiter = pending
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&h.tid);
                    if let Some(w) = waiter {
                        let _ = w.send((h, data, crc));
                    }
                }
            }
        });
        sessions.insert(
            osd,
            OsdSession {
                addr: addr.to_string(),
                sender: sender.clone(),
                reader: reader.abort_handle(),
            },
        );
        Ok(sender)
    }

    async fn submit(
        &self,
        pool: &str,
        name: &str,
        kind: OpKind,
        data: Bytes,
    ) -> Result<(ReplyHeader, Bytes), ClientError> {
        self.submit_to(pool, Target::Object(name), kind, data, None)
            .await
    }

    /// Sends one operation and resends it (new map, new primary, lost session) until it is
    /// answered or its deadline passes; `assert_version` makes a write conditional.
    async fn submit_to(
        &self,
        pool: &str,
        target: Target<'_>,
        kind: OpKind,
        data: Bytes,
        assert_version: Option<u64>,
    ) -> Result<(ReplyHeader, Bytes), ClientError> {
        let name = match target {
            Target::Object(n) => n,
            Target::Pg(_) => "",
        };
        let deadline = Instant::now() + Duration::from_millis(self.op_timeout_ms);
        // Once per op, not per resend: a resend of a write that was applied is answered from
        // the PG log.
        let reqid = kind.is_write().then(|| ReqId {
            client: self.nonce,
            seq: self.next_request.fetch_add(1, Ordering::Relaxed),
        });
        // Once per op, not per resend: the messenger sends it with the data as is.
        let data_crc = crc_fast::crc32_iscsi(&data);
        let mut last = String::from("no attempt");
        let mut map_rx = self.map.clone();
        while Instant::now() < deadline {
            if let Some(why) = self.paused(kind.is_write()) {
                // Held until a map without the flag comes (Ceph's Objecter holds paused ops
                // the same way), or until the operation's deadline.
                last = why;
                let left = deadline.saturating_duration_since(Instant::now());
                let _ = tokio::time::timeout(left, map_rx.changed()).await;
                continue;
            }
            let Location {
                epoch,
                pool: pool_id,
                pg,
                primary,
                inactive,
                quota_full,
            } = self.locate(pool, &target)?;
            if let Some(why) =
                quota_full.filter(|_| kind.is_write() && !kind.frees_only() && !self.full_force)
            {
                // As Ceph's Objecter: refused at once, without asking the primary.
                return Err(ClientError::QuotaExceeded(why));
            }
            let attempt = async {
                let (osd, addr, up_from) = primary.ok_or_else(|| "no primary up".to_string())?;
                let sender = self.session(osd, &addr).await?;
                let mut restarts = sender.peer_restarts();
                let restarts_before = *restarts.borrow_and_update();
                let tid = self.next_tid.fetch_add(1, Ordering::Relaxed);
                let (tx, rx) = oneshot::channel();
                self.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(tid, tx);
                let header = OpHeader {
                    tid,
                    epoch,
                    pool: pool_id,
                    pg_seed: pg.seed,
                    object: name.to_string(),
                    kind: kind.clone(),
                    data_crc,
                    reqid,
                    assert_version,
                    background: in_background_scope(),
                    client: self.id,
                    instance: self.nonce,
                    full_force: self.full_force && kind.is_write(),
                };
                sender
                    .send_data(
                        MSG_OSD_OP,
                        encode(&header, &[]),
                        data.clone(),
                        Some(data_crc),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .min(ATTEMPT_TIMEOUT);
                let sent_to = (osd, addr.as_str(), up_from);
                let answer = self.reply_or_new_primary(rx, pool, &target, (epoch, sent_to));
                // A lossy session that reconnected is a new session: the OSD forgot this
                // request (or its reply), so it goes again at once rather than after the
                // attempt's timeout.
                let reset = async {
                    while restarts.changed().await.is_ok() {
                        if *restarts.borrow_and_update() != restarts_before {
                            return;
                        }
                    }
                    std::future::pending::<()>().await
                };
                let r = tokio::time::timeout(left, async {
                    tokio::select! {
                        a = answer => Some(a),
                        () = reset => None,
                    }
                })
                .await;
                self.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&tid);
                match r {
                    Ok(Some(Some(Ok(reply)))) => Ok(reply),
                    Ok(Some(None)) => Err(format!("osd.{osd} is no longer the primary")),
                    Ok(None) => Err(format!("the session to osd.{osd} started over")),
                    _ => Err(format!("osd.{osd} did not answer")),
                }
            };
            match attempt.await {
                Ok((h, d, crc)) => match &h.result {
                    OpResult::Ok if crc != h.data_crc => {
                        return Err(ClientError::Checksum(name.to_string()))
                    }
                    OpResult::Ok => return Ok((h, d)),
                    OpResult::NotFound => return Err(ClientError::NotFound(name.to_string())),
                    OpResult::Invalid(why) => return Err(ClientError::Invalid(why.clone())),
                    OpResult::NoSpace(why) => return Err(ClientError::NoSpace(why.clone())),
                    OpResult::Damaged(why) => return Err(ClientError::Damaged(why.clone())),
                    OpResult::QuotaExceeded(why) => {
                        return Err(ClientError::QuotaExceeded(why.clone()))
                    }
                    OpResult::VersionMismatch { current } => {
                        return Err(ClientError::VersionMismatch {
                            object: name.to_string(),
                            current: *current,
                        })
                    }
                    OpResult::Blocklisted(why) => {
                        self.fenced.store(true, Ordering::Release);
                        return Err(ClientError::Blocklisted {
                            instance: self.nonce,
                            why: why.clone(),
                        });
                    }
                    other => last = format!("{other:?} at epoch {}", h.epoch),
                },
                Err(e) => {
                    last = match inactive {
                        Some(why) => format!("{e}: {why}"),
                        None => e,
                    }
                }
            }
            // Wait for a newer map, or back off briefly, before resending.
            let _ = tokio::time::timeout(Duration::from_millis(200), map_rx.changed()).await;
        }
        Err(ClientError::Timeout {
            object: name.to_string(),
            timeout_ms: self.op_timeout_ms,
            last,
        })
    }
}

/// Room kept in a frame for an operation's header (object name up to 1000 bytes, kind,
/// request id) beside its data.
const OP_HEADER_ROOM_BYTES: usize = 64 << 10;

tokio::task_local! {
    static BACKGROUND: ();
}

/// Runs `work` with every op it sends (in this task) marked as background work: the OSDs
/// schedule those ops, and their replica writes, in the best-effort class, after clients.
/// A service's housekeeping (the S3 gateway's lifecycle pass) runs this way.
pub async fn in_background<F: std::future::Future>(work: F) -> F::Output {
    BACKGROUND.scope((), work).await
}

/// `work` marked as background work if the calling task's ops are (see [`in_background`]),
/// for a task that the caller spawns: a spawned task does not inherit the mark.
pub fn carry_background<F: std::future::Future>(
    work: F,
) -> impl std::future::Future<Output = F::Output> {
    let background = BACKGROUND.try_with(|_| ()).is_ok();
    async move {
        if background {
            BACKGROUND.scope((), work).await
        } else {
            work.await
        }
    }
}

/// Whether the calling task is inside [`in_background`].
pub fn in_background_scope() -> bool {
    BACKGROUND.try_with(|_| ()).is_ok()
}

/// Most data bytes one operation can carry: what one frame of the client's sessions holds
/// (the messenger's default `max_payload_bytes`) less room for the header. Commands check
/// their input against it before reading or building that much data; an OSD may allow less
/// (its `max_object_bytes`, 32 MiB by default) and says so when it refuses.
pub fn max_op_data_bytes() -> usize {
    (Limits::default().max_payload_bytes as usize).saturating_sub(OP_HEADER_ROOM_BYTES)
}

/// Longest one attempt of an operation waits for its answer before it is resent (unless a new
/// map names another primary first).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// A client id for [`Client::connect`] (and a monitor session) unique with high probability
/// across hosts: random, where a process id would repeat on another host, and two clients
/// with one id would share their sessions on every OSD (each connection taking over the
/// other's) and their QoS queue.
pub fn random_client_id() -> u64 {
    random_nonce(0) >> 1
}

/// A random 64-bit nonce for this client's request ids: the OS-seeded hasher of the standard
/// library (keyed anew for each call) over the caller's id and the time, so that two clients
/// given the same id (two hosts, or one process connecting twice) still differ.
fn random_nonce(client_id: u64) -> u64 {
    use std::hash::BuildHasher;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::collections::hash_map::RandomState::new()
        .hash_one((client_id, now))
        .max(1)
}

/// How long a request to the monitor made on a caller's behalf may take.
const MON_OP_TIMEOUT_MS: u64 = 10_000;

#[cfg(test)]
mod tests {
    use super::random_client_id;

    #[test]
    fn client_ids_of_one_process_differ() {
        let ids: std::collections::BTreeSet<u64> = (0..1000).map(|_| random_client_id()).collect();
        assert_eq!(ids.len(), 1000, "a process would reuse its own client id");
        assert!(ids.iter().all(|id| *id >> 63 == 0));
        assert!(
            !ids.contains(&u64::from(std::process::id())),
            "the process id is not a client id"
        );
    }
}
