"""Lifecycle rules against a gateway whose lifecycle day is one second and whose pass runs
twice a second (S3_FAST_ENDPOINT; `lifecycle_day_secs = 1`), with a storage class COLD in pool
s3-cold: the configuration calls and their refusals, then each action seen to happen: current
versions expire (a delete marker in a versioned bucket), noncurrent versions go (the newest N
kept), expired delete markers go, incomplete uploads are aborted, filters by prefix, tag and
size hold, locked versions stay, current and noncurrent versions move to COLD (their stripes
seen in the class's pool with `cairn ls`, CAIRN_BIN/CAIRN_MON/CAIRN_KEYRING), and objects
outside every rule are untouched (read back by checksum)."""

import hashlib
import os
import subprocess
import tempfile
import time

from s3common import wait_for, check, client, code_of, empty_bucket, step

FAST = os.environ["S3_FAST_ENDPOINT"]
s3 = client(FAST)


def sha(b):
    return hashlib.sha256(b).hexdigest()



def cold_stripes():
    """Names of the data objects in the COLD class's pool."""
    out = subprocess.run([os.environ["CAIRN_BIN"], "ls", "-p", "s3-cold", "--mon", os.environ["CAIRN_MON"]],
                         capture_output=True, text=True, timeout=120)
    check(out.returncode == 0, f"cairn ls: {out.stdout} {out.stderr}")
    return {n for n in out.stdout.split() if n.startswith("d.")}


def class_of(bucket, key, **kw):
    return s3.head_object(Bucket=bucket, Key=key, **kw).get("StorageClass", "STANDARD")


def body_sha(bucket, key, **kw):
    return sha(s3.get_object(Bucket=bucket, Key=key, **kw)["Body"].read())


def keys(bucket):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def versions(bucket, key):
    r = s3.list_object_versions(Bucket=bucket, Prefix=key)
    vs = [v for v in r.get("Versions", []) if v["Key"] == key]
    ms = [m for m in r.get("DeleteMarkers", []) if m["Key"] == key]
    return vs, ms


def rule(rid, **kw):
    r = {"ID": rid, "Status": "Enabled", "Filter": kw.pop("Filter", {"Prefix": ""})}
    r.update(kw)
    return r


step("configuration calls and refusals")
s3.create_bucket(Bucket="lc-conf")
check(code_of(s3.get_bucket_lifecycle_configuration, Bucket="lc-conf") == "NoSuchLifecycleConfiguration",
      "no configuration yet")
conf = {"Rules": [
    rule("logs", Filter={"And": {"Prefix": "logs/", "Tags": [{"Key": "t", "Value": "v"}],
                                 "ObjectSizeGreaterThan": 1}},
         Expiration={"Days": 30}),
    rule("old", Filter={"Prefix": "old/"}, NoncurrentVersionExpiration={"NoncurrentDays": 5,
                                                                        "NewerNoncurrentVersions": 2}),
    rule("mpu", AbortIncompleteMultipartUpload={"DaysAfterInitiation": 7}),
]}
s3.put_bucket_lifecycle_configuration(Bucket="lc-conf", LifecycleConfiguration=conf)
got = s3.get_bucket_lifecycle_configuration(Bucket="lc-conf")["Rules"]
check([r["ID"] for r in got] == ["logs", "old", "mpu"], f"rules back: {got}")
check(got[0]["Filter"]["And"]["Prefix"] == "logs/" and got[0]["Expiration"]["Days"] == 30, f"{got[0]}")
check(got[1]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 5, "NewerNoncurrentVersions": 2},
      f"{got[1]}")
check(got[2]["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] == 7, f"{got[2]}")
for bad, want in [
    ({"Rules": [rule("x", Expiration={"Days": 0})]}, "InvalidArgument"),
    ({"Rules": [rule("x", Expiration={"Days": 1}), rule("x", Expiration={"Days": 2})]}, "InvalidArgument"),
    ({"Rules": [rule("x")]}, "MalformedXML"),
    ({"Rules": [rule("x", Transitions=[{"Days": 1, "StorageClass": "GLACIER"}])]}, "InvalidStorageClass"),
    ({"Rules": [rule("x", Transitions=[{"Days": 1, "StorageClass": "STANDARD"}])]}, "InvalidStorageClass"),
    ({"Rules": [rule("x", Expiration={"Days": 1}, Transitions=[{"Days": 2, "StorageClass": "COLD"}])]},
     "InvalidArgument"),
    ({"Rules": [rule("x", Expiration={"Days": 1, "ExpiredObjectDeleteMarker": True})]}, "MalformedXML"),
]:
    code = code_of(s3.put_bucket_lifecycle_configuration, Bucket="lc-conf", LifecycleConfiguration=bad)
    check(code == want, f"{bad}: {code}, want {want}")
check(len(s3.get_bucket_lifecycle_configuration(Bucket="lc-conf")["Rules"]) == 3,
      "a refused configuration changes nothing")
s3.delete_bucket_lifecycle(Bucket="lc-conf")
check(code_of(s3.get_bucket_lifecycle_configuration, Bucket="lc-conf") == "NoSuchLifecycleConfiguration",
      "configuration deleted")
s3.delete_bucket(Bucket="lc-conf")

step("current versions expire by prefix, tag and size; others stay whole")
s3.create_bucket(Bucket="lc-cur")
kept = {}
for k, body, tags in [
    ("tmp/a", b"a" * 100, ""),
    ("tmp/tagged-keep", b"k" * 100, "keep=yes"),
    ("tmp/tiny", b"t", ""),
    ("data/b", b"b" * 100, ""),
]:
    s3.put_object(Bucket="lc-cur", Key=k, Body=body, Tagging=tags)
    kept[k] = sha(body)
s3.put_bucket_lifecycle_configuration(Bucket="lc-cur", LifecycleConfiguration={"Rules": [
    rule("tmp", Filter={"And": {"Prefix": "tmp/", "ObjectSizeGreaterThan": 10}}, Expiration={"Days": 2}),
]})
# tmp/tagged-keep matches too (no tag in the filter); a second bucket below checks tag filters.
wait_for("tmp/ objects over 10 bytes expired",
         lambda: keys("lc-cur") == ["data/b", "tmp/tiny"])
for k in ["data/b", "tmp/tiny"]:
    check(sha(s3.get_object(Bucket="lc-cur", Key=k)["Body"].read()) == kept[k], f"{k} intact")

s3.create_bucket(Bucket="lc-tag")
s3.put_object(Bucket="lc-tag", Key="x", Body=b"x" * 50, Tagging="class=scratch")
s3.put_object(Bucket="lc-tag", Key="y", Body=b"y" * 50, Tagging="class=keep")
s3.put_object(Bucket="lc-tag", Key="z", Body=b"z" * 50)
s3.put_bucket_lifecycle_configuration(Bucket="lc-tag", LifecycleConfiguration={"Rules": [
    rule("scratch", Filter={"Tag": {"Key": "class", "Value": "scratch"}}, Expiration={"Days": 1}),
]})
wait_for("the tagged object expired", lambda: keys("lc-tag") == ["y", "z"])
time.sleep(2)
check(keys("lc-tag") == ["y", "z"], "objects without the tag stay")

step("versioned bucket: expiration makes a delete marker; noncurrent versions go, newest kept")
s3.create_bucket(Bucket="lc-ver")
s3.put_bucket_versioning(Bucket="lc-ver", VersioningConfiguration={"Status": "Enabled"})
bodies = [f"v{i}".encode() * 10 for i in range(5)]
for b in bodies:
    s3.put_object(Bucket="lc-ver", Key="doc", Body=b)
s3.put_object(Bucket="lc-ver", Key="other", Body=b"other")
s3.put_bucket_lifecycle_configuration(Bucket="lc-ver", LifecycleConfiguration={"Rules": [
    rule("nc", Filter={"Prefix": "doc"}, NoncurrentVersionExpiration={"NoncurrentDays": 1,
                                                                     "NewerNoncurrentVersions": 2}),
]})
wait_for("noncurrent versions beyond the newest two removed", lambda: len(versions("lc-ver", "doc")[0]) == 3)
vs, _ = versions("lc-ver", "doc")
check(sha(s3.get_object(Bucket="lc-ver", Key="doc")["Body"].read()) == sha(bodies[-1]), "current kept")
got = sorted(sha(s3.get_object(Bucket="lc-ver", Key="doc", VersionId=v["VersionId"])["Body"].read())
             for v in vs)
check(got == sorted(sha(b) for b in bodies[-3:]), "the newest two noncurrent versions kept")
s3.put_bucket_lifecycle_configuration(Bucket="lc-ver", LifecycleConfiguration={"Rules": [
    rule("cur", Filter={"Prefix": "doc"}, Expiration={"Days": 1},
         NoncurrentVersionExpiration={"NoncurrentDays": 1}),
]})
wait_for("the current version expired into a delete marker, then everything went",
         lambda: versions("lc-ver", "doc") == ([], []))
check(code_of(s3.head_object, Bucket="lc-ver", Key="doc") in ("404", "NoSuchKey"), "doc gone")
check(s3.get_object(Bucket="lc-ver", Key="other")["Body"].read() == b"other", "other key untouched")

step("expired delete markers go")
s3.put_object(Bucket="lc-ver", Key="gone", Body=b"g")
vid = s3.list_object_versions(Bucket="lc-ver", Prefix="gone")["Versions"][0]["VersionId"]
s3.delete_object(Bucket="lc-ver", Key="gone")
s3.delete_object(Bucket="lc-ver", Key="gone", VersionId=vid)
check(len(versions("lc-ver", "gone")[1]) == 1, "a lone delete marker")
s3.put_bucket_lifecycle_configuration(Bucket="lc-ver", LifecycleConfiguration={"Rules": [
    rule("markers", Filter={"Prefix": "gone"}, Expiration={"ExpiredObjectDeleteMarker": True}),
]})
wait_for("the expired delete marker removed", lambda: versions("lc-ver", "gone") == ([], []))
check(s3.get_object(Bucket="lc-ver", Key="other")["Body"].read() == b"other", "other key untouched")
s3.delete_bucket_lifecycle(Bucket="lc-ver")

step("incomplete multipart uploads are aborted")
s3.create_bucket(Bucket="lc-mpu")
up = s3.create_multipart_upload(Bucket="lc-mpu", Key="big/one")["UploadId"]
s3.upload_part(Bucket="lc-mpu", Key="big/one", UploadId=up, PartNumber=1, Body=b"p" * 1024)
keep_up = s3.create_multipart_upload(Bucket="lc-mpu", Key="keep/two")["UploadId"]
s3.put_bucket_lifecycle_configuration(Bucket="lc-mpu", LifecycleConfiguration={"Rules": [
    rule("mpu", Filter={"Prefix": "big/"}, AbortIncompleteMultipartUpload={"DaysAfterInitiation": 1}),
]})
wait_for("the upload under big/ aborted",
         lambda: [u["Key"] for u in s3.list_multipart_uploads(Bucket="lc-mpu").get("Uploads", [])]
         == ["keep/two"])
check(code_of(s3.list_parts, Bucket="lc-mpu", Key="big/one", UploadId=up) == "NoSuchUpload", "aborted")
s3.abort_multipart_upload(Bucket="lc-mpu", Key="keep/two", UploadId=keep_up)

step("locked versions outlive their lifecycle")
s3.create_bucket(Bucket="lc-lock", ObjectLockEnabledForBucket=True)
s3.put_object(Bucket="lc-lock", Key="held", Body=b"h1")
s3.put_object(Bucket="lc-lock", Key="held", Body=b"h2", ObjectLockLegalHoldStatus="ON")
first = [v for v in versions("lc-lock", "held")[0] if not v["IsLatest"]][0]["VersionId"]
s3.put_object_legal_hold(Bucket="lc-lock", Key="held", VersionId=first, LegalHold={"Status": "ON"})
s3.put_bucket_lifecycle_configuration(Bucket="lc-lock", LifecycleConfiguration={"Rules": [
    rule("all", Expiration={"Days": 1}, NoncurrentVersionExpiration={"NoncurrentDays": 1}),
]})
wait_for("a delete marker on the held object", lambda: len(versions("lc-lock", "held")[1]) == 1)
time.sleep(3)
vs, _ = versions("lc-lock", "held")
check(len(vs) == 2, f"both held versions stay: {vs}")
for v in vs:
    s3.put_object_legal_hold(Bucket="lc-lock", Key="held", VersionId=v["VersionId"],
                             LegalHold={"Status": "OFF"})
wait_for("released versions removed", lambda: versions("lc-lock", "held")[0] == [])

step("storage classes: PUT, copy and multipart into COLD; unknown classes refused")
s3.create_bucket(Bucket="lc-class")
before = cold_stripes()
data = os.urandom(300 << 10)
s3.put_object(Bucket="lc-class", Key="put", Body=data, StorageClass="COLD")
check(class_of("lc-class", "put") == "COLD", "HEAD names the class")
listed = s3.list_objects_v2(Bucket="lc-class")["Contents"]
check([o["StorageClass"] for o in listed] == ["COLD"], f"listing names the class: {listed}")
check(body_sha("lc-class", "put") == sha(data), "read back from the class's pool")
check(len(cold_stripes() - before) >= 1, "its stripes are in s3-cold")
check(code_of(s3.put_object, Bucket="lc-class", Key="x", Body=b"x", StorageClass="GLACIER")
      == "InvalidStorageClass", "an unknown class is refused")
s3.put_object(Bucket="lc-class", Key="tiny", Body=b"tiny", StorageClass="COLD")
check(class_of("lc-class", "tiny") == "COLD" and body_sha("lc-class", "tiny") == sha(b"tiny"),
      "a small object in COLD is stored in the class's pool too")
s3.copy_object(Bucket="lc-class", Key="put", CopySource={"Bucket": "lc-class", "Key": "put"},
               StorageClass="STANDARD")
check(class_of("lc-class", "put") == "STANDARD" and body_sha("lc-class", "put") == sha(data),
      "a copy onto itself changes the class back")
part = os.urandom(5 << 20)
up = s3.create_multipart_upload(Bucket="lc-class", Key="mpu", StorageClass="COLD")["UploadId"]
etags = [s3.upload_part(Bucket="lc-class", Key="mpu", UploadId=up, PartNumber=n, Body=b)["ETag"]
         for n, b in [(1, part), (2, b"tail")]]
check(s3.list_multipart_uploads(Bucket="lc-class")["Uploads"][0]["StorageClass"] == "COLD", "upload class")
s3.complete_multipart_upload(Bucket="lc-class", Key="mpu", UploadId=up, MultipartUpload={
    "Parts": [{"PartNumber": 1, "ETag": etags[0]}, {"PartNumber": 2, "ETag": etags[1]}]})
check(class_of("lc-class", "mpu") == "COLD" and body_sha("lc-class", "mpu") == sha(part + b"tail"),
      "a multipart object in COLD reads back")

step("aws-cli and rclone name the class")
env = dict(os.environ, AWS_DEFAULT_REGION="us-east-1")
src = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"lc-class-{os.getpid()}")
with open(src, "wb") as f:
    f.write(data)
# `aws s3 cp --storage-class` takes only AWS's class names; s3api passes any.
r = subprocess.run(["aws", "--endpoint-url", FAST, "s3api", "put-object", "--bucket", "lc-class", "--key", "cli",
                    "--body", src, "--storage-class", "COLD"], env=env, capture_output=True, text=True, timeout=120)
check(r.returncode == 0, f"aws s3api put-object --storage-class: {r.stderr}")
check(class_of("lc-class", "cli") == "COLD" and body_sha("lc-class", "cli") == sha(data), "aws-cli's object in COLD")
renv = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
renv.update(RCLONE_CONFIG_CAIRN_TYPE="s3", RCLONE_CONFIG_CAIRN_PROVIDER="Other",
            RCLONE_CONFIG_CAIRN_ACCESS_KEY_ID=os.environ["AWS_ACCESS_KEY_ID"],
            RCLONE_CONFIG_CAIRN_SECRET_ACCESS_KEY=os.environ["AWS_SECRET_ACCESS_KEY"],
            RCLONE_CONFIG_CAIRN_ENDPOINT=FAST, RCLONE_CONFIG_CAIRN_REGION="us-east-1",
            RCLONE_CONFIG_CAIRN_FORCE_PATH_STYLE="true")
with tempfile.NamedTemporaryFile(suffix=".conf") as conf:
    r = subprocess.run(["rclone", "--config", conf.name, "--s3-storage-class", "COLD", "copyto", src,
                        "cairn:lc-class/rclone"], env=renv, capture_output=True, text=True, timeout=120)
check(r.returncode == 0, f"rclone --s3-storage-class: {r.stderr}")
check(class_of("lc-class", "rclone") == "COLD" and body_sha("lc-class", "rclone") == sha(data),
      "rclone's object in COLD")
os.remove(src)

step("transitions move current versions to COLD, whole; others stay")
s3.create_bucket(Bucket="lc-tr")
objs = {"cold/big": os.urandom(200 << 10), "cold/small": b"s" * 100, "warm/big": os.urandom(100 << 10)}
for k, body in objs.items():
    s3.put_object(Bucket="lc-tr", Key=k, Body=body)
up = s3.create_multipart_upload(Bucket="lc-tr", Key="cold/parts")["UploadId"]
etags = [s3.upload_part(Bucket="lc-tr", Key="cold/parts", UploadId=up, PartNumber=n, Body=b)["ETag"]
         for n, b in [(1, part), (2, b"second part")]]
s3.complete_multipart_upload(Bucket="lc-tr", Key="cold/parts", UploadId=up, MultipartUpload={
    "Parts": [{"PartNumber": 1, "ETag": etags[0]}, {"PartNumber": 2, "ETag": etags[1]}]})
objs["cold/parts"] = part + b"second part"
before = cold_stripes()
s3.put_bucket_lifecycle_configuration(Bucket="lc-tr", LifecycleConfiguration={"Rules": [
    rule("to-cold", Filter={"Prefix": "cold/"}, Transitions=[{"Days": 1, "StorageClass": "COLD"}]),
]})
got = s3.get_bucket_lifecycle_configuration(Bucket="lc-tr")["Rules"][0]
check(got["Transitions"] == [{"Days": 1, "StorageClass": "COLD"}], f"transition read back: {got}")
wait_for("the cold/ objects in COLD",
         lambda: all(class_of("lc-tr", k) == "COLD" for k in objs if k.startswith("cold/")))
check(class_of("lc-tr", "warm/big") == "STANDARD", "outside the rule: STANDARD")
for k, body in objs.items():
    check(body_sha("lc-tr", k) == sha(body), f"{k} reads back whole after the move")
check(sha(s3.get_object(Bucket="lc-tr", Key="cold/parts", PartNumber=2)["Body"].read())
      == sha(b"second part"), "part boundaries kept")
check(len(cold_stripes() - before) >= 4, "the moved stripes are in s3-cold")

step("noncurrent versions move to COLD; the current one stays")
s3.create_bucket(Bucket="lc-trv")
s3.put_bucket_versioning(Bucket="lc-trv", VersioningConfiguration={"Status": "Enabled"})
v1 = s3.put_object(Bucket="lc-trv", Key="k", Body=b"one" * 1000)["VersionId"]
v2 = s3.put_object(Bucket="lc-trv", Key="k", Body=b"two" * 1000)["VersionId"]
s3.put_bucket_lifecycle_configuration(Bucket="lc-trv", LifecycleConfiguration={"Rules": [
    rule("nc", NoncurrentVersionTransitions=[{"NoncurrentDays": 1, "StorageClass": "COLD"}]),
]})
classes = lambda: {v["VersionId"]: v["StorageClass"] for v in versions("lc-trv", "k")[0]}
wait_for("the noncurrent version in COLD", lambda: classes() == {v1: "COLD", v2: "STANDARD"})
check(body_sha("lc-trv", "k", VersionId=v1) == sha(b"one" * 1000), "the moved version reads back")
check(body_sha("lc-trv", "k") == sha(b"two" * 1000), "the current version is untouched")

for b in ["lc-cur", "lc-tag", "lc-ver", "lc-mpu", "lc-lock", "lc-class", "lc-tr", "lc-trv"]:
    s3.delete_bucket_lifecycle(Bucket=b)
    empty_bucket(s3, b)
print("ALL LIFECYCLE CHECKS PASSED")
