//! Rule evaluation: Ceph's `crush_do_rule`, bit for bit.
//!
//! Owns the choose loops (firstn and indep), the per-algorithm bucket choice and the `is_out`
//! test against the reweight vector. Pure: the input `x`, the reweights and a reusable
//! [`Workspace`] come from the caller; nothing here allocates on the steady-state path.

use crate::convert::{i32_of, u32_of, MAX_RESULT};
use crate::hash::{hash32_2, hash32_3, hash32_3_lanes, hash32_4, LANES};
use crate::ln::crush_ln;
use crate::model::{
    tree_height, Bucket, BucketAlg, ChooseArg, CrushMap, Derived, Step, ITEM_NONE, ITEM_UNDEF,
};

/// Dense choose_args table: entry `-1 - bucket_id` holds that bucket's overrides.
pub type DenseChooseArgs = Vec<Option<ChooseArg>>;

/// Permutation state of one bucket for one `do_rule` call (uniform buckets and perm fallback).
#[derive(Clone, Default)]
struct PermState {
    stamp: u64,
    x: u32,
    n: u32,
    perm: Vec<u32>,
}

/// Scratch space reused across calls so mapping does not allocate.
#[derive(Default)]
pub struct Workspace {
    stamp: u64,
    perms: Vec<PermState>,
    a: Vec<i32>,
    b: Vec<i32>,
    c: Vec<i32>,
}

impl Workspace {
    /// An empty workspace; it grows to fit the first map it is used with.
    pub fn new() -> Self {
        Self::default()
    }
}

struct Ctx<'a> {
    map: &'a CrushMap,
    weights: &'a [u32],
    max_devices: i32,
    choose_args: Option<&'a [Option<ChooseArg>]>,
    x: i32,
}

impl CrushMap {
    /// Builds the dense choose_args table for a set index, falling back to the default set (-1)
    /// like Ceph's `choose_args_get_with_fallback`.
    pub fn dense_choose_args(&self, index: i64) -> Option<DenseChooseArgs> {
        let set = self
            .choose_args
            .get(&index)
            .or_else(|| self.choose_args.get(&-1))?;
        let mut dense = vec![None; self.buckets.len()];
        for (&bucket_id, arg) in set {
            if bucket_id < 0 {
                let index = (-1 - bucket_id) as usize;
                if index < dense.len() {
                    dense[index] = Some(arg.clone());
                }
            }
        }
        Some(dense)
    }

    /// Evaluates rule `rule_id` for input `x`, writing up to `result_max` items into `out`.
    ///
    /// `reweights` is the OSDMap in/out vector (16.16, 0x10000 = in) indexed by device id.
    /// Returns false (and leaves `out` empty) if the rule does not exist. A `result_max`
    /// beyond `i32::MAX` counts as `i32::MAX`, Ceph's `int` limit.
    #[allow(clippy::too_many_arguments)]
    pub fn do_rule(
        &self,
        rule_id: i32,
        x: i32,
        result_max: usize,
        reweights: &[u32],
        choose_args: Option<&[Option<ChooseArg>]>,
        ws: &mut Workspace,
        out: &mut Vec<i32>,
    ) -> bool {
        out.clear();
        let result_max = result_max.min(MAX_RESULT);
        let Some(rule) = self.rules.get(&rule_id) else {
            return false;
        };
        ws.stamp = ws.stamp.wrapping_add(1);
        if ws.perms.len() < self.buckets.len() {
            ws.perms.resize(self.buckets.len(), PermState::default());
        }
        for v in [&mut ws.a, &mut ws.b, &mut ws.c] {
            v.clear();
            v.resize(result_max, 0);
        }
        let ctx = Ctx {
            map: self,
            weights: reweights,
            max_devices: self.max_devices(),
            choose_args,
            x,
        };
        let t = &self.tunables;
        let mut choose_tries = t.choose_total_tries + 1;
        let mut choose_leaf_tries = 0u32;
        let mut local_retries = t.choose_local_tries;
        let mut local_fallback_retries = t.choose_local_fallback_tries;
        let mut vary_r = t.chooseleaf_vary_r;
        let mut stable = t.chooseleaf_stable;

        let mut w = std::mem::take(&mut ws.a);
        let mut o = std::mem::take(&mut ws.b);
        let mut c = std::mem::take(&mut ws.c);
        let mut wsize = 0usize;

        for step in &rule.steps {
            match *step {
                Step::Take(item) => {
                    let valid =
                        (item >= 0 && item < ctx.max_devices) || self.bucket(item).is_some();
                    if valid && result_max > 0 {
                        w[0] = item;
                        wsize = 1;
                    }
                }
                Step::SetChooseTries(n) => {
                    if n > 0 {
                        choose_tries = n as u32;
                    }
                }
                Step::SetChooseleafTries(n) => {
                    if n > 0 {
                        choose_leaf_tries = n as u32;
                    }
                }
                Step::SetChooseLocalTries(n) => {
                    if n >= 0 {
                        local_retries = n as u32;
                    }
                }
                Step::SetChooseLocalFallbackTries(n) => {
                    if n >= 0 {
                        local_fallback_retries = n as u32;
                    }
                }
                Step::SetChooseleafVaryR(n) => {
                    if n >= 0 {
                        vary_r = n as u32;
                    }
                }
                Step::SetChooseleafStable(n) => {
                    if n >= 0 {
                        stable = n as u32;
                    }
                }
                Step::ChooseFirstn { n, type_id }
                | Step::ChooseleafFirstn { n, type_id }
                | Step::ChooseIndep { n, type_id }
                | Step::ChooseleafIndep { n, type_id } => {
                    if wsize == 0 {
                        continue;
                    }
                    let firstn = matches!(
                        step,
                        Step::ChooseFirstn { .. } | Step::ChooseleafFirstn { .. }
                    );
                    let leaf = matches!(
                        step,
                        Step::ChooseleafFirstn { .. } | Step::ChooseleafIndep { .. }
                    );
                    let mut osize = 0usize;
                    for &take in &w[..wsize] {
                        let mut numrep = n;
                        if numrep <= 0 {
                            numrep += i32_of(result_max);
                            if numrep <= 0 {
                                continue;
                            }
                        }
                        let Some(bucket) = self.bucket(take) else {
                            continue;
                        };
                        if firstn {
                            let recurse_tries = if choose_leaf_tries > 0 {
                                choose_leaf_tries
                            } else if t.chooseleaf_descend_once != 0 {
                                1
                            } else {
                                choose_tries
                            };
                            let params = FirstnParams {
                                tries: choose_tries,
                                recurse_tries,
                                local_retries,
                                local_fallback_retries,
                                vary_r,
                                stable,
                            };
                            osize += choose_firstn(
                                &ctx,
                                &mut ws.perms,
                                ws.stamp,
                                bucket,
                                numrep,
                                type_id,
                                &mut o[osize..],
                                0,
                                result_max - osize,
                                &params,
                                leaf,
                                Some(&mut c[osize..]),
                                0,
                            );
                        } else {
                            let out_size = (numrep as usize).min(result_max - osize);
                            choose_indep(
                                &ctx,
                                &mut ws.perms,
                                ws.stamp,
                                bucket,
                                out_size,
                                numrep,
                                type_id,
                                &mut o[osize..],
                                0,
                                choose_tries,
                                if choose_leaf_tries > 0 {
                                    choose_leaf_tries
                                } else {
                                    1
                                },
                                leaf,
                                Some(&mut c[osize..]),
                                0,
                            );
                            osize += out_size;
                        }
                    }
                    if leaf {
                        o[..osize].copy_from_slice(&c[..osize]);
                    }
                    std::mem::swap(&mut o, &mut w);
                    wsize = osize;
                }
                Step::Emit => {
                    for &item in &w[..wsize] {
                        if out.len() >= result_max {
                            break;
                        }
                        out.push(item);
                    }
                    wsize = 0;
                }
            }
        }
        ws.a = w;
        ws.b = o;
        ws.c = c;
        true
    }

    /// Convenience wrapper: maps `x` with a fresh workspace and no choose_args.
    pub fn map_x(&self, rule_id: i32, x: i32, result_max: usize, reweights: &[u32]) -> Vec<i32> {
        let mut ws = Workspace::new();
        let mut out = Vec::with_capacity(result_max);
        self.do_rule(rule_id, x, result_max, reweights, None, &mut ws, &mut out);
        out
    }
}

struct FirstnParams {
    tries: u32,
    recurse_tries: u32,
    local_retries: u32,
    local_fallback_retries: u32,
    vary_r: u32,
    stable: u32,
}

fn is_out(ctx: &Ctx, item: i32) -> bool {
    let Some(&w) = ctx.weights.get(item as usize) else {
        return true;
    };
    if w >= 0x10000 {
        return false;
    }
    if w == 0 {
        return true;
    }
    (hash32_2(ctx.x as u32, item as u32) & 0xffff) >= w
}

fn perm_choose(perms: &mut [PermState], stamp: u64, bucket: &Bucket, x: i32, r: i32) -> i32 {
    let size = u32_of(bucket.size());
    let pr = (r as u32) % size;
    let state = &mut perms[(-1 - bucket.id) as usize];
    if state.stamp != stamp {
        state.stamp = stamp;
        state.n = 0;
        state.x = 0;
    }
    if state.perm.len() < size as usize {
        state.perm.resize(size as usize, 0);
    }
    let bid = bucket.id as u32;
    if state.x != x as u32 || state.n == 0 {
        state.x = x as u32;
        if pr == 0 {
            let s = hash32_3(x as u32, bid, 0) % size;
            state.perm[0] = s;
            state.n = 0xffff;
            return bucket.items[s as usize];
        }
        for i in 0..size {
            state.perm[i as usize] = i;
        }
        state.n = 0;
    } else if state.n == 0xffff {
        for i in 1..size {
            state.perm[i as usize] = i;
        }
        let first = state.perm[0] as usize;
        state.perm[first] = 0;
        state.n = 1;
    }
    while state.n <= pr {
        let p = state.n;
        if p < size - 1 {
            let i = hash32_3(x as u32, bid, p) % (size - p);
            if i != 0 {
                state.perm.swap((p + i) as usize, p as usize);
            }
        }
        state.n += 1;
    }
    bucket.items[state.perm[pr as usize] as usize]
}

#[inline]
fn straw2_choose(bucket: &Bucket, x: i32, r: i32, arg: Option<&ChooseArg>, position: usize) -> i32 {
    let weights: &[u32] = match arg {
        Some(a) if !a.weight_set.is_empty() => {
            let p = position.min(a.weight_set.len() - 1);
            &a.weight_set[p]
        }
        _ => &bucket.weights,
    };
    let ids: &[i32] = match arg.and_then(|a| a.ids.as_deref()) {
        Some(ids) => ids,
        None => &bucket.items,
    };
    let size = bucket.items.len().min(ids.len());
    if size <= 1 {
        // With one item the first draw always wins, whatever it is.
        return bucket.items[0];
    }
    let mut high = 0usize;
    let mut high_draw = i64::MIN;
    let mut lane_ids = [0u32; LANES];
    for start in (0..size).step_by(LANES) {
        let end = (start + LANES).min(size);
        for (slot, &id) in lane_ids.iter_mut().zip(&ids[start..end]) {
            *slot = id as u32;
        }
        let hashes = hash32_3_lanes(x as u32, &lane_ids, r as u32);
        for (lane, i) in (start..end).enumerate() {
            let w = weights.get(i).copied().unwrap_or(0);
            let draw = if w != 0 {
                let ln = crush_ln(hashes[lane] & 0xffff) as i64 - 0x1_0000_0000_0000;
                ln / i64::from(w)
            } else {
                i64::MIN
            };
            if i == 0 || draw > high_draw {
                high = i;
                high_draw = draw;
            }
        }
    }
    bucket.items[high]
}

fn bucket_choose(
    ctx: &Ctx,
    perms: &mut [PermState],
    stamp: u64,
    bucket: &Bucket,
    r: i32,
    position: usize,
) -> i32 {
    let x = ctx.x;
    match (&bucket.alg, &bucket.derived) {
        (BucketAlg::Straw2, _) => {
            let arg = ctx
                .choose_args
                .and_then(|args| args.get((-1 - bucket.id) as usize))
                .and_then(Option::as_ref);
            straw2_choose(bucket, x, r, arg, position)
        }
        (BucketAlg::Uniform, _) => perm_choose(perms, stamp, bucket, x, r),
        (BucketAlg::List, Derived::List { sum_weights }) => {
            for i in (0..bucket.size()).rev() {
                let mut w = u64::from(
                    hash32_4(x as u32, bucket.items[i] as u32, r as u32, bucket.id as u32) & 0xffff,
                );
                w = (w * u64::from(sum_weights[i])) >> 16;
                if w < u64::from(bucket.weights[i]) {
                    return bucket.items[i];
                }
            }
            bucket.items[0]
        }
        (BucketAlg::Tree, Derived::Tree { node_weights }) => {
            let mut n = u32_of(node_weights.len() >> 1);
            while n & 1 == 0 {
                let w = u64::from(node_weights[n as usize]);
                let t = (u64::from(hash32_4(x as u32, n, r as u32, bucket.id as u32)) * w) >> 32;
                let h = tree_height(n);
                let left = n - (1 << (h - 1));
                if t < u64::from(node_weights[left as usize]) {
                    n = left;
                } else {
                    n += 1 << (h - 1);
                }
            }
            bucket.items[(n >> 1) as usize]
        }
        (BucketAlg::Straw, Derived::Straw { straws }) => {
            let mut high = 0usize;
            let mut high_draw = 0u64;
            for (i, (&item, &straw)) in bucket.items.iter().zip(straws).enumerate() {
                let draw = u64::from(hash32_3(x as u32, item as u32, r as u32) & 0xffff)
                    * u64::from(straw);
                if i == 0 || draw > high_draw {
                    high = i;
                    high_draw = draw;
                }
            }
            bucket.items[high]
        }
        _ => bucket.items[0],
    }
}

#[allow(clippy::too_many_arguments)]
fn choose_firstn(
    ctx: &Ctx,
    perms: &mut [PermState],
    stamp: u64,
    bucket: &Bucket,
    numrep: i32,
    type_id: i32,
    out: &mut [i32],
    mut outpos: usize,
    out_size: usize,
    p: &FirstnParams,
    recurse_to_leaf: bool,
    mut out2: Option<&mut [i32]>,
    parent_r: i32,
) -> usize {
    let map = ctx.map;
    let mut count = out_size;
    let mut rep: i32 = if p.stable != 0 { 0 } else { i32_of(outpos) };
    while rep < numrep && count > 0 {
        let mut ftotal: u32 = 0;
        let mut skip_rep = false;
        let mut item: i32;
        'descent: loop {
            let mut in_bucket = bucket;
            let mut flocal: u32 = 0;
            loop {
                let r = rep + parent_r + ftotal as i32;
                let mut collide = false;
                let reject;
                if in_bucket.size() == 0 {
                    reject = true;
                    item = 0;
                } else {
                    item = if p.local_fallback_retries > 0
                        && flocal >= (u32_of(in_bucket.size()) >> 1)
                        && flocal > p.local_fallback_retries
                    {
                        perm_choose(perms, stamp, in_bucket, ctx.x, r)
                    } else {
                        bucket_choose(ctx, perms, stamp, in_bucket, r, outpos)
                    };
                    if item >= ctx.max_devices {
                        skip_rep = true;
                        break 'descent;
                    }
                    let item_type = if item < 0 {
                        match map.bucket(item) {
                            Some(b) => b.type_id,
                            None => {
                                skip_rep = true;
                                break 'descent;
                            }
                        }
                    } else {
                        0
                    };
                    if item_type != type_id {
                        match map.bucket(item) {
                            Some(b) if item < 0 => {
                                in_bucket = b;
                                continue;
                            }
                            _ => {
                                skip_rep = true;
                                break 'descent;
                            }
                        }
                    }
                    collide = out[..outpos].contains(&item);
                    let mut rej = false;
                    if !collide && recurse_to_leaf {
                        if item < 0 {
                            let sub_r = if p.vary_r != 0 {
                                r >> (p.vary_r - 1)
                            } else {
                                0
                            };
                            let child = map.bucket(item).expect("checked above");
                            let o2 = out2.as_deref_mut().expect("leaf mode has out2");
                            let inner = FirstnParams {
                                tries: p.recurse_tries,
                                recurse_tries: 0,
                                local_retries: p.local_retries,
                                local_fallback_retries: p.local_fallback_retries,
                                vary_r: p.vary_r,
                                stable: p.stable,
                            };
                            let got = choose_firstn(
                                ctx,
                                perms,
                                stamp,
                                child,
                                if p.stable != 0 { 1 } else { i32_of(outpos) + 1 },
                                0,
                                o2,
                                outpos,
                                count,
                                &inner,
                                false,
                                None,
                                sub_r,
                            );
                            if got <= outpos {
                                rej = true;
                            }
                        } else if let Some(o2) = out2.as_deref_mut() {
                            o2[outpos] = item;
                        }
                    }
                    if !rej && !collide && item_type == 0 {
                        rej = is_out(ctx, item);
                    }
                    reject = rej;
                }
                if reject || collide {
                    ftotal += 1;
                    flocal += 1;
                    let retry_bucket = (collide && flocal <= p.local_retries)
                        || (p.local_fallback_retries > 0
                            && flocal <= u32_of(in_bucket.size()) + p.local_fallback_retries);
                    if retry_bucket {
                        continue;
                    } else if ftotal < p.tries {
                        continue 'descent;
                    } else {
                        skip_rep = true;
                        break 'descent;
                    }
                }
                break 'descent;
            }
        }
        if !skip_rep {
            out[outpos] = item;
            outpos += 1;
            count -= 1;
        }
        rep += 1;
    }
    outpos
}

#[allow(clippy::too_many_arguments)]
fn choose_indep(
    ctx: &Ctx,
    perms: &mut [PermState],
    stamp: u64,
    bucket: &Bucket,
    left: usize,
    numrep: i32,
    type_id: i32,
    out: &mut [i32],
    outpos: usize,
    tries: u32,
    recurse_tries: u32,
    recurse_to_leaf: bool,
    mut out2: Option<&mut [i32]>,
    parent_r: i32,
) {
    let map = ctx.map;
    let endpos = outpos + left;
    let mut left = left;
    for rep in outpos..endpos {
        out[rep] = ITEM_UNDEF;
        if let Some(o2) = out2.as_deref_mut() {
            o2[rep] = ITEM_UNDEF;
        }
    }
    let mut ftotal: u32 = 0;
    while left > 0 && ftotal < tries {
        for rep in outpos..endpos {
            if out[rep] != ITEM_UNDEF {
                continue;
            }
            let mut in_bucket = bucket;
            loop {
                let mut r = i32_of(rep) + parent_r;
                if in_bucket.alg == BucketAlg::Uniform
                    && numrep > 0
                    && i32_of(in_bucket.size()) % numrep == 0
                {
                    r += (numrep + 1) * ftotal as i32;
                } else {
                    r += numrep * ftotal as i32;
                }
                if in_bucket.size() == 0 {
                    break;
                }
                let item = bucket_choose(ctx, perms, stamp, in_bucket, r, outpos);
                if item >= ctx.max_devices {
                    out[rep] = ITEM_NONE;
                    if let Some(o2) = out2.as_deref_mut() {
                        o2[rep] = ITEM_NONE;
                    }
                    left -= 1;
                    break;
                }
                let item_bucket = map.bucket(item);
                let item_type = if item < 0 {
                    item_bucket.map_or(-1, |b| b.type_id)
                } else {
                    0
                };
                if item_type != type_id {
                    match item_bucket {
                        Some(b) => {
                            in_bucket = b;
                            continue;
                        }
                        None => {
                            out[rep] = ITEM_NONE;
                            if let Some(o2) = out2.as_deref_mut() {
                                o2[rep] = ITEM_NONE;
                            }
                            left -= 1;
                            break;
                        }
                    }
                }
                if out[outpos..endpos].contains(&item) {
                    break;
                }
                if recurse_to_leaf {
                    let o2 = out2.as_deref_mut().expect("leaf mode has out2");
                    if let Some(child) = item_bucket {
                        choose_indep(
                            ctx,
                            perms,
                            stamp,
                            child,
                            1,
                            numrep,
                            0,
                            o2,
                            rep,
                            recurse_tries,
                            0,
                            false,
                            None,
                            r,
                        );
                        if o2[rep] == ITEM_NONE {
                            break;
                        }
                    } else {
                        o2[rep] = item;
                    }
                }
                if item_type == 0 && is_out(ctx, item) {
                    break;
                }
                out[rep] = item;
                left -= 1;
                break;
            }
        }
        ftotal += 1;
    }
    for rep in outpos..endpos {
        if out[rep] == ITEM_UNDEF {
            out[rep] = ITEM_NONE;
        }
        if let Some(o2) = out2.as_deref_mut() {
            if o2[rep] == ITEM_UNDEF {
                o2[rep] = ITEM_NONE;
            }
        }
    }
}
