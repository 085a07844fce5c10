//! Object operations: PUT (inline or striped; the index entry flip is the commit point, old
//! stripes are removed after it), GET and HEAD (ranges, conditions), DELETE, DeleteObjects,
//! CopyObject.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use hyper::http::{Extensions, HeaderMap};
use s3s::TrailingHeaders;

use std::sync::Arc;

use crate::access_ops::{acl_on_write, any_grant};
use crate::acl::CannedAcl;
use crate::authz::{authorize, Action};
use crate::backend::Backend;
use crate::buckets::{self, fresh_id, now_ms, BucketInfo};
use crate::checksum::{self, Checksum, ChecksumAlgo};
use crate::data::{self, hex, WriteSpec, Written};
use crate::entry::{ContentHeaders, DataLoc, Entry};
use crate::gateway::Gateway;
use crate::headers::{
    check_conditions, content_headers, content_md5, etag, metadata_out, timestamp, Conditions,
    HeaderInput,
};
use crate::metrics::LimitCounters;
use crate::{lock_ops, tagging, versions};

/// Most keys in one DeleteObjects request (AWS: 1000).
pub const MAX_DELETE_KEYS: usize = 1000;
/// Longest object key in bytes (AWS: 1024).
pub const MAX_KEY_BYTES: usize = 1024;

fn check_key(key: &str) -> S3Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(s3_error!(
            KeyTooLongError,
            "keys are 1..={MAX_KEY_BYTES} bytes"
        ));
    }
    Ok(())
}

/// The checksum a PUT or part must match: a header value known before the body, or one a
/// trailer carries after it (`x-amz-trailer`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChecksumCheck {
    /// Algorithm.
    pub algo: ChecksumAlgo,
    /// The value from a header; None: from the trailer.
    pub value: Option<String>,
}

/// The checksum to verify for a body: from the five `x-amz-checksum-*` header values, else
/// from an `x-amz-trailer` that names one of them.
pub fn checksum_check(
    values: [Option<&str>; 5],
    headers: &HeaderMap,
) -> S3Result<Option<ChecksumCheck>> {
    if let Some(c) = checksum::requested(values)? {
        return Ok(Some(ChecksumCheck {
            algo: c.algo,
            value: Some(c.value),
        }));
    }
    let trailer = headers
        .get("x-amz-trailer")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase());
    let algo = checksum::ALGOS
        .into_iter()
        .find(|a| trailer.as_deref() == Some(a.header()));
    Ok(algo.map(|algo| ChecksumCheck { algo, value: None }))
}

/// Compares a stored body's checksum with the one the client sent (in a header, or in the
/// trailer now that the body is read): BadDigest on a mismatch or a missing trailer value,
/// after removing what was stored.
pub async fn verify_checksum(
    gw: &Gateway,
    pool: &Arc<dyn Backend>,
    w: &Written,
    check: Option<&ChecksumCheck>,
    trailers: Option<&TrailingHeaders>,
) -> S3Result<Option<Checksum>> {
    let Some(check) = check else {
        return Ok(None);
    };
    let sent = match &check.value {
        Some(v) => Some(v.clone()),
        None => trailers
            .and_then(|t| t.read(|h| h.get(check.algo.header()).cloned()))
            .flatten()
            .and_then(|v| v.to_str().ok().map(|v| v.trim().to_string())),
    };
    let computed = w.checksum.clone();
    match (sent, computed) {
        (Some(s), Some(c)) if s == c => Ok(Some(Checksum {
            algo: check.algo,
            value: c,
        })),
        (Some(_), _) => {
            discard(gw, pool, w).await;
            Err(s3_error!(
                BadDigest,
                "the {} you specified did not match the calculated checksum",
                check.algo.header()
            ))
        }
        (None, _) => {
            discard(gw, pool, w).await;
            Err(s3_error!(
                BadDigest,
                "the trailer did not carry the announced {}",
                check.algo.header()
            ))
        }
    }
}

/// Builds the entry for a stored body.
pub fn entry_from(w: Written, stripe_bytes: u64, headers: ContentHeaders) -> Entry {
    let (loc, inline) = match (w.inline, w.segment) {
        (Some(bytes), _) => (DataLoc::Inline, bytes),
        (None, seg) => (
            DataLoc::Striped {
                stripe_bytes,
                segments: seg.into_iter().collect(),
            },
            Vec::new(),
        ),
    };
    Entry {
        size: w.size,
        etag: hex(&w.md5),
        mtime_ms: now_ms(),
        headers,
        loc,
        parts: 0,
        acl: CannedAcl::Private,
        checksum: None,
        version_id: None,
        delete_marker: false,
        null_rank: None,
        storage_class: None,
        tags: Default::default(),
        retention: None,
        legal_hold: false,
        inline,
    }
}

/// Writes `entry` for `key` and then removes the data of the entry it replaced; in a
/// versioned bucket, records it as the key's newest version (setting its version id, which
/// it returns) and removes only the data of a null version it replaced.
pub async fn commit_entry(
    gw: &Gateway,
    b: &BucketInfo,
    key: &str,
    entry: &mut Entry,
) -> S3Result<Option<String>> {
    if b.versioning.versioned() {
        let replaced = versions::commit(&gw.backend, b, key, entry, b.versioning).await?;
        for old in &replaced.orphans {
            remove_data(gw, old).await;
        }
        return Ok(entry.version_id.clone());
    }
    let old = buckets::get_entry(&gw.backend, b, key).await?;
    buckets::put_entry(&gw.backend, b, key, entry).await?;
    if let Some(old) = old {
        remove_data(gw, &old).await;
    }
    Ok(None)
}

/// Stores `entry` for `key` as [`commit_entry`] does; on failure removes its data, unless
/// the bucket is versioned (a version may already name it: its data then stays, unreferenced
/// at worst).
pub async fn commit_or_discard(
    gw: &Gateway,
    b: &BucketInfo,
    key: &str,
    entry: &mut Entry,
) -> S3Result<Option<String>> {
    let r = commit_entry(gw, b, key, entry).await;
    if r.is_err() && !b.versioning.versioned() {
        remove_data(gw, entry).await;
    }
    r
}

/// Removes the stripes of `e` from its storage class's pool.
pub(crate) async fn remove_data(gw: &Gateway, e: &Entry) {
    if let DataLoc::Striped {
        stripe_bytes,
        segments,
    } = &e.loc
    {
        match gw.data_for(e.storage_class.as_deref()) {
            Ok(pool) => data::remove_segments(pool, *stripe_bytes, segments).await,
            Err(err) => tracing::warn!("data of a removed version left behind: {err}"),
        }
    }
}

async fn discard(gw: &Gateway, pool: &Arc<dyn Backend>, w: &Written) {
    if let Some(seg) = &w.segment {
        data::remove_segments(pool, gw.cfg.stripe_bytes, std::slice::from_ref(seg)).await;
    }
}

/// Refuses a CopyObject whose source is larger than one PUT may be (AWS: 5 GiB), as AWS
/// does: such an object is copied by a multipart upload of UploadPartCopy ranges.
pub fn check_copy_source_size(size: u64, max: u64) -> S3Result<()> {
    if size > max {
        return Err(s3_error!(
            InvalidRequest,
            "The specified copy source is larger than the maximum allowable size for a copy source: {max}"
        ));
    }
    Ok(())
}

/// Checks a declared body length against the PUT limit before anything is read.
pub fn check_length(len: Option<i64>, max: u64) -> S3Result<()> {
    if len.is_some_and(|l| l < 0 || l as u64 > max) {
        return Err(s3_error!(
            EntityTooLarge,
            "bodies are limited to {max} bytes"
        ));
    }
    Ok(())
}

/// Stores a body in `pool` (a storage class's data pool) and verifies its Content-MD5
/// (BadDigest; nothing is left behind), computing the checksum `checksum` asks for beside it.
pub async fn store_body(
    gw: &Gateway,
    pool: &Arc<dyn Backend>,
    id: &str,
    inline_max: u64,
    body: Option<StreamingBlob>,
    expected_md5: Option<[u8; 16]>,
    checksum: Option<ChecksumAlgo>,
) -> S3Result<Written> {
    let spec = WriteSpec {
        id,
        stripe_bytes: gw.cfg.stripe_bytes,
        inline_max,
        max_bytes: gw.cfg.max_put_bytes,
        deadlines: gw.body_deadlines(),
        checksum,
    };
    let len = body
        .as_ref()
        .and_then(|b| s3s::stream::ByteStream::remaining_length(b).exact());
    let turn = gw.admit_body(len.map(|l| l as u64)).await?;
    let w = data::write_body(pool, &spec, body).await.inspect_err(|e| {
        if *e.code() == s3s::S3ErrorCode::RequestTimeout {
            LimitCounters::bump(&gw.metrics.limits.body_timeouts);
        }
    })?;
    drop(turn);
    if expected_md5.is_some_and(|m| m != w.md5) {
        discard(gw, pool, &w).await;
        return Err(s3_error!(BadDigest));
    }
    Ok(w)
}

/// PutObject.
pub async fn put(
    gw: &Gateway,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    let input = req.input;
    check_key(&input.key)?;
    check_length(input.content_length, gw.cfg.max_put_bytes)?;
    let headers = content_headers(
        HeaderInput {
            content_type: input.content_type.map(|c| c.to_string()),
            content_encoding: input.content_encoding,
            content_disposition: input.content_disposition,
            content_language: input.content_language,
            cache_control: input.cache_control,
            metadata: input.metadata,
        },
        gw.cfg.max_meta_bytes,
    )?;
    let md5 = content_md5(input.content_md5.as_deref())?;
    let acl_asked = (
        input.acl.as_ref().map(|a| a.as_str().to_string()),
        any_grant!(input),
    );
    let tags = match input.tagging.as_deref() {
        Some(h) => tagging::from_header(h)?,
        None => Default::default(),
    };
    let lock_headers = (
        input.object_lock_mode.clone(),
        input.object_lock_retain_until_date.clone(),
        input.object_lock_legal_hold_status.clone(),
    );
    let check = checksum_check(
        [
            input.checksum_crc32.as_deref(),
            input.checksum_crc32c.as_deref(),
            input.checksum_sha1.as_deref(),
            input.checksum_sha256.as_deref(),
            input.checksum_crc64nvme.as_deref(),
        ],
        &req.headers,
    )?;
    let class = gw.class_requested(input.storage_class.as_ref().map(|c| c.as_str()))?;
    let b = gw.bucket(&req.extensions, &input.bucket).await?;
    let acl = acl_on_write(&b, acl_asked.0.as_deref(), acl_asked.1)?;
    let lock = lock_ops::for_new_version(
        &b,
        lock_headers.0.as_ref(),
        lock_headers.1.as_ref(),
        lock_headers.2.as_ref(),
    )?;
    if input.if_none_match.is_some() || input.if_match.is_some() {
        let cur = buckets::get_entry(&gw.backend, &b, &input.key).await?;
        match (&cur, &input.if_none_match, &input.if_match) {
            (Some(_), Some(ETagCondition::Any), _) => return Err(s3_error!(PreconditionFailed)),
            (None, _, Some(_)) => return Err(s3_error!(NoSuchKey)),
            (Some(e), _, Some(m)) => check_conditions(
                &Conditions {
                    if_match: Some(m),
                    ..Default::default()
                },
                &e.etag,
                e.mtime_ms,
                true,
            )?,
            _ => {}
        }
    }
    let algo = check.as_ref().map(|c| c.algo);
    let inline_max = match class {
        None => gw.cfg.inline_max_bytes,
        Some(_) => 0,
    };
    let pool = gw.data_for(class.as_deref())?;
    let w = store_body(gw, pool, &fresh_id(), inline_max, input.body, md5, algo).await?;
    let sum = verify_checksum(gw, pool, &w, check.as_ref(), req.trailing_headers.as_ref()).await?;
    let size = w.size;
    let mut entry = entry_from(w, gw.cfg.stripe_bytes, headers);
    entry.acl = acl;
    entry.checksum = sum.clone();
    entry.tags = tags;
    entry.retention = lock.retention;
    entry.legal_hold = lock.legal_hold;
    entry.storage_class = class;
    let version_id = commit_or_discard(gw, &b, &input.key, &mut entry).await?;
    let mut out = PutObjectOutput {
        e_tag: Some(etag(&entry.etag)),
        size: Some(size as i64),
        version_id,
        ..Default::default()
    };
    if let Some(c) = sum {
        [
            out.checksum_crc32,
            out.checksum_crc32c,
            out.checksum_sha1,
            out.checksum_sha256,
            out.checksum_crc64nvme,
        ] = c.slots();
    }
    Ok(S3Response::new(out))
}

/// The entry a read of `key` (version `version_id` if given) finds: NoSuchKey, NoSuchVersion,
/// or MethodNotAllowed for a delete marker named by its version id (as S3). In a versioned
/// bucket the entry carries its version id (`null` for an object older than versioning).
pub async fn find_entry(
    gw: &Gateway,
    b: &BucketInfo,
    key: &str,
    version_id: Option<&str>,
) -> S3Result<Entry> {
    let versioned = b.versioning.versioned();
    let mut e = match version_id {
        Some(id) if versioned => {
            let (_, e) = versions::get_version(&gw.backend, b, key, id)
                .await?
                .ok_or_else(|| s3_error!(NoSuchVersion))?;
            if e.delete_marker {
                return Err(s3_error!(
                    MethodNotAllowed,
                    "the version named is a delete marker"
                ));
            }
            e
        }
        Some(id) if id != versions::NULL_VERSION => {
            if !versions::valid_version_id(id) {
                return Err(s3_error!(InvalidArgument, "invalid version id specified"));
            }
            return Err(s3_error!(NoSuchVersion));
        }
        _ => buckets::get_entry(&gw.backend, b, key)
            .await?
            .ok_or_else(|| s3_error!(NoSuchKey))?,
    };
    if versioned {
        e.version_id
            .get_or_insert_with(|| versions::NULL_VERSION.into());
    }
    Ok(e)
}

async fn lookup(
    gw: &Gateway,
    ext: &Extensions,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
) -> S3Result<(BucketInfo, Entry)> {
    let b = gw.bucket(ext, bucket).await?;
    let e = find_entry(gw, &b, key, version_id).await?;
    Ok((b, e))
}

/// The entry a GetObject or HeadObject reads, once its conditions hold, with the byte range
/// asked for (`None`: the whole object).
/// What a GetObject or HeadObject names: the object, a version, a byte range or a part.
struct ReadAsk<'a> {
    bucket: &'a str,
    key: &'a str,
    version_id: Option<&'a str>,
    range: Option<&'a Range>,
    part: Option<i32>,
}

async fn read_target(
    gw: &Gateway,
    ext: &Extensions,
    ask: ReadAsk<'_>,
    conditions: &Conditions<'_>,
) -> S3Result<(BucketInfo, Entry, Option<(u64, u64)>)> {
    let ReadAsk {
        bucket,
        key,
        version_id,
        range,
        part,
    } = ask;
    if range.is_some() && part.is_some() {
        return Err(s3_error!(
            InvalidRequest,
            "Cannot specify both Range header and partNumber query parameter"
        ));
    }
    let (b, e) = lookup(gw, ext, bucket, key, version_id).await?;
    check_conditions(conditions, &e.etag, e.mtime_ms, false)?;
    let range = match part {
        Some(n) => part_range(&e, n)?,
        None => byte_range(range, e.size)?,
    };
    Ok((b, e, range))
}

/// The bytes of part `n` (`partNumber`) of `e`: a multipart object's part, or for another
/// object part 1, the whole of it (None). InvalidPartNumber (416) past the last part.
pub fn part_range(e: &Entry, n: i32) -> S3Result<Option<(u64, u64)>> {
    let invalid = || {
        let mut err = s3s::S3Error::with_message(
            s3s::S3ErrorCode::Custom("InvalidPartNumber".into()),
            "The requested partnumber is not satisfiable",
        );
        err.set_status_code(hyper::StatusCode::RANGE_NOT_SATISFIABLE);
        err
    };
    let index = usize::try_from(n)
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(invalid)?
        - 1;
    if e.parts == 0 {
        return if index == 0 { Ok(None) } else { Err(invalid()) };
    }
    let segments = e.segments();
    let seg = segments.get(index).ok_or_else(invalid)?;
    let start: u64 = segments[..index].iter().map(|s| s.size).sum();
    Ok(Some((start, start + seg.size)))
}

/// The lock fields a GET or HEAD returns: only for a bucket with object lock, or a version
/// written with a lock.
async fn lock_fields(
    gw: &Gateway,
    b: &BucketInfo,
    key: &str,
    e: &Entry,
) -> S3Result<(
    Option<ObjectLockMode>,
    Option<Timestamp>,
    Option<ObjectLockLegalHoldStatus>,
)> {
    if b.object_lock.is_none() && e.retention.is_none() && !e.legal_hold {
        return Ok((None, None, None));
    }
    let lock = lock_ops::effective(&gw.backend, b, key, e).await?;
    Ok(lock_ops::response_fields(&lock))
}

fn byte_range(range: Option<&Range>, size: u64) -> S3Result<Option<(u64, u64)>> {
    match range {
        None => Ok(None),
        Some(r) => {
            let r = r.check(size)?;
            Ok(Some((r.start, r.end)))
        }
    }
}

/// [`read_target`] for a GetObject or HeadObject input (two types with the same fields).
macro_rules! read_target {
    ($gw:expr, $req:expr, $input:expr) => {
        read_target(
            $gw,
            &$req.extensions,
            ReadAsk {
                bucket: &$input.bucket,
                key: &$input.key,
                version_id: $input.version_id.as_deref(),
                range: $input.range.as_ref(),
                part: $input.part_number,
            },
            &Conditions {
                if_match: $input.if_match.as_ref(),
                if_none_match: $input.if_none_match.as_ref(),
                if_modified_since: $input.if_modified_since.as_ref(),
                if_unmodified_since: $input.if_unmodified_since.as_ref(),
            },
        )
    };
}

/// The stored checksum to return, as (crc32, crc32c, sha1, sha256, crc64nvme) and its type,
/// when the request asks for checksums (`x-amz-checksum-mode: ENABLED`) and reads the whole
/// object.
fn returned_checksum(
    e: &Entry,
    mode: Option<&ChecksumMode>,
    ranged: bool,
) -> ([Option<String>; 5], Option<ChecksumType>) {
    let enabled = mode.is_some_and(|m| m.as_str().eq_ignore_ascii_case(ChecksumMode::ENABLED));
    match (enabled, ranged, &e.checksum) {
        (true, false, Some(c)) => (c.slots(), Some(ChecksumType::from_static(c.type_name()))),
        _ => Default::default(),
    }
}

/// GetObject.
pub async fn get(
    gw: &Gateway,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let input = &req.input;
    let (b, e, range) = read_target!(gw, req, input).await?;
    let ((lock_mode, lock_until, lock_hold), tag_count) = tokio::try_join!(
        lock_fields(gw, &b, &input.key, &e),
        crate::tag_ops::count(gw, &b, &input.key, &e)
    )?;
    let (start, end) = range.unwrap_or((0, e.size));
    gw.charge_response(&req, &input.bucket, end - start);
    let h = &e.headers;
    let ([crc32, crc32c, sha1, sha256, crc64nvme], checksum_type) =
        returned_checksum(&e, input.checksum_mode.as_ref(), range.is_some());
    let out = GetObjectOutput {
        checksum_crc32: crc32,
        checksum_crc32c: crc32c,
        checksum_sha1: sha1,
        checksum_sha256: sha256,
        checksum_crc64nvme: crc64nvme,
        checksum_type,
        accept_ranges: Some("bytes".into()),
        content_length: Some((end - start) as i64),
        content_range: range.map(|(s, t)| format!("bytes {s}-{}/{}", t - 1, e.size)),
        content_type: h.content_type.as_ref().and_then(|c| c.parse().ok()),
        content_encoding: h.content_encoding.clone(),
        content_disposition: h.content_disposition.clone(),
        content_language: h.content_language.clone(),
        cache_control: h.cache_control.clone(),
        e_tag: Some(etag(&e.etag)),
        last_modified: Some(timestamp(e.mtime_ms)),
        metadata: metadata_out(h),
        parts_count: (e.parts > 0).then_some(e.parts as i32),
        version_id: e.version_id.clone(),
        object_lock_mode: lock_mode,
        object_lock_retain_until_date: lock_until,
        object_lock_legal_hold_status: lock_hold,
        tag_count,
        storage_class: e.storage_class.clone().map(StorageClass::from),
        body: Some(data::blob(
            gw.data_for(e.storage_class.as_deref())?.clone(),
            e.clone(),
            start,
            end,
        )),
        ..Default::default()
    };
    let mut resp = S3Response::new(out);
    if range.is_some() {
        resp.status = Some(hyper::StatusCode::PARTIAL_CONTENT);
    }
    Ok(resp)
}

/// HeadObject.
pub async fn head(
    gw: &Gateway,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let input = &req.input;
    let (b, e, range) = read_target!(gw, req, input).await?;
    let (lock_mode, lock_until, lock_hold) = lock_fields(gw, &b, &input.key, &e).await?;
    let (start, end) = range.unwrap_or((0, e.size));
    let h = &e.headers;
    let ([crc32, crc32c, sha1, sha256, crc64nvme], checksum_type) =
        returned_checksum(&e, input.checksum_mode.as_ref(), range.is_some());
    Ok(S3Response::new(HeadObjectOutput {
        checksum_crc32: crc32,
        checksum_crc32c: crc32c,
        checksum_sha1: sha1,
        checksum_sha256: sha256,
        checksum_crc64nvme: crc64nvme,
        checksum_type,
        accept_ranges: Some("bytes".into()),
        content_length: Some((end - start) as i64),
        content_range: range.map(|(s, t)| format!("bytes {s}-{}/{}", t - 1, e.size)),
        content_type: h.content_type.as_ref().and_then(|c| c.parse().ok()),
        content_encoding: h.content_encoding.clone(),
        content_disposition: h.content_disposition.clone(),
        content_language: h.content_language.clone(),
        cache_control: h.cache_control.clone(),
        e_tag: Some(etag(&e.etag)),
        last_modified: Some(timestamp(e.mtime_ms)),
        metadata: metadata_out(h),
        parts_count: (e.parts > 0).then_some(e.parts as i32),
        version_id: e.version_id.clone(),
        object_lock_mode: lock_mode,
        object_lock_retain_until_date: lock_until,
        object_lock_legal_hold_status: lock_hold,
        storage_class: e.storage_class.clone().map(StorageClass::from),
        ..Default::default()
    }))
}

/// Deletes `key` (version `version_id` if given): in a bucket never versioned the object
/// goes (`null` names it; another id is refused or names nothing); in a versioned bucket a
/// delete marker is made, or the version named goes. A missing key or version succeeds.
pub(crate) async fn delete_key(
    gw: &Gateway,
    b: &BucketInfo,
    key: &str,
    version_id: Option<&str>,
    bypass: bool,
) -> S3Result<versions::Deleted> {
    let deleted = match (version_id, b.versioning.versioned()) {
        (Some(id), true) => {
            // Versions carry locks only in a bucket with object lock: read the version once,
            // to check its lock and then to delete it.
            let known = match b.object_lock {
                Some(_) => versions::get_version(&gw.backend, b, key, id).await?,
                None => None,
            };
            if let Some((_, e)) = &known {
                lock_ops::check_delete(gw, b, key, e, bypass).await?;
            }
            versions::delete_version(&gw.backend, b, key, id, known).await?
        }
        (None, true) => versions::delete_current(&gw.backend, b, key, b.versioning).await?,
        (Some(id), false) if id != versions::NULL_VERSION => {
            if !versions::valid_version_id(id) {
                return Err(s3_error!(InvalidArgument, "invalid version id specified"));
            }
            versions::Deleted::default()
        }
        (_, false) => {
            let mut gone = versions::Deleted::default();
            if let Some(e) = buckets::get_entry(&gw.backend, b, key).await? {
                buckets::remove_entry(&gw.backend, b, key).await?;
                gone.orphans.push(e);
            }
            gone.version_id = version_id.map(str::to_string);
            gone
        }
    };
    for e in &deleted.orphans {
        remove_data(gw, e).await;
    }
    Ok(deleted)
}

/// Most parts one GetObjectAttributes reply lists (AWS: 1000).
pub const MAX_ATTRIBUTE_PARTS: i32 = 1000;

/// GetObjectAttributes: the ETag, checksum, size, storage
/// class and parts (sizes, paged by part number) of an object or one of its versions.
pub async fn attributes(
    gw: &Gateway,
    req: S3Request<GetObjectAttributesInput>,
) -> S3Result<S3Response<GetObjectAttributesOutput>> {
    let i = &req.input;
    // One header, `x-amz-object-attributes: ETag,ObjectSize`, may arrive as one element.
    let wants = |a: &str| {
        i.object_attributes
            .iter()
            .flat_map(|x| x.as_str().split(','))
            .any(|x| x.trim() == a)
    };
    if i.object_attributes.is_empty() {
        return Err(s3_error!(
            InvalidArgument,
            "x-amz-object-attributes names no attribute"
        ));
    }
    let (_, e) = lookup(
        gw,
        &req.extensions,
        &i.bucket,
        &i.key,
        i.version_id.as_deref(),
    )
    .await?;
    let mut out = GetObjectAttributesOutput {
        last_modified: Some(timestamp(e.mtime_ms)),
        version_id: e.version_id.clone(),
        ..Default::default()
    };
    if wants(ObjectAttributes::ETAG) {
        out.e_tag = Some(ETag::Strong(e.etag.clone()));
    }
    if wants(ObjectAttributes::OBJECT_SIZE) {
        out.object_size = Some(e.size as i64);
    }
    if wants(ObjectAttributes::STORAGE_CLASS) {
        out.storage_class = Some(StorageClass::from(
            crate::storage_class::name_of(e.storage_class.as_deref()).to_string(),
        ));
    }
    if let Some(c) = e
        .checksum
        .as_ref()
        .filter(|_| wants(ObjectAttributes::CHECKSUM))
    {
        let [crc32, crc32c, sha1, sha256, crc64nvme] = c.slots();
        out.checksum = Some(s3s::dto::Checksum {
            checksum_crc32: crc32,
            checksum_crc32c: crc32c,
            checksum_sha1: sha1,
            checksum_sha256: sha256,
            checksum_crc64nvme: crc64nvme,
            checksum_type: Some(ChecksumType::from_static(c.type_name())),
        });
    }
    if e.parts > 0 && wants(ObjectAttributes::OBJECT_PARTS) {
        let max = i
            .max_parts
            .unwrap_or(MAX_ATTRIBUTE_PARTS)
            .clamp(0, MAX_ATTRIBUTE_PARTS);
        let marker = i.part_number_marker.unwrap_or(0).max(0);
        let all: Vec<ObjectPart> = e
            .segments()
            .iter()
            .zip(1..)
            .filter(|(_, n)| *n > marker)
            .map(|(s, n)| ObjectPart {
                part_number: Some(n),
                size: Some(s.size as i64),
                ..Default::default()
            })
            .collect();
        let truncated = all.len() > max as usize;
        let parts: Vec<ObjectPart> = all.into_iter().take(max as usize).collect();
        out.object_parts = Some(GetObjectAttributesParts {
            total_parts_count: Some(e.parts as i32),
            part_number_marker: Some(marker),
            next_part_number_marker: parts.last().and_then(|p| p.part_number),
            max_parts: Some(max),
            is_truncated: Some(truncated),
            parts: Some(parts),
        });
    }
    Ok(S3Response::new(out))
}

/// DeleteObject (a missing key succeeds, as in S3).
pub async fn delete(
    gw: &Gateway,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    let bypass = lock_ops::may_bypass(
        gw.caller(&req).as_deref(),
        &b,
        req.input.bypass_governance_retention,
    );
    let d = delete_key(
        gw,
        &b,
        &req.input.key,
        req.input.version_id.as_deref(),
        bypass,
    )
    .await?;
    Ok(S3Response::new(DeleteObjectOutput {
        delete_marker: d.delete_marker.then_some(true),
        version_id: d.version_id,
        ..Default::default()
    }))
}

/// DeleteObjects (at most 1000 keys).
pub async fn delete_many(
    gw: &Gateway,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    let input = req.input;
    if input.delete.objects.len() > MAX_DELETE_KEYS {
        return Err(s3_error!(
            MalformedXML,
            "at most {MAX_DELETE_KEYS} keys per request"
        ));
    }
    let b = gw.bucket(&req.extensions, &input.bucket).await?;
    let caller = crate::identity::caller(&req.extensions).map(|id| id.user.clone());
    let quiet = input.delete.quiet.unwrap_or(false);
    let bypass = lock_ops::may_bypass(caller.as_deref(), &b, input.bypass_governance_retention);
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for obj in input.delete.objects {
        let done = match authorize(
            gw,
            caller.as_deref(),
            &b,
            Action::DeleteObject,
            Some(&obj.key),
        )
        .await
        {
            Ok(()) => delete_key(gw, &b, &obj.key, obj.version_id.as_deref(), bypass).await,
            Err(e) => Err(e),
        };
        match done {
            Ok(_) if quiet => {}
            Ok(d) => {
                let marker_id = d.version_id.clone().filter(|_| d.delete_marker);
                deleted.push(DeletedObject {
                    key: Some(obj.key),
                    version_id: obj.version_id.clone(),
                    delete_marker: d.delete_marker.then_some(true),
                    delete_marker_version_id: marker_id,
                })
            }
            Err(e) => errors.push(Error {
                code: Some(e.code().as_str().to_string()),
                key: Some(obj.key),
                message: e.message().map(str::to_string),
                version_id: obj.version_id.clone(),
            }),
        }
    }
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: Some(deleted),
        errors: Some(errors),
        ..Default::default()
    }))
}

/// The bucket, key and version id a copy source names (access points are NotImplemented).
pub fn source_parts(source: &CopySource) -> S3Result<(&str, &str, Option<&str>)> {
    match source {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((bucket, key, version_id.as_deref())),
        _ => Err(s3_error!(NotImplemented, "access point copy sources")),
    }
}

/// The bucket and entry a copy reads (CopyObject, UploadPartCopy) from `bucket`/`key`
/// (version `version_id` if given): the caller must be allowed to read it, `conditions` (the
/// copy-source ones) must hold, and a version id may not name a delete marker
/// (InvalidRequest, as S3).
pub async fn copy_source(
    gw: &Gateway,
    ext: &Extensions,
    (bucket, key, version_id): (&str, &str, Option<&str>),
    conditions: &Conditions<'_>,
) -> S3Result<(BucketInfo, Entry)> {
    let b = gw.bucket(ext, bucket).await?;
    let caller = crate::identity::caller(ext).map(|id| id.user.clone());
    authorize(gw, caller.as_deref(), &b, Action::GetObject, Some(key)).await?;
    let e = match find_entry(gw, &b, key, version_id).await {
        Err(e) if *e.code() == s3s::S3ErrorCode::MethodNotAllowed => {
            return Err(s3_error!(
                InvalidRequest,
                "the source of a copy may not name a delete marker"
            ))
        }
        other => other?,
    };
    check_conditions(conditions, &e.etag, e.mtime_ms, true)?;
    Ok((b, e))
}

/// CopyObject: the source's bytes are re-striped under a fresh id (inline stays inline); the
/// caller must be allowed to read the source (admission allowed the write). The copy gets
/// the request's canned ACL and keeps the source's checksum (same bytes).
pub async fn copy(
    gw: &Gateway,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    let input = req.input;
    check_key(&input.key)?;
    let acl_asked = (
        input.acl.as_ref().map(|a| a.as_str().to_string()),
        any_grant!(input),
    );
    let (src_bucket, src_key, src_version) = source_parts(&input.copy_source)?;
    let (src_b, src) = copy_source(
        gw,
        &req.extensions,
        (src_bucket, src_key, src_version),
        &Conditions {
            if_match: input.copy_source_if_match.as_ref(),
            if_none_match: input.copy_source_if_none_match.as_ref(),
            if_modified_since: input.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
        },
    )
    .await?;
    check_copy_source_size(src.size, gw.cfg.max_put_bytes)?;
    let replace = input
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
    let class = gw.class_requested(input.storage_class.as_ref().map(|c| c.as_str()))?;
    let same_class = class == src.storage_class;
    if !replace
        && same_class
        && src_version.is_none()
        && src_bucket == input.bucket
        && src_key == input.key
    {
        return Err(s3_error!(
            InvalidRequest,
            "copying an object to itself needs a metadata or storage class change (x-amz-metadata-directive: REPLACE, x-amz-storage-class)"
        ));
    }
    let headers = if replace {
        content_headers(
            HeaderInput {
                content_type: input.content_type.map(|c| c.to_string()),
                content_encoding: input.content_encoding,
                content_disposition: input.content_disposition,
                content_language: input.content_language,
                cache_control: input.cache_control,
                metadata: input.metadata,
            },
            gw.cfg.max_meta_bytes,
        )?
    } else {
        src.headers.clone()
    };
    let replace_tags = input
        .tagging_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE);
    let tags = match (replace_tags, input.tagging.as_deref()) {
        (true, Some(h)) => tagging::from_header(h)?,
        (true, None) => Default::default(),
        (false, _) => crate::tag_ops::effective(&gw.backend, &src_b, src_key, &src).await?,
    };
    let dst = gw.bucket(&req.extensions, &input.bucket).await?;
    let acl = acl_on_write(&dst, acl_asked.0.as_deref(), acl_asked.1)?;
    let lock = lock_ops::for_new_version(
        &dst,
        input.object_lock_mode.as_ref(),
        input.object_lock_retain_until_date.as_ref(),
        input.object_lock_legal_hold_status.as_ref(),
    )?;
    let mut entry = if matches!(src.loc, DataLoc::Inline) && class.is_none() {
        Entry {
            mtime_ms: now_ms(),
            headers,
            ..src.clone()
        }
    } else {
        let from = gw.data_for(src.storage_class.as_deref())?.clone();
        let body = data::blob(from, src.clone(), 0, src.size);
        let pool = gw.data_for(class.as_deref())?;
        let w = store_body(gw, pool, &fresh_id(), 0, Some(body), None, None).await?;
        entry_from(w, gw.cfg.stripe_bytes, headers)
    };
    entry.storage_class = class;
    entry.mtime_ms = now_ms();
    entry.acl = acl;
    entry.checksum.clone_from(&src.checksum);
    entry.version_id = None;
    entry.tags = tags;
    entry.retention = lock.retention;
    entry.legal_hold = lock.legal_hold;
    let version_id = commit_or_discard(gw, &dst, &input.key, &mut entry).await?;
    Ok(S3Response::new(CopyObjectOutput {
        version_id,
        copy_source_version_id: src.version_id.clone(),
        copy_object_result: Some(CopyObjectResult {
            e_tag: Some(etag(&entry.etag)),
            last_modified: Some(timestamp(entry.mtime_ms)),
            ..Default::default()
        }),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Segment;

    #[test]
    fn copies_above_the_put_limit_are_refused() {
        let max = 5 << 30;
        check_copy_source_size(max, max).unwrap();
        let err = check_copy_source_size(max + 1, max).unwrap_err();
        assert_eq!(*err.code(), s3s::S3ErrorCode::InvalidRequest);
        assert!(err.message().unwrap_or_default().contains("5368709120"));
    }

    fn multipart(sizes: &[u64]) -> Entry {
        let mut e = entry_from(
            Written {
                size: sizes.iter().sum(),
                md5: [0; 16],
                checksum: None,
                inline: None,
                segment: None,
            },
            4 << 20,
            ContentHeaders::default(),
        );
        e.parts = u32::try_from(sizes.len()).expect("a few parts");
        e.loc = DataLoc::Striped {
            stripe_bytes: 4 << 20,
            segments: sizes
                .iter()
                .enumerate()
                .map(|(i, &size)| Segment {
                    id: format!("s{i}"),
                    size,
                })
                .collect(),
        };
        e
    }

    #[test]
    fn part_numbers_name_each_part_and_nothing_past_the_last() {
        let e = multipart(&[5, 7, 2]);
        assert_eq!(part_range(&e, 1).unwrap(), Some((0, 5)));
        assert_eq!(part_range(&e, 2).unwrap(), Some((5, 12)));
        assert_eq!(part_range(&e, 3).unwrap(), Some((12, 14)));
        for bad in [0, -1, 4] {
            let err = part_range(&e, bad).unwrap_err();
            assert_eq!(
                err.status_code(),
                Some(hyper::StatusCode::RANGE_NOT_SATISFIABLE)
            );
        }
        let single = multipart(&[]);
        let single = Entry { parts: 0, ..single };
        assert_eq!(
            part_range(&single, 1).unwrap(),
            None,
            "part 1 of a plain object is all of it"
        );
        assert!(part_range(&single, 2).is_err());
    }
}
