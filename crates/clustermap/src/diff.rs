//! Data movement between two placements of the same pool, and the least movement any
//! placement meeting the new targets would need.
//!
//! Owns only counting; placements come from the caller (CRUSH, a balancer, or a real map).

use serde::Serialize;

use crate::shape::Topology;

/// Movement from placement A to placement B.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Movement {
    /// Replicas in B.
    pub total_replicas: u64,
    /// Replicas of B on an OSD that did not hold that PG in A.
    pub moved_replicas: u64,
    /// moved / total.
    pub moved_fraction: f64,
    /// Fewest replicas that must move: sum over OSDs of how far A's count is below B's target.
    pub minimum_replicas: f64,
    /// minimum / total.
    pub minimum_fraction: f64,
    /// moved / minimum (1.0 is optimal).
    pub ratio_to_minimum: f64,
}

/// Compares two placements (one set per PG, same PG order); `topo_b` gives B's targets.
pub fn movement(a: &[Vec<i32>], b: &[Vec<i32>], topo_b: &Topology) -> Movement {
    let n = topo_b.domain.len();
    let mut counts_a = vec![0u64; n];
    for set in a {
        for &o in set {
            if o >= 0 && (o as usize) < n {
                counts_a[o as usize] += 1;
            }
        }
    }
    let total: u64 = b
        .iter()
        .map(|s| s.iter().filter(|&&o| o >= 0).count() as u64)
        .sum();
    let moved: u64 = a
        .iter()
        .zip(b)
        .map(|(sa, sb)| sb.iter().filter(|o| **o >= 0 && !sa.contains(o)).count() as u64)
        .sum();
    let targets = topo_b.targets(total as f64, b.len());
    let minimum: f64 = (0..n)
        .map(|o| (targets[o] - counts_a[o] as f64).max(0.0))
        .sum();
    let frac = |v: f64| if total == 0 { 0.0 } else { v / total as f64 };
    Movement {
        total_replicas: total,
        moved_replicas: moved,
        moved_fraction: frac(moved as f64),
        minimum_replicas: minimum,
        minimum_fraction: frac(minimum),
        ratio_to_minimum: if minimum > 0.0 {
            moved as f64 / minimum
        } else {
            0.0
        },
    }
}
