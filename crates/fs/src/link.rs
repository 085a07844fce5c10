//! A client's link to its file system's metadata server: finds it through the `mds.addr`
//! object, keeps a lossy session to it, and sends each request until it is answered — again
//! after the session restarts or an attempt times out (a restarted or replacement MDS), with
//! the same request id, so that the MDS answers a mutation it already applied from its record.
//!
//! A mutation the MDS answered early (applied in memory, not yet journaled) is kept until an
//! `MdsSafe` names it; every new session, and a session whose MDS restarted, starts with those
//! mutations replayed in request order and a `Reconnected`, before any new request.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use cairn_client::{Client, ClientError};
use cairn_msgr::handshake::CredentialSource;
use cairn_msgr::session::{Policy, Session, SessionSender};
use cairn_msgr::Limits;
use cairn_proto::mds::{
    Attr, FileKind, MdsAnswer, MdsOp, MdsRecall, MdsReply, MdsRequest, MdsSafe, NewInode,
    MAX_NAME_BYTES, MSG_MDS_RECALL, MSG_MDS_REPLY, MSG_MDS_REQUEST, MSG_MDS_SAFE,
};
use tokio::sync::{oneshot, watch, Notify};

use crate::dirlease::{Handed, Held, Lookup, LEASE};
use crate::kernel::KernelCache;
use crate::mds::ADDR_OBJECT;
use crate::namespace::slots::OUT_OF_ORDER;

/// Longest one attempt waits for its answer before the address is read again and the
/// request resent.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a request is tried before the caller gets EIO (an MDS that stays away).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(300);
/// How long a granted lock waits for the cluster map its barrier names.
const MAP_BARRIER_TIMEOUT_MS: u64 = 30_000;

/// How often a link with early answers not made safe checks that its session still reaches
/// the serving MDS.
const REPLAY_CHECK: Duration = Duration::from_secs(1);

/// How long after its latest answered mutation a client takes itself to be on the MDS's roster,
/// and watches for a new MDS so that one starting need not wait for it:
/// the roster keeps a client [`crate::replay::ROSTER_IDLE`] after its last mutation, and a restarted MDS
/// starts up to a lease (15 s) after its predecessor stopped.
const ROSTERED_FOR: Duration = Duration::from_secs(60);

/// Most creates a mount has answered by itself that the MDS has not answered yet; past it a
/// create waits for the MDS.
pub const MAX_EARLY_CREATES: usize = 1024;
/// Furthest a create answered here takes a number past the oldest one the MDS has not
/// answered: the MDS takes a pinned number no further than [`OUT_OF_ORDER`] below the
/// highest it has seen from the slot, and a create that waits (a session lost, a lease of
/// another client) must still be taken when it arrives.
const MAX_NUMBER_SPREAD: u64 = OUT_OF_ORDER / 2;
/// How long a mount that could not get inode numbers of its own waits before asking again.
const NUMBERS_RETRY: Duration = Duration::from_secs(30);

/// How long the kernel may cache a lookup's answer: its entry, and the attributes it gives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelTtl {
    /// The name's entry (its inode number, or that it is missing).
    pub entry: Duration,
    /// The attributes of the inode found.
    pub attr: Duration,
}

/// Where a request's answer goes.
type AnswerTo = oneshot::Sender<Result<MdsAnswer, i32>>;

/// Requests in flight and mutations answered early, shared with the session's reader.
#[derive(Default)]
struct Outstanding {
    /// Sent, not answered: where the answer goes, the request (kept if answered early), and
    /// when it was first sent.
    waiting: HashMap<u64, (AnswerTo, MdsRequest, Instant)>,
    /// Answered early, not yet safe, by request id: the request, and where it fell in
    /// execution order (the replay generation it was answered in, the MDS's sequence number).
    unsafe_answered: BTreeMap<u64, (MdsRequest, (u64, u64))>,
    /// Replays done so far: a session's replies count only while its generation is the
    /// latest, so that no early answer slips in after the replays were taken.
    generation: u64,
    /// When the latest mutation was answered: while the MDS may still hold this client on its
    /// roster, a restarted MDS waits for it to reconnect.
    last_mutation: Option<Instant>,
    /// The directory leases held, kept in step with the answers in the order they come.
    leases: Held,
    /// Creates this mount answered by itself that the MDS has not answered, by request id,
    /// with their inode numbers (both rising together): a later request waits for them (the
    /// MDS must know a file before what is done to it), and a lease is given up only after
    /// them.
    early_creates: BTreeMap<u64, u64>,
    /// The inode numbers delegated to this mount not used yet: the next one and the end.
    numbers: Option<(u64, u64)>,
    /// Numbers are being asked for, or (`Some(at)`) could not be had at `at`.
    numbers_asked: Option<Option<Instant>>,
}

impl Outstanding {
    /// Takes in one reply: hands a waiting request its answer, keeps what was answered early,
    /// forgets what is safe.
    fn replied(&mut self, reply: MdsReply, generation: u64) {
        if generation != self.generation {
            // A reply on a session replaced since: the request is sent again on the new one.
            return;
        }
        match self.waiting.remove(&reply.tid) {
            Some((to, req, asked)) => {
                if req.op.is_mutation() {
                    self.last_mutation = Some(Instant::now());
                }
                // An early create was followed when the mount answered it.
                if !self.early_creates.contains_key(&reply.tid) {
                    self.leases_follow(&req.op, &reply.result, asked);
                }
                if !reply.safe {
                    let req = MdsRequest {
                        op: req.op.pinned_to(&reply.result),
                        ..req
                    };
                    let order = (self.generation, reply.seq);
                    self.unsafe_answered.insert(reply.tid, (req, order));
                }
                let _ = to.send(reply.result);
            }
            None if reply.safe => {
                self.unsafe_answered.remove(&reply.tid);
            }
            None => {}
        }
    }

    /// Keeps the leases in step with an answer to `op`, sent first at `asked`: a lease granted
    /// or renewed, directories' attributes the MDS answered, and this client's own changes to
    /// leased directories.
    fn leases_follow(&mut self, op: &MdsOp, result: &Result<MdsAnswer, i32>, asked: Instant) {
        let l = &mut self.leases;
        let now = Instant::now();
        match (op, result) {
            (
                MdsOp::LeaseDir { dir, creates, .. },
                Ok(MdsAnswer::DirLeased {
                    names: Some(names),
                    attr,
                    grant,
                    file_object_size,
                }),
            ) => {
                l.granted(*dir, *grant, names.clone(), attr.clone(), asked, now);
                l.new_files_get(*dir, *file_object_size);
                if *creates {
                    l.creates_granted(*dir, *grant);
                }
            }
            (
                MdsOp::LeaseDir {
                    dir, names: true, ..
                },
                _,
            ) => l.refused(*dir, now),
            (
                MdsOp::LeaseDir {
                    dir,
                    names: false,
                    creates,
                },
                r,
            ) => {
                let (grant, layout) = match r {
                    Ok(MdsAnswer::DirLeased {
                        grant,
                        file_object_size,
                        ..
                    }) => (Some(*grant), *file_object_size),
                    _ => (None, 0),
                };
                l.renewed(*dir, grant, asked);
                if grant.is_some() {
                    l.new_files_get(*dir, layout);
                }
                if let Some(grant) = grant.filter(|_| *creates) {
                    l.creates_granted(*dir, grant);
                }
            }
            (_, Err(_)) => {}
            (
                MdsOp::Create {
                    parent,
                    name,
                    inode,
                },
                Ok(answer),
            ) => {
                l.added(*parent, name, answered_ino(answer));
                if inode.kind == FileKind::File {
                    l.note_create(*parent, now);
                }
                // A new directory adds a link to its parent, which is not followed here.
                let at = (inode.kind != FileKind::Dir).then_some(inode.now_ns);
                l.touched(*parent, at);
                if let MdsAnswer::Attr(a) = answer {
                    l.seen_file(Some((*parent, name)), a, asked, now);
                }
            }
            (
                MdsOp::Link {
                    parent,
                    name,
                    now_ns,
                    ..
                },
                Ok(answer),
            ) => {
                l.added(*parent, name, answered_ino(answer));
                l.touched(*parent, Some(*now_ns));
                if let MdsAnswer::Attr(a) = answer {
                    l.seen_file(Some((*parent, name)), a, asked, now);
                }
            }
            (
                MdsOp::Unlink {
                    parent,
                    name,
                    now_ns,
                },
                _,
            ) => {
                // The file's link count and ctime change.
                match l.removed(*parent, name) {
                    Some(gone) => l.forget_file(gone),
                    None => l.forget_files(),
                }
                l.touched(*parent, Some(*now_ns));
            }
            (MdsOp::Rmdir { parent, name, .. }, _) => {
                match l.removed(*parent, name) {
                    Some(gone) => l.touched(gone, None),
                    // A directory this mount may lease, its number not known here.
                    None => l.forget_attrs(),
                }
                l.touched(*parent, None);
            }
            (
                MdsOp::Rename {
                    parent,
                    name,
                    new_parent,
                    new_name,
                    ..
                },
                _,
            ) => {
                let moved = l.ino_of(*parent, name);
                let replaced = l.ino_of(*new_parent, new_name);
                let target_absent =
                    l.is_leased(*new_parent) && !l.knows_name(*new_parent, new_name);
                // A directory moved may inherit another layout, and the directories below it
                // with it: asked again (a file kept here is no directory).
                if !moved.is_some_and(|m| l.keeps_file(m)) {
                    l.forget_layouts();
                }
                if (parent, name) != (new_parent, new_name) {
                    // A rename onto another name of the same inode (a hard link) leaves both;
                    // the source name is dropped only when that is ruled out.
                    let other_inode = matches!((moved, replaced), (Some(m), Some(r)) if m != r);
                    let same_inode = matches!((moved, replaced), (Some(m), Some(r)) if m == r);
                    if target_absent || other_inode {
                        l.removed(*parent, name);
                        l.added(*new_parent, new_name, moved.unwrap_or(0));
                    } else if !same_inode {
                        l.forget(*parent);
                        l.added(*new_parent, new_name, 0);
                    }
                }
                for dir in [Some(*parent), Some(*new_parent), moved, replaced]
                    .into_iter()
                    .flatten()
                {
                    l.touched(dir, None);
                }
                // The moved file's ctime and the replaced one's link count change.
                match (moved, replaced) {
                    (Some(m), r) if r.is_some() || target_absent => {
                        l.forget_file(m);
                        r.into_iter().for_each(|r| l.forget_file(r));
                    }
                    _ => l.forget_files(),
                }
                if moved.is_none() || (replaced.is_none() && !target_absent) {
                    // A directory moved or replaced that this mount may lease, its number not
                    // known here.
                    l.forget_attrs();
                }
            }
            (MdsOp::SetXattr { ino, name, .. } | MdsOp::RemoveXattr { ino, name }, _) => {
                l.touched(*ino, None);
                l.forget_file(*ino);
                if crate::layout::is_virtual(name) {
                    l.forget_layouts();
                }
            }
            (MdsOp::Lookup { parent, name }, Ok(MdsAnswer::Attr(a))) => {
                l.named(*parent, name, a.ino, now);
                match a.kind {
                    FileKind::Dir => l.seen_dir(a, now),
                    _ => l.seen_file(Some((*parent, name)), a, asked, now),
                }
            }
            (_, Ok(MdsAnswer::Attr(a))) if a.kind == FileKind::Dir => l.seen_dir(a, now),
            (_, Ok(MdsAnswer::Attr(a))) => l.seen_file(None, a, asked, now),
            _ => {}
        }
    }

    /// [`MdsLink::create_here`] at `now`, its request id taken from `tids`.
    fn create_here(
        &mut self,
        parent: u64,
        name: &[u8],
        mut inode: NewInode,
        tids: &AtomicU64,
        now: Instant,
    ) -> Option<(Attr, EarlyCreate)> {
        if inode.kind != FileKind::File || self.early_creates.len() >= MAX_EARLY_CREATES {
            return None;
        }
        // A name the MDS would refuse goes to it, for its errno.
        let plain = !matches!(name, b"" | b"." | b"..") && !name.contains(&b'/');
        if !plain || name.contains(&0) || name.len() > MAX_NAME_BYTES {
            return None;
        }
        let object_size = self.leases.may_create(parent, name, now)?;
        let (ino, end) = self.numbers.filter(|(next, end)| next < end)?;
        // The MDS takes a number only so far below the highest it has seen from the slot.
        let oldest = self.early_creates.values().next().copied();
        if oldest.is_some_and(|oldest| ino - oldest >= MAX_NUMBER_SPREAD) {
            return None;
        }
        self.numbers = Some((ino + 1, end));
        inode.ino = Some(ino);
        inode.object_size = Some(object_size);
        let attr = Attr {
            ino,
            kind: FileKind::File,
            perm: inode.perm & 0o7777,
            uid: inode.uid,
            gid: inode.gid,
            size: 0,
            nlink: 1,
            atime_ns: inode.now_ns,
            mtime_ns: inode.now_ns,
            ctime_ns: inode.now_ns,
            rdev: 0,
            object_size,
        };
        let tid = tids.fetch_add(1, Ordering::Relaxed);
        let earlier = self.early_creates.insert(tid, ino);
        assert!(earlier.is_none(), "request ids are unique");
        debug_assert!(
            self.early_creates.last_key_value() == Some((&tid, &ino)),
            "request ids and numbers rise together"
        );
        self.leases.added(parent, name, ino);
        self.leases.touched(parent, Some(inode.now_ns));
        self.leases.seen_file(Some((parent, name)), &attr, now, now);
        let op = MdsOp::Create {
            parent,
            name: name.to_vec(),
            inode,
        };
        let early = EarlyCreate {
            tid,
            op,
            parent,
            name: name.to_vec(),
            ino,
        };
        Some((attr, early))
    }

    /// Forgets what the MDS says is durable.
    fn safe(&mut self, safe: &MdsSafe) {
        for tid in &safe.tids {
            self.unsafe_answered.remove(tid);
        }
    }

    /// Starts a new generation and returns the mutations to replay in it, in the order they
    /// were executed.
    fn replays(&mut self) -> (u64, Vec<MdsRequest>) {
        self.generation += 1;
        let mut held: Vec<&(MdsRequest, (u64, u64))> = self.unsafe_answered.values().collect();
        held.sort_by_key(|(_, order)| *order);
        let replays = held
            .into_iter()
            .map(|(r, _)| MdsRequest {
                replay: true,
                ..r.clone()
            })
            .collect();
        (self.generation, replays)
    }
}

/// The inode number an answer gives (0, unknown, when it gives none).
fn answered_ino(answer: &MdsAnswer) -> u64 {
    match answer {
        MdsAnswer::Attr(a) => a.ino,
        _ => 0,
    }
}

type Shared = Arc<Mutex<Outstanding>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Outstanding> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// The kernel whose cache leases may fill, once the mount names it.
type Kernel = Arc<OnceLock<Arc<dyn KernelCache>>>;

/// Returns once every create this mount answered by itself with a request id below `before`
/// has its answer from the MDS.
async fn early_creates_answered(outstanding: &Shared, answered: &Notify, before: u64) {
    loop {
        let notified = answered.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if lock(outstanding)
            .early_creates
            .range(..before)
            .next()
            .is_none()
        {
            return;
        }
        notified.await;
    }
}

/// What a session's reader needs to give up a recalled lease: a `ReleaseDir` of its own, sent
/// once the MDS answered the creates this mount made by itself and the kernel dropped what it
/// cached under the lease.
#[derive(Clone)]
struct Release {
    to: SessionSender,
    client: u64,
    tids: Arc<AtomicU64>,
    kernel: Kernel,
    outstanding: Shared,
    early_answered: Arc<Notify>,
}

impl Release {
    /// Gives up lease `grant` on `dir` once the creates answered here before now are answered
    /// by the MDS (or a lease went by) and the kernel dropped `handed` (left to run out when
    /// the kernel does not drop it in time).
    fn give_up(&self, dir: u64, grant: u64, handed: Option<Handed>) {
        let release = self.clone();
        let before = self.tids.load(Ordering::Relaxed);
        tokio::spawn(async move {
            let creates =
                early_creates_answered(&release.outstanding, &release.early_answered, before);
            if tokio::time::timeout(LEASE, creates).await.is_err() {
                tracing::warn!(dir, "creates made under a recalled lease went unanswered");
            }
            if let (Some(handed), Some(kernel)) = (handed, release.kernel.get().cloned()) {
                let dropping = move || crate::kernel::forget_handed(&*kernel, dir, &handed);
                if !crate::kernel::bounded(dropping).await {
                    tracing::warn!(dir, "the kernel kept a leased entry: the lease runs out");
                    return;
                }
            }
            release.release(dir, grant).await;
        });
    }

    /// Tells the MDS this client gave up lease `grant` on `dir` (its answer is not waited
    /// for).
    async fn release(&self, dir: u64, grant: u64) {
        let req = MdsRequest {
            tid: self.tids.fetch_add(1, Ordering::Relaxed),
            client: self.client,
            op: MdsOp::ReleaseDir { dir, grant },
            replay: false,
        };
        let payload = cairn_proto::encode(&req, &[]);
        if let Err(e) = self.to.send(MSG_MDS_REQUEST, payload).await {
            tracing::debug!(dir, error = %e, "a lease release was not sent: it runs out");
        }
    }
}

/// A create this mount answered by itself under a lease, for [`MdsLink::finish_create`] to
/// send to the MDS.
#[derive(Debug)]
pub struct EarlyCreate {
    tid: u64,
    op: MdsOp,
    parent: u64,
    name: Vec<u8>,
    ino: u64,
}

/// The session in use: where it goes, its sender, the MDS restarts it has replayed for, the
/// generation its replies count in, and the task reading its replies.
struct Current {
    addr: SocketAddr,
    sender: SessionSender,
    restarts: watch::Receiver<u64>,
    generation: Arc<AtomicU64>,
    reader: tokio::task::AbortHandle,
}

impl Drop for Current {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The link.
pub struct MdsLink {
    rados: Arc<Client>,
    metadata_pool: String,
    client_id: u64,
    creds: Option<Arc<dyn CredentialSource>>,
    current: tokio::sync::Mutex<Option<Current>>,
    outstanding: Shared,
    next_tid: Arc<AtomicU64>,
    kernel: Kernel,
    /// Signalled each time the MDS answers a create this mount answered by itself.
    early_answered: Arc<Notify>,
}

impl MdsLink {
    /// A link for the file system whose metadata is in `metadata_pool`, found and dialed with
    /// `rados`'s credentials.
    pub fn new(rados: Arc<Client>, metadata_pool: String) -> MdsLink {
        let creds = rados.service_credentials();
        MdsLink {
            // The instance its OSD ops carry: what the MDS fences if it evicts this mount.
            client_id: rados.instance(),
            rados,
            metadata_pool,
            creds,
            current: tokio::sync::Mutex::new(None),
            outstanding: Arc::default(),
            next_tid: Arc::new(AtomicU64::new(1)),
            kernel: Arc::default(),
            early_answered: Arc::default(),
        }
    }

    /// Returns once this mount's cluster map is at least `epoch` (a lock's barrier: the map
    /// fences every client evicted before the lock was granted); EIO if it does not come.
    pub async fn wait_for_map(&self, epoch: u64) -> Result<(), i32> {
        if self.rados.epoch() >= epoch {
            return Ok(());
        }
        match self
            .rados
            .mon()
            .wait_for_epoch(epoch, MAP_BARRIER_TIMEOUT_MS)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::warn!(epoch, error = %e, "waiting for a lock's map barrier");
                Err(libc::EIO)
            }
        }
    }

    /// Where the MDS says it serves.
    async fn address(&self) -> Result<SocketAddr, String> {
        let bytes = match self.rados.read(&self.metadata_pool, ADDR_OBJECT).await {
            Ok(b) => b,
            Err(ClientError::NotFound(_)) => return Err("no metadata server has started".into()),
            Err(e) => return Err(e.to_string()),
        };
        String::from_utf8_lossy(&bytes)
            .trim()
            .parse()
            .map_err(|e| format!("{ADDR_OBJECT} holds no address: {e}"))
    }

    /// The session's sender, dialing the MDS at its published address when there is no
    /// session, or when `redial` asks for the address to be read again. A new session, and
    /// one whose MDS restarted, first carries the replays.
    async fn sender(&self, redial: bool) -> Result<SessionSender, String> {
        // Read before the session is locked: requests go on while the read waits.
        let published = match redial {
            true => Some(self.address().await?),
            false => None,
        };
        let mut current = self.current.lock().await;
        let usable =
            |c: &&mut Current| published.is_none_or(|addr| c.addr == addr && !c.sender.is_closed());
        if let Some(c) = current.as_mut().filter(usable) {
            return self.replayed_on(c).await;
        }
        let addr = match published {
            Some(addr) => addr,
            None => self.address().await?,
        };
        let mut session = Session::connect_as(
            addr,
            self.client_id,
            Limits::default(),
            100,
            Policy::Lossy,
            self.creds.clone(),
        )
        .await;
        let sender = session.sender();
        let outstanding = self.outstanding.clone();
        let generation = Arc::new(AtomicU64::new(u64::MAX));
        let reader_generation = generation.clone();
        let releases = Release {
            to: sender.clone(),
            client: self.client_id,
            tids: self.next_tid.clone(),
            kernel: self.kernel.clone(),
            outstanding: self.outstanding.clone(),
            early_answered: self.early_answered.clone(),
        };
        let reader = tokio::spawn(async move {
            while let Some(frame) = session.recv().await {
                match frame.header.msg_type {
                    MSG_MDS_REPLY => match cairn_proto::decode::<MdsReply>(&frame.payload) {
                        Ok((reply, _)) => {
                            let mut o = lock(&outstanding);
                            o.replied(reply, reader_generation.load(Ordering::Acquire));
                        }
                        Err(_) => tracing::warn!("a malformed reply from the metadata server"),
                    },
                    MSG_MDS_SAFE => match cairn_proto::decode::<MdsSafe>(&frame.payload) {
                        Ok((safe, _)) => lock(&outstanding).safe(&safe),
                        Err(_) => {
                            tracing::warn!("a malformed safe notice from the metadata server")
                        }
                    },
                    MSG_MDS_RECALL => match cairn_proto::decode::<MdsRecall>(&frame.payload) {
                        Ok((recall, _)) => {
                            // Given up before the MDS hears so: no answer from it follows.
                            let (dir, grant) = (recall.dir, recall.grant);
                            let handed = lock(&outstanding).leases.recalled(dir, grant);
                            releases.give_up(dir, grant, handed);
                        }
                        Err(_) => tracing::warn!("a malformed recall from the metadata server"),
                    },
                    _ => {}
                }
            }
        })
        .abort_handle();
        // The replaced session's replies stop counting before the replays are taken.
        current.take();
        let mut c = Current {
            addr,
            restarts: sender.peer_restarts(),
            sender,
            generation,
            reader,
        };
        self.replay(&c.sender, &c.generation).await?;
        c.restarts.borrow_and_update();
        let sender = c.sender.clone();
        *current = Some(c);
        Ok(sender)
    }

    /// `c`'s sender, once the replays went on it if its MDS restarted since they last did.
    async fn replayed_on(&self, c: &mut Current) -> Result<SessionSender, String> {
        if c.restarts.has_changed().unwrap_or(false) {
            c.restarts.borrow_and_update();
            self.replay(&c.sender, &c.generation).await?;
        }
        Ok(c.sender.clone())
    }

    /// Sends every mutation answered early and not yet safe, in the order the MDS executed
    /// them, then `Reconnected`; from now on only replies counted in `generation` (the
    /// session's) count.
    async fn replay(&self, sender: &SessionSender, generation: &AtomicU64) -> Result<(), String> {
        let replays = {
            let mut o = lock(&self.outstanding);
            let (now, replays) = o.replays();
            generation.store(now, Ordering::Release);
            replays
        };
        match replays.len() {
            0 => tracing::debug!("a new session to the metadata server"),
            n => tracing::info!(
                mutations = n,
                "replaying to the metadata server the mutations it answered early"
            ),
        }
        let done = MdsRequest {
            tid: self.next_tid.fetch_add(1, Ordering::Relaxed),
            client: self.client_id,
            op: MdsOp::Reconnected,
            replay: false,
        };
        for req in replays.iter().chain([&done]) {
            sender
                .send(MSG_MDS_REQUEST, cairn_proto::encode(req, &[]))
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Keeps mutations answered early from being lost with their MDS, and a restarted MDS
    /// from waiting for this client: each [`REPLAY_CHECK`] while an early answer waits for its
    /// `MdsSafe`, or while the MDS may count this client on its roster, reads the MDS's
    /// address again and replays on a new session when it changed (a standby took over) or
    /// after the MDS restarted. Ends with the link.
    pub async fn keep_replaying(link: Weak<MdsLink>) {
        loop {
            tokio::time::sleep(REPLAY_CHECK).await;
            let Some(link) = link.upgrade() else { return };
            let watching = {
                let o = lock(&link.outstanding);
                !o.unsafe_answered.is_empty()
                    || o.last_mutation
                        .is_some_and(|at| at.elapsed() <= ROSTERED_FOR)
            };
            if watching {
                if let Err(e) = link.sender(true).await {
                    tracing::warn!(error = %e, "reaching the metadata server to replay");
                }
            }
        }
    }

    /// Whether lookups may be answered from directory leases (on unless turned off).
    pub fn use_dir_leases(&self, on: bool) {
        lock(&self.outstanding).leases.set_enabled(on);
    }

    /// Lets `kernel` cache what this mount's leases cover: the TTLs the lookups below give
    /// are then the leases' own, and a recall takes what they covered out of `kernel` first.
    /// Named once.
    pub fn cache_in_kernel(&self, kernel: Arc<dyn KernelCache>) {
        if self.kernel.set(kernel).is_ok() {
            lock(&self.outstanding).leases.set_kernel_caching(true);
        }
    }

    /// How a lookup of `name` in `dir` goes with this mount's directory leases (see
    /// [`Held::lookup`]), how long the kernel may cache its answer (its entry, and the
    /// attributes of a directory found), and the leases that want renewing now (`dir`'s, and
    /// a leased directory's found).
    pub fn lookup_leased(&self, dir: u64, name: &[u8]) -> (Lookup, KernelTtl, [Option<u64>; 2]) {
        let now = Instant::now();
        let mut o = lock(&self.outstanding);
        let (found, renew) = o.leases.lookup(dir, name, now);
        // A leased directory found by name: its lease is in use too (the kernel may cache its
        // attributes and never ask for them).
        let child_renew = match &found {
            Lookup::Found(attr) if attr.kind == FileKind::Dir => {
                o.leases.attr(attr.ino, now).1.then_some(attr.ino)
            }
            _ => None,
        };
        let renew = [renew.then_some(dir), child_renew];
        let ttl = match &found {
            Lookup::Absent => KernelTtl {
                entry: o.leases.kernel_entry(dir, name, None, now),
                attr: Duration::ZERO,
            },
            // A directory's name is not cached: dropping it at a recall would cut off what
            // is mounted below it and the working directories of processes in it.
            Lookup::Found(attr) if attr.kind == FileKind::Dir => KernelTtl {
                entry: Duration::ZERO,
                attr: o.leases.kernel_attr(attr.ino, now),
            },
            Lookup::Found(attr) => KernelTtl {
                entry: o.leases.kernel_entry(dir, name, Some(attr.ino), now),
                attr: o.leases.kernel_file_attr(attr.ino, now),
            },
            Lookup::Ask(_) => KernelTtl::default(),
        };
        (found, ttl, renew)
    }

    /// How long the kernel may cache the entry of `name` in `dir`, which the MDS just
    /// answered is inode `ino` (see [`Held::kernel_entry`]); a directory's name (`is_dir`)
    /// not at all.
    pub fn kernel_entry_ttl(&self, dir: u64, name: &[u8], ino: u64, is_dir: bool) -> Duration {
        if is_dir {
            return Duration::ZERO;
        }
        lock(&self.outstanding)
            .leases
            .kernel_entry(dir, name, Some(ino), Instant::now())
    }

    /// The attributes of `ino` when a lease here covers them (a directory leased here, see
    /// [`Held::attr`]; a file named in one, see [`Held::file_attr`]), how long the kernel may
    /// cache them, and the directory whose lease wants renewing now.
    pub fn attr_leased(&self, ino: u64) -> (Option<Attr>, Duration, Option<u64>) {
        let now = Instant::now();
        let mut o = lock(&self.outstanding);
        match o.leases.attr(ino, now) {
            (Some(attr), renew) => {
                let ttl = o.leases.kernel_attr(ino, now);
                (Some(attr), ttl, renew.then_some(ino))
            }
            (None, renew) => {
                let (attr, file_renew) = o.leases.file_attr(ino, now);
                let ttl = match attr {
                    Some(_) => o.leases.kernel_file_attr(ino, now),
                    None => Duration::ZERO,
                };
                (attr, ttl, file_renew.or(renew.then_some(ino)))
            }
        }
    }

    /// Whether a lease on directory `dir`, whose attributes the MDS just answered, is worth
    /// asking for (see [`Held::worth_asking`]).
    pub fn worth_leasing(&self, dir: u64) -> bool {
        lock(&self.outstanding)
            .leases
            .worth_asking(dir, Instant::now())
    }

    /// Asks for a lease on `dir` (`names`: a new one, with its names) unless one is being
    /// asked for; what comes of it is taken in with the answer.
    pub async fn ask_lease(&self, dir: u64, names: bool) {
        if names && !lock(&self.outstanding).leases.asking(dir, Instant::now()) {
            return;
        }
        let creates = lock(&self.outstanding)
            .leases
            .wants_creates(dir, Instant::now());
        let op = MdsOp::LeaseDir {
            dir,
            names,
            creates,
        };
        if let Err(e) = self.request(op).await {
            tracing::debug!(dir, errno = e, "no directory lease");
            if names && e == libc::EIO {
                // No answer came (an answer, EAGAIN included, was taken in already, and a
                // newer request may be under way).
                lock(&self.outstanding).leases.refused(dir, Instant::now());
            }
        }
    }

    /// Creates file `name` in `parent` as `inode` here, without waiting for the MDS, when
    /// this mount leases `parent` (see [`Held::may_create`]) and has inode numbers of its
    /// own: the new file's attributes, to answer the creator with now, and the `Create`,
    /// for the caller to run with [`MdsLink::finish_create`]. Every request asked for after
    /// this reaches the MDS after the `Create` does. `None`: ask the MDS.
    pub fn create_here(
        &self,
        parent: u64,
        name: &[u8],
        inode: NewInode,
    ) -> Option<(Attr, EarlyCreate)> {
        let mut o = lock(&self.outstanding);
        o.create_here(parent, name, inode, &self.next_tid, Instant::now())
    }

    /// Sends a create answered here to the MDS and takes in its answer. Should the MDS refuse
    /// it (or number the file otherwise), the name is taken back from the lease and the
    /// kernel, and the refusal logged: what the creator wrote to the file is lost.
    pub async fn finish_create(self: Arc<Self>, early: EarlyCreate) {
        let EarlyCreate {
            tid,
            op,
            parent,
            name,
            ino,
        } = early;
        let result = self.request_as(tid, op).await;
        let made = match &result {
            Ok(MdsAnswer::Attr(a)) => Some(a.ino),
            _ => None,
        };
        if made != Some(ino) {
            tracing::error!(
                parent,
                name = %String::from_utf8_lossy(&name),
                ino,
                ?result,
                "the metadata server did not make a file this mount created: it is gone"
            );
            {
                let mut o = lock(&self.outstanding);
                if o.leases.ino_of(parent, &name) == Some(ino) {
                    match made {
                        Some(other) => o.leases.added(parent, &name, other),
                        None => {
                            o.leases.removed(parent, &name);
                        }
                    }
                }
                o.leases.forget_file(ino);
            }
            if let Some(kernel) = self.kernel.get().cloned() {
                let dropping = move || {
                    crate::kernel::forget(&*kernel, parent, [name.as_slice()], false, [ino])
                };
                if !crate::kernel::bounded(dropping).await {
                    tracing::warn!(parent, "the kernel kept the entry of a file never made");
                }
            }
        }
        lock(&self.outstanding).early_creates.remove(&tid);
        self.early_answered.notify_waiters();
    }

    /// Whether this mount should ask for inode numbers of its own now, to create files in
    /// `dir` (it leases `dir` for creates, has no numbers, is not asking, and was not refused
    /// lately): noted as asking, for the caller to run [`MdsLink::ask_numbers`].
    pub fn wants_numbers(&self, dir: u64) -> bool {
        let mut o = lock(&self.outstanding);
        if !o.leases.held_for_creates(dir, Instant::now()) {
            return false;
        }
        let refused_lately =
            |at: &Option<Instant>| at.is_none_or(|at| at.elapsed() < NUMBERS_RETRY);
        // Numbers once had are never asked for again: the MDS would give the same ones.
        if o.numbers.is_some() || o.numbers_asked.as_ref().is_some_and(refused_lately) {
            return false;
        }
        o.numbers_asked = Some(None);
        true
    }

    /// Asks the MDS for inode numbers of this mount's own (see [`MdsOp::Delegate`]).
    pub async fn ask_numbers(&self) {
        let result = self.request(MdsOp::Delegate).await;
        let mut o = lock(&self.outstanding);
        match result {
            Ok(MdsAnswer::Delegated { first, count }) => {
                o.numbers = Some((first, first.saturating_add(count)));
                o.numbers_asked = None;
            }
            other => {
                tracing::debug!(?other, "no inode numbers of this mount's own");
                o.numbers_asked = Some(Some(Instant::now()));
            }
        }
    }

    /// Whether the lease on `dir`, where this mount just created a file through the MDS,
    /// wants renewing now to be held for creates (see [`Held::creates_due`]): the caller then
    /// asks for it with [`MdsLink::ask_lease`].
    pub fn lease_for_creates(&self, dir: u64) -> bool {
        lock(&self.outstanding)
            .leases
            .creates_due(dir, Instant::now())
    }

    /// Runs `op` on the MDS: its answer or an errno (EIO when the MDS stays unreachable).
    /// It reaches the MDS after every create answered here before it.
    pub async fn request(&self, op: MdsOp) -> Result<MdsAnswer, i32> {
        let tid = self.next_tid.fetch_add(1, Ordering::Relaxed);
        early_creates_answered(&self.outstanding, &self.early_answered, tid).await;
        self.request_as(tid, op).await
    }

    /// Runs `op` on the MDS as request `tid`.
    async fn request_as(&self, tid: u64, op: MdsOp) -> Result<MdsAnswer, i32> {
        let asked = Instant::now();
        let req = MdsRequest {
            tid,
            client: self.client_id,
            op,
            replay: false,
        };
        let payload = cairn_proto::encode(&req, &[]);
        let deadline = Instant::now() + REQUEST_DEADLINE;
        let mut redial = false;
        let mut last = String::new();
        while Instant::now() < deadline {
            let sender = match self.sender(redial).await {
                Ok(s) => s,
                Err(e) => {
                    last = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    redial = true;
                    continue;
                }
            };
            let mut restarts = sender.peer_restarts();
            restarts.borrow_and_update();
            let (tx, rx) = oneshot::channel();
            lock(&self.outstanding)
                .waiting
                .insert(tid, (tx, req.clone(), asked));
            if let Err(e) = sender.send(MSG_MDS_REQUEST, payload.clone()).await {
                last = e.to_string();
                redial = true;
                continue;
            }
            tokio::select! {
                got = rx => match got {
                    Ok(result) => return result,
                    Err(_) => last = "the reply channel closed".into(),
                },
                _ = restarts.changed() => last = "the metadata server restarted".into(),
                _ = tokio::time::sleep(ATTEMPT_TIMEOUT) => {
                    last = "no answer in time".into();
                    redial = true;
                }
            }
        }
        lock(&self.outstanding).waiting.remove(&tid);
        tracing::warn!(%last, "a metadata request failed");
        Err(libc::EIO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::mds::{Attr, FileKind, NewInode};

    fn create(name: &str) -> MdsRequest {
        MdsRequest {
            tid: 0,
            client: 9,
            op: MdsOp::Create {
                parent: 1,
                name: name.as_bytes().to_vec(),
                inode: NewInode {
                    kind: FileKind::File,
                    perm: 0o644,
                    uid: 0,
                    gid: 0,
                    rdev: 0,
                    target: Vec::new(),
                    now_ns: 0,
                    open: true,
                    ino: None,
                    object_size: None,
                },
            },
            replay: false,
        }
    }

    fn made(ino: u64) -> Result<MdsAnswer, i32> {
        Ok(MdsAnswer::Attr(Attr {
            ino,
            kind: FileKind::File,
            perm: 0o644,
            uid: 0,
            gid: 0,
            size: 0,
            nlink: 1,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            rdev: 0,
            object_size: 4 << 20,
        }))
    }

    /// Takes a new lease for creates on directory 1 into `o`: its `names`, and the object
    /// size its new files get.
    fn lease_for_creates(o: &mut Outstanding, names: Vec<(Vec<u8>, u64)>, file_object_size: u32) {
        assert!(o.leases.asking(1, Instant::now()));
        let lease = MdsOp::LeaseDir {
            dir: 1,
            names: true,
            creates: true,
        };
        let granted = Ok(MdsAnswer::DirLeased {
            names: Some(names),
            attr: None,
            grant: 1,
            file_object_size,
        });
        o.leases_follow(&lease, &granted, Instant::now());
    }

    fn new_file() -> NewInode {
        match create("x").op {
            MdsOp::Create { inode, .. } => inode,
            _ => unreachable!("create() makes a create"),
        }
    }

    #[test]
    fn a_file_is_created_here_only_under_a_lease_with_a_layout_and_numbers_of_its_own() {
        let mut o = Outstanding::default();
        let tids = AtomicU64::new(10);
        let now = Instant::now();
        assert!(
            o.create_here(1, b"a", new_file(), &tids, now).is_none(),
            "no lease"
        );
        let old = || vec![(b"old".to_vec(), 5)];
        lease_for_creates(&mut o, old(), 0);
        o.numbers = Some((100, 102));
        let now = Instant::now();
        assert!(
            o.create_here(1, b"a", new_file(), &tids, now).is_none(),
            "the layout of new files not told"
        );
        o.leases.forget(1);
        lease_for_creates(&mut o, old(), 1 << 20);
        let now = Instant::now();
        assert!(
            o.create_here(1, b"old", new_file(), &tids, now).is_none(),
            "taken"
        );
        let long = vec![b'n'; MAX_NAME_BYTES + 1];
        for bad in [&long[..], b"", b".", b"..", b"a/b", b"a\0b"] {
            assert!(
                o.create_here(1, bad, new_file(), &tids, now).is_none(),
                "{bad:?} goes to the MDS for its errno"
            );
        }
        let (attr, early) = o.create_here(1, b"a", new_file(), &tids, now).unwrap();
        assert_eq!((attr.ino, attr.object_size, attr.size), (100, 1 << 20, 0));
        assert_eq!((early.tid, early.ino), (10, 100));
        match &early.op {
            MdsOp::Create { inode, name, .. } => {
                assert_eq!((inode.ino, inode.object_size), (Some(100), Some(1 << 20)));
                assert_eq!(name, b"a");
            }
            other => panic!("not a create: {other:?}"),
        }
        assert_eq!(o.early_creates.get(&10), Some(&100));
        assert_eq!(
            o.leases.ino_of(1, b"a"),
            Some(100),
            "the lease names it at once"
        );
        assert_eq!(
            o.leases.file_attr(100, now).0.map(|a| a.ino),
            Some(100),
            "its attributes are answered here"
        );
        assert!(
            o.create_here(1, b"a", new_file(), &tids, now).is_none(),
            "now taken"
        );
        let dir = NewInode {
            kind: FileKind::Dir,
            ..new_file()
        };
        assert!(
            o.create_here(1, b"d", dir, &tids, now).is_none(),
            "files only"
        );
        assert!(o.create_here(1, b"b", new_file(), &tids, now).is_some());
        assert!(
            o.create_here(1, b"c", new_file(), &tids, now).is_none(),
            "the numbers ran out"
        );
        // The MDS's answer to an early create leaves the lease as the mount made it.
        let (answer, _) = oneshot::channel();
        o.waiting.insert(
            10,
            (
                answer,
                MdsRequest {
                    tid: 10,
                    ..create("a")
                },
                now,
            ),
        );
        o.replied(
            MdsReply {
                tid: 10,
                result: made(100),
                safe: true,
                seq: 0,
            },
            0,
        );
        assert_eq!(o.leases.ino_of(1, b"a"), Some(100));
        o.leases.recalled(1, 1);
        o.numbers = Some((102, 110));
        assert!(
            o.create_here(1, b"e", new_file(), &tids, Instant::now())
                .is_none(),
            "the lease recalled"
        );
    }

    /// A grant replaces a lease with the names the MDS listed when it answered. Were a new
    /// lease asked for while one is current, a create made here under the current one (whose
    /// request goes out after the ask) would be missing from that listing, and the mount would
    /// answer that its own new file does not exist.
    #[test]
    fn no_new_lease_is_asked_for_while_one_is_current_so_early_creates_stay_named() {
        let mut o = Outstanding::default();
        let tids = AtomicU64::new(10);
        lease_for_creates(&mut o, Vec::new(), 1 << 20);
        o.numbers = Some((100, 200));
        let now = Instant::now();
        assert!(
            !o.leases.asking(1, now),
            "a lease on the directory is current: no new one is asked for"
        );
        let (attr, early) = o.create_here(1, b"new", new_file(), &tids, now).unwrap();
        assert_eq!((attr.ino, early.ino), (100, 100));
        assert!(
            matches!(o.leases.lookup(1, b"new", now).0, Lookup::Found(a) if a.ino == 100),
            "the mount names its own new file"
        );
        let (answer, _) = oneshot::channel();
        let request = MdsRequest {
            tid: early.tid,
            ..create("new")
        };
        o.waiting.insert(early.tid, (answer, request, now));
        o.replied(
            MdsReply {
                tid: early.tid,
                result: made(100),
                safe: true,
                seq: 0,
            },
            0,
        );
        assert!(matches!(
            o.leases.lookup(1, b"new", now).0,
            Lookup::Found(a) if a.ino == 100
        ));
        let after = now + LEASE;
        assert!(
            o.leases.asking(1, after),
            "the lease ended: a new one is asked for"
        );
    }

    #[test]
    fn a_mount_takes_numbers_no_further_than_the_spread_past_its_oldest_unanswered_create() {
        let mut o = Outstanding::default();
        let tids = AtomicU64::new(10);
        lease_for_creates(&mut o, Vec::new(), 1 << 20);
        let first = 10_000;
        o.numbers = Some((first, first + 100_000));
        // A create answered here long ago, still unanswered by the MDS.
        o.early_creates.insert(1, first - MAX_NUMBER_SPREAD + 1);
        let now = Instant::now();
        assert!(o.create_here(1, b"a", new_file(), &tids, now).is_some());
        assert!(
            o.create_here(1, b"b", new_file(), &tids, now).is_none(),
            "too far past the oldest"
        );
        o.early_creates.remove(&1);
        assert_eq!(
            o.create_here(1, b"b", new_file(), &tids, now)
                .map(|(a, _)| a.ino),
            Some(first + 1)
        );
    }

    #[test]
    fn the_mounts_own_changes_to_a_file_follow_or_forget_its_kept_attributes() {
        let mut o = Outstanding::default();
        lease_for_creates(&mut o, Vec::new(), 0);
        let kept = |o: &mut Outstanding, ino| o.leases.file_attr(ino, Instant::now()).0;
        o.leases_follow(&create("f").op, &made(9), Instant::now());
        assert_eq!(
            kept(&mut o, 9).map(|a| a.size),
            Some(0),
            "its create's answer"
        );
        let mut grown = made(9).unwrap();
        if let MdsAnswer::Attr(a) = &mut grown {
            a.size = 100;
        }
        let setattr = MdsOp::SetAttr {
            ino: 9,
            set: Default::default(),
            now_ns: 1,
        };
        o.leases_follow(&setattr, &Ok(grown), Instant::now());
        assert_eq!(
            kept(&mut o, 9).map(|a| a.size),
            Some(100),
            "its setattr's answer"
        );
        let xattr = MdsOp::RemoveXattr {
            ino: 9,
            name: b"user.x".to_vec(),
        };
        o.leases_follow(&xattr, &Ok(MdsAnswer::Done), Instant::now());
        assert_eq!(
            kept(&mut o, 9),
            None,
            "an extended attribute changes its ctime"
        );
        o.leases_follow(&MdsOp::GetAttr { ino: 9 }, &made(9), Instant::now());
        assert_eq!(
            kept(&mut o, 9),
            None,
            "a getattr names no directory to keep it under"
        );
        let lookup = MdsOp::Lookup {
            parent: 1,
            name: b"f".to_vec(),
        };
        o.leases_follow(&lookup, &made(9), Instant::now());
        assert!(kept(&mut o, 9).is_some(), "looked up again");
        let unlink = MdsOp::Unlink {
            parent: 1,
            name: b"f".to_vec(),
            now_ns: 2,
        };
        o.leases_follow(&unlink, &Ok(MdsAnswer::Done), Instant::now());
        assert_eq!(kept(&mut o, 9), None, "its unlink");
        o.leases_follow(&create("g").op, &made(10), Instant::now());
        let stale = Instant::now() - Duration::from_secs(1);
        o.leases_follow(&MdsOp::GetAttr { ino: 10 }, &made(10), stale);
        assert_eq!(
            kept(&mut o, 10),
            None,
            "an answer to a request older than the lease"
        );
    }

    /// Sends `name`'s create as request `tid` and takes in its early answer.
    fn answered_early(o: &mut Outstanding, tid: u64, name: &str, ino: u64, seq: u64) {
        let (tx, _rx) = oneshot::channel();
        o.waiting.insert(
            tid,
            (
                tx,
                MdsRequest {
                    tid,
                    ..create(name)
                },
                Instant::now(),
            ),
        );
        let reply = MdsReply {
            tid,
            result: made(ino),
            safe: false,
            seq,
        };
        let generation = o.generation;
        o.replied(reply, generation);
    }

    fn replayed(o: &mut Outstanding) -> Vec<(u64, Option<u64>)> {
        let (_, replays) = o.replays();
        replays
            .into_iter()
            .map(|r| {
                assert!(r.replay);
                match r.op {
                    MdsOp::Create { inode, .. } => (r.tid, inode.ino),
                    other => panic!("replayed {other:?}"),
                }
            })
            .collect()
    }

    #[test]
    fn early_answers_replay_in_execution_order_with_their_inode_numbers_until_safe() {
        let mut o = Outstanding::default();
        answered_early(&mut o, 5, "a", 101, 2);
        answered_early(&mut o, 6, "b", 100, 1);
        assert_eq!(replayed(&mut o), vec![(6, Some(100)), (5, Some(101))]);
        answered_early(&mut o, 7, "c", 102, 1);
        assert_eq!(
            replayed(&mut o),
            vec![(6, Some(100)), (5, Some(101)), (7, Some(102))],
            "answered after a replay: executed after what was replayed"
        );
        o.safe(&MdsSafe { tids: vec![6, 7] });
        assert_eq!(replayed(&mut o), vec![(5, Some(101))]);
        let generation = o.generation;
        o.replied(
            MdsReply {
                tid: 5,
                result: made(101),
                safe: true,
                seq: 0,
            },
            generation,
        );
        assert!(
            replayed(&mut o).is_empty(),
            "a safe answer to a replay ends it"
        );
    }

    #[test]
    fn a_reply_on_a_replaced_session_does_not_count() {
        let mut o = Outstanding::default();
        let (tx, mut rx) = oneshot::channel();
        o.waiting.insert(
            3,
            (
                tx,
                MdsRequest {
                    tid: 3,
                    ..create("a")
                },
                Instant::now(),
            ),
        );
        let old = o.generation;
        let _ = o.replays();
        let reply = MdsReply {
            tid: 3,
            result: made(50),
            safe: false,
            seq: 1,
        };
        o.replied(reply, old);
        assert!(o.unsafe_answered.is_empty() && o.waiting.contains_key(&3));
        assert!(rx.try_recv().is_err(), "the request is sent again instead");
    }
}
