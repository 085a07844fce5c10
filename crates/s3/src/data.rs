//! Object bytes in the cluster: a request body is cut into stripes of `stripe_bytes`, each
//! written as its own cluster object named from a fresh segment id while the MD5 is computed
//! on the way (at most one stripe is buffered); small bodies stay in memory to be inlined in
//! the index entry. Reads stream the stripes covering a byte range through a bounded channel.
//! Never touches the index.

use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use s3s::crypto::{Checksum, Md5};
use s3s::dto::StreamingBlob;
use s3s::{s3_error, S3Error, S3Result};

use crate::backend::Backend;
use crate::entry::{DataLoc, Entry, Segment};

/// Stripes read ahead of the HTTP response.
pub const READ_AHEAD_STRIPES: usize = 2;
/// Stripes removed concurrently.
pub const REMOVE_CONCURRENCY: usize = 8;

/// A body stored by [`write_body`].
pub struct Written {
    /// Bytes received.
    pub size: u64,
    /// Their MD5.
    pub md5: [u8; 16],
    /// The bytes, when they fit inline (nothing was written to the cluster).
    pub inline: Option<Vec<u8>>,
    /// The segment the bytes were striped into, otherwise.
    pub segment: Option<Segment>,
}

/// How to store a body.
pub struct WriteSpec<'a> {
    /// Segment id used if the body is striped.
    pub id: &'a str,
    /// Stripe size.
    pub stripe_bytes: u64,
    /// Inline bodies up to this size (0: never inline).
    pub inline_max: u64,
    /// Refuse bodies longer than this (EntityTooLarge), cleaning up what was written.
    pub max_bytes: u64,
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Maps a cluster failure to InternalError, logging the cause.
pub fn internal(e: impl std::fmt::Display) -> S3Error {
    tracing::warn!("cluster error: {e}");
    s3_error!(InternalError, "cluster error: {}", e)
}

/// Stores `body`, striping as it arrives.
pub async fn write_body(
    backend: &Arc<dyn Backend>,
    spec: &WriteSpec<'_>,
    body: Option<StreamingBlob>,
) -> S3Result<Written> {
    let mut md5 = Md5::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut size = 0u64;
    let mut stripes = 0u64;
    let seg_of = |size| Segment {
        id: spec.id.to_string(),
        size,
    };
    let result: S3Result<()> = async {
        let Some(mut body) = body else {
            return Ok(());
        };
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| s3_error!(IncompleteBody, "reading the body: {}", e))?;
            size += chunk.len() as u64;
            if size > spec.max_bytes {
                return Err(s3_error!(
                    EntityTooLarge,
                    "body exceeds {} bytes",
                    spec.max_bytes
                ));
            }
            md5.update(&chunk);
            buf.extend_from_slice(&chunk);
            let stripe = spec.stripe_bytes as usize;
            while buf.len() >= stripe {
                backend
                    .put(&seg_of(0).stripe_name(stripes), &buf[..stripe])
                    .await
                    .map_err(internal)?;
                stripes += 1;
                buf.drain(..stripe);
            }
        }
        Ok(())
    }
    .await;
    let finish: S3Result<Written> = match result {
        Err(e) => Err(e),
        Ok(()) if stripes == 0 && size <= spec.inline_max => {
            return Ok(Written {
                size,
                md5: md5.finalize(),
                inline: Some(buf),
                segment: None,
            })
        }
        Ok(()) => if buf.is_empty() {
            Ok(())
        } else {
            backend
                .put(&seg_of(0).stripe_name(stripes), &buf)
                .await
                .map(|_| stripes += 1)
                .map_err(internal)
        }
        .map(|()| Written {
            size,
            md5: md5.finalize(),
            inline: None,
            segment: Some(seg_of(size)),
        }),
    };
    if finish.is_err() {
        remove_stripes(backend, spec.id, stripes).await;
    }
    finish
}

async fn remove_stripes(backend: &Arc<dyn Backend>, id: &str, count: u64) {
    let seg = Segment {
        id: id.to_string(),
        size: 0,
    };
    let names: Vec<String> = (0..count).map(|n| seg.stripe_name(n)).collect();
    let results: Vec<_> = futures::stream::iter(names)
        .map(|name| {
            let b = backend.clone();
            async move { (b.remove(&name).await, name) }
        })
        .buffer_unordered(REMOVE_CONCURRENCY)
        .collect()
        .await;
    for (r, name) in results {
        if let Err(e) = r {
            tracing::warn!("could not remove stripe {name}: {e} (left as garbage)");
        }
    }
}

/// Removes every stripe of `segments` (failures are logged: the data is unreachable already).
pub async fn remove_segments(backend: &Arc<dyn Backend>, stripe_bytes: u64, segments: &[Segment]) {
    for s in segments {
        remove_stripes(backend, &s.id, s.stripes(stripe_bytes)).await;
    }
}

/// Reads `[start, end)` of a striped object in full (for copies of bounded size).
pub async fn read_all(
    backend: &Arc<dyn Backend>,
    entry: &Entry,
    start: u64,
    end: u64,
) -> S3Result<Vec<u8>> {
    let mut out = Vec::with_capacity((end - start) as usize);
    let mut stream = read_stream(backend.clone(), entry.clone(), start, end);
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.map_err(internal)?);
    }
    Ok(out)
}

/// Pieces `(object, offset, len)` covering `[start, end)` of the object.
pub fn plan_reads(entry: &Entry, start: u64, end: u64) -> Vec<(String, u64, u64)> {
    let DataLoc::Striped {
        stripe_bytes,
        segments,
    } = &entry.loc
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut seg_start = 0u64;
    for seg in segments {
        let seg_end = seg_start + seg.size;
        let (a, b) = (start.max(seg_start), end.min(seg_end));
        if a < b {
            let mut pos = a - seg_start;
            let stop = b - seg_start;
            while pos < stop {
                let n = pos / stripe_bytes;
                let off = pos % stripe_bytes;
                let len = (stripe_bytes - off).min(stop - pos);
                out.push((seg.stripe_name(n), off, len));
                pos += len;
            }
        }
        seg_start = seg_end;
    }
    out
}

/// The bytes `[start, end)` of an object as a stream, read ahead by a bounded channel.
pub fn read_stream(
    backend: Arc<dyn Backend>,
    entry: Entry,
    start: u64,
    end: u64,
) -> futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>> {
    if matches!(entry.loc, DataLoc::Inline) {
        let s = (start as usize).min(entry.inline.len());
        let e = (end as usize).clamp(s, entry.inline.len());
        let bytes = Bytes::copy_from_slice(&entry.inline[s..e]);
        return futures::stream::once(async move { Ok(bytes) }).boxed();
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel(READ_AHEAD_STRIPES);
    let plan = plan_reads(&entry, start, end);
    tokio::spawn(async move {
        for (name, off, len) in plan {
            let r = backend
                .read_range(&name, off, len)
                .await
                .map_err(std::io::Error::other)
                .and_then(|d| {
                    if d.len() as u64 == len {
                        Ok(Bytes::from(d))
                    } else {
                        Err(std::io::Error::other(format!(
                            "stripe {name} short: {} of {len} bytes",
                            d.len()
                        )))
                    }
                });
            let failed = r.is_err();
            if tx.send(r).await.is_err() || failed {
                return;
            }
        }
    });
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
        .into_stream()
        .boxed()
}

/// A response body for `[start, end)`.
pub fn blob(backend: Arc<dyn Backend>, entry: Entry, start: u64, end: u64) -> StreamingBlob {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    let mut inner = read_stream(backend, entry, start, end);
    tokio::spawn(async move {
        while let Some(item) = inner.next().await {
            if tx.send(item).await.is_err() {
                return;
            }
        }
    });
    StreamingBlob::wrap(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::ContentHeaders;

    fn entry(sizes: &[u64], stripe: u64) -> Entry {
        Entry {
            size: sizes.iter().sum(),
            etag: String::new(),
            mtime_ms: 0,
            headers: ContentHeaders::default(),
            loc: DataLoc::Striped {
                stripe_bytes: stripe,
                segments: sizes
                    .iter()
                    .enumerate()
                    .map(|(i, s)| Segment {
                        id: format!("s{i}"),
                        size: *s,
                    })
                    .collect(),
            },
            parts: 0,
            inline: Vec::new(),
        }
    }

    #[test]
    fn plans_cover_the_range_exactly() {
        let e = entry(&[10, 7, 0, 5], 4);
        for start in 0..=22 {
            for end in start..=22 {
                let plan = plan_reads(&e, start, end);
                let total: u64 = plan.iter().map(|p| p.2).sum();
                assert_eq!(total, end - start, "{start}..{end}");
                assert!(plan.iter().all(|p| p.1 + p.2 <= 4 && p.2 > 0));
            }
        }
        assert_eq!(
            plan_reads(&e, 9, 12),
            vec![("d.s0.2".to_string(), 1, 1), ("d.s1.0".to_string(), 0, 2)]
        );
    }

    #[tokio::test]
    async fn striped_write_then_ranged_reads() {
        let mem: Arc<dyn Backend> = Arc::new(crate::backend::MemBackend::default());
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let chunks: Vec<Result<Bytes, std::io::Error>> = data
            .chunks(33)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let body = StreamingBlob::wrap(futures::stream::iter(chunks));
        let spec = WriteSpec {
            id: "x",
            stripe_bytes: 64,
            inline_max: 10,
            max_bytes: 1 << 20,
        };
        let w = write_body(&mem, &spec, Some(body)).await.unwrap();
        assert_eq!(w.size, 1000);
        assert_eq!(w.md5, Md5::checksum(&data));
        let e = entry(&[1000], 64);
        let e = Entry {
            loc: DataLoc::Striped {
                stripe_bytes: 64,
                segments: vec![w.segment.unwrap()],
            },
            ..e
        };
        for (a, b) in [(0, 1000), (63, 65), (999, 1000), (5, 5), (128, 640)] {
            assert_eq!(
                read_all(&mem, &e, a, b).await.unwrap(),
                &data[a as usize..b as usize]
            );
        }
    }

    #[tokio::test]
    async fn oversize_body_is_refused_and_cleaned() {
        let backend = Arc::new(crate::backend::MemBackend::default());
        let mem: Arc<dyn Backend> = backend.clone();
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            (0..10).map(|_| Ok(Bytes::from(vec![1u8; 50]))).collect();
        let spec = WriteSpec {
            id: "big",
            stripe_bytes: 64,
            inline_max: 0,
            max_bytes: 300,
        };
        let body = StreamingBlob::wrap(futures::stream::iter(chunks));
        let err = write_body(&mem, &spec, Some(body)).await.err().unwrap();
        assert_eq!(err.code(), &s3s::S3ErrorCode::EntityTooLarge);
        assert!(backend.names().is_empty(), "{:?}", backend.names());
    }
}
