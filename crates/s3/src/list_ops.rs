//! ListObjects (v1) and ListObjectsV2 over the sharded index (`listing`): max-keys capped at
//! 1000, markers, start-after, opaque continuation tokens (hex of the resume marker) and
//! `encoding-type=url`.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use crate::convert::count_i32;
use crate::data::hex;
use crate::entry::Entry;
use crate::gateway::Gateway;
use crate::headers::{etag, timestamp, url_encode};
use crate::listing::{self, Item, ListPage, ListQuery};

/// Largest page (AWS: 1000).
pub const MAX_KEYS: usize = 1000;

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

struct Listed {
    page: ListPage,
    contents: Vec<Object>,
    prefixes: Vec<CommonPrefix>,
}

async fn run(
    gw: &Gateway,
    bucket: &str,
    prefix: Option<&str>,
    delimiter: Option<&str>,
    marker: &str,
    max_keys: Option<i32>,
    url: bool,
) -> S3Result<Listed> {
    let b = gw.buckets.get(&gw.backend, bucket).await?;
    let max = match max_keys {
        Some(m) if m < 0 => return Err(s3_error!(InvalidArgument, "max-keys must be >= 0")),
        Some(m) => (m as usize).min(MAX_KEYS),
        None => MAX_KEYS,
    };
    let q = ListQuery {
        prefix: prefix.unwrap_or_default().to_string(),
        delimiter: delimiter.filter(|d| !d.is_empty()).map(str::to_string),
        marker: marker.to_string(),
        max,
        versioned: false,
    };
    let page = listing::list(gw.backend.as_ref(), &b.shard_names(), &q)
        .await
        .map_err(crate::data::internal)?;
    let enc = |s: &str| if url { url_encode(s) } else { s.to_string() };
    let mut contents = Vec::new();
    let mut prefixes = Vec::new();
    for item in &page.items {
        match item {
            Item::Object(key, value) => {
                let e = Entry::decode(value).map_err(crate::data::internal)?;
                contents.push(Object {
                    key: Some(enc(key)),
                    size: Some(e.size as i64),
                    e_tag: Some(etag(&e.etag)),
                    last_modified: Some(timestamp(e.mtime_ms)),
                    storage_class: Some(ObjectStorageClass::from(
                        crate::storage_class::name_of(e.storage_class.as_deref()).to_string(),
                    )),
                    ..Default::default()
                });
            }
            Item::Prefix(p) => prefixes.push(CommonPrefix {
                prefix: Some(enc(p)),
            }),
        }
    }
    Ok(Listed {
        page,
        contents,
        prefixes,
    })
}

/// Whether a listing asks for `encoding-type=url`.
pub(crate) fn is_url(e: Option<&EncodingType>) -> bool {
    e.is_some_and(|e| e.as_str() == EncodingType::URL)
}

/// ListObjects (v1).
pub async fn v1(
    gw: &Gateway,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let i = &req.input;
    let url = is_url(i.encoding_type.as_ref());
    let marker = i.marker.clone().unwrap_or_default();
    let l = run(
        gw,
        &i.bucket,
        i.prefix.as_deref(),
        i.delimiter.as_deref(),
        &marker,
        i.max_keys,
        url,
    )
    .await?;
    let enc = |s: &str| if url { url_encode(s) } else { s.to_string() };
    let next = l
        .page
        .truncated
        .then(|| l.page.items.last().map(|x| enc(x.marker())))
        .flatten();
    Ok(S3Response::new(ListObjectsOutput {
        name: Some(i.bucket.clone()),
        prefix: Some(enc(i.prefix.as_deref().unwrap_or_default())),
        marker: Some(enc(&marker)),
        max_keys: Some(i.max_keys.unwrap_or(count_i32(MAX_KEYS))),
        is_truncated: Some(l.page.truncated),
        contents: Some(l.contents),
        common_prefixes: Some(l.prefixes),
        delimiter: i.delimiter.as_deref().map(enc),
        next_marker: next,
        encoding_type: i.encoding_type.clone(),
        ..Default::default()
    }))
}

/// ListObjectsV2.
pub async fn v2(
    gw: &Gateway,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let i = &req.input;
    let url = is_url(i.encoding_type.as_ref());
    let marker = match &i.continuation_token {
        Some(t) => unhex(t)
            .ok_or_else(|| s3_error!(InvalidArgument, "the continuation token is not valid"))?,
        None => i.start_after.clone().unwrap_or_default(),
    };
    let l = run(
        gw,
        &i.bucket,
        i.prefix.as_deref(),
        i.delimiter.as_deref(),
        &marker,
        i.max_keys,
        url,
    )
    .await?;
    let enc = |s: &str| if url { url_encode(s) } else { s.to_string() };
    let next = l
        .page
        .truncated
        .then(|| l.page.items.last().map(|x| hex(x.marker().as_bytes())))
        .flatten();
    Ok(S3Response::new(ListObjectsV2Output {
        name: Some(i.bucket.clone()),
        prefix: Some(enc(i.prefix.as_deref().unwrap_or_default())),
        max_keys: Some(i.max_keys.unwrap_or(count_i32(MAX_KEYS))),
        key_count: Some(count_i32(l.contents.len() + l.prefixes.len())),
        continuation_token: i.continuation_token.clone(),
        is_truncated: Some(l.page.truncated),
        next_continuation_token: next,
        contents: Some(l.contents),
        common_prefixes: Some(l.prefixes),
        delimiter: i.delimiter.as_deref().map(enc),
        encoding_type: i.encoding_type.clone(),
        start_after: i.start_after.as_deref().map(enc),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_garbage_is_refused() {
        for s in ["", "a/b", "é/x"] {
            assert_eq!(unhex(&hex(s.as_bytes())).as_deref(), Some(s));
        }
        for bad in ["0", "zz", "ff"] {
            assert_eq!(unhex(bad), None);
        }
    }
}
