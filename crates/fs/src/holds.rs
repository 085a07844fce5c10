//! The files a mount holds open and the locks it holds, kept known to the metadata server: a
//! file unlinked elsewhere while open here keeps its data until this mount closes it, and a
//! lock taken here keeps other mounts out.
//!
//! Each open and lock change is told to the MDS as it happens; every [`RENEW_EVERY`] the
//! whole of it goes again (`Held`), which renews this client's lease, tells the MDS of the
//! closes since the last one (a close is not sent by itself: a file closed here counts as
//! open at the MDS until then) and makes good whatever the MDS lost (everything after an MDS
//! restart). Changes run side by side; a `Held` waits for those in flight and holds new ones
//! back while it goes, so what it carries is never older than what the MDS has already seen.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cairn_proto::mds::{Attr, LockKind, LockSpec, MdsAnswer, MdsOp};
use tokio::sync::RwLock;

use crate::link::MdsLink;
use crate::locks::Locks;
use crate::opens::RENEW_EVERY;

/// The client id this mount's own lock table files its locks under.
const OWN: u64 = 0;

/// A mount's open files and locks.
pub struct Holds {
    link: Arc<MdsLink>,
    counts: Mutex<HashMap<u64, u32>>,
    /// The locks this mount holds (under one client id of its own: the MDS knows the mount's).
    locks: Mutex<Locks>,
    /// Read-held by opens and lock changes in flight, write-held by a `Held` in flight.
    order: RwLock<()>,
    /// A file was closed since the last `Held` was taken.
    closed: AtomicBool,
}

impl Holds {
    /// Open files of the mount whose MDS is behind `link`.
    pub fn new(link: Arc<MdsLink>) -> Holds {
        Holds {
            link,
            counts: Mutex::default(),
            locks: Mutex::default(),
            order: RwLock::new(()),
            closed: AtomicBool::new(false),
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<u64, u32>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `op` (an `Open`, or a `Create` of a file held open), counting the file open once
    /// it answers with its attributes.
    pub async fn open(&self, op: MdsOp) -> Result<Attr, i32> {
        let _order = self.order.read().await;
        match self.link.request(op).await? {
            MdsAnswer::Attr(a) => {
                *self.counts().entry(a.ino).or_default() += 1;
                Ok(a)
            }
            _ => Err(libc::EIO),
        }
    }

    /// Counts a file open that `make` creates here (see
    /// [`crate::link::MdsLink::create_here`]: the MDS counts it when its `Create` runs),
    /// unless a `Held` is in flight, which might reach the MDS after that `Create` without
    /// it. `make` answers what it made and the file's inode number.
    pub fn opened_here<T>(&self, make: impl FnOnce() -> Option<(T, u64)>) -> Option<T> {
        let _order = self.order.try_read().ok()?;
        let (made, ino) = make()?;
        *self.counts().entry(ino).or_default() += 1;
        Some(made)
    }

    /// Closes what one [`Holds::open`] opened; the MDS learns of it with the next `Held`.
    pub fn close(&self, ino: u64) {
        let mut counts = self.counts();
        match counts.get_mut(&ino) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                counts.remove(&ino);
                self.closed.store(true, Ordering::Release);
            }
            None => {}
        }
    }

    fn locks(&self) -> std::sync::MutexGuard<'_, Locks> {
        self.locks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lock of another owner (on any mount) in the way of `lock` on `ino`, if any.
    pub async fn lock_in_the_way(&self, ino: u64, lock: LockSpec) -> Result<Option<LockSpec>, i32> {
        match self.link.request(MdsOp::GetLock { ino, lock }).await? {
            MdsAnswer::Lock(l) => Ok(l),
            _ => Err(libc::EIO),
        }
    }

    /// Takes, changes or releases `lock` on `ino` without waiting (EAGAIN while another
    /// owner's lock is in the way); with `wait`, the caller asks again until granted, and
    /// EDEADLK says it would wait forever.
    ///
    /// A granted lock is answered only once this mount's map has the grant's barrier (every
    /// client the MDS evicted is fenced there): no write made under the lock can reach an
    /// OSD that would still take one of theirs after it. If that map does not come, the
    /// lock is let go again and the caller told EIO.
    pub async fn set_lock(&self, ino: u64, lock: LockSpec, wait: bool) -> Result<(), i32> {
        let _order = self.order.read().await;
        let answer = self
            .link
            .request(MdsOp::SetLock { ino, lock, wait })
            .await?;
        let mirrored = self.locks().set(ino, OWN, lock);
        debug_assert_eq!(mirrored, Ok(()), "the MDS granted what this mount holds");
        let MdsAnswer::LockGranted { epoch_barrier } = answer else {
            return Ok(());
        };
        if let Err(errno) = self.link.wait_for_map(epoch_barrier).await {
            if lock.kind != LockKind::Unlock {
                let undo = LockSpec {
                    kind: LockKind::Unlock,
                    ..lock
                };
                if self
                    .link
                    .request(MdsOp::SetLock {
                        ino,
                        lock: undo,
                        wait: false,
                    })
                    .await
                    .is_ok()
                {
                    let _ = self.locks().set(ino, OWN, undo);
                }
            }
            return Err(errno);
        }
        Ok(())
    }

    /// Whether `owner` holds any lock on `ino` through this mount (a close then has locks to
    /// release).
    pub fn holds_locks(&self, ino: u64, owner: u64) -> bool {
        self.locks()
            .held_by(OWN)
            .iter()
            .any(|(i, l)| *i == ino && l.owner == owner)
    }

    /// Releases the locks `owner` holds on `ino` (the file it locked through was closed).
    pub async fn release_locks(&self, ino: u64, owner: u64) {
        if !self.holds_locks(ino, owner) {
            return;
        }
        if let Err(e) = self.set_lock(ino, LockSpec::unlock_all(owner), false).await {
            tracing::warn!(ino, errno = e, "releasing the locks of a closed file");
        }
    }

    /// Sends the whole count every [`RENEW_EVERY`] while any file is open or one was closed
    /// since the last; runs until the mount's runtime stops.
    pub async fn renew_forever(self: Arc<Self>) {
        loop {
            tokio::time::sleep(RENEW_EVERY).await;
            let _order = self.order.write().await;
            let closed = self.closed.swap(false, Ordering::AcqRel);
            let files: Vec<(u64, u32)> = self.counts().iter().map(|(i, n)| (*i, *n)).collect();
            let locks = self.locks().held_by(OWN);
            if files.is_empty() && locks.is_empty() && !closed {
                continue;
            }
            if let Err(e) = self.link.request(MdsOp::Held { files, locks }).await {
                tracing::warn!(errno = e, "renewing this mount's open files");
                self.closed.fetch_or(closed, Ordering::AcqRel);
            }
        }
    }
}
