//! Editing a map the way `ceph osd crush add/reweight/remove` does: devices are placed under a
//! host bucket (created under the root when missing) and every ancestor's weight follows.
//!
//! Owns structural edits only; it never evaluates rules.

use crate::error::CrushError;
use crate::model::{Bucket, BucketAlg, CrushMap, Device};

impl CrushMap {
    /// A fresh map for a cluster: optimal tunables, types osd/host/root, a straw2 root bucket
    /// and the replicated rule `chooseleaf firstn 0 type host` (id 0).
    pub fn new_cluster(root_name: &str) -> Result<CrushMap, CrushError> {
        let mut map = CrushMap {
            tunables: crate::model::Tunables::optimal(),
            ..CrushMap::default()
        };
        map.types.insert(0, "osd".into());
        map.types.insert(1, "host".into());
        map.types.insert(10, "root".into());
        map.insert_bucket(Bucket::new(
            -1,
            root_name,
            10,
            BucketAlg::Straw2,
            vec![],
            vec![],
            1,
        )?)?;
        map.rules.insert(
            0,
            crate::model::Rule {
                id: 0,
                name: "replicated_rule".into(),
                rule_type: crate::model::RuleType::Replicated,
                min_size: 1,
                max_size: 10,
                steps: vec![
                    crate::model::Step::Take(-1),
                    crate::model::Step::ChooseleafFirstn { n: 0, type_id: 1 },
                    crate::model::Step::Emit,
                ],
            },
        );
        Ok(map)
    }

    fn next_bucket_id(&self) -> Result<i32, CrushError> {
        i32::try_from(self.buckets.len())
            .ok()
            .and_then(|n| (-n).checked_sub(1))
            .ok_or_else(|| CrushError::Invalid("no bucket id is left".into()))
    }

    /// Replaces bucket `id`'s item list and weights, keeping its identity and algorithm.
    fn rebuild(&mut self, id: i32, items: Vec<i32>, weights: Vec<u32>) -> Result<(), CrushError> {
        let old = self
            .bucket(id)
            .ok_or_else(|| CrushError::Invalid(format!("no bucket {id}")))?
            .clone();
        let mut b = Bucket::new(
            id,
            old.name,
            old.type_id,
            old.alg,
            items,
            weights,
            self.tunables.straw_calc_version,
        )?;
        b.hash = old.hash;
        self.insert_bucket(b)
    }

    /// Sets item `item`'s weight inside `parent` and propagates the change up to the root.
    fn set_item_weight_in(
        &mut self,
        parent: i32,
        item: i32,
        weight: u32,
    ) -> Result<(), CrushError> {
        let mut child = item;
        let mut new_weight = weight;
        let mut bucket_id = parent;
        loop {
            let b = self
                .bucket(bucket_id)
                .ok_or_else(|| CrushError::Invalid(format!("no bucket {bucket_id}")))?
                .clone();
            let pos = b.items.iter().position(|&i| i == child).ok_or_else(|| {
                CrushError::Invalid(format!("{child} is not in bucket {bucket_id}"))
            })?;
            let mut weights = b.weights.clone();
            weights[pos] = new_weight;
            self.rebuild(bucket_id, b.items.clone(), weights)?;
            let total = self.bucket(bucket_id).map_or(0, |b| b.weight);
            match self.parent_of(bucket_id).map(|p| p.id) {
                Some(p) => {
                    child = bucket_id;
                    new_weight = total;
                    bucket_id = p;
                }
                None => return Ok(()),
            }
        }
    }

    /// Adds device `id` named `name` with CRUSH `weight` (16.16) under host `host` (created
    /// under `root` if needed). An existing device is moved/reweighted instead.
    pub fn add_device(
        &mut self,
        id: i32,
        name: &str,
        weight: u32,
        host: &str,
        root: &str,
    ) -> Result<(), CrushError> {
        if id < 0 {
            return Err(CrushError::Invalid(format!("device id {id} is negative")));
        }
        if self.devices.contains_key(&id) {
            self.remove_device(id)?;
        }
        let root_id = self
            .item_id(root)
            .filter(|&r| r < 0)
            .ok_or_else(|| CrushError::Invalid(format!("no root bucket `{root}`")))?;
        let host_type = self
            .type_id("host")
            .ok_or_else(|| CrushError::Invalid("the map has no `host` type".into()))?;
        let host_id = match self.item_id(host) {
            Some(h) if h < 0 => h,
            Some(_) => return Err(CrushError::Invalid(format!("`{host}` is a device"))),
            None => {
                let h = self.next_bucket_id()?;
                self.insert_bucket(Bucket::new(
                    h,
                    host,
                    host_type,
                    BucketAlg::Straw2,
                    vec![],
                    vec![],
                    1,
                )?)?;
                let root_b = self
                    .bucket(root_id)
                    .cloned()
                    .ok_or_else(|| CrushError::Invalid("root vanished".into()))?;
                let mut items = root_b.items.clone();
                let mut weights = root_b.weights.clone();
                items.push(h);
                weights.push(0);
                self.rebuild(root_id, items, weights)?;
                h
            }
        };
        self.devices.insert(
            id,
            Device {
                name: name.to_string(),
                class: None,
            },
        );
        let hb = self
            .bucket(host_id)
            .cloned()
            .ok_or_else(|| CrushError::Invalid("host vanished".into()))?;
        let mut items = hb.items.clone();
        let mut weights = hb.weights.clone();
        items.push(id);
        weights.push(0);
        self.rebuild(host_id, items, weights)?;
        self.set_item_weight_in(host_id, id, weight)
    }

    /// Changes a device's CRUSH weight everywhere it appears (ancestors follow).
    pub fn reweight_device(&mut self, id: i32, weight: u32) -> Result<(), CrushError> {
        let parent = self
            .parent_of(id)
            .map(|b| b.id)
            .ok_or_else(|| CrushError::Invalid(format!("device {id} is not in the tree")))?;
        self.set_item_weight_in(parent, id, weight)
    }

    /// Removes a device from the tree and the device list.
    pub fn remove_device(&mut self, id: i32) -> Result<(), CrushError> {
        if let Some(parent) = self.parent_of(id).map(|b| b.id) {
            self.set_item_weight_in(parent, id, 0)?;
            let b = self
                .bucket(parent)
                .cloned()
                .ok_or_else(|| CrushError::Invalid("parent vanished".into()))?;
            let keep: Vec<usize> = (0..b.items.len()).filter(|&i| b.items[i] != id).collect();
            self.rebuild(
                parent,
                keep.iter().map(|&i| b.items[i]).collect(),
                keep.iter().map(|&i| b.weights[i]).collect(),
            )?;
        }
        self.devices.remove(&id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_devices_builds_hosts_and_propagates_weights() {
        let mut map = CrushMap::new_cluster("default").unwrap();
        map.add_device(0, "osd.0", 0x10000, "a", "default").unwrap();
        map.add_device(1, "osd.1", 0x20000, "a", "default").unwrap();
        map.add_device(2, "osd.2", 0x10000, "b", "default").unwrap();
        let root = map.bucket(map.item_id("default").unwrap()).unwrap();
        assert_eq!(root.weight, 0x40000);
        assert_eq!(root.items.len(), 2);
        map.reweight_device(1, 0x10000).unwrap();
        assert_eq!(
            map.bucket(map.item_id("default").unwrap()).unwrap().weight,
            0x30000
        );
        let w = map.default_reweights();
        let out = map.map_x(0, 1234, 2, &w);
        assert_eq!(out.len(), 2);
        map.remove_device(2).unwrap();
        assert_eq!(
            map.bucket(map.item_id("default").unwrap()).unwrap().weight,
            0x20000
        );
        assert!(map.add_device(-1, "x", 1, "a", "default").is_err());
        assert!(map.add_device(3, "osd.3", 1, "a", "nope").is_err());
        let text = crate::text::write(&map);
        assert_eq!(crate::text::parse(&text).unwrap(), map);
    }
}
