"""End-to-end S3 checks against a running cairn gateway, driven by boto3, aws-cli, s3cmd and
rclone, plus aws-chunked uploads built here (no client sends signed chunks over plain http).

Run by crates/cli/tests/s3_gateway.rs with S3_ENDPOINT, AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY set (and S3_LIMITED_ENDPOINT for the rate-limit check). Exits non-zero
with a message on the first failed check. The rclone round trip is skipped, loudly, only when
rclone is not installed and CI is not set.
"""

import base64
import datetime
import hashlib
import hmac
import http.client
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import zlib
from concurrent.futures import ThreadPoolExecutor

import boto3
import botocore
import botocore.auth
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.exceptions import ClientError
from boto3.s3.transfer import TransferConfig

ENDPOINT = os.environ["S3_ENDPOINT"]
AK = os.environ["AWS_ACCESS_KEY_ID"]
SK = os.environ["AWS_SECRET_ACCESS_KEY"]
MIB = 1 << 20
RNG = random.Random(7)

CFG = Config(
    signature_version="s3v4",
    s3={"addressing_style": "path"},
    retries={"max_attempts": 1, "mode": "standard"},
    connect_timeout=30,
    read_timeout=120,
)
s3 = boto3.client(
    "s3",
    endpoint_url=ENDPOINT,
    aws_access_key_id=AK,
    aws_secret_access_key=SK,
    region_name="us-east-1",
    config=CFG,
)


def check(cond, msg):
    if not cond:
        print("FAILED:", msg, flush=True)
        sys.exit(1)


def step(name):
    print("==", name, flush=True)


def code_of(fn, *args, **kwargs):
    """The S3 error code a call fails with (None on success)."""
    try:
        fn(*args, **kwargs)
    except ClientError as e:
        return e.response["Error"]["Code"]
    return None


def md5(b):
    return hashlib.md5(b).hexdigest()


def raw(method, url, headers=None, body=None):
    """(status, body) of a plain HTTP request."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    path = u.path + ("?" + u.query if u.query else "")
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


B = os.environ.get("S3_BUCKET", "cairn-e2e")

step("anonymous access is denied")
status, body = raw("GET", ENDPOINT + "/")
check(status == 403 and b"AccessDenied" in body, f"anonymous GET / gave {status} {body[:200]}")

step("buckets")
s3.create_bucket(Bucket=B)
s3.head_bucket(Bucket=B)
check(B in [b["Name"] for b in s3.list_buckets()["Buckets"]], "bucket listed")
check(code_of(s3.create_bucket, Bucket=B) == "BucketAlreadyOwnedByYou", "re-create refused")
check(code_of(s3.head_bucket, Bucket="no-such-bucket-x") in ("404", "NoSuchBucket"), "head missing")
check(code_of(s3.put_object, Bucket="no-such-bucket-x", Key="k", Body=b"x") == "NoSuchBucket", "put into missing bucket")

step("objects of 0 B .. 100 MiB, verified by MD5")
sizes = [0, 1, 1000, 64 * 1024, 64 * 1024 + 1, 4 * MIB - 1, 4 * MIB, 4 * MIB + 1, 24 * MIB + 3, 100 * MIB]
blobs = {}
for n in sizes:
    data = RNG.randbytes(n)
    key = f"obj/{n}"
    blobs[key] = data
    r = s3.put_object(Bucket=B, Key=key, Body=data, ContentType="application/x-test",
                      Metadata={"origin": "e2e", "size": str(n)})
    check(r["ETag"].strip('"') == md5(data), f"ETag of {n} B")
for key, data in blobs.items():
    r = s3.get_object(Bucket=B, Key=key)
    back = r["Body"].read()
    check(len(back) == len(data) and md5(back) == md5(data), f"content of {key}")
    check(r["ContentType"] == "application/x-test", f"content type of {key}")
    check(r["Metadata"] == {"origin": "e2e", "size": str(len(data))}, f"metadata of {key}: {r['Metadata']}")
    h = s3.head_object(Bucket=B, Key=key)
    check(h["ContentLength"] == len(data) and h["ETag"].strip('"') == md5(data), f"head of {key}")
check(code_of(s3.get_object, Bucket=B, Key="obj/none") == "NoSuchKey", "missing key")

step("ranged GETs")
big = blobs[f"obj/{24 * MIB + 3}"]
bk = f"obj/{24 * MIB + 3}"
for rng, want in [
    ("bytes=0-0", big[0:1]),
    ("bytes=5-100", big[5:101]),
    ("bytes=-100", big[-100:]),
    (f"bytes={len(big) - 10}-", big[-10:]),
    (f"bytes={4 * MIB - 10}-{4 * MIB + 9}", big[4 * MIB - 10:4 * MIB + 10]),
    (f"bytes={3 * MIB}-{13 * MIB}", big[3 * MIB:13 * MIB + 1]),
    (f"bytes=0-{len(big) + 100}", big),
]:
    r = s3.get_object(Bucket=B, Key=bk, Range=rng)
    back = r["Body"].read()
    check(back == want, f"range {rng}: {len(back)} bytes")
    check(r["ResponseMetadata"]["HTTPStatusCode"] == 206, f"206 for {rng}")
    check(r["ContentRange"].endswith(f"/{len(big)}"), f"content-range for {rng}")
small = blobs["obj/1000"]
check(s3.get_object(Bucket=B, Key="obj/1000", Range="bytes=10-19")["Body"].read() == small[10:20], "inline range")
check(code_of(s3.get_object, Bucket=B, Key=bk, Range=f"bytes={len(big)}-") == "InvalidRange", "unsatisfiable range")

step("conditional GETs")
tag = '"' + md5(small) + '"'
check(code_of(s3.get_object, Bucket=B, Key="obj/1000", IfNoneMatch=tag) == "304", "If-None-Match hit")
check(code_of(s3.get_object, Bucket=B, Key="obj/1000", IfMatch='"0000"') == "PreconditionFailed", "If-Match miss")
s3.get_object(Bucket=B, Key="obj/1000", IfMatch=tag)
future = "Mon, 01 Jan 2100 00:00:00 GMT"
past = "Mon, 01 Jan 2001 00:00:00 GMT"
check(code_of(s3.get_object, Bucket=B, Key="obj/1000", IfModifiedSince=future) == "304", "If-Modified-Since")
check(code_of(s3.get_object, Bucket=B, Key="obj/1000", IfUnmodifiedSince=past) == "PreconditionFailed", "If-Unmodified-Since")
s3.get_object(Bucket=B, Key="obj/1000", IfModifiedSince=past)

step("overwrite (large over small, small over large)")
s3.put_object(Bucket=B, Key="ow", Body=b"tiny")
payload = RNG.randbytes(9 * MIB)
s3.put_object(Bucket=B, Key="ow", Body=payload)
check(md5(s3.get_object(Bucket=B, Key="ow")["Body"].read()) == md5(payload), "large over small")
s3.put_object(Bucket=B, Key="ow", Body=b"tiny again")
check(s3.get_object(Bucket=B, Key="ow")["Body"].read() == b"tiny again", "small over large")

step("copy")
s3.copy_object(Bucket=B, Key="copy/big", CopySource={"Bucket": B, "Key": bk})
check(md5(s3.get_object(Bucket=B, Key="copy/big")["Body"].read()) == md5(big), "copied big")
s3.copy_object(Bucket=B, Key="copy/small", CopySource={"Bucket": B, "Key": "obj/1000"},
               MetadataDirective="REPLACE", Metadata={"new": "yes"}, ContentType="text/plain")
h = s3.head_object(Bucket=B, Key="copy/small")
check(h["Metadata"] == {"new": "yes"} and h["ContentType"] == "text/plain", f"replaced metadata {h['Metadata']}")
check(s3.get_object(Bucket=B, Key="copy/small")["Body"].read() == small, "copied small")
check(code_of(s3.copy_object, Bucket=B, Key="copy/x", CopySource={"Bucket": B, "Key": "obj/1000"},
              CopySourceIfMatch='"nope"') == "PreconditionFailed", "copy-source-if-match")

step("listing 10,100 keys with delimiters and pagination")
keys = [f"many/dir{i % 10}/file{i:05d}" for i in range(10000)] + [f"many/top{i:03d}" for i in range(100)]
with ThreadPoolExecutor(32) as pool:
    list(pool.map(lambda k: s3.put_object(Bucket=B, Key=k, Body=k.encode()), keys))
keys.sort()


def list_all(version, **kw):
    out, prefixes = [], []
    if version == 2:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=B, **kw)
    else:
        pages = s3.get_paginator("list_objects").paginate(Bucket=B, **kw)
    for p in pages:
        out += [o["Key"] for o in p.get("Contents", [])]
        prefixes += [c["Prefix"] for c in p.get("CommonPrefixes", [])]
    return out, prefixes


for version in (1, 2):
    got, _ = list_all(version, Prefix="many/", PaginationConfig={"PageSize": 997})
    check(got == keys, f"v{version} paginated listing: {len(got)} keys")
    got, prefixes = list_all(version, Prefix="many/", Delimiter="/", PaginationConfig={"PageSize": 7})
    check(prefixes == [f"many/dir{i}/" for i in range(10)], f"v{version} common prefixes {prefixes}")
    check(got == [k for k in keys if k.startswith("many/top")], f"v{version} keys beside prefixes")
r = s3.list_objects_v2(Bucket=B, Prefix="many/", StartAfter="many/dir9/file00999", MaxKeys=5)
check([o["Key"] for o in r["Contents"]] == [k for k in keys if k > "many/dir9/file00999"][:5], "start-after")
r = s3.list_objects(Bucket=B, Prefix="many/dir3/", Marker="many/dir3/file00500", MaxKeys=1000)
check([o["Key"] for o in r["Contents"]] == [k for k in keys if k.startswith("many/dir3/") and k > "many/dir3/file00500"], "marker")
r = s3.list_objects_v2(Bucket=B, Delimiter="/")
check(sorted(c["Prefix"] for c in r["CommonPrefixes"]) == ["copy/", "many/", "obj/"], f"top level {r.get('CommonPrefixes')}")
check(r["KeyCount"] == 4 and [o["Key"] for o in r["Contents"]] == ["ow"], "top-level keys")
check(code_of(s3.list_objects_v2, Bucket=B, ContinuationToken="zz") == "InvalidArgument", "bad token")

step("batch delete of 10 x 1,000 keys")
doomed = [k for k in keys if "/dir" in k]
for i in range(0, len(doomed), 1000):
    r = s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": k} for k in doomed[i:i + 1000]]})
    check(len(r.get("Deleted", [])) == 1000 and not r.get("Errors"), f"deleted {len(r.get('Deleted', []))}")
got, _ = list_all(2, Prefix="many/")
check(got == [k for k in keys if "/top" in k], f"after batch delete {len(got)}")
r = s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": k} for k in got], "Quiet": True})
check(not r.get("Deleted") and not r.get("Errors"), "quiet delete")
s3.delete_object(Bucket=B, Key="never-existed")

step("multipart upload with 3 parts")
parts_data = [RNG.randbytes(5 * MIB), RNG.randbytes(5 * MIB + 17), RNG.randbytes(MIB + 7)]
up = s3.create_multipart_upload(Bucket=B, Key="mp/obj", ContentType="application/x-mp", Metadata={"m": "1"})
uid = up["UploadId"]
check(any(u["UploadId"] == uid for u in s3.list_multipart_uploads(Bucket=B).get("Uploads", [])), "upload listed")
etags = []
for i, d in enumerate(parts_data, 1):
    etags.append(s3.upload_part(Bucket=B, Key="mp/obj", UploadId=uid, PartNumber=i, Body=d)["ETag"])
# Part 2 uploaded again: the second copy wins.
parts_data[1] = RNG.randbytes(5 * MIB + 1)
etags[1] = s3.upload_part(Bucket=B, Key="mp/obj", UploadId=uid, PartNumber=2, Body=parts_data[1])["ETag"]
lp = s3.list_parts(Bucket=B, Key="mp/obj", UploadId=uid)
check([p["PartNumber"] for p in lp["Parts"]] == [1, 2, 3], "list parts")
check([p["Size"] for p in lp["Parts"]] == [len(d) for d in parts_data], "part sizes")
lp = s3.list_parts(Bucket=B, Key="mp/obj", UploadId=uid, MaxParts=2)
check(lp["IsTruncated"] and lp["NextPartNumberMarker"] == 2, "list parts paging")
check(code_of(s3.complete_multipart_upload, Bucket=B, Key="mp/obj", UploadId=uid,
              MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": etags[1]}, {"PartNumber": 1, "ETag": etags[0]}]})
      == "InvalidPartOrder", "part order")
check(code_of(s3.complete_multipart_upload, Bucket=B, Key="mp/obj", UploadId=uid,
              MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"bad"'}]}) == "InvalidPart", "part etag")
r = s3.complete_multipart_upload(Bucket=B, Key="mp/obj", UploadId=uid, MultipartUpload={
    "Parts": [{"PartNumber": i + 1, "ETag": e} for i, e in enumerate(etags)]})
want_etag = hashlib.md5(b"".join(hashlib.md5(d).digest() for d in parts_data)).hexdigest() + "-3"
check(r["ETag"].strip('"') == want_etag, f"multipart ETag {r['ETag']} != {want_etag}")
whole = b"".join(parts_data)
g = s3.get_object(Bucket=B, Key="mp/obj")
check(md5(g["Body"].read()) == md5(whole), "multipart content")
check(g["ContentType"] == "application/x-mp" and g["Metadata"] == {"m": "1"}, "multipart headers")
check(s3.get_object(Bucket=B, Key="mp/obj", Range=f"bytes={5 * MIB - 3}-{5 * MIB + 3}")["Body"].read()
      == whole[5 * MIB - 3:5 * MIB + 4], "range across parts")
check(code_of(s3.list_parts, Bucket=B, Key="mp/obj", UploadId=uid) == "NoSuchUpload", "completed upload gone")

step("multipart: small part refused, abort cleans up")
up = s3.create_multipart_upload(Bucket=B, Key="mp/small")
e1 = s3.upload_part(Bucket=B, Key="mp/small", UploadId=up["UploadId"], PartNumber=1, Body=b"x" * 100)["ETag"]
e2 = s3.upload_part(Bucket=B, Key="mp/small", UploadId=up["UploadId"], PartNumber=2, Body=b"y" * 100)["ETag"]
check(code_of(s3.complete_multipart_upload, Bucket=B, Key="mp/small", UploadId=up["UploadId"],
              MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
      == "EntityTooSmall", "5 MiB minimum")
s3.abort_multipart_upload(Bucket=B, Key="mp/small", UploadId=up["UploadId"])
check(code_of(s3.list_parts, Bucket=B, Key="mp/small", UploadId=up["UploadId"]) == "NoSuchUpload", "aborted")
check(not s3.list_multipart_uploads(Bucket=B).get("Uploads"), "no uploads left")
check(code_of(s3.upload_part, Bucket=B, Key="mp/small", UploadId="nope", PartNumber=1, Body=b"x") == "NoSuchUpload", "part of unknown upload")

step("boto3 managed transfer (multipart, 4 threads)")
blob16 = RNG.randbytes(16 * MIB + 5)
with tempfile.NamedTemporaryFile() as f:
    f.write(blob16)
    f.flush()
    tc = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB, max_concurrency=4)
    s3.upload_file(f.name, B, "mp/managed", Config=tc)
    s3.download_file(B, "mp/managed", f.name + ".back", Config=tc)
    with open(f.name + ".back", "rb") as back:
        check(md5(back.read()) == md5(blob16), "managed transfer round trip")
    os.unlink(f.name + ".back")

step("presigned GET and PUT")
url = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "obj/1000"}, ExpiresIn=600)
status, body = raw("GET", url)
check(status == 200 and body == small, f"presigned GET {status}")
put_url = s3.generate_presigned_url("put_object", Params={"Bucket": B, "Key": "presigned"}, ExpiresIn=600)
status, body = raw("PUT", put_url, body=b"via presigned put")
check(status == 200, f"presigned PUT {status} {body[:300]}")
check(s3.get_object(Bucket=B, Key="presigned")["Body"].read() == b"via presigned put", "presigned PUT content")

step("tampered presigned URLs are all rejected")
u = urllib.parse.urlsplit(url)
q = urllib.parse.parse_qsl(u.query, keep_blank_values=True)


def with_query(qs, path=None):
    return urllib.parse.urlunsplit((u.scheme, u.netloc, path or u.path, urllib.parse.urlencode(qs), ""))


def mutate(qs, name, fn):
    return [(k, fn(v) if k == name else v) for k, v in qs]


def flip(s):
    c = s[-1]
    return s[:-1] + ("0" if c != "0" else "1")


tampered = {
    "signature": with_query(mutate(q, "X-Amz-Signature", flip)),
    "credential key": with_query(mutate(q, "X-Amz-Credential", lambda v: flip(v.split("/")[0]) + v[v.index("/"):])),
    "credential region": with_query(mutate(q, "X-Amz-Credential", lambda v: v.replace("us-east-1", "eu-west-1"))),
    "date": with_query(mutate(q, "X-Amz-Date", lambda v: v[:-3] + ("00Z" if v[-3:] != "00Z" else "01Z"))),
    "expires": with_query(mutate(q, "X-Amz-Expires", lambda v: str(int(v) + 1))),
    "signed headers": with_query(mutate(q, "X-Amz-SignedHeaders", lambda v: v + ";x-amz-date")),
    "path": with_query(q, path=u.path.replace("obj/1000", "obj/1001")),
    "extra parameter": with_query(q + [("response-content-type", "text/html")]),
    "no signature": with_query([(k, v) for k, v in q if k != "X-Amz-Signature"]),
}
for what, turl in tampered.items():
    status, body = raw("GET", turl)
    check(status in (400, 403) and body != small, f"tampered {what}: {status} {body[:200]}")
status, _ = raw("DELETE", url)
check(status in (400, 403), f"presigned GET used for DELETE: {status}")
check(s3.head_object(Bucket=B, Key="obj/1000")["ContentLength"] == 1000, "object survived")

step("expired and over-long presigned URLs")
short = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "obj/1000"}, ExpiresIn=1)
time.sleep(2.5)
status, body = raw("GET", short)
check(status == 403 and b"AccessDenied" in body, f"expired URL: {status} {body[:200]}")
long = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "obj/1000"}, ExpiresIn=7 * 24 * 3600 + 1)
status, body = raw("GET", long)
check(status in (400, 403) and b"AuthorizationQueryParametersError" in body, f"8-day URL: {status} {body[:200]}")

step("tampered header signatures are all rejected")
creds = botocore.credentials.Credentials(AK, SK)


def signed(method, path, body=b"", headers=None):
    headers = dict(headers or {}, **{"x-amz-content-sha256": hashlib.sha256(body).hexdigest()})
    req = AWSRequest(method=method, url=ENDPOINT + path, data=body, headers=headers)
    SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
    return dict(req.headers.items())


h = signed("GET", "/" + B + "/obj/1000")
status, body = raw("GET", ENDPOINT + "/" + B + "/obj/1000", headers=h)
check(status == 200 and body == small, f"hand-signed GET works: {status} {body[:200]}")


def bad(method, path, headers, body=None, what=""):
    status, resp = raw(method, ENDPOINT + path, headers=headers, body=body)
    check(status in (400, 403), f"tampered {what}: {status} {resp[:200]}")


path = "/" + B + "/obj/1000"
auth = h["Authorization"]
bad("GET", path, {**h, "Authorization": auth[:-1] + ("0" if auth[-1] != "0" else "1")}, what="signature")
bad("GET", path, {**h, "Authorization": auth.replace(AK, AK[:-1] + ("A" if AK[-1] != "A" else "B"))}, what="access key")
bad("GET", path, {**h, "X-Amz-Date": h["X-Amz-Date"][:-2] + ("0Z" if h["X-Amz-Date"][-2] != "0" else "1Z")}, what="date")
bad("GET", path, {**h, "x-amz-content-sha256": hashlib.sha256(b"x").hexdigest()}, what="payload hash")
bad("GET", path.replace("1000", "1001"), h, what="path")
bad("GET", path + "?versionId=x", h, what="query")
bad("DELETE", path, h, what="method")
bad("GET", path, {**h, "Authorization": auth.replace("us-east-1", "eu-west-1")}, what="scope region")
ph = signed("PUT", "/" + B + "/hdr-put", body=b"signed body")
bad("PUT", "/" + B + "/hdr-put", ph, body=b"other body!", what="body")
status, _ = raw("PUT", ENDPOINT + "/" + B + "/hdr-put", headers=ph, body=b"signed body")
check(status == 200, f"hand-signed PUT works: {status}")
old = botocore.credentials.Credentials(AK, SK)
req = AWSRequest(method="GET", url=ENDPOINT + path, headers={"x-amz-content-sha256": hashlib.sha256(b"").hexdigest()})
# A correctly signed request dated 20 minutes ago: outside the 15-minute window.
now_fn = botocore.auth.get_current_datetime
botocore.auth.get_current_datetime = lambda: now_fn() - datetime.timedelta(minutes=20)
try:
    SigV4Auth(old, "s3", "us-east-1").add_auth(req)
finally:
    botocore.auth.get_current_datetime = now_fn
status, body = raw("GET", ENDPOINT + path, headers=dict(req.headers.items()))
check(status == 403 and b"RequestTimeTooSkewed" in body, f"skewed request: {status} {body[:200]}")

step("aws-chunked uploads: every chunk signature verified")
STREAMING = {
    "signed": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
    "signed-trailer": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
    "unsigned-trailer": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
}
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def hmac256(k, msg):
    return hmac.new(k, msg.encode() if isinstance(msg, str) else msg, hashlib.sha256).digest()


def chunked_put(key, data, chunk=64 * 1024, mode="signed", tamper=None, tamper_chunk=1):
    """PUT `data` as an aws-chunked body, signed per SigV4 streaming (seed signature over the
    head, then one signature per chunk chained from it, then the trailer's). `tamper` changes
    one thing after signing: "chunk-signature" (one hex digit of chunk `tamper_chunk`'s
    signature), "chunk-data" (one byte of that chunk), "trailer-signature" or
    "trailer-value". Returns (status, response body)."""
    u = urllib.parse.urlsplit(ENDPOINT)
    amz_date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    scope = f"{amz_date[:8]}/us-east-1/s3/aws4_request"
    skey = hmac256(hmac256(hmac256(hmac256(("AWS4" + SK).encode(), amz_date[:8]), "us-east-1"), "s3"), "aws4_request")
    marker = STREAMING[mode]
    signed = mode != "unsigned-trailer"
    pieces = [data[i:i + chunk] for i in range(0, len(data), chunk)] + [b""]
    crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    trailer = f"x-amz-checksum-crc32:{crc}"

    def body_with(sigs, trailer_sig):
        out = []
        for i, p in enumerate(pieces):
            ext = f";chunk-signature={sigs[i]}" if signed else ""
            out.append(f"{len(p):x}{ext}\r\n".encode())
            if p or mode == "signed":
                out.append(p + b"\r\n")
        if mode != "signed":
            out.append((trailer + "\r\n").encode())
            if signed:
                out.append(f"x-amz-trailer-signature:{trailer_sig}\r\n".encode())
            out.append(b"\r\n")
        return b"".join(out)

    length = len(body_with(["0" * 64] * len(pieces), "0" * 64))
    path = "/" + B + "/" + urllib.parse.quote(key, safe="/~")
    headers = {
        "host": u.netloc,
        "x-amz-date": amz_date,
        "x-amz-content-sha256": marker,
        "content-encoding": "aws-chunked",
        "x-amz-decoded-content-length": str(len(data)),
        "content-length": str(length),
    }
    if mode != "signed":
        headers["x-amz-trailer"] = "x-amz-checksum-crc32"
    names = sorted(headers)
    canonical = "\n".join(["PUT", path, "", "".join(f"{n}:{headers[n]}\n" for n in names), ";".join(names), marker])
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    prev = hmac.new(skey, sts.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={AK}/{scope}, SignedHeaders={';'.join(names)}, "
                                f"Signature={prev}")
    sigs = []
    for p in pieces:
        if signed:
            prev = hmac.new(skey, "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, prev, EMPTY_SHA256,
                                             hashlib.sha256(p).hexdigest()]).encode(), hashlib.sha256).hexdigest()
        sigs.append(prev)
    trailer_sig = hmac.new(skey, "\n".join(["AWS4-HMAC-SHA256-TRAILER", amz_date, scope, prev, hashlib.sha256(
        (trailer + "\n").encode()).hexdigest()]).encode(), hashlib.sha256).hexdigest()
    if tamper == "chunk-signature":
        s = sigs[tamper_chunk]
        sigs[tamper_chunk] = s[:10] + ("0" if s[10] != "0" else "1") + s[11:]
    if tamper == "chunk-data":
        p = bytearray(pieces[tamper_chunk])
        p[len(p) // 2] ^= 0x01
        pieces[tamper_chunk] = bytes(p)
    if tamper == "trailer-signature":
        trailer_sig = trailer_sig[:-1] + ("0" if trailer_sig[-1] != "0" else "1")
    if tamper == "trailer-value":
        trailer = f"x-amz-checksum-crc32:{base64.b64encode(b'abcd').decode()}"
    body = body_with(sigs, trailer_sig)
    check(len(body) == length, "chunked body length")
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    try:
        conn.request("PUT", path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


for mode, size, chunk in [("signed", MIB + 5, 64 * 1024), ("signed", 9 * MIB + 1, MIB),
                          ("signed-trailer", 300 * 1024 + 1, 64 * 1024), ("unsigned-trailer", 200 * 1024 + 3, 64 * 1024),
                          ("signed", 0, 64 * 1024)]:
    data = RNG.randbytes(size)
    key = f"chunked/{mode}/{size}"
    status, body = chunked_put(key, data, chunk=chunk, mode=mode)
    check(status == 200, f"aws-chunked {mode} PUT of {size} B: {status} {body[:300]}")
    back = s3.get_object(Bucket=B, Key=key)
    check(back["Body"].read() == data and back["ETag"].strip('"') == md5(data), f"aws-chunked {mode} {size} B content")

s3.put_object(Bucket=B, Key="chunked/victim", Body=b"the old content")
for what, size, chunk, mode, at in [
    ("chunk-signature", 300 * 1024, 64 * 1024, "signed", 1),
    ("chunk-data", 300 * 1024, 64 * 1024, "signed", 2),
    # The last data chunk of 9 MiB in 1 MiB chunks: two 4 MiB stripes are already written.
    ("chunk-data", 9 * MIB + 1, MIB, "signed", 9),
    ("chunk-signature", 9 * MIB + 1, MIB, "signed", 10),
    ("trailer-signature", 300 * 1024, 64 * 1024, "signed-trailer", 0),
    ("trailer-value", 300 * 1024, 64 * 1024, "signed-trailer", 0),
]:
    for key in (f"chunked/tampered-{what}", "chunked/victim"):
        status, body = chunked_put(key, RNG.randbytes(size), chunk=chunk, mode=mode, tamper=what, tamper_chunk=at)
        check(status == 403 and b"SignatureDoesNotMatch" in body,
              f"tampered {what} (chunk {at} of {size} B): {status} {body[:300]}")
    check(code_of(s3.head_object, Bucket=B, Key=f"chunked/tampered-{what}") in ("404", "NoSuchKey"),
          f"nothing stored after a tampered {what}")
    check(s3.get_object(Bucket=B, Key="chunked/victim")["Body"].read() == b"the old content",
          f"a tampered {what} left the old object alone")

step("bad requests get S3 error codes")
check(code_of(s3.put_object, Bucket=B, Key="meta", Body=b"x", Metadata={"k": "v" * 2100}) == "MetadataTooLarge", "metadata limit")
check(code_of(s3.put_object, Bucket=B, Key="k" * 1025, Body=b"x") == "KeyTooLongError", "key limit")
check(code_of(s3.put_object, Bucket=B, Key="md5", Body=b"hello", ContentMD5="1B2M2Y8AsgTpgAmY7PhCfg==") == "BadDigest", "wrong Content-MD5")
check(code_of(s3.head_object, Bucket=B, Key="md5") in ("404", "NoSuchKey"), "nothing stored on BadDigest")
check(code_of(s3.put_object, Bucket=B, Key="md5", Body=b"hello", ContentMD5="not base64!") == "InvalidDigest", "malformed Content-MD5")
dh = signed("POST", "/" + B + "?delete", body=b"<Delete><Object><Key>a</Key></Object", headers={"Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg=="})
status, body = raw("POST", ENDPOINT + "/" + B + "?delete", headers=dh, body=b"<Delete><Object><Key>a</Key></Object")
check(status == 400 and (b"MalformedXML" in body or b"InvalidRequest" in body), f"malformed XML: {status} {body[:200]}")
check(code_of(s3.delete_objects, Bucket=B, Delete={"Objects": [{"Key": f"k{i}"} for i in range(1001)]}) == "MalformedXML", "1001 keys")
check(code_of(s3.delete_bucket, Bucket=B) == "BucketNotEmpty", "non-empty bucket kept")

step("aws-cli")
env = dict(os.environ, AWS_DEFAULT_REGION="us-east-1")
with tempfile.TemporaryDirectory() as d:
    src = os.path.join(d, "src.bin")
    with open(src, "wb") as f:
        f.write(RNG.randbytes(7 * MIB + 11))
    aws = ["aws", "--endpoint-url", ENDPOINT, "s3"]
    subprocess.run(aws + ["cp", src, f"s3://{B}/cli/src.bin"], check=True, env=env, capture_output=True)
    out = subprocess.run(aws + ["ls", f"s3://{B}/cli/"], check=True, env=env, capture_output=True, text=True).stdout
    check("src.bin" in out, f"aws s3 ls: {out}")
    dst = os.path.join(d, "dst.bin")
    subprocess.run(aws + ["cp", f"s3://{B}/cli/src.bin", dst], check=True, env=env, capture_output=True)
    check(open(src, "rb").read() == open(dst, "rb").read(), "aws s3 cp round trip")
    subprocess.run(aws + ["rm", "--recursive", f"s3://{B}/"], check=True, env=env, capture_output=True)

step("s3cmd")
host = ENDPOINT.split("://", 1)[1]
s3cmd = ["s3cmd", "--config=/dev/null", f"--host={host}", f"--host-bucket={host}", "--no-ssl",
         f"--access_key={AK}", f"--secret_key={SK}", "--region=us-east-1"]
with tempfile.TemporaryDirectory() as d:
    src = os.path.join(d, "s3cmd.bin")
    with open(src, "wb") as f:
        f.write(RNG.randbytes(3 * MIB + 5))
    subprocess.run(s3cmd + ["put", src, f"s3://{B}/s3cmd/one.bin"], check=True, capture_output=True)
    out = subprocess.run(s3cmd + ["ls", f"s3://{B}/s3cmd/"], check=True, capture_output=True, text=True).stdout
    check("one.bin" in out, f"s3cmd ls: {out}")
    dst = os.path.join(d, "back.bin")
    subprocess.run(s3cmd + ["get", f"s3://{B}/s3cmd/one.bin", dst], check=True, capture_output=True)
    check(open(src, "rb").read() == open(dst, "rb").read(), "s3cmd put/get round trip")
    subprocess.run(s3cmd + ["del", f"s3://{B}/s3cmd/one.bin"], check=True, capture_output=True)
    check(code_of(s3.head_object, Bucket=B, Key="s3cmd/one.bin") in ("404", "NoSuchKey"), "s3cmd del")

step("rclone")
if shutil.which("rclone") is None:
    check(not os.environ.get("CI"), "rclone is not installed (CI must install it: .ci/run apt-installs rclone)")
    print("!" * 78 + "\n!!! SKIPPED the rclone round trip: rclone is not installed "
          "(apt-get install rclone)\n" + "!" * 78, flush=True)
else:
    # AWS_CA_BUNDLE (set on some machines) makes rclone's AWS SDK fail on a plain-http endpoint.
    renv = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    renv.update(RCLONE_CONFIG_CAIRN_TYPE="s3", RCLONE_CONFIG_CAIRN_PROVIDER="Other",
                RCLONE_CONFIG_CAIRN_ACCESS_KEY_ID=AK, RCLONE_CONFIG_CAIRN_SECRET_ACCESS_KEY=SK,
                RCLONE_CONFIG_CAIRN_ENDPOINT=ENDPOINT, RCLONE_CONFIG_CAIRN_REGION="us-east-1",
                RCLONE_CONFIG_CAIRN_FORCE_PATH_STYLE="true",
                # Above 32 MiB rclone uploads in 16 MiB parts: the 70 MiB file is a 5-part upload.
                RCLONE_S3_UPLOAD_CUTOFF="32M", RCLONE_S3_CHUNK_SIZE="16M")

    def rclone(*args, ok=True):
        with tempfile.NamedTemporaryFile(suffix=".conf") as conf:
            r = subprocess.run(["rclone", "--config", conf.name, "--retries", "1", "--low-level-retries", "1",
                                *args], env=renv, capture_output=True, text=True, timeout=600)
        if ok:
            check(r.returncode == 0, f"rclone {' '.join(args)}: rc {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r

    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "src"), os.path.join(d, "dst")
        files = {"small.txt": b"hello from rclone\n", "empty": b"", "sub/mid.bin": RNG.randbytes(5 * MIB + 3),
                 "sub/deeper/big.bin": RNG.randbytes(70 * MIB + 7)}
        for name, data in files.items():
            os.makedirs(os.path.dirname(os.path.join(src, name)), exist_ok=True)
            with open(os.path.join(src, name), "wb") as f:
                f.write(data)
        rclone("copy", src, f"cairn:{B}/rclone")
        listed = {}
        for line in rclone("ls", f"cairn:{B}/rclone").stdout.splitlines():
            size, name = line.split(None, 1)
            listed[name] = int(size)
        check(listed == {n: len(v) for n, v in files.items()}, f"rclone ls: {listed}")
        big = s3.head_object(Bucket=B, Key="rclone/sub/deeper/big.bin")
        check(big["ETag"].strip('"').endswith("-5"), f"rclone uploaded big.bin in 5 parts: {big['ETag']}")
        r = rclone("check", src, f"cairn:{B}/rclone")
        check("0 differences found" in r.stderr and "hashes could not be checked" not in r.stderr,
              f"rclone check compared every hash: {r.stderr}")
        with open(os.path.join(src, "sub/mid.bin"), "r+b") as f:
            f.seek(MIB)
            f.write(b"X")
        r = rclone("check", src, f"cairn:{B}/rclone", ok=False)
        check(r.returncode != 0 and "1 differences found" in r.stderr, f"rclone check sees a changed byte: {r.stderr}")
        rclone("copy", f"cairn:{B}/rclone", dst)
        for name, data in files.items():
            with open(os.path.join(dst, name), "rb") as f:
                check(f.read() == data, f"rclone download of {name}")
        rclone("delete", f"cairn:{B}/rclone/sub/mid.bin")
        check(code_of(s3.head_object, Bucket=B, Key="rclone/sub/mid.bin") in ("404", "NoSuchKey"), "rclone delete")
        rclone("purge", f"cairn:{B}/rclone")
        check(not s3.list_objects_v2(Bucket=B, Prefix="rclone/").get("Contents"), "rclone purge removed everything")

step("delete everything and the bucket")
left = list_all(2)[0]
if left:
    s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": k} for k in left]})
s3.delete_bucket(Bucket=B)
check(code_of(s3.head_bucket, Bucket=B) in ("404", "NoSuchBucket"), "bucket gone")

limited = os.environ.get("S3_LIMITED_ENDPOINT")
if limited:
    step("rate limit: SlowDown past the user's request rate")
    ls3 = boto3.client("s3", endpoint_url=limited, aws_access_key_id=AK, aws_secret_access_key=SK,
                       region_name="us-east-1", config=CFG)
    codes = [code_of(ls3.list_buckets) for _ in range(5)]
    check(codes[0] is None and all(c == "SlowDown" for c in codes[1:]), f"rate limited: {codes}")

print("ALL S3 CHECKS PASSED", flush=True)
