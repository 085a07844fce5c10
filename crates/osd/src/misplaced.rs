//! Degraded and misplaced object copies of the PGs this OSD leads, as Ceph counts them for
//! `ceph status`: a copy is degraded when fewer copies than the pool's size serve its object
//! (it exists nowhere it should), misplaced when it serves from an OSD outside the PG's up set
//! and has not reached the up-set OSD meant to hold it yet. `tell osd.N pg objects` answers
//! them; `cairn status` sums them over the primaries.

use std::collections::BTreeSet;

use cairn_clustermap::PgId;
use cairn_store::StoreError;

use crate::pgs::Pg;
use crate::shared::Shared;

/// One PG's object copies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyCounts {
    /// Objects of the PG.
    pub objects: u64,
    /// Copies the pool wants of them (objects times its size).
    pub copies: u64,
    /// Copies missing: fewer copies serve than the pool's size.
    pub degraded: u64,
    /// Copies serving away from the up set, not yet on it.
    pub misplaced: u64,
}

impl CopyCounts {
    /// Adds `other` to these.
    pub fn add(&mut self, other: CopyCounts) {
        self.objects += other.objects;
        self.copies += other.copies;
        self.degraded += other.degraded;
        self.misplaced += other.misplaced;
    }
}

/// The copy counts of a PG of `objects` objects in a pool of `size`, served by `serving`
/// copies, whose up set has `targets` OSDs outside the acting set; `progress` the target a
/// fill pass pushes to now and the objects that pass has left (a target not yet begun counts
/// every object). Misplaced copies already counted as degraded are not counted twice.
pub fn count(
    objects: u64,
    size: usize,
    serving: usize,
    targets: &BTreeSet<i32>,
    progress: Option<(i32, u64)>,
) -> CopyCounts {
    let missing = size.saturating_sub(serving) as u64;
    let degraded = objects.saturating_mul(missing);
    let to_fill: u64 = targets
        .iter()
        .map(|t| match progress {
            Some((target, left)) if target == *t => left.min(objects),
            _ => objects,
        })
        .sum();
    CopyCounts {
        objects,
        copies: objects.saturating_mul(size as u64),
        degraded,
        misplaced: to_fill.saturating_sub(degraded),
    }
}

/// The counts of `pg`, led and active here, of `objects` objects: the copies its serving
/// copies lack after activation are degraded too.
fn of_pg(pg: &Pg, objects: u64) -> CopyCounts {
    let mut counts = of_placement(pg, objects);
    let (_, lacking) = pg.missing().counts();
    counts.degraded = counts.degraded.saturating_add(lacking).min(counts.copies);
    counts
}

/// The counts of `pg` from its placement alone: copies missing from the acting set, and
/// copies its up set's other OSDs are yet to get.
fn of_placement(pg: &Pg, objects: u64) -> CopyCounts {
    let iv = pg.interval();
    let targets: BTreeSet<i32> = iv
        .up
        .iter()
        .copied()
        .filter(|o| !iv.acting.contains(o))
        .collect();
    count(
        objects,
        iv.size,
        iv.copies().count(),
        &targets,
        pg.fill_progress(),
    )
}

/// The counts of every active PG this OSD is the acting primary of, in PG order.
pub async fn led(s: &Shared) -> Result<Vec<(PgId, CopyCounts)>, StoreError> {
    let pgs = crate::usage::led_active(s);
    let mut out = Vec::with_capacity(pgs.len());
    for pg in pgs {
        let (objects, _) = crate::objects::collection_usage(&s.store, &pg.coll).await?;
        out.push((pg.id, of_pg(&pg, objects)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_count_as_ceph_counts_them() {
        let none = BTreeSet::new();
        let one: BTreeSet<i32> = [4].into();
        // Clean: size 3, three serving, nothing to fill.
        assert_eq!(
            count(10, 3, 3, &none, None),
            CopyCounts {
                objects: 10,
                copies: 30,
                degraded: 0,
                misplaced: 0
            }
        );
        // Degraded: two of three serve.
        assert_eq!(count(10, 3, 2, &none, None).degraded, 10);
        // Remapped: three serve, osd.4 of the up set not filled yet, then half way.
        assert_eq!(count(10, 3, 3, &one, None).misplaced, 10);
        assert_eq!(count(10, 3, 3, &one, Some((4, 5))).misplaced, 5);
        assert_eq!(count(10, 3, 3, &one, Some((7, 5))).misplaced, 10);
        // Remapped and degraded: the copies to fill make up the missing ones first.
        let c = count(10, 3, 2, &one, None);
        assert_eq!((c.degraded, c.misplaced), (10, 0));
        let two: BTreeSet<i32> = [4, 5].into();
        let c = count(10, 3, 2, &two, None);
        assert_eq!((c.degraded, c.misplaced), (10, 10));
        // A pass's count never exceeds the PG's objects.
        assert_eq!(count(10, 3, 3, &one, Some((4, 99))).misplaced, 10);
    }
}
