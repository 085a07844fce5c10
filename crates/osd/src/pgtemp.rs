//! Batched pg_temp requests: when many PGs move at once (an OSD joins, leaves or returns),
//! every primary wants a temporary acting set for several of them at about the same time.
//! Each request to the monitor makes a map epoch that every OSD and client applies, so the
//! PGs' wants gathered within a short window go to the monitor as one request and make one
//! epoch (Ceph's OSD batches its pg_temp wants into one message the same way).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_client::mon::MonClient;
use cairn_clustermap::PgId;
use cairn_proto::mon::{Request, MAX_PG_TEMPS_PER_REQUEST};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::error::OsdError;

/// How long the first want waits for others to join its request.
const GATHER: Duration = Duration::from_millis(10);
/// How long the monitor may take to answer.
const MON_TIMEOUT_MS: u64 = 5_000;

type Waiter = oneshot::Sender<Result<(), String>>;

/// The wants not yet sent, and whether a sender is gathering them.
#[derive(Default)]
struct Pending {
    wants: BTreeMap<PgId, Vec<i32>>,
    waiters: Vec<Waiter>,
    gathering: bool,
}

/// Gathers the PGs' pg_temp wants of one OSD into batched monitor requests.
pub struct PgTempBatch {
    mon: Arc<MonClient>,
    pending: Arc<Mutex<Pending>>,
}

impl PgTempBatch {
    /// A batcher sending its requests through `mon`.
    pub fn new(mon: Arc<MonClient>) -> Self {
        PgTempBatch {
            mon,
            pending: Arc::default(),
        }
    }

    /// Asks the monitor that `pg` be served by `acting` (empty: by its up set again), together
    /// with this OSD's other wants of the next few milliseconds; resolves when the monitor has
    /// answered the request that carried it. A later want for the same PG in the same batch
    /// replaces an earlier one. The request is sent by a task of its own, handed to `track`
    /// (the OSD stops it with its other tasks), so a want given up (its peering ended) does
    /// not hold back the others.
    pub async fn want(
        &self,
        pg: PgId,
        acting: Vec<i32>,
        track: impl FnOnce(JoinHandle<()>),
    ) -> Result<(), OsdError> {
        let (tx, rx) = oneshot::channel();
        let gather = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            p.wants.insert(pg, acting);
            p.waiters.push(tx);
            !std::mem::replace(&mut p.gathering, true)
        };
        if gather {
            let (pending, mon) = (self.pending.clone(), self.mon.clone());
            track(tokio::spawn(async move {
                tokio::time::sleep(GATHER).await;
                send(&pending, &mon).await;
            }));
        }
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(OsdError::Protocol(format!("pg_temp request: {why}"))),
            Err(_) => Err(OsdError::Protocol("pg_temp request dropped".into())),
        }
    }
}

/// Sends everything gathered (in requests of at most the monitor's limit) and answers every
/// waiter with the outcome.
async fn send(pending: &Mutex<Pending>, mon: &MonClient) {
    let (wants, waiters) = {
        let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
        p.gathering = false;
        (std::mem::take(&mut p.wants), std::mem::take(&mut p.waiters))
    };
    let wants: Vec<(PgId, Vec<i32>)> = wants.into_iter().collect();
    let mut outcome = Ok(());
    for chunk in wants.chunks(MAX_PG_TEMPS_PER_REQUEST) {
        let req = Request::PgTemp {
            temps: chunk.to_vec(),
        };
        if let Err(e) = mon.op(req, MON_TIMEOUT_MS).await {
            outcome = Err(e.to_string());
        }
    }
    for w in waiters {
        let _ = w.send(outcome.clone());
    }
}
