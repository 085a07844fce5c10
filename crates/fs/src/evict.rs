//! Evicting clients that went silent while holding files open or locks, as Ceph's MDS evicts
//! a session that timed out. A lease that ends says only that the MDS no longer hears the
//! client: it may be alive behind a partition, still writing through the files it has open.
//! So before its locks pass to anyone the MDS fences it out of the OSDs (the blocklist), and
//! every lock granted afterwards carries the map epoch of that fence (the barrier): the mount
//! waits for that map before it answers its caller, so an OSD has the fence before it serves
//! any write made under the new lock. Until the fence holds, the evicted client keeps its
//! locks and the MDS refuses it; afterwards the blocklist in the map refuses it, here and at
//! every OSD, until the fence expires.

use std::collections::HashMap;
use std::sync::Arc;

use cairn_client::lease::Lease;
use cairn_client::Client;
use tokio::sync::mpsc;

/// How long an evicted client stays fenced (Ceph's default blocklist expiry): far past any
/// write it could still have in flight.
pub const EVICTION_FENCE_S: u64 = 3600;

/// The answer to a fence: the epoch of the map that holds it, or why it failed.
pub type FenceResult = Result<u64, String>;

/// A fence that finished, for [`Evictions::finished`].
#[derive(Debug)]
pub struct Fenced {
    /// The evicted client.
    pub client: u64,
    /// Its fence's epoch, or why it failed.
    pub result: FenceResult,
}

/// The clients being evicted and the barrier of those evicted.
pub struct Evictions {
    fencer: Arc<Client>,
    /// The MDS's lease: a fence is asked for only while it holds (an MDS woken from a stall
    /// must not fence the clients it could not hear while a standby served them).
    lease: Arc<Lease>,
    /// Clients whose fence is not in place yet: its task runs (true) or it failed and waits
    /// for [`Evictions::retry`] (false).
    pending: HashMap<u64, bool>,
    barrier: u64,
    done_tx: mpsc::UnboundedSender<Fenced>,
    done_rx: mpsc::UnboundedReceiver<Fenced>,
}

impl Evictions {
    /// Evictions made through `fencer` (the MDS's own client, whose caps may fence) while
    /// `lease` (the active MDS's) holds. The barrier starts at the epoch of its map: a fence
    /// an earlier MDS put in place is in it.
    pub fn new(fencer: Arc<Client>, lease: Arc<Lease>) -> Evictions {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Evictions {
            barrier: fencer.epoch(),
            fencer,
            lease,
            pending: HashMap::new(),
            done_tx,
            done_rx,
        }
    }

    /// Starts fencing `client` (once: a client already being evicted is left as it is).
    pub fn evict(&mut self, client: u64) {
        if self.pending.contains_key(&client) {
            return;
        }
        tracing::warn!(
            client,
            "evicting a client whose lease ended while it held files or locks: fencing it first"
        );
        self.start(client);
    }

    fn start(&mut self, client: u64) {
        self.pending.insert(client, true);
        let fencer = self.fencer.clone();
        let lease = self.lease.clone();
        let done = self.done_tx.clone();
        tokio::spawn(async move {
            let result = match lease.check().await {
                Ok(()) => fencer
                    .blocklist(client, Some(EVICTION_FENCE_S))
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(format!("not the active metadata server: {e}")),
            };
            let _ = done.send(Fenced { client, result });
        });
    }

    /// Starts again every fence that failed.
    pub fn retry(&mut self) {
        let failed: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, running)| !**running)
            .map(|(c, _)| *c)
            .collect();
        for client in failed {
            self.start(client);
        }
    }

    /// The next fence to finish (waits forever when none runs).
    pub async fn next(&mut self) -> Fenced {
        match self.done_rx.recv().await {
            Some(f) => f,
            None => unreachable!("the evictions hold a sender of their own"),
        }
    }

    /// Takes in a finished fence: true when `f.client` is now fenced and what it held may go;
    /// a failed fence is tried again at the next [`Evictions::retry`].
    pub fn finished(&mut self, f: Fenced) -> bool {
        match f.result {
            Ok(epoch) => {
                self.pending.remove(&f.client);
                self.barrier = self.barrier.max(epoch);
                tracing::warn!(
                    client = f.client,
                    epoch,
                    "evicted client fenced; its locks are released"
                );
                true
            }
            Err(why) => {
                tracing::warn!(client = f.client, %why, "fencing an evicted client failed; trying again");
                self.pending.insert(f.client, false);
                false
            }
        }
    }

    /// Whether requests of `client` are refused: it is being evicted, or the map fences it.
    pub fn refuses(&self, client: u64) -> bool {
        self.pending.contains_key(&client) || self.fencer.is_blocklisted(client)
    }

    /// The epoch every evicted client is fenced in: a lock granted now is used only under a
    /// map at least this new.
    pub fn barrier(&self) -> u64 {
        self.barrier
    }
}
