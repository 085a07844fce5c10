"""Copies and parts against a running cairn gateway, driven by boto3 and aws-cli: UploadPartCopy
with and without ranges (and refused ranges), boto3's managed copy (which copies a large object
part by part with UploadPartCopy), a version as the copy source, GetObject/HeadObject by
`partNumber`, and ListMultipartUploads with a delimiter and pages. Bytes read back are compared by SHA-256.

Run by crates/cli/tests/s3_gateway.rs with S3_ENDPOINT, AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY set. Exits non-zero with a message on the first failed check.
"""

import hashlib
import os
import random
import subprocess

from boto3.s3.transfer import TransferConfig

from s3common import empty_bucket, check, client, code_of, step, ENDPOINT

B = "copies"
MIB = 1 << 20

s3 = client(read_timeout=120)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def read(key, **kw):
    return s3.get_object(Bucket=B, Key=key, **kw)["Body"].read()


rng = random.Random(3)
src = rng.randbytes(13 * MIB + 5)
s3.create_bucket(Bucket=B)
s3.put_object(Bucket=B, Key="src", Body=src)

step("UploadPartCopy")
up = s3.create_multipart_upload(Bucket=B, Key="assembled")["UploadId"]
ranges = [(0, 6 * MIB - 1), (6 * MIB, 12 * MIB - 1), (12 * MIB, len(src) - 1)]
parts = []
for n, (a, z) in enumerate(ranges, start=1):
    r = s3.upload_part_copy(Bucket=B, Key="assembled", UploadId=up, PartNumber=n,
                            CopySource={"Bucket": B, "Key": "src"}, CopySourceRange=f"bytes={a}-{z}")
    etag = r["CopyPartResult"]["ETag"]
    check(etag.strip('"') == hashlib.md5(src[a:z + 1]).hexdigest(), f"part {n}'s ETag is its bytes' MD5")
    parts.append({"PartNumber": n, "ETag": etag})
for bad in [f"bytes=0-{len(src)}", "bytes=5-1", "0-5"]:
    code = code_of(s3.upload_part_copy, Bucket=B, Key="assembled", UploadId=up, PartNumber=9,
                   CopySource={"Bucket": B, "Key": "src"}, CopySourceRange=bad)
    check(code in ("InvalidRange", "InvalidArgument"), f"range {bad} refused: {code}")
check(code_of(s3.upload_part_copy, Bucket=B, Key="assembled", UploadId=up, PartNumber=9,
              CopySource={"Bucket": B, "Key": "missing"}) == "NoSuchKey", "a missing source")
check(code_of(s3.upload_part_copy, Bucket=B, Key="assembled", UploadId="nope", PartNumber=1,
              CopySource={"Bucket": B, "Key": "src"}) == "NoSuchUpload", "a missing upload")
s3.complete_multipart_upload(Bucket=B, Key="assembled", UploadId=up, MultipartUpload={"Parts": parts})
check(sha(read("assembled")) == sha(src), "the assembled object equals its source")

step("GetObject by part number")
r = s3.get_object(Bucket=B, Key="assembled", PartNumber=2)
body = r["Body"].read()
check(r["PartsCount"] == 3 and r["ResponseMetadata"]["HTTPStatusCode"] == 206
      and body == src[6 * MIB:12 * MIB], f"part 2: {r['ResponseMetadata']['HTTPStatusCode']} {len(body)}")
h = s3.head_object(Bucket=B, Key="assembled", PartNumber=3)
check(h["ContentLength"] == len(src) - 12 * MIB and h["PartsCount"] == 3, f"HEAD of part 3: {h}")
check(code_of(s3.get_object, Bucket=B, Key="assembled", PartNumber=4) == "InvalidPartNumber", "part 4")
check(read("src", PartNumber=1) == src, "part 1 of a plain object is all of it")
check(code_of(s3.get_object, Bucket=B, Key="assembled", PartNumber=1, Range="bytes=0-1")
      == "InvalidRequest", "a range and a part number together")

step("boto3's managed copy (UploadPartCopy underneath)")
cfg = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
s3.copy({"Bucket": B, "Key": "src"}, B, "managed", Config=cfg)
h = s3.head_object(Bucket=B, Key="managed")
check(h["ETag"].strip('"').endswith("-3"), f"copied in 3 parts: {h['ETag']}")
check(sha(read("managed")) == sha(src), "the managed copy equals its source")

step("a version as the source")
s3.put_bucket_versioning(Bucket=B, VersioningConfiguration={"Status": "Enabled"})
old = s3.put_object(Bucket=B, Key="v", Body=b"old" * 1000)["VersionId"]
s3.put_object(Bucket=B, Key="v", Body=b"new")
up = s3.create_multipart_upload(Bucket=B, Key="from-version")["UploadId"]
r = s3.upload_part_copy(Bucket=B, Key="from-version", UploadId=up, PartNumber=1,
                        CopySource={"Bucket": B, "Key": "v", "VersionId": old})
check(r.get("CopySourceVersionId") == old, f"the source version is named: {r}")
s3.complete_multipart_upload(Bucket=B, Key="from-version", UploadId=up,
                             MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": r["CopyPartResult"]["ETag"]}]})
check(read("from-version") == b"old" * 1000, "the old version's bytes")

step("ListMultipartUploads with a delimiter")
ids = {k: s3.create_multipart_upload(Bucket=B, Key=k)["UploadId"] for k in ["d/a/1", "d/a/2", "d/b", "d/c/x", "d/c/y"]}
r = s3.list_multipart_uploads(Bucket=B, Prefix="d/", Delimiter="/")
check([p["Prefix"] for p in r.get("CommonPrefixes", [])] == ["d/a/", "d/c/"]
      and [u["Key"] for u in r.get("Uploads", [])] == ["d/b"], f"roll-up: {r.get('CommonPrefixes')} {r.get('Uploads')}")
seen, kw = [], {}
while True:
    r = s3.list_multipart_uploads(Bucket=B, Prefix="d/", MaxUploads=2, **kw)
    seen += [u["Key"] for u in r.get("Uploads", [])]
    if not r["IsTruncated"]:
        break
    kw = {"KeyMarker": r["NextKeyMarker"], "UploadIdMarker": r["NextUploadIdMarker"]}
check(seen == sorted(ids), f"pages of 2 uploads: {seen}")
for k, u in ids.items():
    s3.abort_multipart_upload(Bucket=B, Key=k, UploadId=u)

step("aws-cli")
env = dict(os.environ, AWS_DEFAULT_REGION="us-east-1")
r = subprocess.run(["aws", "--endpoint-url", ENDPOINT, "s3", "cp", f"s3://{B}/src", f"s3://{B}/cli-copy"],
                   env=env, capture_output=True, text=True, timeout=300)
check(r.returncode == 0, f"aws s3 cp: {r.stderr}")
check(sha(read("cli-copy")) == sha(src), "aws s3 cp between keys")

step("clean up")
empty_bucket(s3, B)

print("ALL COPY CHECKS PASSED", flush=True)
