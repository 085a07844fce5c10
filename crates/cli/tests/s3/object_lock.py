"""Object lock against a running cairn gateway, driven by boto3, restic and rclone: a bucket created with
object lock (versioning on, not suspendable), default retention, retention and legal hold set on
PUT and later, GOVERNANCE yielding only to the bypass, COMPLIANCE to no one, a delete marker still
allowed, lock fields on GET and HEAD, then restic backing up to and restoring from a versioned,
locked bucket (files compared by SHA-256), `restic check` reading every pack back, and an rclone
copy and check into the same bucket.

Run by crates/cli/tests/s3_gateway.rs with S3_ENDPOINT, AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY set. Exits non-zero with a message on the first failed check. restic may be
missing only outside CI: that part is then skipped, loudly.
"""

import datetime
import hashlib
import json
import os
import random
import shutil
import subprocess
import tempfile

from s3common import check, client, code_of, step, AK, SK, ENDPOINT


B = "locked"

s3 = client()


def later(seconds):
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)


step("a bucket without object lock")
s3.create_bucket(Bucket="unlocked")
check(code_of(s3.get_object_lock_configuration, Bucket="unlocked") == "ObjectLockConfigurationNotFoundError",
      "no configuration")
check(code_of(s3.put_object, Bucket="unlocked", Key="k", Body=b"x", ObjectLockMode="GOVERNANCE",
              ObjectLockRetainUntilDate=later(60)) == "InvalidRequest", "lock headers refused")
check(code_of(s3.put_object_lock_configuration, Bucket="unlocked",
              ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"}) == "InvalidBucketState",
      "object lock needs versioning")
s3.delete_bucket(Bucket="unlocked")

step("created with object lock")
s3.create_bucket(Bucket=B, ObjectLockEnabledForBucket=True)
check(s3.get_bucket_versioning(Bucket=B).get("Status") == "Enabled", "versioning on")
check(s3.get_object_lock_configuration(Bucket=B)["ObjectLockConfiguration"]["ObjectLockEnabled"] == "Enabled",
      "object lock on")
check(code_of(s3.put_bucket_versioning, Bucket=B, VersioningConfiguration={"Status": "Suspended"})
      == "InvalidBucketState", "versioning cannot be suspended")

step("retention on PUT")
gov = s3.put_object(Bucket=B, Key="gov", Body=b"g", ObjectLockMode="GOVERNANCE",
                    ObjectLockRetainUntilDate=later(3600))["VersionId"]
comp = s3.put_object(Bucket=B, Key="comp", Body=b"c", ObjectLockMode="COMPLIANCE",
                     ObjectLockRetainUntilDate=later(3600))["VersionId"]
h = s3.head_object(Bucket=B, Key="gov")
check(h.get("ObjectLockMode") == "GOVERNANCE" and h.get("ObjectLockRetainUntilDate") is not None,
      f"HEAD shows the lock: {h}")
check(code_of(s3.delete_object, Bucket=B, Key="gov", VersionId=gov) == "AccessDenied",
      "a GOVERNANCE version cannot be deleted")
check(code_of(s3.delete_object, Bucket=B, Key="comp", VersionId=comp, BypassGovernanceRetention=True)
      == "AccessDenied", "nor a COMPLIANCE one, bypass or not")
d = s3.delete_object(Bucket=B, Key="comp")
check(d.get("DeleteMarker") is True, "a delete marker is still allowed")
check(s3.get_object(Bucket=B, Key="comp", VersionId=comp)["Body"].read() == b"c", "the locked version stays")
r = s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": "gov", "VersionId": gov}]})
check([e["Code"] for e in r.get("Errors", [])] == ["AccessDenied"], f"DeleteObjects refuses too: {r}")

step("retention changes")
check(code_of(s3.put_object_retention, Bucket=B, Key="comp", VersionId=comp,
              Retention={"Mode": "COMPLIANCE", "RetainUntilDate": later(60)}) == "AccessDenied",
      "COMPLIANCE cannot be shortened")
s3.put_object_retention(Bucket=B, Key="comp", VersionId=comp,
                        Retention={"Mode": "COMPLIANCE", "RetainUntilDate": later(7200)})
check(s3.get_object_retention(Bucket=B, Key="comp", VersionId=comp)["Retention"]["Mode"] == "COMPLIANCE",
      "but extended")
check(code_of(s3.put_object_retention, Bucket=B, Key="gov", VersionId=gov,
              Retention={"Mode": "GOVERNANCE", "RetainUntilDate": later(30)}) == "AccessDenied",
      "GOVERNANCE shortened without the bypass")
s3.put_object_retention(Bucket=B, Key="gov", VersionId=gov, BypassGovernanceRetention=True,
                        Retention={"Mode": "GOVERNANCE", "RetainUntilDate": later(30)})
s3.delete_object(Bucket=B, Key="gov", VersionId=gov, BypassGovernanceRetention=True)
check(code_of(s3.head_object, Bucket=B, Key="gov") == "404", "deleted with the bypass")

step("legal hold and default retention")
v = s3.put_object(Bucket=B, Key="held", Body=b"h", ObjectLockLegalHoldStatus="ON")["VersionId"]
check(s3.get_object_legal_hold(Bucket=B, Key="held")["LegalHold"]["Status"] == "ON", "hold on")
check(code_of(s3.delete_object, Bucket=B, Key="held", VersionId=v, BypassGovernanceRetention=True)
      == "AccessDenied", "a held version cannot be deleted")
s3.put_object_legal_hold(Bucket=B, Key="held", VersionId=v, LegalHold={"Status": "OFF"})
s3.delete_object(Bucket=B, Key="held", VersionId=v)
s3.put_object_lock_configuration(Bucket=B, ObjectLockConfiguration={
    "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
rule = s3.get_object_lock_configuration(Bucket=B)["ObjectLockConfiguration"]["Rule"]["DefaultRetention"]
check(rule == {"Mode": "GOVERNANCE", "Days": 1}, f"default retention: {rule}")
v = s3.put_object(Bucket=B, Key="defaulted", Body=b"d")["VersionId"]
r = s3.get_object_retention(Bucket=B, Key="defaulted")["Retention"]
check(r["Mode"] == "GOVERNANCE" and r["RetainUntilDate"] > later(86000), f"the default applies: {r}")
check(code_of(s3.delete_object, Bucket=B, Key="defaulted", VersionId=v) == "AccessDenied",
      "a defaulted version is locked")
check(code_of(s3.put_object_lock_configuration, Bucket=B, ObjectLockConfiguration={
    "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1, "Years": 1}}})
      == "MalformedXML", "Days and Years together")

step("restic on a versioned, locked bucket")
if shutil.which("restic") is None:
    check(os.environ.get("CI") is None, "CI needs restic (apt-get install restic; .ci/run does it)")
    print("!" * 78 + "\n!!! SKIPPED restic: not installed (apt-get install restic)\n" + "!" * 78, flush=True)
else:
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env.update(AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK, RESTIC_PASSWORD="cairn-restic-test",
               RESTIC_REPOSITORY=f"s3:{ENDPOINT}/{B}/restic")

    def restic(*args):
        r = subprocess.run(["restic", "--no-cache", *args], env=env, capture_output=True, text=True,
                           timeout=600)
        check(r.returncode == 0, f"restic {' '.join(args)}: rc {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r.stdout

    rng = random.Random(11)
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "src"), os.path.join(d, "dst")
        files = {"a.txt": b"restic on cairn\n", "empty": b"", "sub/blob.bin": rng.randbytes(3 << 20),
                 "sub/deeper/big.bin": rng.randbytes(12 << 20)}
        for name, data in files.items():
            os.makedirs(os.path.dirname(os.path.join(src, name)), exist_ok=True)
            with open(os.path.join(src, name), "wb") as f:
                f.write(data)
        restic("init")
        restic("backup", src)
        with open(os.path.join(src, "a.txt"), "ab") as f:
            f.write(b"second snapshot\n")
        restic("backup", src)
        snaps = json.loads(restic("snapshots", "--json"))
        check(len(snaps) == 2 and all(s["paths"] == [src] for s in snaps), f"two snapshots: {snaps}")
        restic("check", "--read-data")
        restic("restore", "latest", "--target", dst)
        for name, data in files.items():
            with open(os.path.join(dst, src.lstrip("/"), name), "rb") as f:
                got = f.read()
            want = data + (b"second snapshot\n" if name == "a.txt" else b"")
            check(hashlib.sha256(got).digest() == hashlib.sha256(want).digest(), f"restored {name}")
        # restic removed its lock files (delete markers); the versions it wrote stay locked.
        listed = s3.list_object_versions(Bucket=B, Prefix="restic/data/")
        some = listed["Versions"][0]
        check(code_of(s3.delete_object, Bucket=B, Key=some["Key"], VersionId=some["VersionId"])
              == "AccessDenied", "restic's packs are under the default retention")

step("rclone on a versioned, locked bucket")
if shutil.which("rclone") is None:
    check(os.environ.get("CI") is None, "CI needs rclone")
    print("!!! SKIPPED rclone: not installed", flush=True)
else:
    renv = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    renv.update(RCLONE_CONFIG_CAIRN_TYPE="s3", RCLONE_CONFIG_CAIRN_PROVIDER="Other",
                RCLONE_CONFIG_CAIRN_ACCESS_KEY_ID=AK, RCLONE_CONFIG_CAIRN_SECRET_ACCESS_KEY=SK,
                RCLONE_CONFIG_CAIRN_ENDPOINT=ENDPOINT, RCLONE_CONFIG_CAIRN_REGION="us-east-1",
                RCLONE_CONFIG_CAIRN_FORCE_PATH_STYLE="true")
    with tempfile.TemporaryDirectory() as d, tempfile.NamedTemporaryFile(suffix=".conf") as conf:
        for i in range(3):
            with open(os.path.join(d, f"f{i}"), "wb") as f:
                f.write(random.Random(i).randbytes(100_000 * (i + 1)))
        for args in (["copy", d, f"cairn:{B}/rclone"], ["check", d, f"cairn:{B}/rclone"]):
            r = subprocess.run(["rclone", "--config", conf.name, "--retries", "1", *args], env=renv,
                               capture_output=True, text=True, timeout=300)
            check(r.returncode == 0, f"rclone {args[0]}: {r.stdout}\n{r.stderr}")
        check("0 differences found" in r.stderr, f"rclone check: {r.stderr}")

print("ALL OBJECT LOCK CHECKS PASSED", flush=True)
