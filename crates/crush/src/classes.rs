//! Device-class shadow trees, built the way Ceph's `populate_classes` builds them.
//!
//! For every root and every class, each bucket gets a clone named `bucket~class` holding only
//! the devices of that class (and the clones of its child buckets). `step take root class ssd`
//! then starts at the clone. Owns the creation and lookup of shadow buckets; no I/O.

use std::collections::BTreeSet;

use crate::error::CrushError;
use crate::model::{Bucket, CrushMap};

/// Records that `shadow_id` is the clone of the bucket named `orig_name` for `class_id`.
pub(crate) fn register_shadow(map: &mut CrushMap, orig_name: &str, class_id: i32, shadow_id: i32) {
    if let Some(orig) = map.item_id(orig_name) {
        map.class_buckets
            .entry(orig)
            .or_default()
            .insert(class_id, shadow_id);
    }
}

/// Roots of the non-shadow hierarchy: buckets no other non-shadow bucket contains.
pub fn nonshadow_roots(map: &CrushMap) -> Vec<i32> {
    let children: BTreeSet<i32> = map
        .iter_buckets()
        .filter(|b| !b.is_shadow())
        .flat_map(|b| b.items.iter().copied())
        .collect();
    map.iter_buckets()
        .filter(|b| !b.is_shadow() && !children.contains(&b.id))
        .map(|b| b.id)
        .collect()
}

/// (Re)builds every shadow bucket from the current hierarchy and device classes.
///
/// Shadow ids already recorded in `map.class_buckets` (e.g. `id -8 class ssd` lines) are kept;
/// new ones take the first free negative id, as Ceph does.
pub fn populate_classes(map: &mut CrushMap) -> Result<(), CrushError> {
    let wanted_ids = map.class_buckets.clone();
    let used: BTreeSet<i32> = wanted_ids
        .values()
        .flat_map(|m| m.values().copied())
        .collect();
    for slot in map.buckets.iter_mut() {
        if slot.as_ref().is_some_and(Bucket::is_shadow) {
            *slot = None;
        }
    }
    let roots = nonshadow_roots(map);
    let classes: Vec<i32> = map.classes.keys().copied().collect();
    for root in roots {
        for &class in &classes {
            clone_for_class(map, root, class, &wanted_ids, &used)?;
        }
    }
    Ok(())
}

fn clone_for_class(
    map: &mut CrushMap,
    original: i32,
    class: i32,
    wanted: &std::collections::BTreeMap<i32, std::collections::BTreeMap<i32, i32>>,
    used: &BTreeSet<i32>,
) -> Result<i32, CrushError> {
    let orig = map
        .bucket(original)
        .ok_or_else(|| CrushError::Invalid(format!("no bucket {original}")))?
        .clone();
    let class_name = map.classes.get(&class).cloned().unwrap_or_default();
    let copy_name = format!("{}~{}", orig.name, class_name);
    if let Some(existing) = map.iter_buckets().find(|b| b.name == copy_name) {
        return Ok(existing.id);
    }
    let mut items = Vec::new();
    let mut weights = Vec::new();
    for (i, &item) in orig.items.iter().enumerate() {
        if item >= 0 {
            if map.devices.get(&item).and_then(|d| d.class) == Some(class) {
                items.push(item);
                weights.push(orig.weights[i]);
            }
        } else {
            let child = clone_for_class(map, item, class, wanted, used)?;
            let w = map.bucket(child).map_or(0, |b| b.weight);
            items.push(child);
            weights.push(w);
        }
    }
    let id = match wanted.get(&original).and_then(|m| m.get(&class)) {
        Some(&id) => id,
        None => {
            let mut id = -1;
            while map.bucket(id).is_some() || used.contains(&id) {
                id -= 1;
            }
            id
        }
    };
    if map.bucket(id).is_some() {
        return Err(CrushError::Invalid(format!(
            "shadow bucket id {id} for {copy_name} is already used"
        )));
    }
    let mut bucket = Bucket::new(
        id,
        copy_name,
        orig.type_id,
        orig.alg,
        items,
        weights,
        map.tunables.straw_calc_version,
    )?;
    bucket.hash = orig.hash;
    map.insert_bucket(bucket)?;
    map.class_buckets
        .entry(original)
        .or_default()
        .insert(class, id);
    Ok(id)
}
