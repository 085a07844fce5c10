"""Bucket versioning against a running cairn gateway, driven by boto3, aws-cli and rclone:
Put/GetBucketVersioning, version ids on PUT/GET/HEAD/COPY/multipart, delete markers,
ListObjectVersions (order, IsLatest, prefix, delimiter, key and version id markers), GET, HEAD,
DELETE and COPY by version id, the null version (objects older than versioning, writes while
suspended), DeleteObjects with version ids, error codes, and a versioned bucket that cannot be
deleted until its last version goes.

Run by crates/cli/tests/s3_gateway.rs with S3_ENDPOINT, AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY set. Exits non-zero with a message on the first failed check.
"""

import hashlib
import json
import os
import shutil
import subprocess
import tempfile

from s3common import check, client, error_of, step, AK, SK, ENDPOINT


B = "versioned"

s3 = client()


def body(key, version=None):
    kw = {"Bucket": B, "Key": key}
    if version:
        kw["VersionId"] = version
    r = s3.get_object(**kw)
    return r["Body"].read(), r.get("VersionId")


def versions(**kw):
    """Every (key, version id, is latest, delete marker) the listing yields, in its order,
    following markers page by page."""
    out = []
    kw = dict(kw)
    while True:
        r = s3.list_object_versions(Bucket=B, **kw)
        rows = [(v["Key"], v["VersionId"], v["IsLatest"], False) for v in r.get("Versions", [])]
        rows += [(m["Key"], m["VersionId"], m["IsLatest"], True) for m in r.get("DeleteMarkers", [])]
        # A page holds versions and markers apart; within a key the newest comes first, and
        # version ids rank newest first (the null version's place is its own).
        rows.sort(key=lambda x: x[0])
        out.append((rows, [p["Prefix"] for p in r.get("CommonPrefixes", [])]))
        if not r["IsTruncated"]:
            return out
        kw["KeyMarker"] = r["NextKeyMarker"]
        if r.get("NextVersionIdMarker"):
            kw["VersionIdMarker"] = r["NextVersionIdMarker"]
        else:
            kw.pop("VersionIdMarker", None)


step("a bucket never versioned")
s3.create_bucket(Bucket=B)
check("Status" not in s3.get_bucket_versioning(Bucket=B), "no status before versioning")
s3.put_object(Bucket=B, Key="k", Body=b"v0")
r = s3.list_object_versions(Bucket=B)
check([(v["Key"], v["VersionId"], v["IsLatest"]) for v in r["Versions"]] == [("k", "null", True)],
      f"an unversioned object is the null version: {r.get('Versions')}")
check(error_of(s3.put_bucket_versioning, Bucket=B, VersioningConfiguration={"Status": "Bogus"})[0]
      == "MalformedXML", "a bad status is refused")

step("enabled: every write a version")
s3.put_bucket_versioning(Bucket=B, VersioningConfiguration={"Status": "Enabled"})
check(s3.get_bucket_versioning(Bucket=B).get("Status") == "Enabled", "status Enabled")
ids = [s3.put_object(Bucket=B, Key="k", Body=b)["VersionId"] for b in (b"v1", b"v2")]
check(len(set(ids)) == 2 and "null" not in ids, f"fresh version ids: {ids}")
check(body("k") == (b"v2", ids[1]), "GET reads the newest, with its version id")
check(body("k", ids[0]) == (b"v1", ids[0]), "GET by version id")
check(body("k", "null") == (b"v0", "null"), "the object older than versioning is the null version")
h = s3.head_object(Bucket=B, Key="k", VersionId=ids[0])
check(h["ContentLength"] == 2 and h["VersionId"] == ids[0]
      and h["ETag"].strip('"') == hashlib.md5(b"v1").hexdigest(), f"HEAD by version id: {h}")
(rows, _), = versions(Prefix="k")
check(rows == [("k", ids[1], True, False), ("k", ids[0], False, False), ("k", "null", False, False)],
      f"versions newest first, one latest: {rows}")

step("a delete leaves a marker")
d = s3.delete_object(Bucket=B, Key="k")
check(d.get("DeleteMarker") is True and d.get("VersionId") not in (None, "null"), f"delete marker: {d}")
marker = d["VersionId"]
check(error_of(s3.get_object, Bucket=B, Key="k")[0] == "NoSuchKey", "a marker hides the key")
check("Contents" not in s3.list_objects_v2(Bucket=B, Prefix="k"), "and it leaves the listing")
check(error_of(s3.get_object, Bucket=B, Key="k", VersionId=marker) == ("MethodNotAllowed", 405),
      "GET of a delete marker by id: 405")
check(body("k", ids[1]) == (b"v2", ids[1]), "old versions stay readable")
(rows, _), = versions(Prefix="k")
check(("k", marker, True, True) in rows and len(rows) == 4, f"the marker is latest: {rows}")
d = s3.delete_object(Bucket=B, Key="k", VersionId=marker)
check(d.get("DeleteMarker") is True and d["VersionId"] == marker, f"marker removed: {d}")
check(body("k") == (b"v2", ids[1]), "removing the marker brings the newest back")
s3.delete_object(Bucket=B, Key="k", VersionId=ids[1])
check(body("k") == (b"v1", ids[0]), "removing the newest version makes the previous current")

step("errors")
check(error_of(s3.get_object, Bucket=B, Key="k", VersionId="not-a-version") == ("InvalidArgument", 400),
      "a malformed version id")
check(error_of(s3.get_object, Bucket=B, Key="k", VersionId="0" * 24) == ("NoSuchVersion", 404),
      "a well-formed id of no version")
check(error_of(s3.get_object, Bucket=B, Key="nokey", VersionId=ids[0]) == ("NoSuchVersion", 404),
      "a version of a missing key")

step("copy by version id and multipart")
c = s3.copy_object(Bucket=B, Key="copy", CopySource={"Bucket": B, "Key": "k", "VersionId": "null"})
check(c.get("CopySourceVersionId") == "null" and c.get("VersionId") not in (None, "null"), f"copy: {c}")
check(body("copy")[0] == b"v0", "the copy has the null version's bytes")
check(error_of(s3.copy_object, Bucket=B, Key="copy2",
               CopySource={"Bucket": B, "Key": "k", "VersionId": "0" * 24})[0] == "NoSuchVersion",
      "copy of a missing version")
m = s3.create_multipart_upload(Bucket=B, Key="mp")
part = s3.upload_part(Bucket=B, Key="mp", UploadId=m["UploadId"], PartNumber=1, Body=b"x" * 100)
done = s3.complete_multipart_upload(Bucket=B, Key="mp", UploadId=m["UploadId"],
                                    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
check(done.get("VersionId") not in (None, "null"), f"a completed upload is a version: {done}")

step("listing: pages, markers, delimiter")
for i in range(5):
    for v in range(3):
        s3.put_object(Bucket=B, Key=f"p/{i}", Body=f"{i}.{v}".encode())
s3.put_object(Bucket=B, Key="dir/a/x", Body=b"a")
s3.put_object(Bucket=B, Key="dir/b", Body=b"b")
whole, = versions(Prefix="p/")
check(len(whole[0]) == 15 and sum(1 for r in whole[0] if r[2]) == 5, f"15 versions, 5 latest: {whole}")
paged = [row for rows, _ in versions(Prefix="p/", MaxKeys=4) for row in rows]
check(len(paged) == 15 and set(paged) == set(whole[0]), f"pages of 4 yield the same 15: {paged}")
check(sum(1 for r in paged if r[2]) == 5, "IsLatest once per key across pages")
(rows, prefixes), = versions(Delimiter="/")
check(prefixes == ["dir/", "p/"] and {r[0] for r in rows} == {"copy", "k", "mp"},
      f"delimiter roll-up: {prefixes} {rows}")
(rows, prefixes), = versions(Prefix="dir/", Delimiter="/")
check(prefixes == ["dir/a/"] and [r[0] for r in rows] == ["dir/b"], f"under a prefix: {prefixes} {rows}")

step("aws-cli")
env = dict(os.environ, AWS_DEFAULT_REGION="us-east-1")
r = subprocess.run(["aws", "--endpoint-url", ENDPOINT, "s3api", "list-object-versions", "--bucket", B,
                    "--prefix", "p/3"], env=env, capture_output=True, text=True, timeout=120)
check(r.returncode == 0, f"aws s3api list-object-versions: {r.stderr}")
listed = json.loads(r.stdout)
check(len(listed["Versions"]) == 3 and [v["IsLatest"] for v in listed["Versions"]].count(True) == 1,
      f"aws-cli sees three versions: {listed}")

step("suspended: the null version is replaced")
s3.put_bucket_versioning(Bucket=B, VersioningConfiguration={"Status": "Suspended"})
check(s3.get_bucket_versioning(Bucket=B).get("Status") == "Suspended", "status Suspended")
before = [row for rows, _ in versions(Prefix="k") for row in rows]
for b in (b"s1", b"s2"):
    check(s3.put_object(Bucket=B, Key="k", Body=b).get("VersionId") == "null", "a suspended write is null")
after = [row for rows, _ in versions(Prefix="k") for row in rows]
check(len(after) == len(before), f"the null version replaced, the others kept: {before} -> {after}")
check(body("k") == (b"s2", "null") and body("k", ids[0])[0] == b"v1", "current null, older versions kept")
d = s3.delete_object(Bucket=B, Key="k")
check(d.get("DeleteMarker") is True and d.get("VersionId") == "null", f"a null delete marker: {d}")

step("rclone sees old versions")
if shutil.which("rclone") is None:
    check(os.environ.get("CI") is None, "CI needs rclone")
    print("!!! rclone is not installed: SKIPPED", flush=True)
else:
    # AWS_CA_BUNDLE (set on some machines) makes rclone's AWS SDK fail on a plain-http endpoint.
    renv = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    renv.update(RCLONE_CONFIG_CAIRN_TYPE="s3", RCLONE_CONFIG_CAIRN_PROVIDER="Other",
                RCLONE_CONFIG_CAIRN_ACCESS_KEY_ID=AK, RCLONE_CONFIG_CAIRN_SECRET_ACCESS_KEY=SK,
                RCLONE_CONFIG_CAIRN_ENDPOINT=ENDPOINT, RCLONE_CONFIG_CAIRN_REGION="us-east-1",
                RCLONE_CONFIG_CAIRN_FORCE_PATH_STYLE="true")
    with tempfile.NamedTemporaryFile(suffix=".conf") as conf:
        run = lambda *a: subprocess.run(["rclone", "--config", conf.name, *a], env=renv,
                                        capture_output=True, text=True, timeout=120)
        plain = run("ls", f"cairn:{B}/p")
        every = run("--s3-versions", "ls", f"cairn:{B}/p")
    check(plain.returncode == 0 and every.returncode == 0, f"rclone ls: {plain.stderr} {every.stderr}")
    check(len(plain.stdout.splitlines()) == 5 and len(every.stdout.splitlines()) == 15,
          f"rclone lists 5 objects, 15 with --s3-versions:\n{plain.stdout}\n{every.stdout}")

step("a bucket with versions is not empty")
everything = [row for rows, _ in versions() for row in rows]
check(error_of(s3.delete_bucket, Bucket=B)[0] == "BucketNotEmpty", "versions keep the bucket")
batch = [{"Key": k, "VersionId": v} for k, v, _, _ in everything]
for i in range(0, len(batch), 1000):
    r = s3.delete_objects(Bucket=B, Delete={"Objects": batch[i:i + 1000]})
    check(not r.get("Errors") and len(r["Deleted"]) == len(batch[i:i + 1000]), f"DeleteObjects: {r}")
    check(all(d.get("VersionId") for d in r["Deleted"]), "each deletion names its version")
check(versions() == [([], [])], f"nothing left: {versions()}")
s3.delete_bucket(Bucket=B)

print("ALL VERSIONING CHECKS PASSED", flush=True)
