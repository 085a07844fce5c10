//! What a pool's rule allows: which OSDs may hold its replicas, which failure domain each OSD
//! is in, and how many replicas each OSD should hold (its target).
//!
//! Owns the interpretation of a rule for balancing and analysis: `take ROOT [class C]`, then
//! choose steps, then `emit`. The last choose step names the failure domain (replicas of one PG
//! in distinct buckets of that type); earlier choose steps name outer domains a replacement must
//! stay within. Targets are weight-proportional with each failure domain capped at one replica
//! per PG (water-filling), then split by weight inside the domain.

use cairn_crush::{CrushMap, Step};

use crate::error::MapError;
use crate::osdmap::OsdMap;
use crate::pool::Pool;

/// Marks an OSD that the rule can never choose.
pub const NOT_ELIGIBLE: i32 = i32::MIN;

/// The placement constraints of one pool, indexed by OSD id.
#[derive(Clone, Debug)]
pub struct Topology {
    /// Replicas per PG.
    pub size: usize,
    /// Failure-domain bucket of each OSD (the OSD itself for `type osd`), or [`NOT_ELIGIBLE`].
    pub domain: Vec<i32>,
    /// Outer-domain buckets of each OSD (one per outer choose step).
    pub outer: Vec<Vec<i32>>,
    /// Effective weight (CRUSH weight x reweight) of each OSD; 0 when not eligible.
    pub weight: Vec<f64>,
}

/// The steps of a rule that matter for balancing.
struct RuleSteps {
    root: i32,
    domain_type: i32,
    outer_types: Vec<i32>,
}

fn rule_steps(crush: &CrushMap, rule_id: i32) -> Result<RuleSteps, MapError> {
    let unsupported = |reason: &str| MapError::UnsupportedRule {
        rule: rule_id,
        reason: reason.to_string(),
    };
    let rule = crush
        .rules
        .get(&rule_id)
        .ok_or_else(|| unsupported("does not exist"))?;
    let mut root = None;
    let mut chooses = Vec::new();
    let mut emits = 0;
    for step in &rule.steps {
        match *step {
            Step::Take(_) if root.is_some() => {
                return Err(unsupported("more than one `take` step"));
            }
            Step::Take(item) => root = Some(item),
            Step::ChooseFirstn { type_id, .. }
            | Step::ChooseIndep { type_id, .. }
            | Step::ChooseleafFirstn { type_id, .. }
            | Step::ChooseleafIndep { type_id, .. } => chooses.push(type_id),
            Step::Emit => emits += 1,
            _ => {}
        }
    }
    if emits != 1 {
        return Err(unsupported("needs exactly one `emit` step"));
    }
    let root = root.ok_or_else(|| unsupported("has no `take` step"))?;
    let domain_type = chooses
        .pop()
        .ok_or_else(|| unsupported("has no choose step"))?;
    Ok(RuleSteps {
        root,
        domain_type,
        outer_types: chooses,
    })
}

impl Topology {
    /// Derives the constraints of `pool` from its rule and the OSD states of `map`.
    pub fn for_pool(map: &OsdMap, pool: &Pool) -> Result<Self, MapError> {
        let steps = rule_steps(&map.crush, pool.crush_rule)?;
        let reweights = map.reweights();
        let n = reweights.len();
        let mut topo = Topology {
            size: pool.size as usize,
            domain: vec![NOT_ELIGIBLE; n],
            outer: vec![Vec::new(); n],
            weight: vec![0.0; n],
        };
        let mut path: Vec<i32> = Vec::new();
        topo.walk(
            &map.crush, &steps, steps.root, 0x10000, &mut path, &reweights,
        );
        Ok(topo)
    }

    fn walk(
        &mut self,
        crush: &CrushMap,
        steps: &RuleSteps,
        item: i32,
        item_weight: u32,
        path: &mut Vec<i32>,
        reweights: &[u32],
    ) {
        if item >= 0 {
            let osd = item as usize;
            let rw = reweights.get(osd).copied().unwrap_or(0);
            if osd >= self.domain.len() || item_weight == 0 || rw == 0 {
                return;
            }
            let type_of = |id: i32| crush.item_type(id).unwrap_or(-1);
            let domain = if steps.domain_type == 0 {
                item
            } else {
                match path.iter().find(|&&b| type_of(b) == steps.domain_type) {
                    Some(&b) => b,
                    None => return,
                }
            };
            self.domain[osd] = domain;
            self.outer[osd] = steps
                .outer_types
                .iter()
                .map(|&t| path.iter().copied().find(|&b| type_of(b) == t).unwrap_or(0))
                .collect();
            self.weight[osd] = f64::from(item_weight) / 65536.0 * f64::from(rw) / 65536.0;
            return;
        }
        let Some(bucket) = crush.bucket(item) else {
            return;
        };
        path.push(item);
        for (&child, &w) in bucket.items.iter().zip(&bucket.weights) {
            self.walk(crush, steps, child, w, path, reweights);
        }
        path.pop();
    }

    /// Takes `osd` out of the topology (its targets go to the others): what a spread of up sets
    /// must do for an OSD that is down but still in, which CRUSH may pick but no up set holds.
    pub fn exclude(&mut self, osd: i32) {
        if let Some(d) = usize::try_from(osd)
            .ok()
            .and_then(|o| self.domain.get_mut(o))
        {
            *d = NOT_ELIGIBLE;
        }
    }

    /// True if the rule may place replicas on this OSD.
    pub fn eligible(&self, osd: i32) -> bool {
        osd >= 0 && (osd as usize) < self.domain.len() && self.domain[osd as usize] != NOT_ELIGIBLE
    }

    /// True if replacing `from` by `to` in `set` keeps the rule's constraints: `to` eligible and
    /// absent, in a failure domain no other member uses, inside the same outer domains as `from`.
    pub fn can_replace(&self, set: &[i32], from: i32, to: i32) -> bool {
        if !self.eligible(to) || set.contains(&to) {
            return false;
        }
        let d = self.domain[to as usize];
        for &m in set {
            if m != from && self.eligible(m) && self.domain[m as usize] == d {
                return false;
            }
        }
        !self.eligible(from) || self.outer[from as usize] == self.outer[to as usize]
    }

    /// Target replica count per OSD for `num_pgs` PGs holding `total_replicas` replicas.
    ///
    /// Failure domains get weight-proportional shares, capped at `num_pgs` (a domain holds at
    /// most one replica of each PG); OSDs split their domain's share by weight.
    pub fn targets(&self, total_replicas: f64, num_pgs: usize) -> Vec<f64> {
        let mut domains: Vec<(i32, f64)> = Vec::new();
        for (osd, &d) in self.domain.iter().enumerate() {
            if d == NOT_ELIGIBLE {
                continue;
            }
            match domains.iter_mut().find(|(id, _)| *id == d) {
                Some(entry) => entry.1 += self.weight[osd],
                None => domains.push((d, self.weight[osd])),
            }
        }
        let cap = num_pgs as f64;
        let mut share: Vec<Option<f64>> = vec![None; domains.len()];
        let mut remaining = total_replicas;
        loop {
            let free_weight: f64 = domains
                .iter()
                .zip(&share)
                .filter(|(_, s)| s.is_none())
                .map(|((_, w), _)| w)
                .sum();
            if free_weight <= 0.0 {
                break;
            }
            let mut capped = false;
            for (i, (_, w)) in domains.iter().enumerate() {
                if share[i].is_none() && remaining * w / free_weight > cap {
                    share[i] = Some(cap);
                    remaining -= cap;
                    capped = true;
                }
            }
            if !capped {
                for (i, (_, w)) in domains.iter().enumerate() {
                    if share[i].is_none() {
                        share[i] = Some(remaining * w / free_weight);
                    }
                }
                break;
            }
        }
        let mut targets = vec![0.0; self.domain.len()];
        for (osd, &d) in self.domain.iter().enumerate() {
            if d == NOT_ELIGIBLE {
                continue;
            }
            if let Some(i) = domains.iter().position(|(id, _)| *id == d) {
                let (_, dw) = domains[i];
                if dw > 0.0 {
                    targets[osd] = share[i].unwrap_or(0.0) * self.weight[osd] / dw;
                }
            }
        }
        targets
    }
}
