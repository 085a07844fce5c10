//! Tag sets of objects and buckets: parsing the `x-amz-tagging` header and TagSet XML, with
//! AWS's limits checked (10 tags on an object, 50 on a bucket, keys up to 128 characters,
//! values up to 256, keys unique, none in the reserved `aws:` namespace). Pure: no I/O.

use std::collections::BTreeMap;

use s3s::dto::Tag;
use s3s::{s3_error, S3Result};

/// A tag set: key -> value, in key order.
pub type Tags = BTreeMap<String, String>;

/// Most tags on one object (AWS: 10).
pub const MAX_OBJECT_TAGS: usize = 10;
/// Most tags on one bucket (AWS: 50).
pub const MAX_BUCKET_TAGS: usize = 50;
/// Longest tag key, in characters (AWS: 128).
pub const MAX_TAG_KEY_CHARS: usize = 128;
/// Longest tag value, in characters (AWS: 256).
pub const MAX_TAG_VALUE_CHARS: usize = 256;

fn add(tags: &mut Tags, key: String, value: String, max: usize) -> S3Result<()> {
    let chars = key.chars().count();
    if chars == 0 || chars > MAX_TAG_KEY_CHARS {
        return Err(s3_error!(
            InvalidTag,
            "a tag key is 1 to {MAX_TAG_KEY_CHARS} characters"
        ));
    }
    if value.chars().count() > MAX_TAG_VALUE_CHARS {
        return Err(s3_error!(
            InvalidTag,
            "a tag value is at most {MAX_TAG_VALUE_CHARS} characters"
        ));
    }
    if key.to_ascii_lowercase().starts_with("aws:") {
        return Err(s3_error!(
            InvalidTag,
            "tag keys starting with aws: are reserved"
        ));
    }
    if tags.insert(key, value).is_some() {
        return Err(s3_error!(InvalidTag, "tag keys must be unique"));
    }
    if tags.len() > max {
        return Err(s3_error!(InvalidTag, "at most {max} tags"));
    }
    Ok(())
}

/// The tags of a TagSet (PutObjectTagging, PutBucketTagging), at most `max` of them.
pub fn from_tag_set(set: &[Tag], max: usize) -> S3Result<Tags> {
    let mut tags = Tags::new();
    for t in set {
        let key = t
            .key
            .clone()
            .ok_or_else(|| s3_error!(MalformedXML, "a tag without a key"))?;
        add(&mut tags, key, t.value.clone().unwrap_or_default(), max)?;
    }
    Ok(tags)
}

/// The tags of an `x-amz-tagging` header (URL-encoded `k1=v1&k2=v2`), at most
/// [`MAX_OBJECT_TAGS`].
pub fn from_header(header: &str) -> S3Result<Tags> {
    let mut tags = Tags::new();
    for (k, v) in form_urlencoded::parse(header.as_bytes()) {
        add(&mut tags, k.into_owned(), v.into_owned(), MAX_OBJECT_TAGS)?;
    }
    Ok(tags)
}

/// A TagSet for a reply.
pub fn to_tag_set(tags: &Tags) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(k: &str, v: &str) -> Tag {
        Tag {
            key: Some(k.into()),
            value: Some(v.into()),
        }
    }

    fn code(r: S3Result<Tags>) -> String {
        r.unwrap_err().code().as_str().to_string()
    }

    #[test]
    fn headers_and_tag_sets_parse_within_the_limits() {
        let t = from_header("project=blue&owner=a%20b&empty=").unwrap();
        assert_eq!(t["owner"], "a b");
        assert_eq!(t["empty"], "");
        assert_eq!(from_header("").unwrap().len(), 0);
        let set: Vec<Tag> = (0..50).map(|i| tag(&format!("k{i}"), "v")).collect();
        assert_eq!(from_tag_set(&set, MAX_BUCKET_TAGS).unwrap().len(), 50);
        assert_eq!(to_tag_set(&t).len(), 3);
    }

    #[test]
    fn bad_tags_are_refused_with_aws_codes() {
        let eleven: String = (0..11).map(|i| format!("k{i}=v&")).collect();
        assert_eq!(code(from_header(&eleven)), "InvalidTag");
        assert_eq!(code(from_header("a=1&a=2")), "InvalidTag");
        assert_eq!(code(from_header("aws:x=1")), "InvalidTag");
        assert_eq!(code(from_header("=v")), "InvalidTag");
        let long_key = "k".repeat(129);
        assert_eq!(code(from_tag_set(&[tag(&long_key, "v")], 10)), "InvalidTag");
        let long_value = "v".repeat(257);
        assert_eq!(
            code(from_tag_set(&[tag("k", &long_value)], 10)),
            "InvalidTag"
        );
        let unkeyed = Tag {
            key: None,
            value: Some("v".into()),
        };
        assert_eq!(code(from_tag_set(&[unkeyed], 10)), "MalformedXML");
        // 128 multi-byte characters are within the limit.
        let wide = "é".repeat(128);
        assert!(from_tag_set(&[tag(&wide, "v")], 10).is_ok());
    }
}
