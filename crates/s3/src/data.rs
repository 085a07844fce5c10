//! Object bytes in the cluster: a request body is cut into stripes of `stripe_bytes`, each
//! written as its own cluster object named from a fresh segment id. Stripe writes are
//! pipelined: up to [`WRITE_AHEAD_STRIPES`] are in flight while the next stripe is received,
//! and each stripe is MD5-hashed on a blocking thread meanwhile (so at most
//! `WRITE_AHEAD_STRIPES + 1` stripes are buffered per body); small bodies stay in memory to
//! be inlined in the index entry. Reads stream the stripes covering a byte range through a bounded channel.
//! Never touches the index.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use s3s::crypto::{Checksum, Md5};
use s3s::dto::StreamingBlob;
use s3s::stream::ByteStream;
use s3s::{s3_error, S3Error, S3Result};

use crate::backend::{Backend, BackendError};
use crate::checksum::{ChecksumAlgo, ChecksumHasher};
use crate::convert::sat_usize;
use crate::entry::{DataLoc, Entry, Segment};

/// Pieces read ahead of the HTTP response (and reads in flight for one response).
pub const READ_AHEAD_PIECES: usize = 4;
/// Largest piece of a stripe read at once: a 4 MiB stripe is read as four 1 MiB pieces in
/// flight together, so its first bytes go out while the rest is still being read.
pub const READ_PIECE_BYTES: u64 = 1 << 20;
/// Stripes removed concurrently.
pub const REMOVE_CONCURRENCY: usize = 8;

/// A body stored by [`write_body`].
pub struct Written {
    /// Bytes received.
    pub size: u64,
    /// Their MD5.
    pub md5: [u8; 16],
    /// Their checksum (base64) in the algorithm [`WriteSpec::checksum`] asked for.
    pub checksum: Option<String>,
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
    /// How long the body may be idle, and may take per stripe (RequestTimeout past either).
    pub deadlines: BodyDeadlines,
    /// A checksum to compute beside the MD5.
    pub checksum: Option<ChecksumAlgo>,
}

/// Time limits on receiving a request body, so a slow or stalled sender holds the gateway's
/// body budget for a bounded time.
#[derive(Debug, Clone, Copy)]
pub struct BodyDeadlines {
    /// Longest wait for the body's next bytes.
    pub idle: Duration,
    /// Longest time to receive one stripe (from the start, or from the last stripe stored).
    pub stripe: Duration,
}

impl Default for BodyDeadlines {
    /// The gateway's default settings (30 s idle, 120 s a stripe).
    fn default() -> Self {
        BodyDeadlines {
            idle: Duration::from_secs(30),
            stripe: Duration::from_secs(120),
        }
    }
}

/// The body's next chunk, or RequestTimeout when it is idle past `deadlines.idle` or the
/// stripe being received started longer than `deadlines.stripe` ago.
async fn next_chunk(
    body: &mut StreamingBlob,
    deadlines: &BodyDeadlines,
    stripe_started: tokio::time::Instant,
) -> S3Result<Option<Result<Bytes, s3s::StdError>>> {
    let idle_end = tokio::time::Instant::now() + deadlines.idle;
    let stripe_end = stripe_started + deadlines.stripe;
    match tokio::time::timeout_at(idle_end.min(stripe_end), body.next()).await {
        Ok(next) => Ok(next),
        Err(_) if idle_end <= stripe_end => Err(s3_error!(
            RequestTimeout,
            "the request body sent nothing for {} ms",
            deadlines.idle.as_millis()
        )),
        Err(_) => Err(s3_error!(
            RequestTimeout,
            "the request body took over {} ms to send one stripe",
            deadlines.stripe.as_millis()
        )),
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Maps a cluster failure to InternalError, logging the cause; a pool past its quota is
/// radosgw's 403 `QuotaExceeded` instead, and a full cluster 507 `InsufficientStorage` (as
/// MinIO's storage-full error): neither is worth retrying, and clients do not retry them as
/// they retry a 500, so the user learns at once that only removals (or more OSDs) help.
pub fn internal<E: std::fmt::Display + 'static>(e: E) -> S3Error {
    let refusal = match (&e as &dyn std::any::Any).downcast_ref::<BackendError>() {
        Some(BackendError::QuotaExceeded(why)) => Some((
            "QuotaExceeded",
            format!("quota exceeded: {why}"),
            hyper::StatusCode::FORBIDDEN,
        )),
        Some(BackendError::NoSpace(why)) => Some((
            "InsufficientStorage",
            format!("the cluster is full: {why}"),
            hyper::StatusCode::INSUFFICIENT_STORAGE,
        )),
        _ => None,
    };
    if let Some((code, message, status)) = refusal {
        let mut err = S3Error::with_message(s3s::S3ErrorCode::Custom(code.into()), message);
        err.set_status_code(status);
        return err;
    }
    tracing::warn!("cluster error: {e}");
    s3_error!(InternalError, "cluster error: {}", e)
}

/// Stores `body`, striping as it arrives. Up to [`WRITE_AHEAD_STRIPES`] full stripes are
/// written (and MD5-hashed on a blocking thread) while the next one is received; on any
/// failure every stripe started is removed once the writes in flight have finished.
pub async fn write_body(
    backend: &Arc<dyn Backend>,
    spec: &WriteSpec<'_>,
    body: Option<StreamingBlob>,
) -> S3Result<Written> {
    let stripe = usize::try_from(spec.stripe_bytes)
        .ok()
        .filter(|&s| s > 0)
        .ok_or_else(|| s3_error!(InternalError, "invalid stripe size {}", spec.stripe_bytes))?;
    let mut p = Pipeline::new(backend.clone(), spec.id, spec.checksum);
    let mut buf: Vec<u8> = Vec::new();
    let mut size = 0u64;
    let result: S3Result<()> = async {
        let Some(mut body) = body else {
            return Ok(());
        };
        // Sized from the declared length, so a small body does not reserve a whole stripe.
        let hint = body.remaining_length().exact().unwrap_or(0);
        buf.reserve_exact(hint.min(stripe));
        let mut stripe_started = tokio::time::Instant::now();
        while let Some(chunk) = next_chunk(&mut body, &spec.deadlines, stripe_started).await? {
            let chunk = chunk.map_err(|e| s3_error!(IncompleteBody, "reading the body: {}", e))?;
            size += chunk.len() as u64;
            if size > spec.max_bytes {
                return Err(s3_error!(
                    EntityTooLarge,
                    "body exceeds {} bytes",
                    spec.max_bytes
                ));
            }
            let mut rest = &chunk[..];
            while !rest.is_empty() {
                let take = (stripe - buf.len()).min(rest.len());
                buf.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                if buf.len() == stripe {
                    let full = std::mem::replace(&mut buf, Vec::with_capacity(stripe));
                    p.push(Bytes::from(full)).await?;
                    stripe_started = tokio::time::Instant::now();
                }
            }
        }
        Ok(())
    }
    .await;
    let finish = match result {
        Err(e) => Err(e),
        Ok(()) if p.started == 0 && size <= spec.inline_max => {
            let mut hashes = p.take_hashes().await?;
            hashes.update(&buf);
            let (md5, checksum) = hashes.finish();
            return Ok(Written {
                size,
                md5,
                checksum,
                inline: Some(buf),
                segment: None,
            });
        }
        Ok(()) => {
            let tail = (!buf.is_empty()).then(|| Bytes::from(std::mem::take(&mut buf)));
            match tail {
                Some(t) => p.push(t).await,
                None => Ok(()),
            }
        }
    };
    let finish = match finish {
        Ok(()) => p.finish().await,
        Err(e) => Err(e),
    };
    match finish {
        Ok((md5, checksum)) => Ok(Written {
            size,
            md5,
            checksum,
            inline: None,
            segment: Some(Segment {
                id: spec.id.to_string(),
                size,
            }),
        }),
        Err(e) => {
            p.abandon().await;
            Err(e)
        }
    }
}

/// Stripe writes in flight for one body while the next stripe is received.
pub const WRITE_AHEAD_STRIPES: usize = 2;
/// Pieces at least this long are hashed on a blocking thread; shorter ones inline.
const BLOCKING_HASH_BYTES: usize = 256 << 10;

/// The digests of a body: its MD5 (the ETag) and, when asked for, a checksum.
struct Hashes {
    md5: Md5,
    checksum: Option<ChecksumHasher>,
}

impl Hashes {
    fn new(checksum: Option<ChecksumAlgo>) -> Self {
        Hashes {
            md5: Md5::new(),
            checksum: checksum.map(ChecksumHasher::new),
        }
    }

    fn update(&mut self, data: &[u8]) {
        self.md5.update(data);
        if let Some(c) = &mut self.checksum {
            c.update(data);
        }
    }

    fn finish(self) -> ([u8; 16], Option<String>) {
        (
            self.md5.finalize(),
            self.checksum.map(ChecksumHasher::finish),
        )
    }
}

/// The digest state: ready, or on a blocking thread hashing a stripe.
enum Hasher {
    Ready(Box<Hashes>),
    Busy(tokio::task::JoinHandle<Box<Hashes>>),
}

/// The stripe writes of one body: started in order, at most [`WRITE_AHEAD_STRIPES`] at a
/// time, each a task of its own so it progresses while the body is being received.
struct Pipeline {
    backend: Arc<dyn Backend>,
    seg: Segment,
    /// Stripes whose write was started: `0..started` may exist in the cluster.
    started: u64,
    inflight: VecDeque<tokio::task::JoinHandle<Result<(), BackendError>>>,
    hasher: Hasher,
    checksum: Option<ChecksumAlgo>,
}

impl Pipeline {
    fn new(backend: Arc<dyn Backend>, id: &str, checksum: Option<ChecksumAlgo>) -> Self {
        Pipeline {
            backend,
            seg: Segment {
                id: id.to_string(),
                size: 0,
            },
            started: 0,
            inflight: VecDeque::new(),
            hasher: Hasher::Ready(Box::new(Hashes::new(checksum))),
            checksum,
        }
    }

    /// The digest state once every piece given so far is hashed.
    async fn take_hashes(&mut self) -> S3Result<Box<Hashes>> {
        let fresh = Hasher::Ready(Box::new(Hashes::new(self.checksum)));
        match std::mem::replace(&mut self.hasher, fresh) {
            Hasher::Ready(m) => Ok(m),
            Hasher::Busy(h) => h.await.map_err(internal),
        }
    }

    /// Hashes `piece` after the pieces before it (on a blocking thread if it is long).
    async fn hash(&mut self, piece: Bytes) -> S3Result<()> {
        let mut hashes = self.take_hashes().await?;
        self.hasher = if piece.len() >= BLOCKING_HASH_BYTES {
            Hasher::Busy(tokio::task::spawn_blocking(move || {
                hashes.update(&piece);
                hashes
            }))
        } else {
            hashes.update(&piece);
            Hasher::Ready(hashes)
        };
        Ok(())
    }

    /// Waits for the oldest write in flight.
    async fn wait_one(&mut self) -> S3Result<()> {
        match self.inflight.pop_front() {
            Some(h) => h.await.map_err(internal)?.map_err(internal),
            None => Ok(()),
        }
    }

    /// Starts writing `stripe` as the next stripe (after waiting for room) and hashes it.
    async fn push(&mut self, stripe: Bytes) -> S3Result<()> {
        while self.inflight.len() >= WRITE_AHEAD_STRIPES {
            self.wait_one().await?;
        }
        let name = self.seg.stripe_name(self.started);
        let backend = self.backend.clone();
        let data = stripe.clone();
        self.started += 1;
        self.inflight
            .push_back(tokio::spawn(cairn_client::carry_background(async move {
                backend.put_bytes(&name, data).await
            })));
        self.hash(stripe).await
    }

    /// Waits for every write and the hash; the body's MD5 and checksum.
    async fn finish(&mut self) -> S3Result<([u8; 16], Option<String>)> {
        while !self.inflight.is_empty() {
            self.wait_one().await?;
        }
        Ok(self.take_hashes().await?.finish())
    }

    /// After a failure: lets the writes in flight end, then removes every stripe started.
    async fn abandon(&mut self) {
        while let Some(h) = self.inflight.pop_front() {
            let _ = h.await;
        }
        remove_stripes(&self.backend, &self.seg.id, self.started).await;
    }
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
    let mut out = Vec::with_capacity(sat_usize(end - start));
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

/// `pieces` cut so that none is longer than `max_len` bytes, in the same order.
pub fn split_pieces(pieces: Vec<(String, u64, u64)>, max_len: u64) -> Vec<(String, u64, u64)> {
    let max_len = max_len.max(1);
    let mut out = Vec::with_capacity(pieces.len());
    for (name, off, len) in pieces {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(max_len);
            out.push((name.clone(), off + done, n));
            done += n;
        }
    }
    out
}

/// The bytes `[start, end)` of an object as a stream: pieces of at most [`READ_PIECE_BYTES`],
/// up to [`READ_AHEAD_PIECES`] read concurrently, delivered in order through a bounded channel.
pub fn read_stream(
    backend: Arc<dyn Backend>,
    entry: Entry,
    start: u64,
    end: u64,
) -> futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>> {
    if matches!(entry.loc, DataLoc::Inline) {
        let s = sat_usize(start).min(entry.inline.len());
        let e = sat_usize(end).clamp(s, entry.inline.len());
        let bytes = Bytes::copy_from_slice(&entry.inline[s..e]);
        return futures::stream::once(async move { Ok(bytes) }).boxed();
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel(READ_AHEAD_PIECES);
    let pieces = split_pieces(plan_reads(&entry, start, end), READ_PIECE_BYTES);
    tokio::spawn(cairn_client::carry_background(async move {
        let mut reads = futures::stream::iter(pieces)
            .map(|(name, off, len)| {
                let backend = backend.clone();
                async move {
                    let d = backend
                        .read_range(&name, off, len)
                        .await
                        .map_err(std::io::Error::other)?;
                    if d.len() as u64 == len {
                        Ok(d)
                    } else {
                        Err(std::io::Error::other(format!(
                            "stripe {name} short: {} of {len} bytes",
                            d.len()
                        )))
                    }
                }
            })
            .buffered(READ_AHEAD_PIECES);
        while let Some(r) = reads.next().await {
            let failed = r.is_err();
            if tx.send(r).await.is_err() || failed {
                return;
            }
        }
    }));
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
            acl: Default::default(),
            checksum: None,
            version_id: None,
            delete_marker: false,
            null_rank: None,
            storage_class: None,
            tags: Default::default(),
            retention: None,
            legal_hold: false,
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
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7).to_le_bytes()[0]).collect();
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
            deadlines: BodyDeadlines::default(),
            checksum: Some(crate::checksum::ChecksumAlgo::Sha256),
        };
        let w = write_body(&mem, &spec, Some(body)).await.unwrap();
        assert_eq!(w.size, 1000);
        assert_eq!(w.md5, Md5::checksum(&data));
        let mut whole = crate::checksum::ChecksumHasher::new(crate::checksum::ChecksumAlgo::Sha256);
        whole.update(&data);
        assert_eq!(
            w.checksum,
            Some(whole.finish()),
            "checksum over every stripe in order"
        );
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
                &data[sat_usize(a)..sat_usize(b)]
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
            deadlines: BodyDeadlines::default(),
            checksum: None,
        };
        let body = StreamingBlob::wrap(futures::stream::iter(chunks));
        let err = write_body(&mem, &spec, Some(body)).await.err().unwrap();
        assert_eq!(err.code(), &s3s::S3ErrorCode::EntityTooLarge);
        assert!(backend.names().is_empty(), "{:?}", backend.names());
    }

    #[test]
    fn a_pool_past_its_quota_is_a_403_quota_exceeded_and_other_failures_internal() {
        let e = internal(BackendError::QuotaExceeded("pool data is full".into()));
        assert_eq!(e.code(), &s3s::S3ErrorCode::Custom("QuotaExceeded".into()));
        assert_eq!(e.status_code(), Some(hyper::StatusCode::FORBIDDEN));
        assert!(e.message().unwrap().contains("pool data is full"));
        let e = internal(BackendError::from(cairn_client::ClientError::NoSpace(
            "osd.2: 1 more would pass the full ratio 0.95".into(),
        )));
        assert_eq!(
            e.code(),
            &s3s::S3ErrorCode::Custom("InsufficientStorage".into())
        );
        assert_eq!(
            e.status_code(),
            Some(hyper::StatusCode::INSUFFICIENT_STORAGE)
        );
        assert!(e.message().unwrap().contains("full ratio"));
        let e = internal(BackendError::Cluster("timeout".into()));
        assert_eq!(e.code(), &s3s::S3ErrorCode::InternalError);
        assert_eq!(internal("plain").code(), &s3s::S3ErrorCode::InternalError);
    }

    /// A memory backend whose stripe writes take a while (so several overlap) and, for names
    /// ending in `fail_suffix`, fail; it records the most writes in flight at once.
    #[derive(Default)]
    struct SlowBackend {
        mem: crate::backend::MemBackend,
        fail_suffix: Option<&'static str>,
        inflight: std::sync::atomic::AtomicUsize,
        peak: std::sync::atomic::AtomicUsize,
        reads_inflight: std::sync::atomic::AtomicUsize,
        reads_peak: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Backend for SlowBackend {
        async fn put(&self, name: &str, data: &[u8]) -> Result<(), BackendError> {
            use std::sync::atomic::Ordering::SeqCst;
            let now = self.inflight.fetch_add(1, SeqCst) + 1;
            self.peak.fetch_max(now, SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            self.inflight.fetch_sub(1, SeqCst);
            if self.fail_suffix.is_some_and(|s| name.ends_with(s)) {
                return Err(BackendError::Cluster(format!("injected failure on {name}")));
            }
            self.mem.put(name, data).await
        }
        async fn read_range(
            &self,
            name: &str,
            offset: u64,
            len: u64,
        ) -> Result<Bytes, BackendError> {
            use std::sync::atomic::Ordering::SeqCst;
            let now = self.reads_inflight.fetch_add(1, SeqCst) + 1;
            self.reads_peak.fetch_max(now, SeqCst);
            // Earlier pieces of a stripe take longer, so reads complete out of order.
            let ms = 12u64.saturating_sub(offset >> 18);
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            self.reads_inflight.fetch_sub(1, SeqCst);
            self.mem.read_range(name, offset, len).await
        }
        async fn remove(&self, name: &str) -> Result<(), BackendError> {
            self.mem.remove(name).await
        }
        async fn omap_set(
            &self,
            name: &str,
            entries: &[(Vec<u8>, Vec<u8>)],
        ) -> Result<(), BackendError> {
            self.mem.omap_set(name, entries).await
        }
        async fn omap_remove(&self, name: &str, keys: &[Vec<u8>]) -> Result<(), BackendError> {
            self.mem.omap_remove(name, keys).await
        }
        async fn version(&self, name: &str) -> Result<u64, BackendError> {
            self.mem.version(name).await
        }
        async fn omap_set_if(
            &self,
            name: &str,
            entries: &[(Vec<u8>, Vec<u8>)],
            expected: u64,
        ) -> Result<bool, BackendError> {
            self.mem.omap_set_if(name, entries, expected).await
        }
        async fn omap_list(
            &self,
            name: &str,
            after: &[u8],
            prefix: &[u8],
            max: u32,
        ) -> Result<(crate::backend::OmapPage, bool), BackendError> {
            self.mem.omap_list(name, after, prefix, max).await
        }
    }

    fn body_of(data: &[u8], chunk: usize) -> StreamingBlob {
        let chunks: Vec<Result<Bytes, std::io::Error>> = data
            .chunks(chunk)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        StreamingBlob::wrap(futures::stream::iter(chunks))
    }

    /// The index entry of a body that `write_body` striped into segment `w`.
    fn striped_entry(w: Written, size: u64, stripe_bytes: u64) -> Entry {
        Entry {
            loc: DataLoc::Striped {
                stripe_bytes,
                segments: vec![w.segment.unwrap()],
            },
            ..entry(&[size], stripe_bytes)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pipelined_writes_are_bounded_and_byte_exact() {
        let backend = Arc::new(SlowBackend::default());
        let b: Arc<dyn Backend> = backend.clone();
        // 20 stripes of 300 KiB (hashed on a blocking thread) plus a 1-byte tail, received
        // in chunks that straddle stripe boundaries.
        let stripe = 300 << 10;
        let data: Vec<u8> = (0..20 * stripe + 1)
            .map(|i: usize| i.wrapping_mul(2654435761).to_le_bytes()[0])
            .collect();
        let spec = WriteSpec {
            id: "p",
            stripe_bytes: stripe as u64,
            inline_max: 0,
            max_bytes: 1 << 30,
            deadlines: BodyDeadlines::default(),
            checksum: None,
        };
        let w = write_body(&b, &spec, Some(body_of(&data, 70_001)))
            .await
            .unwrap();
        assert_eq!(w.size, data.len() as u64);
        assert_eq!(w.md5, Md5::checksum(&data));
        let peak = backend.peak.load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            (2..=WRITE_AHEAD_STRIPES).contains(&peak),
            "peak in flight {peak}"
        );
        assert_eq!(backend.mem.names().len(), 21);
        let e = striped_entry(w, data.len() as u64, stripe as u64);
        let all = read_all(&b, &e, 0, data.len() as u64).await.unwrap();
        assert!(all == data, "read back differs");
    }

    #[test]
    fn split_pieces_cover_each_piece_in_order() {
        let plan = vec![("a".to_string(), 0, 5), ("b".to_string(), 3, 2)];
        assert_eq!(
            split_pieces(plan.clone(), 2),
            vec![
                ("a".to_string(), 0, 2),
                ("a".to_string(), 2, 2),
                ("a".to_string(), 4, 1),
                ("b".to_string(), 3, 2),
            ]
        );
        assert_eq!(split_pieces(plan.clone(), 100), plan);
        assert_eq!(split_pieces(Vec::new(), 2), Vec::new());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_stripes_are_read_as_concurrent_pieces_in_order() {
        let backend = Arc::new(SlowBackend::default());
        let b: Arc<dyn Backend> = backend.clone();
        let stripe: usize = (5 << 20) / 2;
        let data: Vec<u8> = (0..3 * stripe - 7)
            .map(|i: usize| i.wrapping_mul(2246822519).to_le_bytes()[0])
            .collect();
        let spec = WriteSpec {
            id: "r",
            stripe_bytes: stripe as u64,
            inline_max: 0,
            max_bytes: 1 << 30,
            deadlines: BodyDeadlines::default(),
            checksum: None,
        };
        let w = write_body(&b, &spec, Some(body_of(&data, 1 << 20)))
            .await
            .unwrap();
        let e = striped_entry(w, data.len() as u64, stripe as u64);
        let all = read_all(&b, &e, 0, data.len() as u64).await.unwrap();
        assert!(all == data, "read back differs");
        let (a, z) = (stripe - 100, 2 * stripe + (3 << 19));
        let part = read_all(&b, &e, a as u64, z as u64).await.unwrap();
        assert!(part == data[a..z], "ranged read differs");
        let peak = backend.reads_peak.load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            (2..=READ_AHEAD_PIECES).contains(&peak),
            "peak reads in flight {peak}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_stripe_write_removes_every_stripe() {
        for fail in [".0", ".3", ".9"] {
            let backend = Arc::new(SlowBackend {
                fail_suffix: Some(fail),
                ..Default::default()
            });
            let b: Arc<dyn Backend> = backend.clone();
            let data = vec![7u8; 10 * 64 + 5];
            let spec = WriteSpec {
                id: "f",
                stripe_bytes: 64,
                inline_max: 0,
                max_bytes: 1 << 20,
                deadlines: BodyDeadlines::default(),
                checksum: None,
            };
            let err = write_body(&b, &spec, Some(body_of(&data, 50)))
                .await
                .err()
                .unwrap();
            assert_eq!(err.code(), &s3s::S3ErrorCode::InternalError, "{fail}");
            // let any straggler finish, then nothing may be left
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            assert!(
                backend.mem.names().is_empty(),
                "{fail}: {:?}",
                backend.mem.names()
            );
        }
    }

    #[tokio::test]
    async fn body_error_mid_stream_removes_every_stripe() {
        let backend = Arc::new(crate::backend::MemBackend::default());
        let mem: Arc<dyn Backend> = backend.clone();
        let mut chunks: Vec<Result<Bytes, std::io::Error>> =
            (0..5).map(|_| Ok(Bytes::from(vec![1u8; 100]))).collect();
        chunks.push(Err(std::io::Error::other("connection reset")));
        let spec = WriteSpec {
            id: "cut",
            stripe_bytes: 64,
            inline_max: 0,
            max_bytes: 1 << 20,
            deadlines: BodyDeadlines::default(),
            checksum: None,
        };
        let body = StreamingBlob::wrap(futures::stream::iter(chunks));
        let err = write_body(&mem, &spec, Some(body)).await.err().unwrap();
        assert_eq!(err.code(), &s3s::S3ErrorCode::IncompleteBody);
        assert!(backend.names().is_empty(), "{:?}", backend.names());
    }

    #[tokio::test]
    async fn small_and_empty_bodies_stay_inline() {
        let mem: Arc<dyn Backend> = Arc::new(crate::backend::MemBackend::default());
        let spec = WriteSpec {
            id: "s",
            stripe_bytes: 64,
            inline_max: 64,
            max_bytes: 1 << 20,
            deadlines: BodyDeadlines::default(),
            checksum: None,
        };
        for data in [&b""[..], b"hello", &[9u8; 63]] {
            let w = write_body(&mem, &spec, Some(body_of(data, 7)))
                .await
                .unwrap();
            assert_eq!(w.inline.as_deref(), Some(data));
            assert_eq!(w.md5, Md5::checksum(data));
        }
        let w = write_body(&mem, &spec, None).await.unwrap();
        assert_eq!((w.size, w.inline.as_deref()), (0, Some(&b""[..])));
        assert_eq!(w.md5, Md5::checksum(b""));
    }
}
