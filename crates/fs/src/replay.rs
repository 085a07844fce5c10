//! Early answers and their replay, as CephFS's unsafe replies: the MDS answers a mutation as
//! soon as it is applied in memory, and says later (an `MdsSafe`) once its journal record is
//! durable; the client keeps every mutation answered early until then and sends it again on a
//! new session. Three rules keep that from losing or reordering what was acknowledged:
//!
//! - **The roster**: a client is answered early only once its id is durable in the roster
//!   object, so a starting MDS knows whom to wait for. A client leaves it when it has been
//!   quiet a while with nothing unsafe, or when it misses a restart's replay window.
//! - **One client at a time**: a mutation is answered early only when every uncommitted
//!   mutation is its own client's. Replays then never need an order across clients: what one
//!   client was told early depends on nothing another client was told but could lose.
//! - **Replays first**: a starting MDS serves only replays (and each client's `Reconnected`)
//!   until every roster client has reconnected or the window ends; other requests wait.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use cairn_client::{Client, ClientError};

use crate::error::FsError;

/// The object listing the clients the MDS may answer early.
pub const ROSTER_OBJECT: &str = "mds.roster";
/// Most clients the roster holds; past it new clients are answered when durable only.
pub const MAX_ROSTER_CLIENTS: usize = 1 << 14;
/// Most uncommitted mutations of one client answered early (a journal that cannot take them,
/// the cluster full or its PGs inactive, makes the client wait instead of both ends'
/// memory grow).
pub const MAX_EARLY_UNCOMMITTED: usize = 4096;
/// How long a starting MDS waits for roster clients to replay before it serves others.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(15);
/// Most requests a replay window holds back; past it the MDS reads no more requests until the
/// window closes (at the latest [`REPLAY_WINDOW`] after the start), so clients wait on their
/// sessions instead of the MDS's memory.
pub const MAX_HELD_REQUESTS: usize = 1 << 16;
/// A roster client quiet this long with nothing unsafe leaves the roster (a restarted MDS
/// waits for the clients on it; one writing now and then joins it again at its next burst).
pub const ROSTER_IDLE: Duration = Duration::from_secs(3);

/// The roster's bytes: client ids, little-endian, in order.
pub fn encode(clients: &BTreeSet<u64>) -> Vec<u8> {
    clients.iter().flat_map(|c| c.to_le_bytes()).collect()
}

/// Reads the roster's bytes back.
pub fn decode(bytes: &[u8]) -> Result<BTreeSet<u64>, FsError> {
    if !bytes.len().is_multiple_of(8) || bytes.len() / 8 > MAX_ROSTER_CLIENTS {
        return Err(FsError::Damaged(format!(
            "{ROSTER_OBJECT} holds {} bytes: not a list of at most {MAX_ROSTER_CLIENTS} ids",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("chunks of eight")))
        .collect())
}

/// The roster as the metadata pool holds it (empty when there is none).
pub async fn load(client: &Client, pool: &str) -> Result<BTreeSet<u64>, FsError> {
    match client.read(pool, ROSTER_OBJECT).await {
        Ok(bytes) => decode(&bytes),
        Err(ClientError::NotFound(_)) => Ok(BTreeSet::new()),
        Err(e) => Err(e.into()),
    }
}

/// Makes `clients` the durable roster.
pub async fn store(client: &Client, pool: &str, clients: &BTreeSet<u64>) -> Result<(), FsError> {
    assert!(
        clients.len() <= MAX_ROSTER_CLIENTS,
        "the roster outgrew its limit"
    );
    client
        .write_full(pool, ROSTER_OBJECT, &encode(clients))
        .await?;
    Ok(())
}

/// Who may be answered early now, and who holds uncommitted mutations.
#[derive(Debug, Default)]
pub struct EarlyAnswers {
    /// The roster as last made durable.
    durable: BTreeSet<u64>,
    /// The roster as it should be.
    wanted: BTreeSet<u64>,
    /// The roster a running commit writes.
    writing: Option<BTreeSet<u64>>,
    /// Uncommitted journal records per client (open batch and the one committing).
    uncommitted: HashMap<u64, usize>,
    /// When each roster client last had a mutation answered.
    last_heard: HashMap<u64, Instant>,
}

impl EarlyAnswers {
    /// Starts from the roster a previous MDS left.
    pub fn new(durable: BTreeSet<u64>) -> EarlyAnswers {
        EarlyAnswers {
            wanted: durable.clone(),
            durable,
            ..EarlyAnswers::default()
        }
    }

    /// A mutation of `client` is in the open batch; whether it may be answered at once. A
    /// client not yet on the roster is put on it by the next commit, and answered once its
    /// record is durable meanwhile.
    pub fn add(&mut self, client: u64, now: Instant) -> bool {
        let pending = self.uncommitted.entry(client).or_default();
        *pending += 1;
        let within_cap = *pending <= MAX_EARLY_UNCOMMITTED;
        if self.wanted.len() < MAX_ROSTER_CLIENTS {
            self.wanted.insert(client);
        }
        if self.wanted.contains(&client) {
            self.last_heard.insert(client, now);
        }
        let rostered = |r: &BTreeSet<u64>| r.contains(&client);
        within_cap
            && rostered(&self.durable)
            && self.writing.as_ref().is_none_or(rostered)
            && self.uncommitted.keys().all(|c| *c == client)
    }

    /// The records of these clients are durable.
    pub fn committed(&mut self, clients: impl IntoIterator<Item = u64>) {
        for c in clients {
            let n = self
                .uncommitted
                .get_mut(&c)
                .expect("a committed record was counted");
            *n -= 1;
            if *n == 0 {
                self.uncommitted.remove(&c);
            }
        }
    }

    /// Drops roster clients quiet since `now - ROSTER_IDLE` with nothing uncommitted, and
    /// `gone` ones (missed a replay window, evicted); keeps those `awaited` (a replay window
    /// waits for them: a second restart must too).
    pub fn forget(&mut self, now: Instant, gone: &[u64], awaited: impl Fn(u64) -> bool) {
        let quiet = |c: &u64| {
            !awaited(*c)
                && !self.uncommitted.contains_key(c)
                && self
                    .last_heard
                    .get(c)
                    .is_none_or(|t| now.saturating_duration_since(*t) >= ROSTER_IDLE)
        };
        let drop: Vec<u64> = self
            .wanted
            .iter()
            .copied()
            .filter(|c| quiet(c) || gone.contains(c))
            .collect();
        for c in drop {
            self.wanted.remove(&c);
            self.last_heard.remove(&c);
        }
    }

    /// Whether the roster should be written.
    pub fn changed(&self) -> bool {
        self.wanted != self.durable
    }

    /// The roster for the commit starting now to write, if it differs from the durable one.
    /// Until it is durable, only clients on both are answered early.
    pub fn to_store(&mut self) -> Option<BTreeSet<u64>> {
        assert!(
            self.writing.is_none(),
            "two commits write the roster at once"
        );
        self.writing = self.changed().then(|| self.wanted.clone());
        self.writing.clone()
    }

    /// The commit that started last has finished; the roster it wrote, if any, is durable.
    pub fn stored(&mut self, roster: Option<BTreeSet<u64>>) {
        if let Some(r) = roster {
            self.durable = r;
        }
        self.writing = None;
    }
}

/// A starting MDS's replay window: requests other than replays wait in it until every
/// roster client has said it reconnected, or the window ends.
#[derive(Debug)]
pub struct ReplayWindow<T> {
    waiting: BTreeSet<u64>,
    until: Instant,
    held: VecDeque<T>,
    missed: HashSet<u64>,
}

impl<T> ReplayWindow<T> {
    /// A window for `roster`'s clients until `now + REPLAY_WINDOW`; closed at once if empty.
    pub fn new(roster: &BTreeSet<u64>, now: Instant) -> ReplayWindow<T> {
        ReplayWindow {
            waiting: roster.clone(),
            until: now + REPLAY_WINDOW,
            held: VecDeque::new(),
            missed: HashSet::new(),
        }
    }

    /// Whether requests other than replays wait.
    pub fn is_open(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Whether another request may be read: the window is closed, or holds fewer than
    /// [`MAX_HELD_REQUESTS`].
    pub fn has_room(&self) -> bool {
        !self.is_open() || self.held.len() < MAX_HELD_REQUESTS
    }

    /// Holds a request until the window closes.
    pub fn hold(&mut self, request: T) {
        assert!(self.is_open(), "a request held back by a closed window");
        assert!(self.has_room(), "a replay window held more than its limit");
        self.held.push_back(request);
    }

    /// `client` has replayed all it holds.
    pub fn reconnected(&mut self, client: u64) {
        self.waiting.remove(&client);
    }

    /// Whether the window waits for `client`'s replays.
    pub fn awaits(&self, client: u64) -> bool {
        self.waiting.contains(&client)
    }

    /// Closes the window when its time is up: the clients that never reconnected, whose
    /// early-answered mutations not in the journal are lost.
    pub fn expire(&mut self, now: Instant) -> Vec<u64> {
        if self.waiting.is_empty() || now < self.until {
            return Vec::new();
        }
        let missed: Vec<u64> = std::mem::take(&mut self.waiting).into_iter().collect();
        self.missed.extend(missed.iter().copied());
        missed
    }

    /// The requests held back, once the window has closed.
    pub fn release(&mut self) -> Vec<T> {
        match self.is_open() {
            true => Vec::new(),
            false => self.held.drain(..).collect(),
        }
    }

    /// Whether `client` missed the window: its late replays are refused, not applied out of
    /// order.
    pub fn missed(&self, client: u64) -> bool {
        self.missed.contains(&client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roster_round_trips_and_damage_is_an_error() {
        let set: BTreeSet<u64> = [3, 1, u64::MAX].into_iter().collect();
        assert_eq!(decode(&encode(&set)).unwrap(), set);
        assert!(decode(&[]).unwrap().is_empty());
        assert!(decode(&[1, 2, 3]).is_err());
        assert!(decode(&vec![0; 8 * (MAX_ROSTER_CLIENTS + 1)]).is_err());
    }

    #[test]
    fn only_a_durable_roster_client_alone_with_uncommitted_records_is_answered_early() {
        let t = Instant::now();
        let mut e = EarlyAnswers::new(BTreeSet::new());
        assert!(!e.add(7, t), "not on the durable roster yet");
        let roster = e.to_store().expect("the client joins the roster");
        assert_eq!(roster, [7].into_iter().collect());
        assert!(!e.add(7, t), "its roster is not durable yet");
        e.stored(Some(roster));
        assert!(e.to_store().is_none());
        e.stored(None);
        e.committed([7]);
        assert!(e.add(7, t), "alone with its own uncommitted records");
        e.stored(Some([7, 8].into_iter().collect()));
        assert!(!e.add(8, t), "another client's records are uncommitted");
        e.committed([7, 7]);
        assert!(!e.add(7, t), "client 8's record is still uncommitted");
        e.committed([8, 7]);
        assert!(e.add(8, t));
    }

    #[test]
    fn quiet_and_gone_clients_leave_the_roster_busy_ones_stay() {
        let t = Instant::now();
        let mut e = EarlyAnswers::new([1, 2, 3, 4].into_iter().collect());
        assert!(e.add(1, t));
        e.forget(t, &[], |c| c == 4);
        let shrunk = e.to_store().unwrap();
        assert_eq!(
            shrunk,
            [1, 4].into_iter().collect(),
            "2 and 3, never heard, leave; 1 has an uncommitted record; 4 is awaited"
        );
        e.committed([1]);
        e.forget(t + ROSTER_IDLE / 2, &[], |_| false);
        assert!(e.changed(), "still to be written");
        e.forget(t + ROSTER_IDLE / 2, &[1], |_| false);
        e.stored(Some(shrunk));
        assert_eq!(
            e.to_store().unwrap(),
            BTreeSet::new(),
            "gone clients leave at once"
        );
    }

    #[test]
    fn a_client_answered_while_it_leaves_the_roster_stays_on_it() {
        let t = Instant::now();
        let mut e = EarlyAnswers::new([1].into_iter().collect());
        e.forget(t, &[], |_| false);
        let without = e.to_store().unwrap();
        assert!(without.is_empty());
        assert!(!e.add(1, t), "the roster being written leaves it out");
        e.stored(Some(without));
        assert_eq!(e.to_store().unwrap(), [1].into_iter().collect());
    }

    #[test]
    fn early_answers_stop_at_the_cap_of_uncommitted_mutations() {
        let t = Instant::now();
        let mut e = EarlyAnswers::new([1].into_iter().collect());
        for _ in 0..MAX_EARLY_UNCOMMITTED {
            assert!(e.add(1, t));
        }
        assert!(!e.add(1, t), "past the cap: answered once durable");
        e.committed(std::iter::repeat_n(1, MAX_EARLY_UNCOMMITTED + 1));
        assert!(e.add(1, t));
    }

    #[test]
    fn a_window_holds_requests_until_every_client_reconnected_or_time_is_up() {
        let t = Instant::now();
        let mut w: ReplayWindow<&str> = ReplayWindow::new(&[1, 2].into_iter().collect(), t);
        assert!(w.is_open());
        w.hold("a");
        w.reconnected(1);
        assert!(w.is_open());
        assert!(w.release().is_empty());
        assert!(w.expire(t + REPLAY_WINDOW / 2).is_empty());
        assert_eq!(w.expire(t + REPLAY_WINDOW), vec![2]);
        assert!(!w.is_open() && w.missed(2) && !w.missed(1));
        assert_eq!(w.release(), vec!["a"]);
        let empty: ReplayWindow<&str> = ReplayWindow::new(&BTreeSet::new(), t);
        assert!(!empty.is_open() && empty.has_room());
    }

    #[test]
    fn a_full_window_takes_no_more_requests() {
        let t = Instant::now();
        let mut w: ReplayWindow<usize> = ReplayWindow::new(&[1].into_iter().collect(), t);
        for i in 0..MAX_HELD_REQUESTS {
            assert!(w.has_room());
            w.hold(i);
        }
        assert!(!w.has_room());
        w.reconnected(1);
        assert!(w.has_room());
        assert_eq!(w.release().len(), MAX_HELD_REQUESTS);
    }
}
