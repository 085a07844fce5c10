//! Spread statistics of a placement: seed 002's columns (mean PGs per OSD, min~max, normalized
//! min~max, stdev of count/target, max deviation in PGs), per failure domain, and primaries.
//!
//! Owns only arithmetic over a placement and its targets; it never changes placement.

use crate::balance::osd_at;
use serde::Serialize;

use crate::shape::Topology;

/// One OSD's share.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OsdShare {
    /// OSD id.
    pub osd: i32,
    /// Replicas held.
    pub count: u32,
    /// Weight-proportional target.
    pub target: f64,
    /// PGs it is primary for.
    pub primaries: u32,
    /// Target primaries.
    pub primary_target: f64,
}

/// Summary of counts against targets.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Summary {
    /// Mean count.
    pub mean: f64,
    /// Smallest count.
    pub min: u32,
    /// Largest count.
    pub max: u32,
    /// Smallest count / target.
    pub norm_min: f64,
    /// Largest count / target.
    pub norm_max: f64,
    /// Population standard deviation of count / target.
    pub stdev_norm: f64,
    /// Largest |count - target|.
    pub max_deviation: f64,
}

impl Summary {
    fn of(pairs: impl Iterator<Item = (u32, f64)>) -> Summary {
        let pairs: Vec<(u32, f64)> = pairs.filter(|&(_, t)| t > 0.0).collect();
        if pairs.is_empty() {
            return Summary::default();
        }
        let n = pairs.len() as f64;
        let norms: Vec<f64> = pairs.iter().map(|&(c, t)| f64::from(c) / t).collect();
        let mean_norm = norms.iter().sum::<f64>() / n;
        Summary {
            mean: pairs.iter().map(|&(c, _)| f64::from(c)).sum::<f64>() / n,
            min: pairs.iter().map(|p| p.0).min().unwrap_or(0),
            max: pairs.iter().map(|p| p.0).max().unwrap_or(0),
            norm_min: norms.iter().copied().fold(f64::INFINITY, f64::min),
            norm_max: norms.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            stdev_norm: (norms.iter().map(|v| (v - mean_norm).powi(2)).sum::<f64>() / n).sqrt(),
            max_deviation: pairs
                .iter()
                .map(|&(c, t)| (f64::from(c) - t).abs())
                .fold(0.0, f64::max),
        }
    }
}

/// Spread of one pool's placement.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Spread {
    /// PGs in the pool.
    pub num_pgs: usize,
    /// Replicas per PG.
    pub size: usize,
    /// Replicas placed.
    pub total_replicas: u64,
    /// Replicas per OSD against targets.
    pub osds: Summary,
    /// Replicas per failure domain against targets.
    pub domains: Summary,
    /// Primaries per OSD against targets.
    pub primaries: Summary,
    /// Per-OSD detail (eligible OSDs only).
    pub per_osd: Vec<OsdShare>,
}

/// Analyses `placement` (one up set per PG, primary first) against the pool's topology.
pub fn analyze(placement: &[Vec<i32>], topo: &Topology) -> Spread {
    let n = topo.domain.len();
    let mut counts = vec![0u32; n];
    let mut primaries = vec![0u32; n];
    let mut total = 0u64;
    for set in placement {
        for (i, &osd) in set.iter().enumerate() {
            if osd >= 0 && (osd as usize) < n {
                counts[osd as usize] += 1;
                total += 1;
                if i == 0 {
                    primaries[osd as usize] += 1;
                }
            }
        }
    }
    let targets = topo.targets(total as f64, placement.len());
    let size = topo.size.max(1) as f64;
    let per_osd: Vec<OsdShare> = (0..n)
        .filter(|&o| topo.eligible(osd_at(o)))
        .map(|o| OsdShare {
            osd: osd_at(o),
            count: counts[o],
            target: targets[o],
            primaries: primaries[o],
            primary_target: targets[o] / size,
        })
        .collect();
    let mut domain_ids: Vec<i32> = per_osd
        .iter()
        .map(|s| topo.domain[s.osd as usize])
        .collect();
    domain_ids.sort_unstable();
    domain_ids.dedup();
    let domain_pairs = domain_ids.iter().map(|&d| {
        per_osd
            .iter()
            .filter(|s| topo.domain[s.osd as usize] == d)
            .fold((0u32, 0.0f64), |(c, t), s| (c + s.count, t + s.target))
    });
    Spread {
        num_pgs: placement.len(),
        size: topo.size,
        total_replicas: total,
        osds: Summary::of(per_osd.iter().map(|s| (s.count, s.target))),
        domains: Summary::of(domain_pairs),
        primaries: Summary::of(per_osd.iter().map(|s| (s.primaries, s.primary_target))),
        per_osd,
    }
}
