//! Free space for `statfs`: what the up OSDs report (`df`: capacity, full ratio, allocated),
//! shared by the data pool's replicas. A client that may not ask the OSDs (no admin
//! capability) sees no free space rather than a made-up figure.

use cairn_client::Client;

/// The value of `key=` in an OSD's `df` reply.
fn field<T: std::str::FromStr>(text: &str, key: &str) -> Option<T> {
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))?
        .parse()
        .ok()
}

/// Bytes the OSDs can still take before their full ratio, as the OSD's `df` reply says.
pub fn osd_room(df_reply: &str) -> Option<u64> {
    let capacity: u64 = field(df_reply, "capacity")?;
    let allocated: u64 = field(df_reply, "allocated")?;
    let full_ratio: f64 = field(df_reply, "full_ratio")?;
    let limit = (capacity as f64 * full_ratio.clamp(0.0, 1.0)) as u64;
    Some(limit.saturating_sub(allocated))
}

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
            room += osd_room(&reply).unwrap_or(0);
        }
    }
    room / copies
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_capacity_under_the_full_ratio_less_allocated() {
        let reply =
            "pgs=3 primary=1 objects=2 stored=10 allocated=100 capacity=1000 full_ratio=0.95";
        assert_eq!(osd_room(reply), Some(850));
        assert_eq!(osd_room("capacity=10 allocated=20 full_ratio=0.5"), Some(0));
        assert_eq!(osd_room("capacity=10"), None);
    }
}
