//! The metadata server: one per file system. It loads the namespace from the metadata pool,
//! replays the journal over it, and serves clients' metadata requests on a messenger listener
//! whose address it publishes in the `mds.addr` object.
//!
//! One task owns the namespace and runs requests in arrival order. A mutation is applied in
//! memory at once; its record waits in a batch while the previous batch commits (one RADOS
//! append per batch, then its updates applied to the directory and inode objects, then the
//! journal trimmed when it has grown), so under load each append carries many mutations. It
//! is answered at once where [`crate::replay`]'s rules allow (the client replays it if this
//! MDS is lost before the record is durable) and otherwise once durable. A resent request
//! (the client lost its session) is answered from the record of its first execution, kept in
//! memory and rebuilt from the journal after a restart, never applied twice. Data objects of
//! deleted files are removed by a purge task from a persisted queue.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_auth::OsdAccess;
use cairn_client::lease::{Lease, LeaseError};
use cairn_client::service::{fetch_service_secret, ServiceSecret, TicketAuthorizer};
use cairn_client::tickets::ClientAuth;
use cairn_client::{Client, ClientError};
use cairn_msgr::handshake::{AuthPeer, Authorizer};
use cairn_msgr::protect::WireMode;
use cairn_msgr::session::{Listener, Session};
use cairn_msgr::Limits;
use cairn_proto::mds::{
    MdsAnswer, MdsOp, MdsRecall, MdsReply, MdsRequest, MdsSafe, MSG_MDS_RECALL, MSG_MDS_REPLY,
    MSG_MDS_REQUEST, MSG_MDS_SAFE,
};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::active;
use crate::backing::{self, metadata_pool, JOURNAL_OBJECT};
use crate::dirlease::{Changing, Granted};
use crate::error::FsError;
use crate::evict::Evictions;
use crate::full::SpaceGuard;
use crate::journal::{self, Record};
use crate::locks::Locks;
use crate::namespace::slots::Slots;
use crate::namespace::{Namespace, Update};
use crate::opens::{OpenFiles, RENEW_EVERY};
use crate::outbox::Outbox;
use crate::replay::{self, EarlyAnswers, ReplayWindow};

/// The object holding the serving MDS's address.
pub const ADDR_OBJECT: &str = "mds.addr";
/// The journal is trimmed to its last batch once it holds this many bytes (all applied by then).
pub const JOURNAL_TRIM_BYTES: u64 = 4 << 20;
/// Most answered mutations remembered for resends.
pub const MAX_REMEMBERED_ANSWERS: usize = 1 << 17;
/// Longest one journal append or object update waits (PGs inactive while the cluster
/// heals): past it the MDS stops rather than answer from a state it cannot make durable.
pub const COMMIT_TIMEOUT_MS: u64 = 3_600_000;
/// Longest a clean stop spends committing its last batch and releasing its lease (a cluster
/// gone before its MDS would hold it for [`COMMIT_TIMEOUT_MS`]).
const CLEAN_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often leases that ran out are ended (and the requests waiting on them run).
const LEASE_TICK: Duration = Duration::from_millis(200);
/// Most requests held back at once until a directory lease ends; past it they are dropped
/// (their clients send them again).
const MAX_WAITING_FOR_LEASES: usize = 65536;
/// Most requests queued for the namespace's task before sessions wait.
const REQUEST_QUEUE: usize = 4096;
/// The client id of the MDS's own journal records (deleting orphans nobody holds open).
const MDS_ITSELF: u64 = 0;
/// How often leases are checked and orphans no client holds are deleted.
const ORPHAN_TICK: Duration = Duration::from_secs(1);
/// A gap between two ticks this long means the MDS itself stalled (stopped, starved): its
/// clients' silence meanwhile proves nothing, so no lease ends on it.
const STALL: Duration = Duration::from_secs(5);
/// After a start, how long no lock is granted: every client that held locks from the MDS
/// before says so again meanwhile (its `Held` every [`RENEW_EVERY`], after at most one
/// attempt's timeout of finding the new MDS).
const LOCK_GRACE: Duration = Duration::from_secs(3 * RENEW_EVERY.as_secs());

/// How to run a metadata server.
#[derive(Clone, Debug)]
pub struct MdsConfig {
    /// The monitor.
    pub mon: SocketAddr,
    /// The file system's name.
    pub fs: String,
    /// Where to listen for clients.
    pub listen: SocketAddr,
    /// Its credentials (an entity with `mon 'profile mds'` and rw on both pools); none where
    /// the cluster does not authenticate.
    pub auth: Option<ClientAuth>,
    /// How long a client keeps what it holds without word from it before it is evicted
    /// (Ceph's `session_timeout`; at least [`crate::opens::MIN_LEASE`]).
    pub session_timeout: Duration,
}

/// A request with where to answer it.
struct Incoming {
    req: MdsRequest,
    reply: Outbox,
}

/// Whom a batch's commit tells what.
enum Tell {
    /// The answer, not given yet.
    Answer { tid: u64, to: Outbox },
    /// That the mutation answered early is durable.
    Safe { tid: u64, to: Outbox },
}

/// A mutation waiting for its record to be durable, or (no record) a sync waiting for those
/// before it.
struct Pending {
    record: Option<Record>,
    tell: Option<Tell>,
}

/// Sends a frame after every frame sent to that session before it, without holding up the
/// namespace's task ([`Outbox`]).
fn send_frame(to: &Outbox, msg_type: u16, payload: bytes::Bytes) {
    to.send(msg_type, payload);
}

/// Answers a request; `safe` says whether what it changed is durable.
fn answer(to: &Outbox, tid: u64, result: Result<MdsAnswer, i32>, safe: bool) {
    let reply = MdsReply {
        tid,
        result,
        safe,
        seq: 0,
    };
    send_frame(to, MSG_MDS_REPLY, cairn_proto::encode(&reply, &[]));
}

/// Answers a mutation early: applied in memory as the `seq`th of this MDS's mutations.
fn answer_early(to: &Outbox, tid: u64, result: MdsAnswer, seq: u64) {
    let reply = MdsReply {
        tid,
        result: Ok(result),
        safe: false,
        seq,
    };
    send_frame(to, MSG_MDS_REPLY, cairn_proto::encode(&reply, &[]));
}

/// Answers already given to mutations, by (client, request id), oldest forgotten first.
#[derive(Default)]
struct Answered {
    by_request: HashMap<(u64, u64), Result<MdsAnswer, i32>>,
    order: VecDeque<(u64, u64)>,
}

impl Answered {
    fn remember(&mut self, client: u64, tid: u64, answer: Result<MdsAnswer, i32>) {
        if self.by_request.insert((client, tid), answer).is_none() {
            self.order.push_back((client, tid));
        }
        while self.order.len() > MAX_REMEMBERED_ANSWERS {
            if let Some(old) = self.order.pop_front() {
                self.by_request.remove(&old);
            }
        }
    }
}

/// Loads the namespace and replays the journal over it (and over the objects), keeping its
/// whole records (their length goes to `journal_bytes`). Formats a new root when the pool has
/// none.
async fn recover(
    client: &Client,
    pool: &str,
    answered: &mut Answered,
    journal_bytes: &mut u64,
) -> Result<Namespace, FsError> {
    let mut ns = backing::load(client, pool).await?;
    let bytes = match client.read(pool, JOURNAL_OBJECT).await {
        Ok(b) => b,
        Err(ClientError::NotFound(_)) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let decoded = journal::decode(&bytes);
    if let Some(why) = &decoded.damage {
        tracing::warn!(%why, "the journal ends in damage; replaying the records before it");
    }
    let mut replay: Vec<Update> = Vec::new();
    for r in &decoded.records {
        for u in &r.updates {
            ns.apply(u);
        }
        replay.extend(r.updates.iter().cloned());
        if r.client != MDS_ITSELF {
            answered.remember(r.client, r.tid, r.answer.clone());
        }
    }
    if ns.inode(cairn_proto::mds::ROOT_INO).is_none() {
        let root = Namespace::format(now_ns(), 0, 0);
        for u in &root {
            ns.apply(u);
        }
        replay.extend(root);
    }
    backing::apply(client, pool, &replay).await?;
    // The records stay (rewritten without a damaged tail, so appends follow whole records): a
    // client that replays a mutation they hold is answered from them, also after another
    // restart, until the journal is trimmed.
    let mut kept = Vec::new();
    for r in &decoded.records {
        journal::encode(r, &mut kept);
    }
    if kept.len() != bytes.len() {
        client.write_full(pool, JOURNAL_OBJECT, &kept).await?;
    }
    *journal_bytes = kept.len() as u64;
    tracing::info!(
        inodes = ns.inode_count(),
        replayed = decoded.records.len(),
        "namespace loaded"
    );
    Ok(ns)
}

/// Nanoseconds since the epoch by this host's clock.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Why `peer` may not run `op` on a file system whose data lives in `data_pool`: mutations
/// need write access to it, everything else read access (the same grant that lets the
/// client touch the file data).
fn refusal(peer: Option<&AuthPeer>, op: &MdsOp, data_pool: &str) -> Option<i32> {
    let peer = peer?;
    // A lease holds other clients' creates back: only a client that may write asks for one.
    let access = match op.is_mutation() || matches!(op, MdsOp::LeaseDir { .. }) {
        true => OsdAccess::Write,
        false => OsdAccess::Read,
    };
    (!peer.caps.osd().allows(data_pool, access)).then_some(libc::EACCES)
}

/// Serves one client session: decodes its requests and hands them to the namespace's task.
async fn serve_session(mut session: Session, to_core: mpsc::Sender<Incoming>, data_pool: String) {
    let peer = session.peer();
    let sender = Outbox::new(session.sender());
    loop {
        let frame = tokio::select! {
            frame = session.recv() => frame,
            // Closed here: the client reconnects and sends its requests again.
            _ = sender.given_up() => return,
        };
        let Some(frame) = frame else {
            return;
        };
        if frame.header.msg_type != MSG_MDS_REQUEST {
            tracing::warn!(
                msg = cairn_proto::registry::name_of(frame.header.msg_type).unwrap_or("unknown"),
                "not a metadata request; closing the session"
            );
            return;
        }
        let req: MdsRequest = match cairn_proto::decode(&frame.payload) {
            Ok((r, _)) => r,
            Err(e) => {
                tracing::warn!(error = %e, "malformed metadata request; closing the session");
                return;
            }
        };
        if req.client != session.id() || req.client == MDS_ITSELF {
            tracing::warn!(
                client = req.client,
                session = session.id(),
                "a request naming another client than its session; refused"
            );
            answer(&sender, req.tid, Err(libc::EINVAL), true);
            continue;
        }
        if let Some(errno) = refusal(peer.as_deref(), &req.op, &data_pool) {
            answer(&sender, req.tid, Err(errno), true);
            continue;
        }
        let incoming = Incoming {
            req,
            reply: sender.clone(),
        };
        if to_core.send(incoming).await.is_err() {
            return;
        }
    }
}

/// Work for the applier: a batch's updates, or a request to say when all before it are
/// applied.
enum ApplyWork {
    Updates(Vec<Update>),
    Drained(oneshot::Sender<()>),
}

/// Longest journaled updates wait before the applier writes them to the directory and inode
/// objects: the changes many batches make to one object then go as one write (the journal
/// holds them durably meanwhile, and a starting MDS replays it; CephFS's MDS writes its dirty
/// metadata back lazily too). A create changes its directory's object, one of the inode
/// objects and the state object: applied batch by batch, each costs the OSDs more than one
/// write.
pub const APPLY_INTERVAL: Duration = Duration::from_millis(500);
/// Most journaled updates the applier holds before it writes them, however young.
pub const MAX_UNAPPLIED_UPDATES: usize = 16_384;

/// Applies journaled batches to the directory and inode objects, in journal order, while the
/// next batches are being journaled: gathers them for up to [`APPLY_INTERVAL`] (or
/// [`MAX_UNAPPLIED_UPDATES`]), and at once when asked to drain. Returns only on a failure.
async fn apply_loop(
    client: Arc<Client>,
    pool: String,
    mut work: mpsc::UnboundedReceiver<ApplyWork>,
    purge: Arc<Notify>,
    lease: Arc<Lease>,
) -> FsError {
    let mut unapplied: Vec<Update> = Vec::new();
    let mut due: Option<tokio::time::Instant> = None;
    loop {
        let next = match due {
            Some(at) => tokio::select! {
                w = work.recv() => Some(w),
                _ = tokio::time::sleep_until(at) => None,
            },
            None => Some(work.recv().await),
        };
        let drained = match next {
            Some(None) => return FsError::Mds("the applier's queue closed".into()),
            Some(Some(ApplyWork::Updates(updates))) => {
                unapplied.extend(updates);
                due.get_or_insert_with(|| tokio::time::Instant::now() + APPLY_INTERVAL);
                if unapplied.len() < MAX_UNAPPLIED_UPDATES {
                    continue;
                }
                None
            }
            Some(Some(ApplyWork::Drained(to))) => Some(to),
            None => None,
        };
        due = None;
        if !unapplied.is_empty() {
            if let Err(e) = lease.check().await {
                return not_active(e);
            }
            if let Err(e) = backing::apply(&client, &pool, &unapplied).await {
                return e;
            }
            if unapplied.iter().any(|u| matches!(u, Update::Purge { .. })) {
                purge.notify_one();
            }
            unapplied.clear();
        }
        if let Some(to) = drained {
            let _ = to.send(());
        }
    }
}

/// What a finished commit made durable.
struct Committed {
    /// The client of each record (the MDS's own left out).
    clients: Vec<u64>,
    /// The roster written with it, if one was.
    roster: Option<BTreeSet<u64>>,
}

/// Commits batches: appends their records to the journal, tells their clients, writes the
/// roster when it changed, and hands the updates to the applier; rewrites the journal down to
/// the last batch once it has grown and everything in it is applied.
struct Committer {
    client: Arc<Client>,
    /// The lease that makes this MDS the active one: checked before every append.
    lease: Arc<Lease>,
    pool: String,
    journal_bytes: u64,
    applier: mpsc::UnboundedSender<ApplyWork>,
}

impl Committer {
    async fn commit(
        &mut self,
        batch: Vec<Pending>,
        roster: Option<BTreeSet<u64>>,
    ) -> Result<Committed, FsError> {
        self.lease.check().await.map_err(not_active)?;
        let mut bytes = Vec::new();
        for r in batch.iter().filter_map(|p| p.record.as_ref()) {
            journal::encode(r, &mut bytes);
        }
        if !bytes.is_empty() {
            self.client
                .append(&self.pool, JOURNAL_OBJECT, &bytes)
                .await?;
        }
        self.journal_bytes += bytes.len() as u64;
        let mut updates = Vec::new();
        let mut clients = Vec::new();
        let mut safe: HashMap<u64, (Outbox, Vec<u64>)> = HashMap::new();
        for p in batch {
            let result = p
                .record
                .as_ref()
                .map_or(Ok(MdsAnswer::Done), |r| r.answer.clone());
            let who = p.record.as_ref().map_or(MDS_ITSELF, |r| r.client);
            match p.tell {
                Some(Tell::Answer { tid, to }) => answer(&to, tid, result, true),
                Some(Tell::Safe { tid, to }) => {
                    // On the client's latest session: an earlier one may have broken since.
                    let notice = safe.entry(who).or_insert_with(|| (to.clone(), Vec::new()));
                    notice.0 = to;
                    notice.1.push(tid);
                }
                None => {}
            }
            if let Some(r) = p.record {
                if r.client != MDS_ITSELF {
                    clients.push(r.client);
                }
                updates.extend(r.updates);
            }
        }
        for (to, tids) in safe.into_values() {
            send_frame(
                &to,
                MSG_MDS_SAFE,
                cairn_proto::encode(&MdsSafe { tids }, &[]),
            );
        }
        if let Some(r) = &roster {
            replay::store(&self.client, &self.pool, r).await?;
        }
        let closed = || FsError::Mds("the applier stopped".into());
        self.applier
            .send(ApplyWork::Updates(updates))
            .map_err(|_| closed())?;
        if self.journal_bytes >= JOURNAL_TRIM_BYTES {
            let (tx, rx) = oneshot::channel();
            self.applier
                .send(ApplyWork::Drained(tx))
                .map_err(|_| closed())?;
            rx.await.map_err(|_| closed())?;
            // The last batch stays: a client that missed its `MdsSafe` and replays to a
            // restarted MDS is answered from its records instead of applying them twice.
            self.client
                .write_full(&self.pool, JOURNAL_OBJECT, &bytes)
                .await?;
            self.journal_bytes = bytes.len() as u64;
        }
        Ok(Committed { clients, roster })
    }
}

/// Removes the data objects of files in the purge queue, forever.
async fn purge_loop(client: Arc<Client>, meta: String, data: String, wake: Arc<Notify>) {
    loop {
        match backing::purge_queue(&client, &meta).await {
            Ok(queue) => {
                for (ino, size, object_size) in queue {
                    if let Err(e) = crate::data::purge(&client, &data, ino, size, object_size).await
                    {
                        tracing::warn!(ino, error = %e, "purging a file's data; will retry");
                        continue;
                    }
                    if let Err(e) = backing::purged(&client, &meta, ino).await {
                        tracing::warn!(ino, error = %e, "dropping a purged file from the queue");
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading the purge queue"),
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), wake.notified()).await;
    }
}

/// What the namespace's task owns besides the commit machinery: the namespace and everything
/// a request's answer depends on.
struct Core {
    ns: Namespace,
    answered: Answered,
    /// Records and syncs for the next commit.
    batch: Vec<Pending>,
    /// Answers due when the running commit ends (syncs and resends of its records).
    after_commit: Vec<(u64, Outbox, Result<MdsAnswer, i32>)>,
    /// Whether a commit is running.
    committing: bool,
    opens: OpenFiles,
    locks: Locks,
    evictions: Evictions,
    space: SpaceGuard,
    early: EarlyAnswers,
    window: ReplayWindow<Incoming>,
    /// Replayed mutations run again (lost with the previous MDS before they were journaled).
    rerun: u64,
    /// Mutations executed: the order a client replays its early answers in.
    executed: u64,
    /// Before this, no lock is granted (clients say again what they held).
    locks_after: Instant,
    /// Directory leases granted, and the requests waiting for one to end.
    leases: Granted<Outbox, Incoming>,
}

impl Core {
    /// Answers `result` once everything executed before it is durable.
    fn after_durable(&mut self, tid: u64, to: Outbox, result: Result<MdsAnswer, i32>) {
        match (self.batch.is_empty(), self.committing) {
            (false, _) => {
                assert!(result == Ok(MdsAnswer::Done), "only syncs wait in a batch");
                self.batch.push(Pending {
                    record: None,
                    tell: Some(Tell::Answer { tid, to }),
                });
            }
            (true, true) => self.after_commit.push((tid, to, result)),
            (true, false) => answer(&to, tid, result, true),
        }
    }

    /// Answers a request the MDS has a record of: once that record is durable.
    fn answer_known(&mut self, who: u64, tid: u64, to: Outbox, known: Result<MdsAnswer, i32>) {
        let waiting = self.batch.iter_mut().find(|p| {
            p.record
                .as_ref()
                .is_some_and(|r| r.client == who && r.tid == tid)
        });
        match (waiting, self.committing) {
            (Some(p), _) => p.tell = Some(Tell::Answer { tid, to }),
            (None, true) => self.after_commit.push((tid, to, known)),
            (None, false) => answer(&to, tid, known, true),
        }
    }

    /// Runs one request (or holds it back while a replay window is open).
    fn handle(&mut self, incoming: Incoming) {
        let (op, replay) = (&incoming.req.op, incoming.req.replay);
        if self.window.is_open() && !replay && *op != MdsOp::Reconnected {
            match self.window.has_room() {
                true => self.window.hold(incoming),
                // Unanswered: the client sends it again after its attempt's timeout.
                false => tracing::debug!("the replay window is full; a request is dropped"),
            }
            return;
        }
        // A resend of what ran already, and a fenced client's request, are answered below
        // without waiting for a lease.
        let (who, tid) = (incoming.req.client, incoming.req.tid);
        let may_wait = !replay
            && !self.evictions.refuses(who)
            && !self.answered.by_request.contains_key(&(who, tid));
        if may_wait {
            let now = Instant::now();
            let mut dirs = dirs_changed(&self.ns, op);
            let changed = dirs.len();
            dirs.extend(dirs_read(op));
            let mut waits = false;
            for (i, &dir) in dirs.iter().enumerate() {
                let must = match i < changed {
                    true => self.leases.changing(dir, who, now),
                    false => self.leases.reading(dir, who, now),
                };
                if let Changing::Wait(recall) = must {
                    if let Some((to, grant)) = recall {
                        tracing::info!(dir, grant, for_client = who, "a directory lease recalled");
                        let notice = cairn_proto::encode(&MdsRecall { dir, grant }, &[]);
                        send_frame(&to, MSG_MDS_RECALL, notice);
                    }
                    waits = true;
                }
            }
            if waits {
                match self.leases.waiting() < MAX_WAITING_FOR_LEASES {
                    true => self.leases.wait(dirs, who, incoming),
                    // Unanswered: the client sends it again after its attempt's timeout.
                    false => tracing::debug!("too many requests wait for leases; one is dropped"),
                }
                return;
            }
        }
        let Incoming { req, reply } = incoming;
        let MdsRequest {
            tid,
            client: who,
            op,
            replay,
        } = req;
        // A number of a slot is kept only for its owner; another pinned number only on a
        // replay (the number an earlier answer gave).
        let own_number = pins_own_number(&self.ns, who, &op);
        let op = match own_number || (replay && !pins_a_slot(&op)) {
            true => op,
            false => op.unpinned(),
        };
        if self.evictions.refuses(who) {
            answer(&reply, tid, Err(libc::ESHUTDOWN), true);
            return;
        }
        let now = Instant::now();
        self.opens.heard(who, now);
        if op == MdsOp::Reconnected {
            if self.window.awaits(who) {
                self.window.reconnected(who);
                let closed = !self.window.is_open();
                tracing::info!(
                    client = who,
                    window_closed = closed,
                    rerun = self.rerun,
                    "a client answered early reconnected"
                );
            }
            answer(&reply, tid, Ok(MdsAnswer::Done), true);
            return;
        }
        if Holding::is_about(&op) {
            let barrier = self.evictions.barrier();
            let (opens, locks, locks_after) = (&mut self.opens, &mut self.locks, self.locks_after);
            let mut holding = Holding {
                opens,
                locks,
                who,
                now,
                locks_after,
                barrier,
            };
            let result = self
                .ns
                .execute(&op)
                .and_then(|(a, _)| Ok(holding.run(&op)?.unwrap_or(a)));
            answer(&reply, tid, result, true);
            return;
        }
        if op == MdsOp::Sync {
            self.after_durable(tid, reply, Ok(MdsAnswer::Done));
            return;
        }
        if let MdsOp::LeaseDir {
            dir,
            names,
            creates,
        } = op
        {
            let result = self.lease_dir(who, dir, names, reply.clone(), now);
            if creates && result.is_ok() {
                self.leases.creating(dir, who);
            }
            answer(&reply, tid, result, true);
            return;
        }
        if let MdsOp::ReleaseDir { dir, grant } = op {
            answer(&reply, tid, Ok(MdsAnswer::Done), true);
            for freed in self.leases.released(dir, who, grant) {
                self.handle(freed);
            }
            return;
        }
        if !op.is_mutation() {
            let result = self.ns.execute(&op).map(|(a, _)| a);
            answer(&reply, tid, result, true);
            return;
        }
        if let Some(known) = self.answered.by_request.get(&(who, tid)) {
            let known = known.clone();
            self.answer_known(who, tid, reply, known);
            return;
        }
        if replay {
            self.replayed(who, tid, op, reply, now);
            return;
        }
        if op == MdsOp::Delegate {
            match self.ns.delegate_to(who) {
                Err(errno) => answer(&reply, tid, Err(errno), true),
                Ok((a, updates)) => {
                    self.answered.remember(who, tid, Ok(a.clone()));
                    self.executed += 1;
                    // Counted as the client's uncommitted record, but never answered early:
                    // the client uses the numbers once they are durable, so a restarted MDS
                    // knows them as the client's.
                    self.early.add(who, now);
                    self.batch_record(who, tid, updates, a, Tell::Answer { tid, to: reply });
                }
            }
            return;
        }
        // A create with the client's own number was answered by the client already, when
        // its map did not say full: taken (an empty inode; the journal's writes are forced).
        if let Some(errno) = self.space.refusal(&op).filter(|_| !own_number) {
            answer(&reply, tid, Err(errno), true);
            return;
        }
        match self.ns.execute_holding(&op, &|ino| self.opens.is_held(ino)) {
            Err(errno) => answer(&reply, tid, Err(errno), true),
            Ok((a, updates)) => {
                self.note_open(who, &op, &a, now);
                self.answered.remember(who, tid, Ok(a.clone()));
                self.executed += 1;
                let tell = match self.early.add(who, now) {
                    true => {
                        answer_early(&reply, tid, a.clone(), self.executed);
                        Tell::Safe { tid, to: reply }
                    }
                    false => Tell::Answer { tid, to: reply },
                };
                self.batch_record(who, tid, updates, a, tell);
            }
        }
    }

    /// Grants or renews `who`'s lease on `dir`, asked for through `to`: the directory's names
    /// and attributes for a new lease; EAGAIN when it is not granted.
    fn lease_dir(
        &mut self,
        who: u64,
        dir: u64,
        names: bool,
        to: Outbox,
        now: Instant,
    ) -> Result<MdsAnswer, i32> {
        let entries = match self.ns.entries(dir) {
            Some(e) => e,
            None if self.ns.inode(dir).is_some() => return Err(libc::ENOTDIR),
            None => return Err(libc::ENOENT),
        };
        if !names && self.leases.held_by(dir, who, now).is_none() {
            return Err(libc::EAGAIN);
        }
        let grant = self
            .leases
            .grant(dir, who, to, entries.len(), now)
            .ok_or(libc::EAGAIN)?;
        let attr = self.ns.inode(dir).map(|i| i.attr.clone());
        Ok(MdsAnswer::DirLeased {
            names: names.then(|| entries.iter().map(|(n, d)| (n.clone(), d.ino)).collect()),
            attr: attr.filter(|_| names),
            grant,
            file_object_size: self.ns.new_file_object_size(dir),
        })
    }

    /// Ends the directory leases that ran out, and runs what waited for them.
    fn expire_leases(&mut self, now: Instant) {
        for freed in self.leases.expire(now) {
            self.handle(freed);
        }
    }

    /// Puts `who`'s mutation `tid` in the open batch: its record, and whom its commit tells.
    fn batch_record(&mut self, who: u64, tid: u64, updates: Vec<Update>, a: MdsAnswer, tell: Tell) {
        let record = Record {
            client: who,
            tid,
            updates,
            answer: Ok(a),
        };
        self.batch.push(Pending {
            record: Some(record),
            tell: Some(tell),
        });
    }

    /// Counts a file created open (FUSE's `create`) as held by its creator.
    fn note_open(&mut self, who: u64, op: &MdsOp, answer: &MdsAnswer, now: Instant) {
        if let (MdsOp::Create { inode, .. }, MdsAnswer::Attr(made)) = (op, answer) {
            if inode.open && made.kind == cairn_proto::mds::FileKind::File {
                let _ = self.opens.open(who, made.ino, now);
            }
        }
    }

    /// A mutation answered early, sent again on a new session, with no record here: lost
    /// with the MDS before it was durable (run again now, answered once durable) when the
    /// window waits for its client; otherwise durable already, its record trimmed.
    fn replayed(&mut self, who: u64, tid: u64, op: MdsOp, reply: Outbox, now: Instant) {
        if self.window.missed(who) {
            tracing::warn!(
                client = who,
                tid,
                "a replay after its client missed the replay window; refused"
            );
            answer(&reply, tid, Err(libc::ESTALE), true);
            return;
        }
        if !self.window.awaits(who) {
            answer(&reply, tid, Ok(MdsAnswer::Done), true);
            return;
        }
        match self.ns.execute_holding(&op, &|ino| self.opens.is_held(ino)) {
            Err(errno) => {
                tracing::warn!(client = who, tid, errno, "a replayed mutation fails now");
                answer(&reply, tid, Err(errno), true);
            }
            Ok((a, updates)) => {
                self.rerun += 1;
                self.executed += 1;
                self.note_open(who, &op, &a, now);
                self.answered.remember(who, tid, Ok(a.clone()));
                self.early.add(who, now);
                self.batch_record(who, tid, updates, a, Tell::Answer { tid, to: reply });
            }
        }
    }

    /// Closes the replay window when its time is up and runs what it held back.
    fn tick_window(&mut self, now: Instant) {
        let missed = self.window.expire(now);
        for client in &missed {
            tracing::warn!(
                client,
                "a client answered early did not reconnect in the replay window; \
                 its changes not yet journaled are lost"
            );
        }
        let window = &self.window;
        self.early.forget(now, &missed, |c| window.awaits(c));
        self.run_held();
    }

    /// Runs the requests a closed replay window held back, in arrival order.
    fn run_held(&mut self) {
        for held in self.window.release() {
            self.handle(held);
        }
    }
}

/// Whether `op` is a create pinning a number delegated to its client `who` (kept on a new
/// request, as a replay's is).
fn pins_own_number(ns: &Namespace, who: u64, op: &MdsOp) -> bool {
    match op {
        MdsOp::Create { inode, .. } => inode.ino.is_some_and(|p| ns.delegated_to(who, p)),
        _ => false,
    }
}

/// Whether `op` is a create pinning a number that lies in a delegated slot's range.
fn pins_a_slot(op: &MdsOp) -> bool {
    match op {
        MdsOp::Create { inode, .. } => inode.ino.and_then(Slots::slot_of).is_some(),
        _ => false,
    }
}

/// Runs the metadata server until `shutdown` resolves or a commit fails (the in-memory
/// namespace is then ahead of what is durable: the daemon stops, and a restart replays).
pub async fn run(
    cfg: MdsConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), FsError> {
    let mut client =
        Client::connect_as(cfg.mon, cairn_client::random_client_id(), cfg.auth.clone()).await?;
    client.op_timeout_ms = COMMIT_TIMEOUT_MS;
    client.full_force = true;
    let client = Arc::new(client);
    let meta = metadata_pool(&cfg.fs);
    let info = backing::read_info(&client, &meta).await?;
    let lease = active::become_active(client.clone(), &meta, &cfg.fs).await?;
    let mut answered = Answered::default();
    let mut journal_bytes = 0;
    let mut ns = recover(&client, &meta, &mut answered, &mut journal_bytes).await?;
    ns.set_data_pool(&info.data_pool);
    let roster = replay::load(&client, &meta).await?;
    if !roster.is_empty() {
        tracing::info!(
            clients = roster.len(),
            "waiting for clients answered early to replay"
        );
    }

    let authz: Option<Arc<dyn Authorizer>> = match &cfg.auth {
        Some(a) => {
            let secret = Arc::new(ServiceSecret::default());
            fetch_service_secret(client.mon(), &a.entity, &a.key, &secret).await?;
            Some(Arc::new(TicketAuthorizer {
                secret,
                min_mode: WireMode::Mac,
            }))
        }
        None => None,
    };
    let mut listener = Listener::bind_with_auth(cfg.listen, Limits::default(), authz).await?;
    let addr = listener.local_addr();
    client
        .write_full(&meta, ADDR_OBJECT, addr.to_string().as_bytes())
        .await?;
    tracing::info!(%addr, fs = %cfg.fs, "metadata server serving on {addr}");
    println!("metadata server for {} serving on {addr}", cfg.fs);

    let purge = Arc::new(Notify::new());
    let purger = tokio::spawn(purge_loop(
        client.clone(),
        meta.clone(),
        info.data_pool.clone(),
        purge.clone(),
    ));
    let (to_core, mut requests) = mpsc::channel::<Incoming>(REQUEST_QUEUE);
    let data_pool = info.data_pool.clone();
    let acceptor = tokio::spawn(async move {
        while let Some(session) = listener.accept().await {
            tokio::spawn(serve_session(session, to_core.clone(), data_pool.clone()));
        }
    });

    let (to_applier, apply_work) = mpsc::unbounded_channel();
    let mut applier = tokio::spawn(apply_loop(
        client.clone(),
        meta.clone(),
        apply_work,
        purge,
        lease.clone(),
    ));
    let mut idle = Some(Committer {
        client: client.clone(),
        lease: lease.clone(),
        pool: meta.clone(),
        journal_bytes,
        applier: to_applier,
    });
    type Commit = tokio::task::JoinHandle<(Committer, Result<Committed, FsError>)>;
    let mut committing: Option<Commit> = None;
    let start = Instant::now();
    let mut core = Core {
        ns,
        answered,
        batch: Vec::new(),
        after_commit: Vec::new(),
        committing: false,
        opens: OpenFiles::with_lease(cfg.session_timeout),
        locks: Locks::default(),
        evictions: Evictions::new(client.clone(), lease.clone()),
        space: SpaceGuard::new(client.mon().watch(), &meta, &info.data_pool),
        window: ReplayWindow::new(&roster, start),
        early: EarlyAnswers::new(roster),
        rerun: 0,
        executed: 0,
        locks_after: start + LOCK_GRACE,
        leases: Granted::new(start),
    };
    let mut last_tick = start;
    // Orphans left by the previous MDS wait for their holders to say so.
    let reap_after = start + core.opens.lease();
    let mut orphan_tick = tokio::time::interval(ORPHAN_TICK);
    let mut lease_tick = tokio::time::interval(LEASE_TICK);
    let result = {
        tokio::pin!(shutdown);
        loop {
            if let Some(mut c) = idle.take_if(|_| !core.batch.is_empty() || core.early.changed()) {
                let work = std::mem::take(&mut core.batch);
                let roster = core.early.to_store();
                core.committing = true;
                committing = Some(tokio::spawn(async move {
                    let r = c.commit(work, roster).await;
                    (c, r)
                }));
            }
            tokio::select! {
                _ = &mut shutdown => break Ok(()),
                why = active::lost(&lease) => break Err(FsError::Mds(format!("no longer the active metadata server: {why}"))),
                failed = &mut applier => break Err(match failed {
                    Ok(e) => e,
                    Err(e) => FsError::Mds(format!("the applier failed: {e}")),
                }),
                done = async { committing.as_mut().expect("guarded").await }, if committing.is_some() => {
                    committing = None;
                    core.committing = false;
                    match done {
                        Ok((c, Ok(made))) => {
                            idle = Some(c);
                            core.early.committed(made.clients);
                            core.early.stored(made.roster);
                        }
                        Ok((_, Err(e))) => break Err(e),
                        Err(e) => break Err(FsError::Mds(format!("the commit task failed: {e}"))),
                    }
                    for (tid, to, result) in core.after_commit.drain(..) {
                        answer(&to, tid, result, true);
                    }
                }
                _ = orphan_tick.tick() => {
                    let now = Instant::now();
                    let stalled = now.saturating_duration_since(last_tick) > STALL;
                    last_tick = now;
                    if stalled {
                        tracing::warn!("the metadata server itself stalled; its clients' leases start again");
                        core.opens.renew_all(now);
                    }
                    for gone in core.opens.expire(now) {
                        if gone.held_files || core.locks.holds_any(gone.client) {
                            core.evictions.evict(gone.client);
                        } else {
                            core.locks.drop_client(gone.client);
                        }
                    }
                    core.evictions.retry();
                    core.tick_window(now);
                    if now >= reap_after {
                        let reaped = reap_orphans(&mut core.ns, &core.opens);
                        core.batch.extend(reaped);
                    }
                }
                _ = lease_tick.tick() => core.expire_leases(Instant::now()),
                fenced = core.evictions.next() => {
                    let client = fenced.client;
                    if core.evictions.finished(fenced) {
                        core.locks.drop_client(client);
                        core.opens.forget(client);
                    }
                }
                next = requests.recv() => {
                    let Some(incoming) = next else { break Ok(()) };
                    core.handle(incoming);
                    core.run_held();
                }
            }
        }
    };
    let last = committing.take();
    acceptor.abort();
    purger.abort();
    match result.is_ok() {
        true => {
            let last_batch = commit_last_batch(last, idle, core);
            if tokio::time::timeout(CLEAN_STOP_TIMEOUT, last_batch)
                .await
                .is_err()
            {
                tracing::warn!(
                    "the cluster did not take the last batch in time; its clients replay it"
                );
            }
        }
        false => {
            if let Some(running) = last {
                let _ = running.await;
            }
        }
    }
    applier.abort();
    if result.is_ok() {
        match tokio::time::timeout(CLEAN_STOP_TIMEOUT, lease.release()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "releasing the active lease; a standby waits it out")
            }
            Err(_) => {
                tracing::warn!("releasing the active lease timed out; a standby waits it out")
            }
        }
    }
    result
}

/// A clean stop's last commit: makes durable what was answered early, sparing its clients
/// the replay.
async fn commit_last_batch(
    running: Option<tokio::task::JoinHandle<(Committer, Result<Committed, FsError>)>>,
    idle: Option<Committer>,
    mut core: Core,
) {
    let committer = match running {
        Some(running) => match running.await {
            Ok((c, Ok(_))) => Some(c),
            _ => None,
        },
        None => idle,
    };
    for (tid, to, result) in core.after_commit.drain(..) {
        answer(&to, tid, result, true);
    }
    if let Some(mut c) = committer.filter(|_| !core.batch.is_empty()) {
        let work = std::mem::take(&mut core.batch);
        if let Err(e) = c.commit(work, None).await {
            tracing::warn!(error = %e, "committing the last batch; its clients replay it");
        }
    }
}

/// A lease failure: this MDS may not go on writing.
fn not_active(e: LeaseError) -> FsError {
    FsError::Mds(format!("no longer the active metadata server: {e}"))
}

/// What one client holds (open files, locks) as one of its requests changes it.
struct Holding<'a> {
    opens: &'a mut OpenFiles,
    locks: &'a mut Locks,
    who: u64,
    now: Instant,
    locks_after: Instant,
    /// The map epoch every evicted client is fenced in ([`Evictions::barrier`]).
    barrier: u64,
}

impl Holding<'_> {
    /// Whether `op` is about what a client holds.
    fn is_about(op: &MdsOp) -> bool {
        matches!(
            op,
            MdsOp::Open { .. }
                | MdsOp::Close { .. }
                | MdsOp::Held { .. }
                | MdsOp::GetLock { .. }
                | MdsOp::SetLock { .. }
        )
    }

    /// Runs `op`, one [`Holding::is_about`] accepts, once the namespace found its inode: its
    /// own answer, or none where the namespace's answer stands.
    fn run(&mut self, op: &MdsOp) -> Result<Option<MdsAnswer>, i32> {
        let (who, now) = (self.who, self.now);
        match op {
            MdsOp::Open { ino } => self.opens.open(who, *ino, now).map(|()| None),
            MdsOp::Close { ino } => {
                self.opens.close(who, *ino, now);
                Ok(None)
            }
            MdsOp::Held { files, locks } => {
                self.opens.replace(who, files, now)?;
                self.locks.replace(who, locks).map(|()| None)
            }
            MdsOp::GetLock { ino, lock } => {
                let conflict = self.locks.conflict(*ino, who, lock);
                Ok(Some(MdsAnswer::Lock(conflict)))
            }
            MdsOp::SetLock { ino, lock, wait } => {
                let taking = lock.kind != cairn_proto::mds::LockKind::Unlock;
                if taking && now < self.locks_after {
                    return Err(libc::EAGAIN);
                }
                match wait {
                    true => self.locks.set_or_wait(*ino, who, *lock, now),
                    false => self.locks.set(*ino, who, *lock),
                }
                .map(|()| {
                    Some(MdsAnswer::LockGranted {
                        epoch_barrier: self.barrier,
                    })
                })
            }
            other => unreachable!("{other:?} is not about what a client holds"),
        }
    }
}

/// The directories whose names or attributes `op` reads: a lease another client creates
/// files under by itself is recalled first.
fn dirs_read(op: &MdsOp) -> Option<u64> {
    match op {
        MdsOp::Lookup { parent, .. } => Some(*parent),
        MdsOp::ReadDir { ino, .. } | MdsOp::GetAttr { ino } => Some(*ino),
        _ => None,
    }
}

/// The directories `op` would change (names or attributes): those it names, those it
/// removes or moves (found by name here), and those naming a file whose attributes it
/// changes. Others' leases on them are recalled first.
fn dirs_changed(ns: &Namespace, op: &MdsOp) -> Vec<u64> {
    let is_dir = |ino: u64| ns.entries(ino).is_some();
    let mut dirs: Vec<u64> = op
        .changes_dirs()
        .into_iter()
        .flatten()
        .filter(|d| is_dir(*d))
        .collect();
    let named: [Option<(u64, &[u8])>; 2] = match op {
        MdsOp::Rmdir { parent, name, .. } => [Some((*parent, name)), None],
        MdsOp::Rename {
            parent,
            name,
            new_parent,
            new_name,
            ..
        } => [Some((*parent, name)), Some((*new_parent, new_name))],
        _ => [None, None],
    };
    for (parent, name) in named.into_iter().flatten() {
        let child = ns.entries(parent).and_then(|e| e.get(name));
        if let Some(d) = child.filter(|d| d.kind == cairn_proto::mds::FileKind::Dir) {
            dirs.push(d.ino);
        }
    }
    // A file whose attributes change (its own, or its link count and ctime as a name of
    // it comes or goes): a lease on any directory naming it covers them.
    let file =
        |parent: u64, name: &[u8]| ns.entries(parent).and_then(|e| e.get(name)).map(|d| d.ino);
    let files: [Option<u64>; 2] = match op {
        MdsOp::SetAttr { ino, .. }
        | MdsOp::SetXattr { ino, .. }
        | MdsOp::RemoveXattr { ino, .. }
        | MdsOp::Link { ino, .. } => [Some(*ino), None],
        MdsOp::Unlink { parent, name, .. } => [file(*parent, name), None],
        MdsOp::Rename {
            parent,
            name,
            new_parent,
            new_name,
            ..
        } => [file(*parent, name), file(*new_parent, new_name)],
        _ => [None, None],
    };
    for ino in files.into_iter().flatten() {
        dirs.extend_from_slice(ns.named_in(ino));
    }
    dirs.sort_unstable();
    dirs.dedup();
    dirs
}

/// Deletes every orphan no client holds open any more: the journal records that do it.
fn reap_orphans(ns: &mut Namespace, opens: &OpenFiles) -> Vec<Pending> {
    let free: Vec<u64> = ns.orphans().filter(|i| !opens.is_held(*i)).collect();
    free.into_iter()
        .filter_map(|ino| ns.reap(ino))
        .map(|updates| Pending {
            record: Some(Record {
                client: MDS_ITSELF,
                tid: 0,
                updates,
                answer: Ok(MdsAnswer::Done),
            }),
            tell: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_to_a_files_attributes_names_every_directory_naming_it() {
        use cairn_proto::mds::{FileKind, NewInode, SetAttr, ROOT_INO};
        let mut ns = Namespace::default();
        for u in Namespace::format(0, 0, 0) {
            ns.apply(&u);
        }
        let mut make = |parent: u64, name: &str, kind: FileKind| -> u64 {
            let inode = NewInode {
                kind,
                perm: 0o755,
                uid: 0,
                gid: 0,
                rdev: 0,
                target: Vec::new(),
                now_ns: 1,
                open: false,
                ino: None,
                object_size: None,
            };
            let op = MdsOp::Create {
                parent,
                name: name.into(),
                inode,
            };
            match ns.execute(&op) {
                Ok((MdsAnswer::Attr(a), _)) => a.ino,
                other => panic!("{other:?}"),
            }
        };
        let (d1, d2) = (
            make(ROOT_INO, "d1", FileKind::Dir),
            make(ROOT_INO, "d2", FileKind::Dir),
        );
        let f = make(d1, "f", FileKind::File);
        let other = make(d2, "other", FileKind::File);
        let link = MdsOp::Link {
            ino: f,
            parent: d2,
            name: b"g".to_vec(),
            now_ns: 2,
        };
        assert_eq!(dirs_changed(&ns, &link), [d1, d2]);
        ns.execute(&link).unwrap();
        let setattr = MdsOp::SetAttr {
            ino: f,
            set: SetAttr::default(),
            now_ns: 3,
        };
        assert_eq!(
            dirs_changed(&ns, &setattr),
            [d1, d2],
            "both names' directories"
        );
        let unlink = MdsOp::Unlink {
            parent: d1,
            name: b"f".to_vec(),
            now_ns: 4,
        };
        assert_eq!(dirs_changed(&ns, &unlink), [d1, d2]);
        let rename = MdsOp::Rename {
            parent: d2,
            name: b"other".to_vec(),
            new_parent: d2,
            new_name: b"g".to_vec(),
            flags: 0,
            now_ns: 5,
        };
        assert_eq!(dirs_changed(&ns, &rename), [d1, d2], "the replaced file's");
        ns.execute(&unlink).unwrap();
        assert_eq!(dirs_changed(&ns, &setattr), [d2], "one name left");
        let dir_attr = MdsOp::SetAttr {
            ino: d1,
            set: SetAttr::default(),
            now_ns: 6,
        };
        assert_eq!(dirs_changed(&ns, &dir_attr), [d1]);
        assert_eq!(dirs_changed(&ns, &MdsOp::GetAttr { ino: other }), [0u64; 0]);
    }

    #[test]
    fn remembered_answers_are_bounded_oldest_first() {
        let mut a = Answered::default();
        for tid in 0..(MAX_REMEMBERED_ANSWERS as u64 + 10) {
            a.remember(1, tid, Ok(MdsAnswer::Done));
        }
        assert_eq!(a.by_request.len(), MAX_REMEMBERED_ANSWERS);
        assert!(!a.by_request.contains_key(&(1, 0)));
        assert!(a
            .by_request
            .contains_key(&(1, MAX_REMEMBERED_ANSWERS as u64 + 9)));
    }

    #[test]
    fn mutations_need_write_access_to_the_data_pool_and_reads_read_access() {
        let caps = cairn_auth::Caps::from_pairs(&[("osd", "allow r pool=fs.data")]).unwrap();
        let peer = AuthPeer {
            entity: "client.bob".parse().unwrap(),
            caps,
            mode: WireMode::Mac,
            client_id: None,
        };
        let read = MdsOp::GetAttr { ino: 1 };
        let write = MdsOp::Unlink {
            parent: 1,
            name: b"x".to_vec(),
            now_ns: 0,
        };
        assert_eq!(refusal(Some(&peer), &read, "fs.data"), None);
        assert_eq!(refusal(Some(&peer), &write, "fs.data"), Some(libc::EACCES));
        assert_eq!(
            refusal(Some(&peer), &read, "other.data"),
            Some(libc::EACCES)
        );
        assert_eq!(refusal(None, &write, "fs.data"), None);
    }
}
