//! A map builder equivalent to `crushtool --build --num_osds N LAYER...`.
//!
//! Each layer is `(type name, algorithm, size)`: it groups the items of the layer below into
//! buckets of `size` items (0 = all remaining in one bucket). Produces the same ids, names,
//! weights and default replicated rule as crushtool so that mappings agree.

use crate::error::CrushError;
use crate::model::{Bucket, BucketAlg, CrushMap, Device, Rule, RuleType, Step, Tunables};

/// One `--build` layer.
#[derive(Clone, Debug)]
pub struct Layer {
    /// Bucket type name (`host`, `rack`, `root`, ...).
    pub type_name: String,
    /// Bucket algorithm.
    pub alg: BucketAlg,
    /// Items per bucket; 0 puts everything in one bucket.
    pub size: usize,
}

/// Builds a map of `num_osds` weight-1.0 devices and the given layers, plus the default
/// `replicated_rule` (chooseleaf firstn 0 over the first layer's type).
pub fn build(num_osds: usize, layers: &[Layer]) -> Result<CrushMap, CrushError> {
    if layers.is_empty() {
        return Err(CrushError::Invalid("at least one layer is needed".into()));
    }
    // Device ids and type ids are i32s: the largest of each must fit.
    let max_osd = i32::try_from(num_osds)
        .map_err(|_| CrushError::Invalid(format!("{num_osds} devices are too many")))?;
    let top_type = i32::try_from(layers.len())
        .map_err(|_| CrushError::Invalid(format!("{} layers are too many", layers.len())))?;
    let mut map = CrushMap {
        tunables: Tunables::optimal(),
        ..CrushMap::default()
    };
    map.types.insert(0, "osd".into());
    for (layer, type_id) in layers.iter().zip(1..=top_type) {
        map.types.insert(type_id, layer.type_name.clone());
    }
    let mut lower: Vec<(i32, u32)> = Vec::new();
    for osd in 0..max_osd {
        map.devices.insert(
            osd,
            Device {
                name: format!("osd.{osd}"),
                class: None,
            },
        );
        lower.push((osd, 0x10000));
    }
    let mut next_id = -1;
    for (layer, type_id) in layers.iter().zip(1..=top_type) {
        let mut upper = Vec::new();
        let chunk = if layer.size == 0 {
            lower.len().max(1)
        } else {
            layer.size
        };
        for (n, group) in lower.chunks(chunk).enumerate() {
            let name = if layer.size == 0 {
                layer.type_name.clone()
            } else {
                format!("{}{}", layer.type_name, n)
            };
            let (items, weights): (Vec<i32>, Vec<u32>) = group.iter().copied().unzip();
            let bucket = Bucket::new(
                next_id,
                name,
                type_id,
                layer.alg,
                items,
                weights,
                map.tunables.straw_calc_version,
            )?;
            upper.push((bucket.id, bucket.weight));
            map.insert_bucket(bucket)?;
            next_id -= 1;
        }
        lower = upper;
    }
    let root = lower
        .first()
        .map(|&(id, _)| id)
        .ok_or_else(|| CrushError::Invalid("no buckets built".into()))?;
    let leaf_type = if layers.len() > 1 { 1 } else { 0 };
    map.rules.insert(
        0,
        Rule {
            id: 0,
            name: "replicated_rule".into(),
            rule_type: RuleType::Replicated,
            min_size: 1,
            max_size: 10,
            steps: vec![
                Step::Take(root),
                Step::ChooseleafFirstn {
                    n: 0,
                    type_id: leaf_type,
                },
                Step::Emit,
            ],
        },
    );
    Ok(map)
}
