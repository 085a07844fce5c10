"""The gateway's error answers, operation by operation, against AWS's documented codes and
statuses: a missing bucket, a missing key or version, a bad argument, a failed precondition, an
expired signature and malformed XML, each a row of a table sent with signed HTTP requests (so
the exact status and code are seen, not a client's retry or interpretation).

Run by crates/cli/tests/s3_gateway.rs with S3_ENDPOINT, AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY set. Prints every row that differs and exits non-zero if any does.
"""

import hashlib
import http.client
import os
import re
import sys
import time
import urllib.parse

import boto3
import botocore.credentials
from botocore.auth import S3SigV4QueryAuth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config

ENDPOINT = os.environ["S3_ENDPOINT"]
AK = os.environ["AWS_ACCESS_KEY_ID"]
SK = os.environ["AWS_SECRET_ACCESS_KEY"]
HOST = urllib.parse.urlsplit(ENDPOINT)
B = "errors"
NB = "no-such-bucket-e"
CREDS = botocore.credentials.Credentials(AK, SK)

s3 = boto3.client("s3", endpoint_url=ENDPOINT, aws_access_key_id=AK, aws_secret_access_key=SK,
                  region_name="us-east-1",
                  config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                                retries={"max_attempts": 1, "mode": "standard"}))


def send(method, path, body=b"", headers=None, sign=True):
    """(status, error code or None) of a SigV4-signed request."""
    headers = dict(headers or {})
    if sign:
        headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
        req = AWSRequest(method=method, url=ENDPOINT + path, data=body, headers=headers)
        SigV4Auth(CREDS, "s3", "us-east-1").add_auth(req)
        headers = dict(req.headers.items())
    conn = http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=60)
    conn.request(method, path, body=body or None, headers=headers)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    m = re.search(rb"<Code>([^<]+)</Code>", data)
    return r.status, m.group(1).decode() if m else None


s3.create_bucket(Bucket=B)
s3.put_object(Bucket=B, Key="k", Body=b"hello")
upload = s3.create_multipart_upload(Bucket=B, Key="mp")["UploadId"]
etag = s3.head_object(Bucket=B, Key="k")["ETag"]
xml = b'<?xml version="1.0" encoding="UTF-8"?>'
garbage = b"<this is not xml"
V = "0" * 24

# (what, method, path, body, headers, expected status, expected code; None: no body, as HEAD)
TABLE = [
    # missing bucket
    ("ListObjectsV2, no bucket", "GET", f"/{NB}?list-type=2", b"", {}, 404, "NoSuchBucket"),
    ("ListObjects, no bucket", "GET", f"/{NB}", b"", {}, 404, "NoSuchBucket"),
    ("HeadBucket, no bucket", "HEAD", f"/{NB}", b"", {}, 404, None),
    ("DeleteBucket, no bucket", "DELETE", f"/{NB}", b"", {}, 404, "NoSuchBucket"),
    ("PutObject, no bucket", "PUT", f"/{NB}/k", b"x", {}, 404, "NoSuchBucket"),
    ("GetObject, no bucket", "GET", f"/{NB}/k", b"", {}, 404, "NoSuchBucket"),
    ("DeleteObject, no bucket", "DELETE", f"/{NB}/k", b"", {}, 404, "NoSuchBucket"),
    ("GetBucketAcl, no bucket", "GET", f"/{NB}?acl", b"", {}, 404, "NoSuchBucket"),
    ("GetBucketVersioning, no bucket", "GET", f"/{NB}?versioning", b"", {}, 404, "NoSuchBucket"),
    ("ListObjectVersions, no bucket", "GET", f"/{NB}?versions", b"", {}, 404, "NoSuchBucket"),
    ("GetBucketTagging, no bucket", "GET", f"/{NB}?tagging", b"", {}, 404, "NoSuchBucket"),
    ("GetBucketCors, no bucket", "GET", f"/{NB}?cors", b"", {}, 404, "NoSuchBucket"),
    ("ListMultipartUploads, no bucket", "GET", f"/{NB}?uploads", b"", {}, 404, "NoSuchBucket"),
    ("CreateMultipartUpload, no bucket", "POST", f"/{NB}/k?uploads", b"", {}, 404, "NoSuchBucket"),
    ("GetBucketLifecycleConfiguration, no bucket", "GET", f"/{NB}?lifecycle", b"", {}, 404, "NoSuchBucket"),
    ("GetPublicAccessBlock, no bucket", "GET", f"/{NB}?publicAccessBlock", b"", {}, 404, "NoSuchBucket"),
    ("GetBucketOwnershipControls, no bucket", "GET", f"/{NB}?ownershipControls", b"", {}, 404,
     "NoSuchBucket"),
    ("GetBucketPolicyStatus, no bucket", "GET", f"/{NB}?policyStatus", b"", {}, 404, "NoSuchBucket"),
    # missing key, version, upload or configuration
    ("GetObject, no key", "GET", f"/{B}/nokey", b"", {}, 404, "NoSuchKey"),
    ("HeadObject, no key", "HEAD", f"/{B}/nokey", b"", {}, 404, None),
    ("GetObjectAcl, no key", "GET", f"/{B}/nokey?acl", b"", {}, 404, "NoSuchKey"),
    ("GetObjectTagging, no key", "GET", f"/{B}/nokey?tagging", b"", {}, 404, "NoSuchKey"),
    ("CopyObject, no source", "PUT", f"/{B}/dst", b"", {"x-amz-copy-source": f"/{B}/nokey"}, 404, "NoSuchKey"),
    ("GetObject, no version", "GET", f"/{B}/k?versionId={V}", b"", {}, 404, "NoSuchVersion"),
    ("UploadPart, no upload", "PUT", f"/{B}/mp?partNumber=1&uploadId=nope", b"x", {}, 404, "NoSuchUpload"),
    ("ListParts, no upload", "GET", f"/{B}/mp?uploadId=nope", b"", {}, 404, "NoSuchUpload"),
    ("AbortMultipartUpload, no upload", "DELETE", f"/{B}/mp?uploadId=nope", b"", {}, 404, "NoSuchUpload"),
    ("GetBucketPolicy, none", "GET", f"/{B}?policy", b"", {}, 404, "NoSuchBucketPolicy"),
    ("GetBucketTagging, none", "GET", f"/{B}?tagging", b"", {}, 404, "NoSuchTagSet"),
    ("GetBucketCors, none", "GET", f"/{B}?cors", b"", {}, 404, "NoSuchCORSConfiguration"),
    ("GetBucketLifecycleConfiguration, none", "GET", f"/{B}?lifecycle", b"", {}, 404,
     "NoSuchLifecycleConfiguration"),
    ("GetPublicAccessBlock, none", "GET", f"/{B}?publicAccessBlock", b"", {}, 404,
     "NoSuchPublicAccessBlockConfiguration"),
    ("GetBucketOwnershipControls, none", "GET", f"/{B}?ownershipControls", b"", {}, 404,
     "OwnershipControlsNotFoundError"),
    ("GetBucketPolicyStatus, none", "GET", f"/{B}?policyStatus", b"", {}, 404, "NoSuchBucketPolicy"),
    ("GetObjectLockConfiguration, none", "GET", f"/{B}?object-lock", b"", {}, 404,
     "ObjectLockConfigurationNotFoundError"),
    # bad arguments
    ("ListObjectsV2, max-keys -1", "GET", f"/{B}?list-type=2&max-keys=-1", b"", {}, 400, "InvalidArgument"),
    ("GetObject, bad version id", "GET", f"/{B}/k?versionId=bad", b"", {}, 400, "InvalidArgument"),
    ("UploadPart, part 0", "PUT", f"/{B}/mp?partNumber=0&uploadId={upload}", b"x", {}, 400, "InvalidArgument"),
    ("GetObject, range past the end", "GET", f"/{B}/k", b"", {"Range": "bytes=100-200"}, 416, "InvalidRange"),
    ("PutObject, bad Content-MD5", "PUT", f"/{B}/k2", b"x", {"Content-MD5": "nope"}, 400, "InvalidDigest"),
    ("PutObject, wrong Content-MD5", "PUT", f"/{B}/k2", b"x",
     {"Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg=="}, 400, "BadDigest"),
    ("PutObject, key too long", "PUT", f"/{B}/{'k' * 1025}", b"x", {}, 400, "KeyTooLongError"),
    ("CopyObject onto itself", "PUT", f"/{B}/k", b"", {"x-amz-copy-source": f"/{B}/k"}, 400, "InvalidRequest"),
    ("CreateBucket, taken", "PUT", f"/{B}", b"", {}, 409, "BucketAlreadyOwnedByYou"),
    ("DeleteBucket, not empty", "DELETE", f"/{B}", b"", {}, 409, "BucketNotEmpty"),
    # preconditions
    ("GetObject, If-Match", "GET", f"/{B}/k", b"", {"If-Match": '"0000"'}, 412, "PreconditionFailed"),
    ("HeadObject, If-Match", "HEAD", f"/{B}/k", b"", {"If-Match": '"0000"'}, 412, None),
    ("GetObject, If-None-Match", "GET", f"/{B}/k", b"", {"If-None-Match": etag}, 304, None),
    ("PutObject, If-None-Match *", "PUT", f"/{B}/k", b"x", {"If-None-Match": "*"}, 412, "PreconditionFailed"),
    ("CopyObject, source If-Match", "PUT", f"/{B}/dst", b"",
     {"x-amz-copy-source": f"/{B}/k", "x-amz-copy-source-if-match": '"0000"'}, 412, "PreconditionFailed"),
    # malformed XML
    ("DeleteObjects, garbage", "POST", f"/{B}?delete", garbage, {}, 400, "MalformedXML"),
    ("CompleteMultipartUpload, garbage", "POST", f"/{B}/mp?uploadId={upload}", garbage, {}, 400, "MalformedXML"),
    ("PutBucketVersioning, garbage", "PUT", f"/{B}?versioning", garbage, {}, 400, "MalformedXML"),
    ("PutBucketTagging, garbage", "PUT", f"/{B}?tagging", garbage, {}, 400, "MalformedXML"),
    ("PutBucketCors, garbage", "PUT", f"/{B}?cors", garbage, {}, 400, "MalformedXML"),
    ("PutBucketLifecycleConfiguration, garbage", "PUT", f"/{B}?lifecycle", garbage, {}, 400, "MalformedXML"),
    ("PutPublicAccessBlock, garbage", "PUT", f"/{B}?publicAccessBlock", garbage, {}, 400, "MalformedXML"),
    ("PutBucketOwnershipControls, garbage", "PUT", f"/{B}?ownershipControls", garbage, {}, 400,
     "MalformedXML"),
    ("PutObjectTagging, garbage", "PUT", f"/{B}/k?tagging", garbage, {}, 400, "MalformedXML"),
    ("CompleteMultipartUpload, no parts", "POST", f"/{B}/mp?uploadId={upload}",
     xml + b"<CompleteMultipartUpload></CompleteMultipartUpload>", {}, 400, "MalformedXML"),
]

wrong = []
for what, method, path, body, headers, status, code in TABLE:
    got = send(method, path, body, headers)
    if got != (status, code):
        wrong.append(f"{what}: {method} {path[:60]} -> {got}, AWS answers {(status, code)}")

# Signatures: an expired presigned URL, an unsigned request for a private object.
req = AWSRequest(method="GET", url=f"{ENDPOINT}/{B}/k")
S3SigV4QueryAuth(CREDS, "s3", "us-east-1", expires=1).add_auth(req)
time.sleep(2)
u = urllib.parse.urlsplit(req.url)
got = send("GET", f"{u.path}?{u.query}", sign=False)
if got != (403, "AccessDenied"):
    wrong.append(f"expired presigned URL -> {got}, AWS answers (403, 'AccessDenied')")
got = send("GET", f"/{B}/k", sign=False)
if got != (403, "AccessDenied"):
    wrong.append(f"an anonymous GET of a private object -> {got}, AWS answers (403, 'AccessDenied')")

s3.abort_multipart_upload(Bucket=B, Key="mp", UploadId=upload)
for o in s3.list_objects_v2(Bucket=B).get("Contents", []):
    s3.delete_object(Bucket=B, Key=o["Key"])
s3.delete_bucket(Bucket=B)

for w in wrong:
    print("DIFFERS:", w, flush=True)
if wrong:
    print(f"FAILED: {len(wrong)} of {len(TABLE) + 2} answers differ from AWS's", flush=True)
    sys.exit(1)
print(f"{len(TABLE) + 2} error answers as AWS documents them", flush=True)
print("ALL ERROR CHECKS PASSED", flush=True)
