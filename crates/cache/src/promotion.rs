//! Promotion: whether a miss is inserted into the cache (`always` or `nhit`).
//!
//! Owns a bounded, direct-mapped table of per-core-line access counters for nhit. Pure: no I/O,
//! no clock. It must never grow past its configured number of counters.

use crate::config::{PromotionParams, PromotionPolicy};

/// The nhit counter table and the decision.
#[derive(Debug, Clone)]
pub struct Promoter {
    slots: Vec<(u64, u32)>,
}

const EMPTY: u64 = u64::MAX;

impl Promoter {
    /// A table with `params.table_entries` counters (at least one).
    pub fn new(params: &PromotionParams) -> Self {
        Self {
            slots: vec![(EMPTY, 0); params.table_entries.max(1)],
        }
    }

    /// Whether the next access to `core_line` would be promoted by
    /// [`Promoter::should_promote`], without recording it.
    pub fn would_promote(
        &self,
        params: &PromotionParams,
        core_line: u64,
        occupancy_pct: u64,
    ) -> bool {
        if params.policy == PromotionPolicy::Always
            || occupancy_pct < u64::from(params.trigger_threshold_pct)
        {
            return true;
        }
        let slot = self.slots[self.index(core_line)];
        slot.0 == core_line && slot.1.saturating_add(1) >= params.insertion_threshold
    }

    fn index(&self, core_line: u64) -> usize {
        (core_line.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as usize % self.slots.len()
    }

    /// Records an access to `core_line` and says whether a miss on it should be inserted, given
    /// the cache occupancy in percent.
    pub fn should_promote(
        &mut self,
        params: &PromotionParams,
        core_line: u64,
        occupancy_pct: u64,
    ) -> bool {
        if params.policy == PromotionPolicy::Always {
            return true;
        }
        let idx = self.index(core_line);
        let slot = &mut self.slots[idx];
        if slot.0 != core_line {
            *slot = (core_line, 0);
        }
        slot.1 = slot.1.saturating_add(1);
        if occupancy_pct < u64::from(params.trigger_threshold_pct) {
            return true;
        }
        if slot.1 >= params.insertion_threshold {
            *slot = (EMPTY, 0);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nhit_inserts_after_threshold_only_above_trigger() {
        let p = PromotionParams {
            policy: PromotionPolicy::Nhit,
            insertion_threshold: 3,
            trigger_threshold_pct: 50,
            table_entries: 1024,
            ..PromotionParams::default()
        };
        let mut pr = Promoter::new(&p);
        assert!(pr.should_promote(&p, 7, 10), "below trigger: always");
        let got: Vec<(bool, bool)> = (0..3)
            .map(|_| (pr.would_promote(&p, 9, 90), pr.should_promote(&p, 9, 90)))
            .collect();
        assert_eq!(got, vec![(false, false), (false, false), (true, true)]);
        let always = PromotionParams::default();
        assert!(pr.should_promote(&always, 11, 100));
    }
}
