"""CRC64NVME checksums and GetObjectAttributes against a running cairn gateway, driven by boto3:
a CRC64NVME value (computed here) verified on PutObject and UploadPart (BadDigest and nothing
stored when wrong), returned on HEAD and GET with checksum mode; GetObjectAttributes of a plain
object (ETag, size, checksum, storage class) and of a multipart object (parts paged by
MaxParts and PartNumberMarker), and of an old version; multipart uploads declaring a checksum
(COMPOSITE SHA-256, FULL_OBJECT CRC32 and CRC64NVME: parts checked at completion, the whole
value returned on complete, HEAD, GET and GetObjectAttributes); tags and a legal hold asked for
when an upload starts; the tag count on GET.

Run by crates/cli/tests/s3_gateway.rs with S3_ENDPOINT, AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY set. Exits non-zero with a message on the first failed check.
"""

import base64
import hashlib
import random
import zlib

from s3common import empty_bucket, check, client, code_of, step


B = "checksums"
MIB = 1 << 20

s3 = client(request_checksum_calculation="when_required",
               response_checksum_validation="when_required")


def _table():
    poly = 0x9A6C9329AC4BC9B5
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = _table()


def crc64nvme(data):
    """CRC-64/NVME (reflected, init and xorout all ones), base64 of the big-endian value."""
    crc = 0xFFFFFFFFFFFFFFFF
    for b in data:
        crc = TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFFFFFFFFFF
    return base64.b64encode(crc.to_bytes(8, "big")).decode()


check(crc64nvme(b"123456789") == base64.b64encode(bytes.fromhex("ae8b14860a799888")).decode(),
      "this script's CRC-64/NVME has the standard check value")

rng = random.Random(5)
s3.create_bucket(Bucket=B)

step("CRC64NVME on PutObject")
body = rng.randbytes(300_000)
r = s3.put_object(Bucket=B, Key="k", Body=body, ChecksumCRC64NVME=crc64nvme(body))
check(r.get("ChecksumCRC64NVME") == crc64nvme(body), f"PUT echoes the checksum: {r}")
h = s3.head_object(Bucket=B, Key="k", ChecksumMode="ENABLED")
check(h.get("ChecksumCRC64NVME") == crc64nvme(body), f"HEAD returns it: {h}")
g = s3.get_object(Bucket=B, Key="k", ChecksumMode="ENABLED")
check(g.get("ChecksumCRC64NVME") == crc64nvme(body) and g["Body"].read() == body, "GET returns it")
check(code_of(s3.put_object, Bucket=B, Key="bad", Body=body, ChecksumCRC64NVME=crc64nvme(body + b"x"))
      == "BadDigest", "a wrong CRC64NVME")
check(code_of(s3.head_object, Bucket=B, Key="bad") == "404", "and nothing stored")

step("CRC64NVME on UploadPart")
up = s3.create_multipart_upload(Bucket=B, Key="mp")["UploadId"]
sizes = [5 * MIB, 5 * MIB, 123]
parts = []
for n, size in enumerate(sizes, start=1):
    data = rng.randbytes(size)
    if n == 2:
        check(code_of(s3.upload_part, Bucket=B, Key="mp", UploadId=up, PartNumber=n, Body=data,
                      ChecksumCRC64NVME=crc64nvme(b"other")) == "BadDigest", "a wrong part checksum")
    r = s3.upload_part(Bucket=B, Key="mp", UploadId=up, PartNumber=n, Body=data,
                       ChecksumCRC64NVME=crc64nvme(data))
    check(r.get("ChecksumCRC64NVME") == crc64nvme(data), f"part {n} echoes its checksum")
    parts.append({"PartNumber": n, "ETag": r["ETag"]})
s3.complete_multipart_upload(Bucket=B, Key="mp", UploadId=up, MultipartUpload={"Parts": parts})

step("GetObjectAttributes")
everything = ["ETag", "Checksum", "ObjectParts", "ObjectSize", "StorageClass"]
a = s3.get_object_attributes(Bucket=B, Key="k", ObjectAttributes=everything)
check(a["ETag"].strip('"') == hashlib.md5(body).hexdigest() and a["ObjectSize"] == len(body)
      and a["StorageClass"] == "STANDARD" and a["Checksum"]["ChecksumCRC64NVME"] == crc64nvme(body)
      and "ObjectParts" not in a, f"a plain object: {a}")
a = s3.get_object_attributes(Bucket=B, Key="k", ObjectAttributes=["ObjectSize"])
check(a.get("ObjectSize") == len(body) and "ETag" not in a, f"only what is asked: {a}")
a = s3.get_object_attributes(Bucket=B, Key="mp", ObjectAttributes=everything, MaxParts=2)
p = a["ObjectParts"]
check(p["TotalPartsCount"] == 3 and [x["Size"] for x in p["Parts"]] == sizes[:2] and p["IsTruncated"]
      and a["ObjectSize"] == sum(sizes) and a["ETag"].strip('"').endswith("-3"), f"a multipart object: {a}")
a = s3.get_object_attributes(Bucket=B, Key="mp", ObjectAttributes=["ObjectParts"],
                             PartNumberMarker=p["NextPartNumberMarker"])
rest = a["ObjectParts"]
check([x["PartNumber"] for x in rest["Parts"]] == [3] and not rest["IsTruncated"], f"the next page: {rest}")
check(code_of(s3.get_object_attributes, Bucket=B, Key="missing", ObjectAttributes=["ETag"]) == "NoSuchKey",
      "a missing key")
s3.put_bucket_versioning(Bucket=B, VersioningConfiguration={"Status": "Enabled"})
v1 = s3.put_object(Bucket=B, Key="v", Body=b"one")["VersionId"]
s3.put_object(Bucket=B, Key="v", Body=b"three")
a = s3.get_object_attributes(Bucket=B, Key="v", VersionId=v1, ObjectAttributes=["ObjectSize"])
check(a["ObjectSize"] == 3 and a.get("VersionId") == v1, f"an old version: {a}")

step("multipart checksums: COMPOSITE, FULL_OBJECT, parts checked at completion")


def b64(raw):
    return base64.b64encode(raw).decode()


def sha256_b64(data):
    return b64(hashlib.sha256(data).digest())


def crc32_b64(data):
    return b64(zlib.crc32(data).to_bytes(4, "big"))


def upload(key, algo, kind, datas, sums, complete_extra=None, part_sums=None):
    """Uploads `datas` as parts of `key` declaring `algo`/`kind`; returns the completion."""
    kw = {"ChecksumAlgorithm": algo}
    if kind:
        kw["ChecksumType"] = kind
    up = s3.create_multipart_upload(Bucket=B, Key=key, **kw)["UploadId"]
    done = []
    for n, data in enumerate(datas, start=1):
        extra = {f"Checksum{algo}": sums(data)} if sums else {}
        r = s3.upload_part(Bucket=B, Key=key, UploadId=up, PartNumber=n, Body=data, **extra)
        part = {"PartNumber": n, "ETag": r["ETag"]}
        if part_sums is not None:
            part[f"Checksum{algo}"] = part_sums(n, data)
        done.append(part)
    return up, lambda **more: s3.complete_multipart_upload(
        Bucket=B, Key=key, UploadId=up, MultipartUpload={"Parts": done}, **(complete_extra or {}), **more)


datas = [rng.randbytes(5 * MIB), rng.randbytes(777)]
up, complete = upload("comp", "SHA256", None, datas, sha256_b64,
                      part_sums=lambda n, d: sha256_b64(d))
want = sha256_b64(b"".join(hashlib.sha256(d).digest() for d in datas)) + "-2"
r = complete()
check(r.get("ChecksumSHA256") == want and r.get("ChecksumType") == "COMPOSITE", f"composite: {r}")
h = s3.head_object(Bucket=B, Key="comp", ChecksumMode="ENABLED")
check(h.get("ChecksumSHA256") == want and h.get("ChecksumType") == "COMPOSITE", f"HEAD composite: {h}")
a = s3.get_object_attributes(Bucket=B, Key="comp", ObjectAttributes=["Checksum"])
check(a["Checksum"].get("ChecksumSHA256") == want and a["Checksum"].get("ChecksumType") == "COMPOSITE",
      f"attributes composite: {a}")

# FULL_OBJECT CRC32: parts sent without checksums are hashed by the gateway; a wrong whole
# value is BadDigest and leaves the upload to complete right.
up, complete = upload("full", "CRC32", "FULL_OBJECT", datas, None)
listed = s3.list_parts(Bucket=B, Key="full", UploadId=up)["Parts"]
check([p.get("ChecksumCRC32") for p in listed] == [crc32_b64(d) for d in datas],
      f"ListParts shows the parts' computed CRC32: {listed}")
whole = b"".join(datas)
check(code_of(complete, ChecksumCRC32=crc32_b64(whole + b"x"), ChecksumType="FULL_OBJECT") == "BadDigest",
      "a wrong whole-object CRC32")
r = complete(ChecksumCRC32=crc32_b64(whole), ChecksumType="FULL_OBJECT")
check(r.get("ChecksumCRC32") == crc32_b64(whole) and r.get("ChecksumType") == "FULL_OBJECT",
      f"full object CRC32: {r}")
g = s3.get_object(Bucket=B, Key="full", ChecksumMode="ENABLED")
check(g.get("ChecksumCRC32") == crc32_b64(whole) and g["Body"].read() == whole, "GET full object")

up, complete = upload("nvme", "CRC64NVME", None, datas, crc64nvme)
r = complete()
check(r.get("ChecksumCRC64NVME") == crc64nvme(b"".join(datas)) and r.get("ChecksumType") == "FULL_OBJECT",
      f"CRC64NVME is a full-object checksum by default: {r}")

up, complete = upload("wrongpart", "SHA256", None, datas, sha256_b64,
                      part_sums=lambda n, d: sha256_b64(d + b"!"))
check(code_of(complete) == "InvalidPart", "a part named with another checksum")
s3.abort_multipart_upload(Bucket=B, Key="wrongpart", UploadId=up)
up = s3.create_multipart_upload(Bucket=B, Key="mixed", ChecksumAlgorithm="SHA256")["UploadId"]
check(code_of(s3.upload_part, Bucket=B, Key="mixed", UploadId=up, PartNumber=1, Body=b"x",
              ChecksumCRC32=crc32_b64(b"x")) == "InvalidRequest", "a part in another algorithm")
s3.abort_multipart_upload(Bucket=B, Key="mixed", UploadId=up)
for algo, kind in [("SHA1", "FULL_OBJECT"), ("CRC64NVME", "COMPOSITE")]:
    check(code_of(s3.create_multipart_upload, Bucket=B, Key="x", ChecksumAlgorithm=algo,
                  ChecksumType=kind) == "InvalidRequest", f"{algo} {kind} is refused")

step("tags and locks asked for at CreateMultipartUpload; the tag count on GET")
up = s3.create_multipart_upload(Bucket=B, Key="tagged", Tagging="a=1&b=2")["UploadId"]
r = s3.upload_part(Bucket=B, Key="tagged", UploadId=up, PartNumber=1, Body=b"tagged")
s3.complete_multipart_upload(Bucket=B, Key="tagged", UploadId=up,
                             MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": r["ETag"]}]})
tags = s3.get_object_tagging(Bucket=B, Key="tagged")["TagSet"]
check(sorted((t["Key"], t["Value"]) for t in tags) == [("a", "1"), ("b", "2")], f"upload's tags: {tags}")
check(s3.get_object(Bucket=B, Key="tagged").get("TagCount") == 2, "GET counts the tags")
s3.put_object(Bucket=B, Key="plain", Body=b"p")
check(s3.get_object(Bucket=B, Key="plain").get("TagCount") is None, "no tags, no count")
s3.put_object_tagging(Bucket=B, Key="tagged", Tagging={"TagSet": [{"Key": "only", "Value": "one"}]})
check(s3.get_object(Bucket=B, Key="tagged").get("TagCount") == 1, "a changed tag set is counted")
s3.delete_object_tagging(Bucket=B, Key="tagged")
check(s3.get_object(Bucket=B, Key="tagged").get("TagCount") is None, "deleted tags are not counted")
L = "checksums-locked"
s3.create_bucket(Bucket=L, ObjectLockEnabledForBucket=True)
up = s3.create_multipart_upload(Bucket=L, Key="held", ObjectLockLegalHoldStatus="ON")["UploadId"]
r = s3.upload_part(Bucket=L, Key="held", UploadId=up, PartNumber=1, Body=b"held")
v = s3.complete_multipart_upload(Bucket=L, Key="held", UploadId=up,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": r["ETag"]}]})["VersionId"]
check(s3.get_object_legal_hold(Bucket=L, Key="held", VersionId=v)["LegalHold"]["Status"] == "ON",
      "the upload's legal hold is on the object")
check(code_of(s3.delete_object, Bucket=L, Key="held", VersionId=v) == "AccessDenied", "held: not deleted")
s3.put_object_legal_hold(Bucket=L, Key="held", VersionId=v, LegalHold={"Status": "OFF"})
check(code_of(s3.create_multipart_upload, Bucket=B, Key="x", ObjectLockLegalHoldStatus="ON")
      == "InvalidRequest", "a lock asked for in a bucket without object lock")
empty_bucket(s3, L)

step("clean up")
empty_bucket(s3, B)

print("ALL CHECKSUM CHECKS PASSED", flush=True)
