//! Multipart uploads. An upload is a sealed record in the bucket's uploads object (omap key
//! `key \0 upload-id`); each part is its own striped segment (fresh id per attempt, so a
//! re-uploaded part never overwrites bytes a reader may use) recorded in `s3.mpp.{upload-id}`.
//! Completing writes one index entry whose segments are the chosen parts, in order: no byte
//! is copied. Abort, completion and bucket deletion remove every unused part's stripes.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use serde::{Deserialize, Serialize};

use crate::access_ops::{acl_on_write, any_grant};
use crate::acl::CannedAcl;
use crate::buckets::{fresh_id, now_ms, BucketInfo};
use crate::checksum::{Checksum, ALGOS};
use crate::convert::{count_i32, count_u32};
use crate::data::{self, hex, internal};
use crate::entry::{ContentHeaders, DataLoc, Entry, Segment};
use crate::gateway::Gateway;
use crate::headers::{content_headers, content_md5, etag, timestamp, HeaderInput};
use crate::identity::ANONYMOUS;
use crate::multipart_checksum::{self, Kind, UploadChecksum};
use crate::object_lock::Lock;
use crate::object_ops::{check_length, checksum_check, commit_entry, store_body, verify_checksum};
use crate::pager::OmapPager;
use crate::record::{seal, unseal};
use crate::tagging::{self, Tags};

/// Smallest part except the last (AWS: 5 MiB).
pub const MIN_PART_BYTES: u64 = 5 << 20;
/// Most parts (AWS: 10,000).
pub const MAX_PARTS: i32 = 10_000;
/// Largest ListParts / ListMultipartUploads page.
pub const MAX_PAGE: usize = 1000;

/// An upload in progress.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UploadInfo {
    /// Object key.
    pub key: String,
    /// Upload id.
    pub upload_id: String,
    /// Start time, ms since the Unix epoch.
    pub initiated_ms: i64,
    /// Initiating user.
    pub owner: String,
    /// Headers and metadata the object will have.
    pub headers: ContentHeaders,
    /// Stripe size of every part.
    pub stripe_bytes: u64,
    /// Canned ACL the object will have.
    #[serde(default)]
    pub acl: CannedAcl,
    /// The checksum the upload declared (every part's algorithm; how the object's is made).
    #[serde(default)]
    pub checksum: Option<UploadChecksum>,
    /// Tags the object will have (`x-amz-tagging`).
    #[serde(default)]
    pub tags: Tags,
    /// Lock the object will have, when asked for by the upload's headers (otherwise the
    /// bucket's default retention when it completes).
    #[serde(default)]
    pub lock: Option<Lock>,
    /// Storage class the object will have (None: STANDARD); its parts go to that class's pool.
    #[serde(default)]
    pub storage_class: Option<String>,
}

/// One uploaded part.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PartInfo {
    /// Part number (1..=10,000).
    pub number: i32,
    /// MD5 hex.
    pub etag: String,
    /// Bytes.
    pub size: u64,
    /// Segment holding the bytes.
    pub segment: String,
    /// Upload time, ms since the Unix epoch.
    pub mtime_ms: i64,
    /// Its checksum (base64) in the upload's declared algorithm.
    #[serde(default)]
    pub checksum: Option<String>,
}

fn upload_key(key: &str, upload_id: &str) -> Vec<u8> {
    let mut k = key.as_bytes().to_vec();
    k.push(0);
    k.extend_from_slice(upload_id.as_bytes());
    k
}

fn parts_object(upload_id: &str) -> String {
    format!("s3.mpp.{upload_id}")
}

fn part_key(n: i32) -> Vec<u8> {
    format!("{n:05}").into_bytes()
}

async fn get_upload(gw: &Gateway, b: &BucketInfo, key: &str, id: &str) -> S3Result<UploadInfo> {
    let k = upload_key(key, id);
    let (page, _) = gw
        .backend
        .omap_list(&b.uploads_object(), &[], &k, 1)
        .await
        .map_err(internal)?;
    match page.first() {
        Some((pk, v)) if *pk == k => unseal(v).map_err(internal),
        _ => Err(s3_error!(NoSuchUpload)),
    }
}

async fn all_parts(gw: &Gateway, upload_id: &str) -> S3Result<Vec<PartInfo>> {
    let mut out = Vec::new();
    let mut pages = OmapPager::new(
        &gw.backend,
        &parts_object(upload_id),
        &[],
        count_u32(MAX_PAGE),
    );
    while let Some(page) = pages.next_page().await? {
        for (_, v) in &page {
            out.push(unseal(v).map_err(internal)?);
        }
    }
    Ok(out)
}

fn segment_of(p: &PartInfo) -> Segment {
    Segment {
        id: p.segment.clone(),
        size: p.size,
    }
}

/// Removes an upload's record, part records and the stripes of `parts`.
async fn drop_upload(
    gw: &Gateway,
    b: &BucketInfo,
    u: &UploadInfo,
    unused: &[PartInfo],
) -> S3Result<()> {
    gw.backend
        .omap_remove(&b.uploads_object(), &[upload_key(&u.key, &u.upload_id)])
        .await
        .map_err(internal)?;
    gw.backend
        .remove(&parts_object(&u.upload_id))
        .await
        .map_err(internal)?;
    let segs: Vec<Segment> = unused.iter().map(segment_of).collect();
    data::remove_segments(
        gw.data_for(u.storage_class.as_deref())?,
        u.stripe_bytes,
        &segs,
    )
    .await;
    Ok(())
}

/// Aborts every upload of bucket `b` for which `due(key, initiated_ms)` holds (the lifecycle
/// pass's AbortIncompleteMultipartUpload); returns how many it aborted.
pub async fn abort_due(
    gw: &Gateway,
    b: &BucketInfo,
    due: impl Fn(&str, i64) -> bool,
) -> S3Result<u64> {
    let mut aborted = 0;
    let mut pages = OmapPager::new(&gw.backend, &b.uploads_object(), &[], count_u32(MAX_PAGE));
    while let Some(page) = pages.next_page().await? {
        for (_, v) in &page {
            let u: UploadInfo = unseal(v).map_err(internal)?;
            if due(&u.key, u.initiated_ms) {
                let parts = all_parts(gw, &u.upload_id).await?;
                drop_upload(gw, b, &u, &parts).await?;
                aborted += 1;
            }
        }
    }
    Ok(aborted)
}

/// Aborts every upload of a bucket (before it is deleted).
pub async fn abort_all(gw: &Gateway, b: &BucketInfo) -> S3Result<()> {
    loop {
        let (page, _) = gw
            .backend
            .omap_list(&b.uploads_object(), &[], &[], count_u32(MAX_PAGE))
            .await
            .map_err(internal)?;
        if page.is_empty() {
            return Ok(());
        }
        for (_, v) in page {
            let u: UploadInfo = unseal(&v).map_err(internal)?;
            let parts = all_parts(gw, &u.upload_id).await?;
            drop_upload(gw, b, &u, &parts).await?;
        }
    }
}

/// CreateMultipartUpload.
pub async fn create(
    gw: &Gateway,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    let owner = gw.caller(&req).unwrap_or_else(|| ANONYMOUS.to_string());
    let input = req.input;
    let acl_asked = (
        input.acl.as_ref().map(|a| a.as_str().to_string()),
        any_grant!(input),
    );
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
    let checksum = multipart_checksum::declared(
        input.checksum_algorithm.as_ref(),
        input.checksum_type.as_ref(),
    )?;
    let tags = match input.tagging.as_deref() {
        Some(h) => tagging::from_header(h)?,
        None => Tags::new(),
    };
    let storage_class = gw.class_requested(input.storage_class.as_ref().map(|c| c.as_str()))?;
    let b = gw.bucket(&req.extensions, &input.bucket).await?;
    let acl = acl_on_write(&b, acl_asked.0.as_deref(), acl_asked.1)?;
    let asked_lock = input.object_lock_mode.is_some()
        || input.object_lock_retain_until_date.is_some()
        || input.object_lock_legal_hold_status.is_some();
    let lock = crate::lock_ops::for_new_version(
        &b,
        input.object_lock_mode.as_ref(),
        input.object_lock_retain_until_date.as_ref(),
        input.object_lock_legal_hold_status.as_ref(),
    )?;
    let u = UploadInfo {
        key: input.key.clone(),
        upload_id: fresh_id(),
        initiated_ms: now_ms(),
        owner,
        headers,
        stripe_bytes: gw.cfg.stripe_bytes,
        acl,
        checksum,
        tags,
        lock: asked_lock.then_some(lock),
        storage_class,
    };
    gw.backend
        .omap_set(
            &b.uploads_object(),
            &[(upload_key(&u.key, &u.upload_id), seal(&u))],
        )
        .await
        .map_err(internal)?;
    Ok(S3Response::new(CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(u.upload_id),
        checksum_algorithm: input.checksum_algorithm,
        checksum_type: checksum.map(|c| checksum_type(c.kind)),
        ..Default::default()
    }))
}

/// Records a stored part (`w`, in segment `seg_id`) as part `number` of upload `u`, removing
/// the part it replaces.
async fn record_part(
    gw: &Gateway,
    u: &UploadInfo,
    number: i32,
    w: &data::Written,
    seg_id: String,
) -> S3Result<PartInfo> {
    let part = PartInfo {
        number,
        etag: hex(&w.md5),
        size: w.size,
        segment: seg_id,
        mtime_ms: now_ms(),
        checksum: u.checksum.and(w.checksum.clone()),
    };
    let key = part_key(part.number);
    let (old, _) = gw
        .backend
        .omap_list(&parts_object(&u.upload_id), &[], &key, 1)
        .await
        .map_err(internal)?;
    gw.backend
        .omap_set(&parts_object(&u.upload_id), &[(key.clone(), seal(&part))])
        .await
        .map_err(internal)?;
    if let Some((_, v)) = old.first().filter(|(k, _)| *k == key) {
        let old: PartInfo = unseal(v).map_err(internal)?;
        let pool = gw.data_for(u.storage_class.as_deref())?;
        data::remove_segments(pool, u.stripe_bytes, &[segment_of(&old)]).await;
    }
    Ok(part)
}

/// The byte range `[start, end)` an `x-amz-copy-source-range` (`bytes=FIRST-LAST`) names in
/// an object of `size` bytes: InvalidArgument when malformed or past the end.
pub fn copy_source_range(range: &str, size: u64) -> S3Result<(u64, u64)> {
    let bad = || {
        s3_error!(
            InvalidArgument,
            "the x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy"
        )
    };
    let (first, last) = range
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .ok_or_else(bad)?;
    let first: u64 = first.parse().map_err(|_| bad())?;
    let last: u64 = last.parse().map_err(|_| bad())?;
    if first > last || last >= size {
        return Err(s3_error!(
            InvalidRange,
            "the range {first}-{last} is not within the source's {size} bytes"
        ));
    }
    Ok((first, last + 1))
}

/// UploadPartCopy: a part made of the source object's bytes (a range of them with
/// `x-amz-copy-source-range`); the caller must be allowed to read the source.
pub async fn upload_part_copy(
    gw: &Gateway,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    let input = &req.input;
    if !(1..=MAX_PARTS).contains(&input.part_number) {
        return Err(s3_error!(
            InvalidArgument,
            "part numbers are 1..={MAX_PARTS}"
        ));
    }
    let source = crate::object_ops::source_parts(&input.copy_source)?;
    let (_, src) = crate::object_ops::copy_source(
        gw,
        &req.extensions,
        source,
        &crate::headers::Conditions {
            if_match: input.copy_source_if_match.as_ref(),
            if_none_match: input.copy_source_if_none_match.as_ref(),
            if_modified_since: input.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
        },
    )
    .await?;
    let (start, end) = match input.copy_source_range.as_deref() {
        Some(r) => copy_source_range(r, src.size)?,
        None => (0, src.size),
    };
    check_length(i64::try_from(end - start).ok(), gw.cfg.max_put_bytes)?;
    let b = gw.bucket(&req.extensions, &input.bucket).await?;
    let u = get_upload(gw, &b, &input.key, &input.upload_id).await?;
    let seg_id = format!("{}.{}.{}", u.upload_id, input.part_number, &fresh_id()[..8]);
    let from = gw.data_for(src.storage_class.as_deref())?.clone();
    let body = data::blob(from, src.clone(), start, end);
    let algo = u.checksum.map(|c| c.algo);
    let pool = gw.data_for(u.storage_class.as_deref())?;
    let w = store_body(gw, pool, &seg_id, 0, Some(body), None, algo).await?;
    let part = record_part(gw, &u, input.part_number, &w, seg_id).await?;
    Ok(S3Response::new(UploadPartCopyOutput {
        copy_part_result: Some(CopyPartResult {
            e_tag: Some(etag(&part.etag)),
            last_modified: Some(timestamp(part.mtime_ms)),
            ..Default::default()
        }),
        copy_source_version_id: src.version_id.clone(),
        ..Default::default()
    }))
}

/// UploadPart.
pub async fn upload_part(
    gw: &Gateway,
    req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    let input = req.input;
    if !(1..=MAX_PARTS).contains(&input.part_number) {
        return Err(s3_error!(
            InvalidArgument,
            "part numbers are 1..={MAX_PARTS}"
        ));
    }
    check_length(input.content_length, gw.cfg.max_put_bytes)?;
    let md5 = content_md5(input.content_md5.as_deref())?;
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
    let b = gw.bucket(&req.extensions, &input.bucket).await?;
    let u = get_upload(gw, &b, &input.key, &input.upload_id).await?;
    if u.stripe_bytes != gw.cfg.stripe_bytes {
        return Err(s3_error!(
            InvalidRequest,
            "the gateway's stripe size changed since this upload started"
        ));
    }
    let algo = match (u.checksum.map(|c| c.algo), check.as_ref().map(|c| c.algo)) {
        (Some(declared), Some(sent)) if declared != sent => {
            return Err(s3_error!(
                InvalidRequest,
                "this upload's parts carry {} checksums, not {}",
                declared.header(),
                sent.header()
            ))
        }
        (declared, sent) => declared.or(sent),
    };
    let seg_id = format!("{}.{}.{}", u.upload_id, input.part_number, &fresh_id()[..8]);
    let pool = gw.data_for(u.storage_class.as_deref())?;
    let w = store_body(gw, pool, &seg_id, 0, input.body, md5, algo).await?;
    let sum = verify_checksum(gw, pool, &w, check.as_ref(), req.trailing_headers.as_ref()).await?;
    let part = record_part(gw, &u, input.part_number, &w, seg_id).await?;
    let mut out = UploadPartOutput {
        e_tag: Some(etag(&part.etag)),
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

/// The multipart ETag: MD5 of the concatenated binary part MD5s, `-N`.
pub fn multipart_etag(part_md5_hex: &[&str]) -> String {
    use s3s::crypto::{Checksum, Md5};
    let mut md5 = Md5::new();
    for h in part_md5_hex {
        let bytes: Vec<u8> = (0..h.len() / 2)
            .filter_map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).ok())
            .collect();
        md5.update(&bytes);
    }
    format!("{}-{}", hex(&md5.finalize()), part_md5_hex.len())
}

/// S3's name of a checksum type.
fn checksum_type(kind: Kind) -> ChecksumType {
    ChecksumType::from(
        match kind {
            Kind::Composite => ChecksumType::COMPOSITE,
            Kind::FullObject => ChecksumType::FULL_OBJECT,
        }
        .to_string(),
    )
}

/// The completed object's checksum, for an upload that declared one: each chosen part's
/// stored checksum must equal what the request names for it (InvalidPart), and a whole-object
/// value the request sends must equal the one made from the parts (BadDigest).
fn object_checksum(
    u: &UploadInfo,
    chosen: &[&PartInfo],
    wanted: &[CompletedPart],
    sent: &[Option<String>; 5],
) -> S3Result<Option<Checksum>> {
    let Some(declared) = u.checksum else {
        return Ok(None);
    };
    let slot = ALGOS
        .iter()
        .position(|a| *a == declared.algo)
        .expect("every algorithm has a slot");
    let mut parts = Vec::with_capacity(chosen.len());
    for (p, w) in chosen.iter().zip(wanted) {
        let stored = p.checksum.as_deref().ok_or_else(|| {
            s3_error!(
                InvalidPart,
                "part {} has no {} checksum",
                p.number,
                declared.algo.header()
            )
        })?;
        let named = [
            &w.checksum_crc32,
            &w.checksum_crc32c,
            &w.checksum_sha1,
            &w.checksum_sha256,
            &w.checksum_crc64nvme,
        ][slot];
        if named.as_deref().is_some_and(|n| n.trim() != stored) {
            return Err(s3_error!(
                InvalidPart,
                "part {}'s {} does not match the uploaded part",
                p.number,
                declared.algo.header()
            ));
        }
        parts.push((stored, p.size));
    }
    let value = multipart_checksum::combine(declared, &parts)?;
    if let Some(s) = sent[slot].as_deref() {
        if s.trim() != value {
            return Err(s3_error!(
                BadDigest,
                "the {} you specified did not match the calculated checksum",
                declared.algo.header()
            ));
        }
    }
    Ok(Some(Checksum {
        algo: declared.algo,
        value,
    }))
}

/// CompleteMultipartUpload.
pub async fn complete(
    gw: &Gateway,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    let input = req.input;
    let input_sums = [
        input.checksum_crc32.clone(),
        input.checksum_crc32c.clone(),
        input.checksum_sha1.clone(),
        input.checksum_sha256.clone(),
        input.checksum_crc64nvme.clone(),
    ];
    let b = gw.bucket(&req.extensions, &input.bucket).await?;
    let u = get_upload(gw, &b, &input.key, &input.upload_id).await?;
    let wanted = input
        .multipart_upload
        .and_then(|m| m.parts)
        .unwrap_or_default();
    if wanted.is_empty() {
        return Err(s3_error!(MalformedXML, "no parts given"));
    }
    let uploaded = all_parts(gw, &u.upload_id).await?;
    let mut chosen: Vec<&PartInfo> = Vec::with_capacity(wanted.len());
    let mut last = 0;
    for w in &wanted {
        let n = w.part_number.ok_or_else(|| s3_error!(InvalidPart))?;
        if n <= last {
            return Err(s3_error!(InvalidPartOrder));
        }
        last = n;
        let p = uploaded
            .iter()
            .find(|p| p.number == n)
            .ok_or_else(|| s3_error!(InvalidPart, "part {n} was not uploaded"))?;
        if w.e_tag.as_ref().is_some_and(|e| e.value() != p.etag) {
            return Err(s3_error!(InvalidPart, "part {n} has another ETag"));
        }
        chosen.push(p);
    }
    for p in &chosen[..chosen.len() - 1] {
        if p.size < MIN_PART_BYTES {
            return Err(s3_error!(
                EntityTooSmall,
                "part {} is {} bytes; parts but the last need {MIN_PART_BYTES}",
                p.number,
                p.size
            ));
        }
    }
    let checksum = object_checksum(&u, &chosen, &wanted, &input_sums)?;
    let tags: Vec<&str> = chosen.iter().map(|p| p.etag.as_str()).collect();
    let mut entry = Entry {
        size: chosen.iter().map(|p| p.size).sum(),
        etag: multipart_etag(&tags),
        mtime_ms: now_ms(),
        headers: u.headers.clone(),
        loc: DataLoc::Striped {
            stripe_bytes: u.stripe_bytes,
            segments: chosen.iter().map(|p| segment_of(p)).collect(),
        },
        parts: count_u32(chosen.len()),
        acl: u.acl,
        checksum: checksum.clone(),
        version_id: None,
        delete_marker: false,
        null_rank: None,
        storage_class: u.storage_class.clone(),
        tags: u.tags.clone(),
        retention: None,
        legal_hold: false,
        inline: Vec::new(),
    };
    let lock = match u.lock {
        Some(l) => l,
        None => crate::lock_ops::for_new_version(&b, None, None, None)?,
    };
    entry.retention = lock.retention;
    entry.legal_hold = lock.legal_hold;
    let version_id = commit_entry(gw, &b, &input.key, &mut entry).await?;
    let unused: Vec<PartInfo> = uploaded
        .iter()
        .filter(|p| !chosen.iter().any(|c| c.number == p.number))
        .cloned()
        .collect();
    drop_upload(gw, &b, &u, &unused).await?;
    let mut out = CompleteMultipartUploadOutput {
        bucket: Some(input.bucket.clone()),
        key: Some(input.key.clone()),
        e_tag: Some(etag(&entry.etag)),
        location: Some(format!("/{}/{}", input.bucket, input.key)),
        version_id,
        ..Default::default()
    };
    if let (Some(c), Some(d)) = (&checksum, u.checksum) {
        [
            out.checksum_crc32,
            out.checksum_crc32c,
            out.checksum_sha1,
            out.checksum_sha256,
            out.checksum_crc64nvme,
        ] = c.slots();
        out.checksum_type = Some(checksum_type(d.kind));
    }
    Ok(S3Response::new(out))
}

/// AbortMultipartUpload: removes the upload and every part's stripes.
pub async fn abort(
    gw: &Gateway,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let input = req.input;
    let b = gw.bucket(&req.extensions, &input.bucket).await?;
    let u = get_upload(gw, &b, &input.key, &input.upload_id).await?;
    let parts = all_parts(gw, &u.upload_id).await?;
    drop_upload(gw, &b, &u, &parts).await?;
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

/// ListParts.
pub async fn list_parts(
    gw: &Gateway,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let input = req.input;
    let b = gw.bucket(&req.extensions, &input.bucket).await?;
    let u = get_upload(gw, &b, &input.key, &input.upload_id).await?;
    let max = input
        .max_parts
        .map_or(MAX_PAGE, |m| (m.max(0) as usize).min(MAX_PAGE));
    let after = input.part_number_marker.filter(|m| *m > 0).map(part_key);
    let (page, more) = gw
        .backend
        .omap_list(
            &parts_object(&u.upload_id),
            after.as_deref().unwrap_or_default(),
            &[],
            count_u32(max.max(1)),
        )
        .await
        .map_err(internal)?;
    let parts: Vec<PartInfo> = page
        .iter()
        .take(max)
        .map(|(_, v)| unseal(v).map_err(internal))
        .collect::<S3Result<_>>()?;
    let truncated = more || page.len() > max;
    let owner = Owner {
        display_name: Some(u.owner.clone()),
        id: Some(u.owner.clone()),
    };
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(u.upload_id),
        max_parts: Some(count_i32(max)),
        is_truncated: Some(truncated),
        part_number_marker: input.part_number_marker,
        next_part_number_marker: parts.last().map(|p| p.number),
        initiator: Some(Initiator {
            display_name: owner.display_name.clone(),
            id: owner.id.clone(),
        }),
        owner: Some(owner),
        storage_class: Some(StorageClass::from(
            crate::storage_class::name_of(u.storage_class.as_deref()).to_string(),
        )),
        parts: Some(
            parts
                .iter()
                .map(|p| {
                    let mut part = Part {
                        e_tag: Some(etag(&p.etag)),
                        last_modified: Some(timestamp(p.mtime_ms)),
                        part_number: Some(p.number),
                        size: Some(p.size as i64),
                        ..Default::default()
                    };
                    if let (Some(c), Some(v)) = (u.checksum, &p.checksum) {
                        [
                            part.checksum_crc32,
                            part.checksum_crc32c,
                            part.checksum_sha1,
                            part.checksum_sha256,
                            part.checksum_crc64nvme,
                        ] = Checksum::slots_of(c.algo, v);
                    }
                    part
                })
                .collect(),
        ),
        ..Default::default()
    }))
}

/// ListMultipartUploads (prefix, key and upload-id markers; no delimiter roll-up).
pub async fn list_uploads(
    gw: &Gateway,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let input = req.input;
    let b = gw.bucket(&req.extensions, &input.bucket).await?;
    let max = input
        .max_uploads
        .map_or(MAX_PAGE, |m| (m.max(0) as usize).min(MAX_PAGE));
    // The uploads object's keys are `key \0 upload-id`: the version listing's merge applies,
    // with common prefixes taken before the `\0`.
    let marker = match (&input.key_marker, &input.upload_id_marker) {
        (Some(k), Some(u)) if !k.is_empty() && !u.is_empty() => format!("{k}\0{u}"),
        // Past every upload of the key: \u{1} sorts after the separator.
        (Some(k), _) if !k.is_empty() => format!("{k}\u{1}"),
        _ => String::new(),
    };
    let q = crate::listing::ListQuery {
        prefix: input.prefix.clone().unwrap_or_default(),
        delimiter: input.delimiter.clone().filter(|d| !d.is_empty()),
        marker,
        max,
        versioned: true,
    };
    let page = crate::listing::list(gw.backend.as_ref(), &[b.uploads_object()], &q)
        .await
        .map_err(internal)?;
    let mut uploads: Vec<UploadInfo> = Vec::new();
    let mut prefixes = Vec::new();
    let mut last: Option<(String, Option<String>)> = None;
    for item in &page.items {
        match item {
            crate::listing::Item::Object(_, v) => {
                let u: UploadInfo = unseal(v).map_err(internal)?;
                last = Some((u.key.clone(), Some(u.upload_id.clone())));
                uploads.push(u);
            }
            crate::listing::Item::Prefix(p) => {
                last = Some((p.clone(), None));
                prefixes.push(CommonPrefix {
                    prefix: Some(p.clone()),
                });
            }
        }
    }
    let truncated = page.truncated;
    let (next_key, next_upload) = match last.filter(|_| truncated) {
        Some((k, u)) => (Some(k), u),
        None => (None, None),
    };
    Ok(S3Response::new(ListMultipartUploadsOutput {
        bucket: Some(input.bucket),
        prefix: input.prefix,
        key_marker: input.key_marker,
        upload_id_marker: input.upload_id_marker,
        max_uploads: Some(count_i32(max)),
        is_truncated: Some(truncated),
        next_key_marker: next_key,
        next_upload_id_marker: next_upload,
        delimiter: input.delimiter,
        common_prefixes: Some(prefixes),
        uploads: Some(
            uploads
                .into_iter()
                .map(|u| MultipartUpload {
                    storage_class: Some(StorageClass::from(
                        crate::storage_class::name_of(u.storage_class.as_deref()).to_string(),
                    )),
                    key: Some(u.key),
                    upload_id: Some(u.upload_id),
                    initiated: Some(timestamp(u.initiated_ms)),
                    initiator: Some(Initiator {
                        display_name: Some(u.owner.clone()),
                        id: Some(u.owner.clone()),
                    }),
                    owner: Some(Owner {
                        display_name: Some(u.owner.clone()),
                        id: Some(u.owner),
                    }),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_etag_matches_aws_rule() {
        // Two parts whose MD5s are those of "a" and "b".
        let a = "0cc175b9c0f1b6a831c399e269772661";
        let b = "92eb5ffee6ae2fec3ad71c777531578f";
        let want = {
            use s3s::crypto::{Checksum, Md5};
            let mut bin = Vec::new();
            for h in [a, b] {
                for i in 0..16 {
                    bin.push(u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap());
                }
            }
            format!("{}-2", hex(&Md5::checksum(&bin)))
        };
        assert_eq!(multipart_etag(&[a, b]), want);
    }
}

#[cfg(test)]
mod copy_range_tests {
    use super::copy_source_range;

    #[test]
    fn copy_source_ranges_are_inclusive_and_checked() {
        assert_eq!(copy_source_range("bytes=0-9", 10).unwrap(), (0, 10));
        assert_eq!(copy_source_range("bytes=5-5", 10).unwrap(), (5, 6));
        for bad in [
            "0-9",
            "bytes=9-5",
            "bytes=a-b",
            "bytes=0-10",
            "bytes=-5",
            "bytes=5-",
        ] {
            assert!(copy_source_range(bad, 10).is_err(), "{bad}");
        }
    }
}
