//! The client host of a run: makes the pool, writes with four writers while the faults play
//! (noting each write in the ledger), sends the operator requests the driver queues, then,
//! once every fault has ended, checks the cluster: every PG active+clean, every object as the
//! ledger allows, map epochs never going back.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use cairn_client::mon::MonClient;
use cairn_client::{Client, ClientError};
use cairn_proto::mon::Request;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::ledger::Ledger;
use cairn_convert::millis;

use crate::world::{mon_addr, Board, Options, Violation, MAX_OBJECT_BYTES, POOL, SETUP_LIMIT};

/// The client host: makes the pool, writes while the faults play, waits for the heal, then
/// checks the cluster.
pub(crate) async fn client_run(
    seed: u64,
    opts: &Options,
    board: &Rc<RefCell<Board>>,
) -> Result<(), Violation> {
    let admin = MonClient::connect(mon_addr(), 91).await;
    admin
        .op(
            Request::CreatePool {
                name: POOL.into(),
                size: 3,
                pg_num: opts.pg_num,
            },
            millis(SETUP_LIMIT),
        )
        .await
        .map_err(|e| Violation::NoStart(format!("create the pool: {e}")))?;
    let mut client = Client::connect(mon_addr(), 2)
        .await
        .map_err(|e| Violation::NoStart(format!("connect: {e}")))?;
    client.op_timeout_ms = millis(opts.op_timeout);
    let deadline = tokio::time::Instant::now() + SETUP_LIMIT;
    while let Err(e) = client.write_full(POOL, "probe", b"x").await {
        if tokio::time::Instant::now() >= deadline {
            return Err(Violation::NoStart(format!("first write: {e}")));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    board.borrow_mut().ready = Some(turmoil::elapsed());
    let ledger = RefCell::new(Ledger::default());
    let epochs = RefCell::new(EpochWatch::default());
    let writers = (0..opts.writers.max(1)).map(|w| {
        let writer = Writer {
            index: w,
            client: &client,
            ledger: &ledger,
            epochs: &epochs,
        };
        writer.run(seed, opts)
    });
    let written = tokio::select! {
        written = futures_util::future::join_all(writers) => written,
        never = serve_orders(&admin, board) => match never {},
    };
    for done in written {
        done?;
    }
    let ledger = ledger.into_inner();
    let mut epochs = epochs.into_inner();
    let healed = async {
        while !board.borrow().healed {
            epochs.see(&client)?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok::<(), Violation>(())
    };
    tokio::select! {
        healed = healed => healed?,
        never = serve_orders(&admin, board) => match never {},
    }
    send_orders(&admin, board).await;
    board.borrow_mut().ledger = ledger.clone();
    wait_clean(&client, opts, &mut epochs).await?;
    // A daemon whose connection lost its state in a partition hears again only once the
    // messenger's idle timeout closes it (a minute): a read may time out before; it is tried
    // again until the settle time is over.
    let deadline = tokio::time::Instant::now() + opts.settle;
    for object in ledger.objects() {
        let found = loop {
            match client.read(POOL, object).await {
                Ok(data) => break Some(crc_fast::crc32_iscsi(&data)),
                Err(ClientError::NotFound(_)) => break None,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(Violation::Unreadable {
                        object: object.to_string(),
                        error: e.to_string(),
                    })
                }
                Err(e) => {
                    tracing::info!(%object, error = %e, "read back failed; trying again");
                    board.borrow_mut().reads_retried += 1;
                }
            }
        };
        ledger.check(object, found).map_err(Violation::Lost)?;
    }
    Ok(())
}

/// Sends the operator requests the driver queued, for as long as it is polled.
async fn serve_orders(admin: &MonClient, board: &Rc<RefCell<Board>>) -> std::convert::Infallible {
    loop {
        send_orders(admin, board).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends every queued operator request, each retried a few times (the monitor may be cut
/// off for a while); one that keeps failing is logged and dropped, as an operator's command
/// that timed out.
async fn send_orders(admin: &MonClient, board: &Rc<RefCell<Board>>) {
    loop {
        let Some(order) = board.borrow_mut().orders.pop_front() else {
            return;
        };
        for attempt in 1..=ORDER_ATTEMPTS {
            match admin.op(order.clone(), ORDER_TIMEOUT_MS).await {
                Ok(_) => break,
                Err(e) if attempt == ORDER_ATTEMPTS => {
                    tracing::warn!(?order, error = %e, "operator request dropped");
                }
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }
}

/// Tries of one operator request, each waiting this long for the monitor.
const ORDER_ATTEMPTS: u32 = 5;
const ORDER_TIMEOUT_MS: u64 = 5_000;

/// One of the client's concurrent writers: it alone writes objects `o{k}` with
/// `k % writers == index`, one write at a time, so each object's writes are ordered.
struct Writer<'a> {
    index: usize,
    client: &'a Client,
    ledger: &'a RefCell<Ledger>,
    epochs: &'a RefCell<EpochWatch>,
}

impl Writer<'_> {
    async fn run(self, seed: u64, opts: &Options) -> Result<(), Violation> {
        let writers = opts.writers.max(1);
        let mine: Vec<usize> = (0..opts.objects.max(1))
            .filter(|k| k % writers == self.index)
            .collect();
        if mine.is_empty() {
            return Ok(());
        }
        let lane = u64::try_from(self.index).unwrap_or(u64::MAX);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_c11e ^ lane.rotate_left(48));
        let count = opts.writes / writers + usize::from(self.index < opts.writes % writers);
        let per_writer = u64::try_from(count.max(1)).unwrap_or(u64::MAX);
        let gap_ms = (millis(opts.window) * 2 / per_writer).max(1);
        for n in 0..count {
            let object = format!("o{}", mine[rng.random_range(0..mine.len())]);
            let len = rng.random_range(1..=MAX_OBJECT_BYTES);
            let mut data = vec![0u8; len];
            rng.fill(&mut data[..]);
            let stamp = ((lane << 32) | u64::try_from(n).unwrap_or(u64::MAX)).to_le_bytes();
            data[..8.min(len)].copy_from_slice(&stamp[..8.min(len)]);
            let crc = crc_fast::crc32_iscsi(&data);
            match self.client.write_full(POOL, &object, &data).await {
                Ok(_) => {
                    tracing::debug!(%object, crc, "write acknowledged");
                    self.ledger.borrow_mut().acked(&object, crc);
                }
                Err(e) => {
                    tracing::info!(%object, crc, error = %e, "write not acknowledged");
                    self.ledger.borrow_mut().uncertain(&object, crc);
                }
            }
            self.epochs.borrow_mut().see(self.client)?;
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..=gap_ms))).await;
        }
        Ok(())
    }
}

/// Waits until every PG of the pool is active+clean, as its primary says.
async fn wait_clean(
    client: &Client,
    opts: &Options,
    epochs: &mut EpochWatch,
) -> Result<(), Violation> {
    let deadline = tokio::time::Instant::now() + opts.settle;
    loop {
        epochs.see(client)?;
        let states = pg_states(client, opts.osds).await;
        let total: usize = states.values().sum();
        if total == opts.pg_num as usize && states.keys().all(|s| s == "active+clean") {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let mut detail = format!("{states:?}");
            for osd in 0..opts.osds {
                let Ok(id) = i32::try_from(osd) else { break };
                let dump = client
                    .tell(id, &["pg".into(), "dump".into()])
                    .await
                    .unwrap_or_default();
                for line in dump.lines().filter(|l| !l.contains("active+clean")) {
                    detail.push_str(&format!("\n    osd.{id}: {line}"));
                }
            }
            return Err(Violation::NotClean {
                settle: opts.settle,
                states: detail,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The PG states the OSDs report for the PGs they lead, counted.
async fn pg_states(client: &Client, osds: usize) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for osd in 0..osds {
        let Ok(id) = i32::try_from(osd) else { break };
        let stats = client
            .tell(id, &["pg".into(), "stats".into()])
            .await
            .unwrap_or_default();
        for line in stats.lines() {
            if let Some((state, n)) = line.rsplit_once(' ') {
                *out.entry(state.to_string()).or_default() += n.parse::<usize>().unwrap_or(0);
            }
        }
    }
    out
}

/// The newest map epoch the client has seen; an older one after it is a violation.
#[derive(Default)]
struct EpochWatch {
    newest: u64,
}

impl EpochWatch {
    fn see(&mut self, client: &Client) -> Result<(), Violation> {
        let Some(map) = client.map() else {
            return Ok(());
        };
        if map.epoch < self.newest {
            return Err(Violation::EpochWentBack {
                was: self.newest,
                now: map.epoch,
            });
        }
        self.newest = map.epoch;
        Ok(())
    }
}
