//! Free space for `statfs`: what the up OSDs report (`df`: capacity, full ratio, allocated),
//! shared by the data pool's replicas. A client that may not ask the OSDs (no admin
//! capability) sees no free space rather than a made-up figure.

use cairn_client::Client;
use cairn_proto::admin::OsdUsage;

/// Bytes of file data the cluster can still take in `data_pool`.
pub async fn free_bytes(rados: &Client, data_pool: &str) -> u64 {
    let Some(map) = rados.map() else { return 0 };
    let copies = map
        .placement
        .pool_named(data_pool)
        .map_or(1, |p| u64::from(p.size.max(1)));
    let mut room = 0u64;
    for osd in map.osds.values().filter(|o| o.up) {
        if let Ok(reply) = rados.tell(osd.id, &["df".into()]).await {
            room += OsdUsage::parse(&reply).map_or(0, |u| u.room());
        }
    }
    room / copies
}
