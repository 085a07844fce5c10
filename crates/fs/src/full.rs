//! When the cluster is too full for the namespace to grow. A metadata server refuses the
//! mutations that add names or attributes (create, link, setxattr) with ENOSPC while the map
//! flags an OSD full, and with EDQUOT while the data or metadata pool is past its quota; it
//! goes on serving reads and the mutations that free space or change fixed-size fields
//! (unlink, rmdir, truncate, rename, chmod), and journals them with forced writes that the
//! OSDs take up to their failsafe ratio. A create a mount already answered by itself (its own
//! inode number pinned) is taken too: the mount checked its own map first. So a full cluster leaves a working file system that
//! files can be deleted from, as Ceph's MDS does, instead of a stopped one.

use cairn_clustermap::ClusterMap;
use cairn_proto::mds::MdsOp;
use tokio::sync::watch;

/// Why the namespace may not grow now, read from the current map.
pub struct SpaceGuard {
    maps: watch::Receiver<Option<ClusterMap>>,
    pools: [String; 2],
    /// The refusal at `epoch`, recomputed when a newer map arrives.
    cached: Option<(u64, Option<i32>)>,
}

impl SpaceGuard {
    /// Watches `maps` for the file system's metadata and data pools.
    pub fn new(maps: watch::Receiver<Option<ClusterMap>>, meta: &str, data: &str) -> SpaceGuard {
        SpaceGuard {
            maps,
            pools: [meta.to_string(), data.to_string()],
            cached: None,
        }
    }

    /// The errno refusing `op`, if it adds to the namespace while the cluster is full.
    pub fn refusal(&mut self, op: &MdsOp) -> Option<i32> {
        match adds_to_namespace(op) {
            true => self.growth_refusal(),
            false => None,
        }
    }

    /// The errno refusing any growth of the namespace now, if the cluster is full.
    pub fn growth_refusal(&mut self) -> Option<i32> {
        let map = self.maps.borrow();
        let map = map.as_ref()?;
        match self.cached {
            Some((epoch, refusal)) if epoch == map.epoch => refusal,
            _ => {
                let refusal = refusal_in(map, &self.pools);
                self.cached = Some((map.epoch, refusal));
                refusal
            }
        }
    }
}

/// A mutation that adds a name or an attribute: what a full file system refuses.
pub fn adds_to_namespace(op: &MdsOp) -> bool {
    matches!(
        op,
        MdsOp::Create { .. } | MdsOp::Link { .. } | MdsOp::SetXattr { .. }
    )
}

/// ENOSPC while an up and in OSD is flagged full, EDQUOT while one of `pools` is past its
/// quota, in `map`.
pub fn refusal_in(map: &ClusterMap, pools: &[String]) -> Option<i32> {
    if map.osds.values().any(|o| o.up && o.reweight > 0 && o.full) {
        return Some(libc::ENOSPC);
    }
    let over_quota = pools.iter().any(|name| {
        map.placement
            .pool_named(name)
            .is_some_and(|p| map.pool_full(p.id))
    });
    over_quota.then_some(libc::EDQUOT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::mds::{FileKind, NewInode};

    fn create() -> MdsOp {
        MdsOp::Create {
            parent: 1,
            name: b"f".to_vec(),
            inode: NewInode {
                kind: FileKind::File,
                perm: 0o644,
                uid: 0,
                gid: 0,
                rdev: 0,
                target: Vec::new(),
                now_ns: 0,
                open: false,
                ino: None,
                object_size: None,
            },
        }
    }

    fn map_with(full_osd: bool, quota_full: bool) -> ClusterMap {
        let mut map = ClusterMap::new("fsid").unwrap();
        for id in 0..3 {
            let mut osd = cairn_clustermap::OsdEntry::booted(
                id,
                format!("u{id}"),
                format!("h{id}"),
                format!("127.0.0.1:{}", 7000 + id),
            );
            osd.full = full_osd && id == 1;
            map.osds.insert(id, osd);
        }
        for (id, name) in [(1, "fs.meta"), (2, "fs.data")] {
            let pool = cairn_clustermap::pool::Pool::replicated(id, name, 3, 8, 0).unwrap();
            map.placement.add_pool(pool).unwrap();
        }
        map.epoch = 7;
        if quota_full {
            let quota = cairn_clustermap::quota::PoolQuota {
                max_objects: Some(1),
                max_bytes: None,
                full: true,
            };
            map.quotas.insert(2, quota);
        }
        map
    }

    fn guard_over(map: ClusterMap) -> (watch::Sender<Option<ClusterMap>>, SpaceGuard) {
        let (tx, rx) = watch::channel(Some(map));
        (tx, SpaceGuard::new(rx, "fs.meta", "fs.data"))
    }

    #[test]
    fn a_full_osd_refuses_creates_with_enospc_until_a_map_clears_it() {
        let (tx, mut guard) = guard_over(map_with(true, false));
        assert_eq!(guard.refusal(&create()), Some(libc::ENOSPC));
        let unlink = MdsOp::Unlink {
            parent: 1,
            name: b"f".to_vec(),
            now_ns: 0,
        };
        assert_eq!(guard.refusal(&unlink), None, "deletes go on");
        let mut cleared = map_with(false, false);
        cleared.epoch = 8;
        tx.send_replace(Some(cleared));
        assert_eq!(guard.refusal(&create()), None);
    }

    #[test]
    fn a_full_osd_that_is_out_or_down_holds_nothing_and_refuses_nothing() {
        let mut map = map_with(true, false);
        map.osds.get_mut(&1).unwrap().reweight = 0;
        assert_eq!(refusal_in(&map, &["fs.meta".into()]), None);
        map.osds.get_mut(&1).unwrap().reweight = 0x10000;
        map.osds.get_mut(&1).unwrap().up = false;
        assert_eq!(refusal_in(&map, &["fs.meta".into()]), None);
    }

    #[test]
    fn a_pool_past_its_quota_refuses_creates_with_edquot() {
        let (_tx, mut guard) = guard_over(map_with(false, true));
        assert_eq!(guard.refusal(&create()), Some(libc::EDQUOT));
        let map = map_with(false, true);
        assert_eq!(
            refusal_in(&map, &["fs.meta".into()]),
            None,
            "another pool's quota"
        );
    }

    #[test]
    fn only_mutations_that_add_names_or_attributes_are_refused() {
        assert!(adds_to_namespace(&create()));
        assert!(adds_to_namespace(&MdsOp::SetXattr {
            ino: 2,
            name: b"user.a".to_vec(),
            value: b"v".to_vec(),
            flags: 0,
        }));
        for frees in [
            MdsOp::Unlink {
                parent: 1,
                name: b"f".to_vec(),
                now_ns: 0,
            },
            MdsOp::Rmdir {
                parent: 1,
                name: b"d".to_vec(),
                now_ns: 0,
            },
            MdsOp::RemoveXattr {
                ino: 2,
                name: b"user.a".to_vec(),
            },
            MdsOp::GetAttr { ino: 1 },
        ] {
            assert!(!adds_to_namespace(&frees), "{frees:?}");
        }
    }
}
