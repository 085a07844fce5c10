//! The balancer: an exception table that brings every OSD within one PG of its target.
//!
//! Starting from CRUSH's placement plus the still-valid existing exceptions (and, when given,
//! pinned back to the previous placement so a map change moves only what it must), it moves
//! single replicas from OSDs above `ceil(target)` to OSDs below it, then fills OSDs below
//! `floor(target)`, each move respecting the rule's failure domains; finally it balances
//! primaries with `pg_upmap_primary` entries, which move no data. Deterministic: the same
//! input always gives the same table. Owns the planning only; applying is the map's job.

use std::collections::{BTreeMap, VecDeque};

use crate::error::MapError;
use crate::exceptions::Exceptions;
use crate::osdmap::OsdMap;
use crate::pool::PgId;
use crate::shape::Topology;

/// What the balancer produced.
#[derive(Clone, Debug)]
pub struct BalanceOutcome {
    /// The full exception table (this pool replanned, other pools' entries untouched).
    pub exceptions: Exceptions,
    /// Final data placement per PG (positions aligned with CRUSH's result).
    pub placement: Vec<Vec<i32>>,
    /// Final up sets, primary first.
    pub up: Vec<Vec<i32>>,
    /// Replicas whose OSD differs from the baseline (previous placement, or current one).
    pub moved_replicas: u64,
    /// Fewest replicas any placement meeting the targets must move from the baseline.
    pub lower_bound: u64,
    /// Existing exception entries of this pool that stayed valid and were kept.
    pub kept_exceptions: usize,
    /// Existing exception entries of this pool that were invalid and dropped.
    pub dropped_exceptions: usize,
    /// True if every OSD ended within its [floor, ceil] target bounds.
    pub converged: bool,
}

/// Options of one balancing run.
#[derive(Clone, Copy, Debug)]
pub struct BalanceOptions {
    /// Also balance primaries (with `pg_upmap_primary`).
    pub primaries: bool,
    /// Safety limit on replica moves, as a multiple of the lower bound (plus a constant).
    pub max_moves_factor: u64,
}

impl Default for BalanceOptions {
    fn default() -> Self {
        BalanceOptions {
            primaries: true,
            max_moves_factor: 4,
        }
    }
}

/// The `pg_upmap_items` pairs that turn `raw` into `placed` under Ceph's sequential
/// semantics, or None if impossible (a swap cycle).
pub fn items_for(raw: &[i32], placed: &[i32]) -> Option<Vec<(i32, i32)>> {
    let changed: Vec<usize> = (0..raw.len()).filter(|&i| raw[i] != placed[i]).collect();
    let mut order: Vec<usize> = Vec::with_capacity(changed.len());
    let mut done = vec![false; raw.len()];
    // A pair whose target is still present in raw must wait until that position is replaced.
    for _ in 0..changed.len() {
        let before = order.len();
        for &i in &changed {
            if done[i] {
                continue;
            }
            let blocker = raw.iter().position(|&o| o == placed[i]);
            if blocker.is_none_or(|j| done[j]) {
                done[i] = true;
                order.push(i);
            }
        }
        if order.len() == changed.len() {
            break;
        }
        if order.len() == before {
            return None;
        }
    }
    Some(order.into_iter().map(|i| (raw[i], placed[i])).collect())
}

/// A position whose previous OSD can no longer be used; the balancer fills it.
const HOLE: i32 = -1;

/// Lays `wanted` (minus OSDs the rule can no longer use) over CRUSH's `raw` positions: OSDs in
/// both keep their raw position, the others fill the remaining positions in order, and positions
/// still left become [`HOLE`]s for the balancer to fill where targets need replicas most.
/// Keeping shared OSDs in place makes the result expressible with the fewest pairs.
fn align(raw: &[i32], wanted: &[i32], topo: &Topology) -> Vec<i32> {
    let wanted: Vec<i32> = wanted
        .iter()
        .copied()
        .filter(|&o| topo.eligible(o))
        .collect();
    let mut next = raw.to_vec();
    let mut incoming = wanted.iter().copied().filter(|o| !raw.contains(o));
    for slot in next.iter_mut() {
        if !wanted.contains(slot) {
            *slot = incoming.next().unwrap_or(HOLE);
        }
    }
    next
}

struct State<'a> {
    topo: &'a Topology,
    raw: Vec<Vec<i32>>,
    cur: Vec<Vec<i32>>,
    counts: Vec<i64>,
    lo: Vec<i64>,
    hi: Vec<i64>,
    targets: Vec<f64>,
    pgs_of: Vec<Vec<u32>>,
    moves: u64,
}

/// The whole counts around target `t` (a count of PG copies: finite, small): its floor and
/// ceiling, each within a hair of `t` counting as `t`.
fn bounds(t: f64) -> (i64, i64) {
    const EPS: f64 = 1e-9;
    assert!(t.is_finite() && t >= 0.0, "a target of {t} PG copies");
    #[allow(clippy::cast_possible_truncation)]
    ((t + EPS).floor() as i64, (t - EPS).ceil() as i64)
}

/// The OSD id whose entry is at `index` of a per-OSD table (tables are indexed by OSD id).
pub(crate) fn osd_at(index: usize) -> i32 {
    i32::try_from(index).expect("per-OSD tables are indexed by i32 OSD ids")
}

/// PG `index` of a pool, as a per-OSD PG list holds it (a pool's PGs are numbered by u32).
fn pg_entry(index: usize) -> u32 {
    u32::try_from(index).expect("a pool's PGs are numbered by u32 seeds")
}

impl State<'_> {
    fn is_valid_set(&self, set: &[i32]) -> bool {
        set.iter().enumerate().all(|(i, &o)| {
            o == HOLE
                || self.topo.eligible(o)
                    && set[..i].iter().all(|&m| {
                        m == HOLE
                            || m != o
                                && self.topo.domain[m as usize] != self.topo.domain[o as usize]
                    })
        })
    }

    /// Fills every [`HOLE`] with the valid OSD furthest below its target (CRUSH's own choice
    /// when no other OSD fits).
    fn fill_holes(&mut self) {
        for p in 0..self.cur.len() {
            while let Some(pos) = self.cur[p].iter().position(|&o| o == HOLE) {
                let receivers = self.receivers(true);
                let filled = receivers.iter().any(|&u| self.try_move(p, HOLE, u))
                    || self.try_move(p, HOLE, self.raw[p][pos]);
                if !filled {
                    self.cur[p][pos] = self.raw[p][pos];
                    let o = self.raw[p][pos];
                    if o >= 0 && (o as usize) < self.counts.len() {
                        self.counts[o as usize] += 1;
                        self.pgs_of[o as usize].push(pg_entry(p));
                    }
                }
            }
        }
    }

    fn try_move(&mut self, p: usize, from: i32, to: i32) -> bool {
        let set = &self.cur[p];
        let Some(pos) = set.iter().position(|&o| o == from) else {
            return false;
        };
        if !self.topo.can_replace(set, from, to) {
            return false;
        }
        let mut next = set.clone();
        next[pos] = to;
        if items_for(&self.raw[p], &next).is_none() {
            return false;
        }
        self.cur[p] = next;
        if from >= 0 && (from as usize) < self.counts.len() {
            self.counts[from as usize] -= 1;
            self.pgs_of[from as usize].retain(|&q| q as usize != p);
        }
        self.counts[to as usize] += 1;
        self.pgs_of[to as usize].push(pg_entry(p));
        self.moves += 1;
        true
    }

    fn excess(&self, o: usize) -> i64 {
        self.counts[o] - self.hi[o]
    }

    fn deficit(&self, o: usize) -> i64 {
        self.lo[o] - self.counts[o]
    }

    /// Receivers ordered by how far below target they are (most first), ties by id.
    fn receivers(&self, allow_at_hi: bool) -> Vec<i32> {
        let mut r: Vec<i32> = (0..self.counts.len())
            .filter(|&o| self.topo.eligible(osd_at(o)))
            .filter(|&o| {
                self.counts[o] < self.hi[o] || (allow_at_hi && self.counts[o] == self.hi[o])
            })
            .map(osd_at)
            .collect();
        r.sort_by(|&a, &b| {
            let da = self.counts[a as usize] as f64 - self.targets[a as usize];
            let db = self.counts[b as usize] as f64 - self.targets[b as usize];
            da.total_cmp(&db).then(a.cmp(&b))
        });
        r
    }

    /// Moves one replica off `o` to the best receiver; false if no PG of `o` allows it.
    fn shed(&mut self, o: i32, allow_at_hi: bool) -> bool {
        let receivers = self.receivers(allow_at_hi);
        let pgs = self.pgs_of[o as usize].clone();
        for &u in &receivers {
            if u == o {
                continue;
            }
            for &p in &pgs {
                if self.try_move(p as usize, o, u) {
                    return true;
                }
            }
        }
        false
    }

    /// Gives one replica to `u` from a donor above its floor; false if impossible.
    fn fill(&mut self, u: i32) -> bool {
        let mut donors: Vec<i32> = (0..self.counts.len())
            .filter(|&o| osd_at(o) != u && self.counts[o] > self.lo[o].max(0))
            .map(osd_at)
            .collect();
        donors.sort_by(|&a, &b| {
            let da = self.counts[a as usize] as f64 - self.targets[a as usize];
            let db = self.counts[b as usize] as f64 - self.targets[b as usize];
            db.total_cmp(&da).then(a.cmp(&b))
        });
        for d in donors {
            let pgs = self.pgs_of[d as usize].clone();
            for p in pgs {
                if self.try_move(p as usize, d, u) {
                    return true;
                }
            }
        }
        false
    }

    fn balance_replicas(&mut self, max_moves: u64) -> bool {
        let n = self.counts.len();
        let mut stuck = vec![false; n];
        loop {
            if self.moves >= max_moves {
                break;
            }
            let over = (0..n)
                .filter(|&o| self.excess(o) > 0 && !stuck[o])
                .max_by(|&a, &b| self.excess(a).cmp(&self.excess(b)).then(b.cmp(&a)));
            if let Some(o) = over {
                if !self.shed(osd_at(o), false) && !self.shed(osd_at(o), true) {
                    stuck[o] = true;
                }
                continue;
            }
            let under = (0..n)
                .filter(|&u| self.topo.eligible(osd_at(u)) && self.deficit(u) > 0 && !stuck[u])
                .max_by(|&a, &b| self.deficit(a).cmp(&self.deficit(b)).then(b.cmp(&a)));
            match under {
                Some(u) => {
                    if !self.fill(osd_at(u)) {
                        stuck[u] = true;
                    }
                }
                None => break,
            }
        }
        (0..n).all(|o| {
            self.excess(o) <= 0 && (!self.topo.eligible(osd_at(o)) || self.deficit(o) <= 0)
        })
    }
}

/// Balances primaries: returns, per PG, the index (in its set) of the chosen primary.
fn balance_primaries(sets: &[Vec<i32>], topo: &Topology, targets: &[f64]) -> Vec<usize> {
    let n = targets.len();
    let size = topo.size.max(1) as f64;
    let mut prim = vec![0usize; sets.len()];
    let mut pc = vec![0i64; n];
    let mut pgs_primary: Vec<Vec<u32>> = vec![Vec::new(); n];
    let (mut plo, mut phi) = (vec![0i64; n], vec![0i64; n]);
    for o in 0..n {
        (plo[o], phi[o]) = bounds(targets[o] / size);
    }
    for (p, set) in sets.iter().enumerate() {
        if let Some(&o) = set.first() {
            if o >= 0 && (o as usize) < n {
                pc[o as usize] += 1;
                pgs_primary[o as usize].push(pg_entry(p));
            }
        }
    }
    // Augmenting paths: shift one primary along PGs from `start` to an OSD accepting it.
    let shift = |start: usize,
                 accept: &dyn Fn(usize, &[i64]) -> bool,
                 prim: &mut Vec<usize>,
                 pc: &mut Vec<i64>,
                 pgs_primary: &mut Vec<Vec<u32>>|
     -> bool {
        let mut parent: Vec<Option<(usize, u32)>> = vec![None; n];
        let mut seen = vec![false; n];
        let mut queue = VecDeque::new();
        seen[start] = true;
        queue.push_back(start);
        while let Some(a) = queue.pop_front() {
            for &p in &pgs_primary[a] {
                for &m in &sets[p as usize] {
                    if m < 0 || m as usize >= n || seen[m as usize] {
                        continue;
                    }
                    let m = m as usize;
                    seen[m] = true;
                    parent[m] = Some((a, p));
                    if accept(m, pc) {
                        let mut node = m;
                        while let Some((from, pg)) = parent[node] {
                            let pg_i = pg as usize;
                            prim[pg_i] = sets[pg_i]
                                .iter()
                                .position(|&o| o as usize == node)
                                .unwrap_or(0);
                            pgs_primary[from].retain(|&q| q != pg);
                            pgs_primary[node].push(pg);
                            node = from;
                        }
                        pc[start] -= 1;
                        pc[m] += 1;
                        return true;
                    }
                    queue.push_back(m);
                }
            }
        }
        false
    };
    let mut stuck = vec![false; n];
    loop {
        let over = (0..n)
            .filter(|&o| pc[o] > phi[o] && !stuck[o])
            .max_by(|&a, &b| (pc[a] - phi[a]).cmp(&(pc[b] - phi[b])).then(b.cmp(&a)));
        let Some(o) = over else { break };
        let accept = |m: usize, pc: &[i64]| pc[m] < phi[m];
        if !shift(o, &accept, &mut prim, &mut pc, &mut pgs_primary) {
            stuck[o] = true;
        }
    }
    // Fill OSDs below their floor by pulling a primary from one above its floor.
    let mut stuck = vec![false; n];
    loop {
        let under = (0..n)
            .filter(|&u| topo.eligible(osd_at(u)) && pc[u] < plo[u] && !stuck[u])
            .max_by(|&a, &b| (plo[a] - pc[a]).cmp(&(plo[b] - pc[b])).then(b.cmp(&a)));
        let Some(u) = under else { break };
        let mut donor_found = false;
        let donors: Vec<usize> = (0..n).filter(|&d| pc[d] > plo[d]).collect();
        for d in donors {
            let accept = |m: usize, _: &[i64]| m == u;
            if shift(d, &accept, &mut prim, &mut pc, &mut pgs_primary) {
                donor_found = true;
                break;
            }
        }
        if !donor_found {
            stuck[u] = true;
        }
    }
    prim
}

/// Plans exceptions for one pool of `map`.
///
/// `previous`, when given, is the data placement per PG before the map changed (same pg_num);
/// PGs are pinned back to it where the rule allows, so only necessary data moves.
pub fn balance(
    map: &OsdMap,
    pool_id: i64,
    previous: Option<&[Vec<i32>]>,
    options: BalanceOptions,
) -> Result<BalanceOutcome, MapError> {
    let pool = map.pools.get(&pool_id).ok_or(MapError::NoPool(pool_id))?;
    let topo = Topology::for_pool(map, pool)?;
    let mut mapper = map.mapper();
    let pgs: Vec<PgId> = pool.pgs().collect();
    let mut raw = Vec::with_capacity(pgs.len());
    for &pg in &pgs {
        raw.push(mapper.raw(pg)?);
    }
    let n = topo.domain.len();
    let mut state = State {
        topo: &topo,
        cur: raw.clone(),
        raw,
        counts: vec![0; n],
        lo: vec![0; n],
        hi: vec![0; n],
        targets: Vec::new(),
        pgs_of: vec![Vec::new(); n],
        moves: 0,
    };
    let (mut kept, mut dropped) = (0, 0);
    for (i, pg) in pgs.iter().enumerate() {
        if !map.exceptions.upmap_items.contains_key(pg) {
            continue;
        }
        let mut set = state.raw[i].clone();
        map.exceptions
            .apply_items(*pg, &mut set, |o| !topo.eligible(o));
        if state.is_valid_set(&set) {
            state.cur[i] = set;
            kept += 1;
        } else {
            dropped += 1;
        }
    }
    let before: Vec<Vec<i32>> = state.cur.clone();
    if let Some(prev) = previous {
        for (p, prev_set) in prev.iter().enumerate().take(state.cur.len()) {
            let next = align(&state.raw[p], prev_set, &topo);
            if state.is_valid_set(&next) && items_for(&state.raw[p], &next).is_some() {
                state.cur[p] = next;
            }
        }
    }
    let baseline: &[Vec<i32>] = previous.unwrap_or(&before);
    for (p, set) in state.cur.iter().enumerate() {
        for &o in set {
            if o >= 0 && (o as usize) < n {
                state.counts[o as usize] += 1;
                state.pgs_of[o as usize].push(pg_entry(p));
            }
        }
    }
    let holes = state.cur.iter().flatten().filter(|&&o| o == HOLE).count() as i64;
    let total: i64 = state.counts.iter().sum::<i64>() + holes;
    state.targets = topo.targets(total as f64, pgs.len());
    for o in 0..n {
        (state.lo[o], state.hi[o]) = bounds(state.targets[o]);
    }
    let lower_bound = {
        let mut base_counts = vec![0i64; n];
        for set in baseline {
            for &o in set {
                if o >= 0 && (o as usize) < n {
                    base_counts[o as usize] += 1;
                }
            }
        }
        let over: i64 = (0..n).map(|o| (base_counts[o] - state.hi[o]).max(0)).sum();
        let under: i64 = (0..n)
            .filter(|&o| topo.eligible(osd_at(o)))
            .map(|o| (state.lo[o] - base_counts[o]).max(0))
            .sum();
        over.max(under) as u64
    };
    let max_moves = lower_bound * options.max_moves_factor + 1000;
    state.fill_holes();
    let converged = state.balance_replicas(max_moves);

    let prim = if options.primaries {
        balance_primaries(&state.cur, &topo, &state.targets)
    } else {
        vec![0; state.cur.len()]
    };

    let mut exceptions = map.exceptions.clone();
    exceptions.upmap_items.retain(|pg, _| pg.pool != pool_id);
    exceptions.upmap_primary.retain(|pg, _| pg.pool != pool_id);
    let mut up = Vec::with_capacity(pgs.len());
    for (i, &pg) in pgs.iter().enumerate() {
        let items = items_for(&state.raw[i], &state.cur[i]).unwrap_or_default();
        if !items.is_empty() {
            exceptions.upmap_items.insert(pg, items);
        }
        let mut set = state.cur[i].clone();
        if prim[i] != 0 {
            exceptions.upmap_primary.insert(pg, set[prim[i]]);
            set[..=prim[i]].rotate_right(1);
        }
        up.push(set);
    }
    let moved_replicas = baseline
        .iter()
        .zip(&state.cur)
        .map(|(b, c)| c.iter().filter(|o| !b.contains(o)).count() as u64)
        .sum();
    Ok(BalanceOutcome {
        exceptions,
        placement: state.cur,
        up,
        moved_replicas,
        lower_bound,
        kept_exceptions: kept,
        dropped_exceptions: dropped,
        converged,
    })
}

/// Data placement of every PG of a pool (raw + items, positions kept), for use as `previous`.
pub fn placement_of(map: &OsdMap, pool_id: i64) -> Result<Vec<Vec<i32>>, MapError> {
    let pool = map.pools.get(&pool_id).ok_or(MapError::NoPool(pool_id))?;
    let mut mapper = map.mapper();
    pool.pgs().map(|pg| mapper.placed(pg)).collect()
}

/// Up sets (primary first) of every PG of a pool.
pub fn up_sets(map: &OsdMap, pool_id: i64) -> Result<Vec<Vec<i32>>, MapError> {
    let pool = map.pools.get(&pool_id).ok_or(MapError::NoPool(pool_id))?;
    let mut mapper = map.mapper();
    pool.pgs()
        .map(|pg| mapper.map_pg(pg).map(|m| m.up))
        .collect()
}

/// Counts, per PG, how many exception pairs each PG carries (for reporting).
pub fn exception_pairs(exceptions: &Exceptions) -> BTreeMap<PgId, usize> {
    exceptions
        .upmap_items
        .iter()
        .map(|(pg, items)| (*pg, items.len()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_order_chains_and_refuses_swaps() {
        assert_eq!(items_for(&[1, 2, 3], &[1, 2, 3]), Some(vec![]));
        assert_eq!(items_for(&[1, 2, 3], &[4, 2, 3]), Some(vec![(1, 4)]));
        // b replaced by c requires c (raw position 2) to be replaced first.
        assert_eq!(
            items_for(&[1, 2, 3], &[1, 3, 5]),
            Some(vec![(3, 5), (2, 3)])
        );
        assert_eq!(items_for(&[1, 2, 3], &[2, 1, 3]), None);
    }
}
