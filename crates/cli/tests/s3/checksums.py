"""CRC64NVME checksums and GetObjectAttributes against a running cairn gateway, driven by boto3:
a CRC64NVME value (computed here) verified on PutObject and UploadPart (BadDigest and nothing
stored when wrong), returned on HEAD and GET with checksum mode; GetObjectAttributes of a plain
object (ETag, size, checksum, storage class) and of a multipart object (parts paged by
MaxParts and PartNumberMarker), and of an old version.

Run by crates/cli/tests/s3_gateway.rs with S3_ENDPOINT, AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY set. Exits non-zero with a message on the first failed check.
"""

import base64
import hashlib
import random

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

step("clean up")
empty_bucket(s3, B)

print("ALL CHECKSUM CHECKS PASSED", flush=True)
