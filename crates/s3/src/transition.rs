//! Lifecycle transitions: moving one version's data to another storage class's pool.
//!
//! The data is copied first, segment by segment (part boundaries kept, so `partNumber` reads
//! still work; an object read whole is checked against its MD5 ETag), into fresh segments of
//! the target pool. Then every index spot that holds the version (the current index, and in a
//! versioned bucket its version-index entry) is swapped to the new location by a
//! compare-and-swap on the index object's version: the entry is re-read, must still be the
//! version that was copied, and is written only if nothing wrote to that index object since
//! the read. A concurrent overwrite or delete therefore wins: the transition then puts back
//! the spots it had already swapped and removes its copy. Only once every spot names the new
//! data is the old data removed. Readers see the old location or the new one, both whole.

use std::sync::Arc;

use s3s::{s3_error, S3Result};

use crate::backend::Backend;
use crate::buckets::{fresh_id, BucketInfo};
use crate::data::{self, hex, internal, BodyDeadlines, WriteSpec};
use crate::entry::{DataLoc, Entry, Segment};
use crate::gateway::Gateway;
use crate::object_ops::remove_data;
use crate::versions;

/// Tries at one compare-and-swap before the spot is left for a later pass (the index object
/// kept changing under other writes).
pub const SWAP_ATTEMPTS: usize = 8;

/// Where an index holds a version: an omap object and the key in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spot {
    /// The index object.
    pub object: String,
    /// The omap key of the version's entry.
    pub key: Vec<u8>,
}

/// The spots holding `e`, the current version of `key` in bucket `b`: the current index, and
/// the version index in a versioned bucket.
pub fn current_spots(b: &BucketInfo, key: &str, e: &Entry) -> Vec<Spot> {
    let mut spots = vec![Spot {
        object: b.shard_of(key),
        key: key.as_bytes().to_vec(),
    }];
    if b.versioning.versioned() {
        spots.push(version_spot(b, key, e));
    }
    spots
}

/// The version-index spot of `e`, a version of `key`.
pub fn version_spot(b: &BucketInfo, key: &str, e: &Entry) -> Spot {
    Spot {
        object: versions::shard_of(b, key),
        key: versions::index_key(key, e),
    }
}

/// What a move did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moved {
    /// The version's data is in the target class now.
    Done,
    /// Nothing to do: a delete marker, or already in that class.
    AlreadyThere,
    /// The version changed or went meanwhile, or its index kept changing: left as it was.
    LeftAlone,
}

/// Whether `a` and `b` are the same version with its data in the same place.
fn same_version(a: &Entry, b: &Entry) -> bool {
    a.size == b.size
        && a.etag == b.etag
        && a.mtime_ms == b.mtime_ms
        && a.loc == b.loc
        && a.storage_class == b.storage_class
}

/// `found` with its data at `loc` in `class`.
fn relocated(found: &Entry, loc: &DataLoc, class: Option<&str>) -> Entry {
    let mut e = found.clone();
    e.loc = loc.clone();
    e.inline = Vec::new();
    e.storage_class = class.map(str::to_string);
    e
}

enum Swap {
    /// Swapped; the entry that was there.
    Done(Box<Entry>),
    /// The spot no longer holds the expected version, or kept changing.
    Refused,
}

/// Replaces the entry at `spot`, if it is still the version `expected`, by `to(found)`.
async fn swap(
    backend: &Arc<dyn Backend>,
    spot: &Spot,
    expected: &Entry,
    to: impl Fn(&Entry) -> Entry,
) -> S3Result<Swap> {
    for _ in 0..SWAP_ATTEMPTS {
        let version = backend.version(&spot.object).await.map_err(internal)?;
        let (page, _) = backend
            .omap_list(&spot.object, &[], &spot.key, 1)
            .await
            .map_err(internal)?;
        let Some((_, raw)) = page.first().filter(|(k, _)| *k == spot.key) else {
            return Ok(Swap::Refused);
        };
        let found = Entry::decode(raw).map_err(internal)?;
        if !same_version(&found, expected) {
            return Ok(Swap::Refused);
        }
        let new = to(&found);
        let applied = backend
            .omap_set_if(&spot.object, &[(spot.key.clone(), new.encode())], version)
            .await
            .map_err(internal)?;
        if applied {
            return Ok(Swap::Done(Box::new(found)));
        }
    }
    Ok(Swap::Refused)
}

/// Copies `e`'s data into fresh segments of `to`, one per segment of `e` (one for an inline
/// entry); the new location. Nothing is left in `to` on failure.
async fn copy_data(gw: &Gateway, e: &Entry, to: &Arc<dyn Backend>) -> S3Result<DataLoc> {
    let from = gw.data_for(e.storage_class.as_deref())?.clone();
    let (stripe_bytes, ranges): (u64, Vec<u64>) = match &e.loc {
        DataLoc::Inline => (gw.cfg.stripe_bytes, vec![e.size]),
        DataLoc::Striped {
            stripe_bytes,
            segments,
        } => (*stripe_bytes, segments.iter().map(|s| s.size).collect()),
    };
    let mut copied: Vec<Segment> = Vec::with_capacity(ranges.len());
    let mut start = 0;
    let result: S3Result<()> = async {
        for len in &ranges {
            let id = fresh_id();
            let spec = WriteSpec {
                id: &id,
                stripe_bytes,
                inline_max: 0,
                max_bytes: u64::MAX,
                deadlines: BodyDeadlines::default(),
                checksum: None,
            };
            let body = data::blob(from.clone(), e.clone(), start, start + len);
            let w = data::write_body(to, &spec, Some(body)).await?;
            if let Some(seg) = w.segment {
                copied.push(seg);
            }
            if w.size != *len {
                return Err(s3_error!(
                    InternalError,
                    "copied {} of {len} bytes of a segment",
                    w.size
                ));
            }
            let whole = e.parts == 0 && ranges.len() == 1;
            if whole && !e.etag.contains('-') && hex(&w.md5) != e.etag {
                return Err(s3_error!(
                    InternalError,
                    "the copy does not match the object's ETag {}",
                    e.etag
                ));
            }
            start += len;
        }
        Ok(())
    }
    .await;
    if let Err(err) = result {
        data::remove_segments(to, stripe_bytes, &copied).await;
        return Err(err);
    }
    Ok(DataLoc::Striped {
        stripe_bytes,
        segments: copied,
    })
}

/// Moves the data of `seen` (a version of `key`, as read at `spots`) to storage class
/// `class`, swapping every spot to the copy; see the module's comment.
pub async fn move_version(
    gw: &Gateway,
    seen: &Entry,
    class: &str,
    spots: &[Spot],
) -> S3Result<Moved> {
    if seen.delete_marker || seen.storage_class.as_deref() == Some(class) {
        return Ok(Moved::AlreadyThere);
    }
    let to = gw.data_for(Some(class))?.clone();
    let loc = copy_data(gw, seen, &to).await?;
    let moved = relocated(seen, &loc, Some(class));
    let mut swapped: Vec<(&Spot, Entry)> = Vec::with_capacity(spots.len());
    for spot in spots {
        match swap(&gw.backend, spot, seen, |found| {
            relocated(found, &loc, Some(class))
        })
        .await
        {
            Ok(Swap::Done(found)) => swapped.push((spot, *found)),
            other => {
                for (spot, found) in swapped.iter().rev() {
                    let back = swap(&gw.backend, spot, &moved, |_| found.clone()).await;
                    if !matches!(back, Ok(Swap::Done(_))) {
                        tracing::warn!(
                            object = %spot.object,
                            "a transition could not put an index entry back; its copy stays"
                        );
                        return other.map(|_| Moved::LeftAlone);
                    }
                }
                remove_data(gw, &moved).await;
                return other.map(|_| Moved::LeftAlone);
            }
        }
    }
    remove_data(gw, seen).await;
    Ok(Moved::Done)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use s3s::dto::StreamingBlob;

    use super::*;
    use crate::backend::MemBackend;
    use crate::buckets::{get_entry, put_entry};
    use crate::config::GatewayConfig;
    use crate::entry::ContentHeaders;
    use crate::object_ops::entry_from;
    use crate::versions::Versioning;

    const STRIPE: u64 = 1024;

    struct World {
        gw: Gateway,
        main: Arc<MemBackend>,
        cold: Arc<MemBackend>,
    }

    fn world() -> World {
        let main = Arc::new(MemBackend::default());
        let cold = Arc::new(MemBackend::default());
        let cfg = GatewayConfig {
            stripe_bytes: STRIPE,
            inline_max_bytes: 64,
            ..GatewayConfig::default()
        };
        let pool: Arc<dyn Backend> = cold.clone();
        let gw = Gateway::new(main.clone(), cfg)
            .with_storage_classes(BTreeMap::from([("COLD".to_string(), pool)]));
        World { gw, main, cold }
    }

    fn bucket(versioning: Versioning) -> BucketInfo {
        BucketInfo {
            versioning,
            ..BucketInfo::for_tests(2)
        }
    }

    fn data_objects(b: &MemBackend) -> Vec<String> {
        b.names()
            .into_iter()
            .filter(|n| n.starts_with("d."))
            .collect()
    }

    /// Stores `body` in the gateway's pool (inline when small) and indexes it as `key`.
    async fn put(w: &World, b: &BucketInfo, key: &str, body: &[u8]) -> Entry {
        let spec = WriteSpec {
            id: &fresh_id(),
            stripe_bytes: STRIPE,
            inline_max: w.gw.cfg.inline_max_bytes,
            max_bytes: u64::MAX,
            deadlines: BodyDeadlines::default(),
            checksum: None,
        };
        let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = body
            .chunks(700)
            .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
            .collect();
        let blob = StreamingBlob::wrap(futures::stream::iter(chunks));
        let written = data::write_body(&w.gw.backend, &spec, Some(blob))
            .await
            .unwrap();
        let mut e = entry_from(written, STRIPE, ContentHeaders::default());
        if b.versioning.versioned() {
            versions::commit(&w.gw.backend, b, key, &mut e, b.versioning)
                .await
                .unwrap();
        } else {
            put_entry(&w.gw.backend, b, key, &e).await.unwrap();
        }
        e
    }

    async fn read(w: &World, e: &Entry) -> Vec<u8> {
        let pool = w.gw.data_for(e.storage_class.as_deref()).unwrap();
        data::read_all(pool, e, 0, e.size).await.unwrap()
    }

    fn body(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| i.to_le_bytes()[0].wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// A striped object and an inline one move whole; the old stripes go, reads follow the
    /// entry to the class's pool, and a second move is a no-op.
    #[tokio::test]
    async fn versions_move_whole_and_old_data_goes() {
        let w = world();
        let b = bucket(Versioning::Off);
        let big = body(3000, 1);
        let small = body(40, 2);
        let e = put(&w, &b, "big", &big).await;
        let s = put(&w, &b, "small", &small).await;
        assert!(matches!(s.loc, DataLoc::Inline));
        assert_eq!(data_objects(&w.main).len(), 3);
        for (key, e, want) in [("big", &e, &big), ("small", &s, &small)] {
            let moved = move_version(&w.gw, e, "COLD", &current_spots(&b, key, e)).await;
            assert_eq!(moved.unwrap(), Moved::Done);
            let now = get_entry(&w.gw.backend, &b, key).await.unwrap().unwrap();
            assert_eq!(now.storage_class.as_deref(), Some("COLD"));
            assert_eq!((now.etag.as_str(), now.size), (e.etag.as_str(), e.size));
            assert_eq!(&read(&w, &now).await, want, "{key} reads back whole");
            let again = move_version(&w.gw, &now, "COLD", &current_spots(&b, key, &now)).await;
            assert_eq!(again.unwrap(), Moved::AlreadyThere);
        }
        assert!(data_objects(&w.main).is_empty(), "the old stripes are gone");
        assert_eq!(
            data_objects(&w.cold).len(),
            4,
            "3 stripes + 1 for the inline object"
        );
    }

    /// A version overwritten after it was read is left alone: the overwrite stands and the
    /// copy is removed.
    #[tokio::test]
    async fn an_overwrite_in_between_wins() {
        let w = world();
        let b = bucket(Versioning::Off);
        let first = put(&w, &b, "k", &body(2000, 3)).await;
        let second_body = body(2500, 4);
        let second = put(&w, &b, "k", &second_body).await;
        let moved = move_version(&w.gw, &first, "COLD", &current_spots(&b, "k", &first)).await;
        assert_eq!(moved.unwrap(), Moved::LeftAlone);
        let now = get_entry(&w.gw.backend, &b, "k").await.unwrap().unwrap();
        assert_eq!(now, second);
        assert_eq!(read(&w, &now).await, second_body);
        assert!(data_objects(&w.cold).is_empty(), "the copy is removed");
    }

    /// In a versioned bucket both indexes move together; when the second spot refuses, the
    /// first is put back and nothing is left in the class's pool.
    #[tokio::test]
    async fn both_indexes_move_or_neither() {
        let w = world();
        let b = bucket(Versioning::Enabled);
        let data = body(1500, 5);
        let e = put(&w, &b, "k", &data).await;
        let spots = current_spots(&b, "k", &e);
        assert_eq!(spots.len(), 2);
        let missing = Spot {
            object: spots[1].object.clone(),
            key: b"k\0no-such-version".to_vec(),
        };
        let refused = move_version(&w.gw, &e, "COLD", &[spots[0].clone(), missing]).await;
        assert_eq!(refused.unwrap(), Moved::LeftAlone);
        assert_eq!(get_entry(&w.gw.backend, &b, "k").await.unwrap().unwrap(), e);
        assert!(data_objects(&w.cold).is_empty());
        assert_eq!(read(&w, &e).await, data);

        assert_eq!(
            move_version(&w.gw, &e, "COLD", &spots).await.unwrap(),
            Moved::Done
        );
        let current = get_entry(&w.gw.backend, &b, "k").await.unwrap().unwrap();
        let id = e.version_id.clone().unwrap();
        let (_, version) = versions::get_version(&w.gw.backend, &b, "k", &id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(current.storage_class.as_deref(), Some("COLD"));
        assert_eq!(version.loc, current.loc, "both indexes name the copy");
        assert_eq!(read(&w, &version).await, data);
        assert!(data_objects(&w.main).is_empty());
    }
}
