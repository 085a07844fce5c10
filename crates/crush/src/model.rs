//! The CRUSH map model: tunables, devices, types, buckets, rules, device classes, choose_args.
//!
//! Owns the in-memory representation every other module reads. Buckets live in a vector indexed
//! by `-1 - id` (as in Ceph) so the mapper reaches them without hashing. Derived per-bucket data
//! (straw lengths, list sums, tree node weights) is computed here, once, when a bucket is built.
//! This module does no I/O.

use std::collections::BTreeMap;

use crate::convert::{fixed_u32, u32_of, MAX_BUCKET_ITEMS};
use crate::error::CrushError;

/// An "empty slot" in an EC (indep) result: Ceph's `CRUSH_ITEM_NONE`.
pub const ITEM_NONE: i32 = 0x7fff_ffff;
/// A slot not decided yet inside `choose_indep`: Ceph's `CRUSH_ITEM_UNDEF`.
pub(crate) const ITEM_UNDEF: i32 = 0x7fff_fffe;
/// A reweight of 1.0 in 16.16 fixed point: device fully in.
pub const WEIGHT_ONE: u32 = 0x10000;
/// Largest total bucket weight Ceph accepts (keeps sums from overflowing u32).
pub const MAX_BUCKET_WEIGHT: u32 = 65535 * 0x10000;
/// Largest device weight Ceph accepts.
pub const MAX_DEVICE_WEIGHT: u32 = 100 * 0x10000;

/// Map-wide tunables; defaults are Ceph's "legacy" (argonaut) values, as `crushtool -c` assumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tunables {
    /// Local retries on collision before retrying from the root (legacy 2, optimal 0).
    pub choose_local_tries: u32,
    /// Local retries that fall back to a permutation search (legacy 5, optimal 0).
    pub choose_local_fallback_tries: u32,
    /// Retries from the root before giving up on a replica (legacy 19, optimal 50).
    pub choose_total_tries: u32,
    /// chooseleaf recursion tries only once (legacy 0, optimal 1).
    pub chooseleaf_descend_once: u32,
    /// Vary the recursive r with the parent's r (legacy 0, optimal 1).
    pub chooseleaf_vary_r: u32,
    /// Stable chooseleaf: recursion always starts at rep 0 (legacy 0, optimal 1).
    pub chooseleaf_stable: u32,
    /// Straw v1 length calculation variant (legacy 0, optimal 1).
    pub straw_calc_version: u32,
    /// Bitmask of bucket algorithms allowed (legacy 22, optimal 54).
    pub allowed_bucket_algs: u32,
}

impl Tunables {
    /// Ceph's legacy (argonaut) tunables: what a map with no `tunable` lines means.
    pub fn legacy() -> Self {
        Tunables {
            choose_local_tries: 2,
            choose_local_fallback_tries: 5,
            choose_total_tries: 19,
            chooseleaf_descend_once: 0,
            chooseleaf_vary_r: 0,
            chooseleaf_stable: 0,
            straw_calc_version: 0,
            allowed_bucket_algs: 22,
        }
    }

    /// Ceph's current optimal (jewel and later) tunables, used by new maps.
    pub fn optimal() -> Self {
        Tunables {
            choose_local_tries: 0,
            choose_local_fallback_tries: 0,
            choose_total_tries: 50,
            chooseleaf_descend_once: 1,
            chooseleaf_vary_r: 1,
            chooseleaf_stable: 1,
            straw_calc_version: 1,
            allowed_bucket_algs: 54,
        }
    }

    /// The tunables in text order with their names, for writing and parsing.
    pub fn fields(&self) -> [(&'static str, u32); 8] {
        [
            ("choose_local_tries", self.choose_local_tries),
            (
                "choose_local_fallback_tries",
                self.choose_local_fallback_tries,
            ),
            ("choose_total_tries", self.choose_total_tries),
            ("chooseleaf_descend_once", self.chooseleaf_descend_once),
            ("chooseleaf_vary_r", self.chooseleaf_vary_r),
            ("chooseleaf_stable", self.chooseleaf_stable),
            ("straw_calc_version", self.straw_calc_version),
            ("allowed_bucket_algs", self.allowed_bucket_algs),
        ]
    }

    /// Sets one tunable by its text name; returns false for an unknown name.
    pub fn set(&mut self, name: &str, value: u32) -> bool {
        let slot = match name {
            "choose_local_tries" => &mut self.choose_local_tries,
            "choose_local_fallback_tries" => &mut self.choose_local_fallback_tries,
            "choose_total_tries" => &mut self.choose_total_tries,
            "chooseleaf_descend_once" => &mut self.chooseleaf_descend_once,
            "chooseleaf_vary_r" => &mut self.chooseleaf_vary_r,
            "chooseleaf_stable" => &mut self.chooseleaf_stable,
            "straw_calc_version" => &mut self.straw_calc_version,
            "allowed_bucket_algs" => &mut self.allowed_bucket_algs,
            _ => return false,
        };
        *slot = value;
        true
    }
}

/// Bucket selection algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BucketAlg {
    /// All items equal weight; choice by a hashed permutation.
    Uniform,
    /// Linked list: cheap additions at the end, poor removals.
    List,
    /// Binary tree of weights.
    Tree,
    /// Straw v1 (flawed weighting kept for compatibility).
    Straw,
    /// Straw2: independent exponential draws; optimal movement.
    Straw2,
}

impl BucketAlg {
    /// The name used in map text (`alg straw2`).
    pub fn name(self) -> &'static str {
        match self {
            BucketAlg::Uniform => "uniform",
            BucketAlg::List => "list",
            BucketAlg::Tree => "tree",
            BucketAlg::Straw => "straw",
            BucketAlg::Straw2 => "straw2",
        }
    }

    /// Parses a text name.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "uniform" => BucketAlg::Uniform,
            "list" => BucketAlg::List,
            "tree" => BucketAlg::Tree,
            "straw" => BucketAlg::Straw,
            "straw2" => BucketAlg::Straw2,
            _ => return None,
        })
    }
}

/// A device (leaf, id >= 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// Name, e.g. `osd.3`.
    pub name: String,
    /// Device class id (see [`CrushMap::classes`]), if any.
    pub class: Option<i32>,
}

/// Per-algorithm data derived from items and weights.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Derived {
    None,
    Straw { straws: Vec<u32> },
    List { sum_weights: Vec<u32> },
    Tree { node_weights: Vec<u32> },
}

/// An interior node of the hierarchy (id < 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Negative id.
    pub id: i32,
    /// Unique name; shadow (device-class) buckets are named `parent~class`.
    pub name: String,
    /// Type id (see [`CrushMap::types`]).
    pub type_id: i32,
    /// Selection algorithm.
    pub alg: BucketAlg,
    /// Hash function id (0 = rjenkins1, the only one Ceph defines).
    pub hash: u8,
    /// Children in order (order matters for ties and for list/tree/uniform buckets).
    pub items: Vec<i32>,
    /// 16.16 weight of each child.
    pub weights: Vec<u32>,
    /// Sum of the children's weights.
    pub weight: u32,
    pub(crate) derived: Derived,
}

impl Bucket {
    /// Builds a bucket and computes its algorithm's derived data.
    pub fn new(
        id: i32,
        name: impl Into<String>,
        type_id: i32,
        alg: BucketAlg,
        items: Vec<i32>,
        weights: Vec<u32>,
        straw_calc_version: u32,
    ) -> Result<Self, CrushError> {
        let name = name.into();
        if items.len() != weights.len() {
            return Err(CrushError::Invalid(format!(
                "bucket {name}: {} items but {} weights",
                items.len(),
                weights.len()
            )));
        }
        if items.len() > MAX_BUCKET_ITEMS {
            return Err(CrushError::Invalid(format!(
                "bucket {name}: {} items, more than {MAX_BUCKET_ITEMS}",
                items.len()
            )));
        }
        let mut total: u32 = 0;
        for &w in &weights {
            total = total.checked_add(w).ok_or_else(|| {
                CrushError::Invalid(format!("bucket {name}: total weight overflows"))
            })?;
        }
        if alg == BucketAlg::Uniform && weights.windows(2).any(|p| p[0] != p[1]) {
            return Err(CrushError::Invalid(format!(
                "uniform bucket {name}: items must all have the same weight"
            )));
        }
        let derived = match alg {
            BucketAlg::Straw => Derived::Straw {
                straws: calc_straws(&weights, straw_calc_version),
            },
            BucketAlg::List => Derived::List {
                sum_weights: weights
                    .iter()
                    .scan(0u32, |acc, &w| {
                        *acc = acc.wrapping_add(w);
                        Some(*acc)
                    })
                    .collect(),
            },
            BucketAlg::Tree => Derived::Tree {
                node_weights: tree_node_weights(&weights),
            },
            BucketAlg::Uniform | BucketAlg::Straw2 => Derived::None,
        };
        Ok(Bucket {
            id,
            name,
            type_id,
            alg,
            hash: 0,
            items,
            weights,
            weight: total,
            derived,
        })
    }

    /// Number of children.
    pub fn size(&self) -> usize {
        self.items.len()
    }

    /// True for a device-class shadow bucket (`host0~ssd`).
    pub fn is_shadow(&self) -> bool {
        self.name.contains('~')
    }
}

/// Straw v1 lengths, following Ceph's `crush_calc_straw` (both calc versions).
fn calc_straws(weights: &[u32], version: u32) -> Vec<u32> {
    let size = weights.len();
    let mut straws = vec![0u32; size];
    // Indices sorted by ascending weight; a stable insertion sort keeps ties in item order.
    let mut order: Vec<usize> = Vec::with_capacity(size);
    for i in 0..size {
        let pos = order
            .iter()
            .position(|&j| weights[i] < weights[j])
            .unwrap_or(order.len());
        order.insert(pos, i);
    }
    let mut numleft = size as f64;
    let mut straw = 1.0f64;
    let mut wbelow = 0.0f64;
    let mut lastw = 0.0f64;
    let w = |k: usize| f64::from(weights[order[k]]);
    let mut i = 0;
    while i < size {
        if version == 0 {
            if weights[order[i]] == 0 {
                straws[order[i]] = 0;
                i += 1;
                continue;
            }
            straws[order[i]] = fixed_u32(straw * 65536.0);
            i += 1;
            if i == size {
                break;
            }
            if weights[order[i]] == weights[order[i - 1]] {
                continue;
            }
            wbelow += (w(i - 1) - lastw) * numleft;
            for j in i..size {
                if weights[order[j]] == weights[order[i]] {
                    numleft -= 1.0;
                } else {
                    break;
                }
            }
            let wnext = numleft * (w(i) - w(i - 1));
            let pbelow = wbelow / (wbelow + wnext);
            straw *= (1.0 / pbelow).powf(1.0 / numleft);
            lastw = w(i - 1);
        } else {
            if weights[order[i]] == 0 {
                straws[order[i]] = 0;
                i += 1;
                numleft -= 1.0;
                continue;
            }
            straws[order[i]] = fixed_u32(straw * 65536.0);
            i += 1;
            if i == size {
                break;
            }
            wbelow += (w(i - 1) - lastw) * numleft;
            numleft -= 1.0;
            let wnext = numleft * (w(i) - w(i - 1));
            let pbelow = wbelow / (wbelow + wnext);
            straw *= (1.0 / pbelow).powf(1.0 / numleft);
            lastw = w(i - 1);
        }
    }
    straws
}

/// Depth of the binary tree that holds `size` leaves (Ceph's `calc_depth`).
pub(crate) fn tree_depth(size: usize) -> u32 {
    if size == 0 {
        return 0;
    }
    let mut depth = 1;
    let mut t = size - 1;
    while t != 0 {
        t >>= 1;
        depth += 1;
    }
    depth
}

/// Height of a tree node label: its number of trailing zero bits.
pub(crate) fn tree_height(n: u32) -> u32 {
    n.trailing_zeros()
}

fn tree_parent(n: u32) -> u32 {
    let h = tree_height(n);
    if n & (1 << (h + 1)) != 0 {
        n - (1 << h)
    } else {
        n + (1 << h)
    }
}

/// Node weights of a tree bucket, leaves at odd labels `2i+1`, root at `num_nodes/2`.
fn tree_node_weights(weights: &[u32]) -> Vec<u32> {
    let depth = tree_depth(weights.len());
    if depth == 0 {
        return Vec::new();
    }
    let num_nodes = 1usize << depth;
    let mut nodes = vec![0u32; num_nodes];
    for (i, &w) in weights.iter().enumerate() {
        let mut node = ((u32_of(i) + 1) << 1) - 1;
        nodes[node as usize] = w;
        for _ in 1..depth {
            node = tree_parent(node);
            nodes[node as usize] = nodes[node as usize].wrapping_add(w);
        }
    }
    nodes
}

/// Operation of one rule step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Start from an item (a bucket, possibly a class shadow bucket, or a device).
    Take(i32),
    /// Choose `n` items of `type_id` (n <= 0 means result_max + n), depth first.
    ChooseFirstn {
        /// Count (relative to the pool size when <= 0).
        n: i32,
        /// Type to choose.
        type_id: i32,
    },
    /// Positional (EC) choose.
    ChooseIndep {
        /// Count (relative to the pool size when <= 0).
        n: i32,
        /// Type to choose.
        type_id: i32,
    },
    /// Choose `n` items of `type_id`, then one leaf under each.
    ChooseleafFirstn {
        /// Count (relative to the pool size when <= 0).
        n: i32,
        /// Type to choose.
        type_id: i32,
    },
    /// Positional chooseleaf.
    ChooseleafIndep {
        /// Count (relative to the pool size when <= 0).
        n: i32,
        /// Type to choose.
        type_id: i32,
    },
    /// Append the working set to the result.
    Emit,
    /// Override choose_total_tries for this rule.
    SetChooseTries(i32),
    /// Override the chooseleaf recursion tries.
    SetChooseleafTries(i32),
    /// Override choose_local_tries.
    SetChooseLocalTries(i32),
    /// Override choose_local_fallback_tries.
    SetChooseLocalFallbackTries(i32),
    /// Override chooseleaf_vary_r.
    SetChooseleafVaryR(i32),
    /// Override chooseleaf_stable.
    SetChooseleafStable(i32),
}

/// Rule type, as written in map text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleType {
    /// Replicated pools (1).
    Replicated,
    /// Erasure-coded pools (3).
    Erasure,
    /// Squid MSR firstn (4): parsed, not evaluated.
    MsrFirstn,
    /// Squid MSR indep (5): parsed, not evaluated.
    MsrIndep,
}

impl RuleType {
    /// Text name.
    pub fn name(self) -> &'static str {
        match self {
            RuleType::Replicated => "replicated",
            RuleType::Erasure => "erasure",
            RuleType::MsrFirstn => "msr_firstn",
            RuleType::MsrIndep => "msr_indep",
        }
    }
}

/// A placement rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Rule id.
    pub id: i32,
    /// Name (may be empty in old maps).
    pub name: String,
    /// Rule type.
    pub rule_type: RuleType,
    /// Legacy min_size (kept for round trip).
    pub min_size: i32,
    /// Legacy max_size (kept for round trip).
    pub max_size: i32,
    /// Steps in order.
    pub steps: Vec<Step>,
}

/// Per-bucket overrides of a choose_args set (weight-set per position and/or substituted ids).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChooseArg {
    /// Weight sets: one vector of item weights per position.
    pub weight_set: Vec<Vec<u32>>,
    /// Ids hashed instead of the item ids.
    pub ids: Option<Vec<i32>>,
}

/// A choose_args set: bucket id -> overrides.
pub type ChooseArgMap = BTreeMap<i32, ChooseArg>;

/// A whole CRUSH map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrushMap {
    /// Tunables.
    pub tunables: Tunables,
    /// Devices by id.
    pub devices: BTreeMap<i32, Device>,
    /// Type names by id.
    pub types: BTreeMap<i32, String>,
    /// Buckets at index `-1 - id`.
    pub buckets: Vec<Option<Bucket>>,
    /// Rules by id.
    pub rules: BTreeMap<i32, Rule>,
    /// Device class names by class id.
    pub classes: BTreeMap<i32, String>,
    /// Shadow bucket ids: original bucket id -> class id -> shadow bucket id.
    pub class_buckets: BTreeMap<i32, BTreeMap<i32, i32>>,
    /// choose_args sets by index (-1 is the default set; otherwise a pool id).
    pub choose_args: BTreeMap<i64, ChooseArgMap>,
}

impl Default for CrushMap {
    fn default() -> Self {
        CrushMap {
            tunables: Tunables::legacy(),
            devices: BTreeMap::new(),
            types: BTreeMap::new(),
            buckets: Vec::new(),
            rules: BTreeMap::new(),
            classes: BTreeMap::new(),
            class_buckets: BTreeMap::new(),
            choose_args: BTreeMap::new(),
        }
    }
}

impl CrushMap {
    /// One past the largest device id (Ceph's `max_devices`).
    pub fn max_devices(&self) -> i32 {
        self.devices.keys().next_back().map_or(0, |&id| id + 1)
    }

    /// The bucket with this (negative) id.
    #[inline]
    pub fn bucket(&self, id: i32) -> Option<&Bucket> {
        if id >= 0 {
            return None;
        }
        self.buckets
            .get((-1 - id) as usize)
            .and_then(Option::as_ref)
    }

    /// Inserts or replaces a bucket at its id.
    pub fn insert_bucket(&mut self, bucket: Bucket) -> Result<(), CrushError> {
        if bucket.id >= 0 {
            return Err(CrushError::Invalid(format!(
                "bucket {} has non-negative id {}",
                bucket.name, bucket.id
            )));
        }
        let index = (-1 - bucket.id) as usize;
        if self.buckets.len() <= index {
            self.buckets.resize(index + 1, None);
        }
        self.buckets[index] = Some(bucket);
        Ok(())
    }

    /// Iterates over existing buckets in id order -1, -2, ...
    pub fn iter_buckets(&self) -> impl Iterator<Item = &Bucket> {
        self.buckets.iter().flatten()
    }

    /// Finds an item id (bucket or device) by name.
    pub fn item_id(&self, name: &str) -> Option<i32> {
        self.iter_buckets()
            .find(|b| b.name == name)
            .map(|b| b.id)
            .or_else(|| {
                self.devices
                    .iter()
                    .find(|(_, d)| d.name == name)
                    .map(|(&id, _)| id)
            })
    }

    /// Name of an item (bucket or device).
    pub fn item_name(&self, id: i32) -> Option<&str> {
        if id >= 0 {
            self.devices.get(&id).map(|d| d.name.as_str())
        } else {
            self.bucket(id).map(|b| b.name.as_str())
        }
    }

    /// Type id of an item (devices are type 0).
    pub fn item_type(&self, id: i32) -> Option<i32> {
        if id >= 0 {
            Some(0)
        } else {
            self.bucket(id).map(|b| b.type_id)
        }
    }

    /// Type id by name.
    pub fn type_id(&self, name: &str) -> Option<i32> {
        self.types
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(&id, _)| id)
    }

    /// Class id by name.
    pub fn class_id(&self, name: &str) -> Option<i32> {
        self.classes
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(&id, _)| id)
    }

    /// Rule id by name.
    pub fn rule_id(&self, name: &str) -> Option<i32> {
        self.rules.values().find(|r| r.name == name).map(|r| r.id)
    }

    /// The parent bucket of an item among non-shadow buckets, if any.
    pub fn parent_of(&self, item: i32) -> Option<&Bucket> {
        self.iter_buckets()
            .filter(|b| !b.is_shadow())
            .find(|b| b.items.contains(&item))
    }

    /// A device's CRUSH weight (16.16) in its parent bucket; `None` when it is in no bucket.
    pub fn device_weight(&self, id: i32) -> Option<u32> {
        let parent = self.parent_of(id)?;
        let at = parent.items.iter().position(|&i| i == id)?;
        parent.weights.get(at).copied()
    }

    /// True if a device appears in some bucket (crushtool gives absent devices weight 0).
    pub fn device_in_tree(&self, id: i32) -> bool {
        self.iter_buckets()
            .filter(|b| !b.is_shadow())
            .any(|b| b.items.contains(&id))
    }

    /// For a shadow bucket id, the (original bucket id, class id) it stands for.
    pub fn shadow_origin(&self, shadow: i32) -> Option<(i32, i32)> {
        self.class_buckets.iter().find_map(|(&orig, by_class)| {
            by_class
                .iter()
                .find(|(_, &s)| s == shadow)
                .map(|(&c, _)| (orig, c))
        })
    }

    /// The reweight vector crushtool uses by default: 1.0 for devices in the tree, else 0.
    pub fn default_reweights(&self) -> Vec<u32> {
        (0..self.max_devices())
            .map(|id| {
                if self.device_in_tree(id) {
                    WEIGHT_ONE
                } else {
                    0
                }
            })
            .collect()
    }

    /// Devices under an item (recursively), in tree order.
    pub fn leaves_under(&self, item: i32) -> Vec<i32> {
        let mut out = Vec::new();
        self.collect_leaves(item, &mut out);
        out
    }

    fn collect_leaves(&self, item: i32, out: &mut Vec<i32>) {
        if item >= 0 {
            out.push(item);
        } else if let Some(b) = self.bucket(item) {
            for &child in &b.items {
                self.collect_leaves(child, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_weights_sum_at_root() {
        let w = vec![1, 2, 3, 4, 5];
        let nodes = tree_node_weights(&w);
        assert_eq!(nodes.len(), 16);
        assert_eq!(nodes[8], 15);
    }

    #[test]
    fn straw_lengths_grow_with_weight() {
        let s = calc_straws(&[0x10000, 0x20000, 0x10000, 0], 1);
        assert_eq!(s[0], 0x10000);
        assert_eq!(s[0], s[2]);
        assert!(s[1] > s[0]);
        assert_eq!(s[3], 0);
    }

    #[test]
    fn uniform_rejects_unequal_weights() {
        let r = Bucket::new(-1, "b", 1, BucketAlg::Uniform, vec![0, 1], vec![1, 2], 1);
        assert!(r.is_err());
    }
}
