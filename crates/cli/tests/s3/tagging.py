"""Object and bucket tagging against a running cairn gateway, driven by boto3 and aws-cli:
tags on PutObject (`x-amz-tagging`), Put/Get/DeleteObjectTagging (also by version id),
CopyObject's tagging directive, an overwrite dropping tags set later, Put/Get/DeleteBucketTagging,
and the limits (10 object tags, 50 bucket tags, key and value lengths, unique keys, `aws:`).

Run by crates/cli/tests/s3_gateway.rs with S3_ENDPOINT, AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY set. Exits non-zero with a message on the first failed check.
"""

import json
import os
import subprocess

from s3common import empty_bucket, check, client, code_of, step, ENDPOINT


B = "tagged"

s3 = client()


def tags(key, **kw):
    return {t["Key"]: t["Value"] for t in s3.get_object_tagging(Bucket=B, Key=key, **kw)["TagSet"]}


def tag_set(d):
    return {"TagSet": [{"Key": k, "Value": v} for k, v in d.items()]}


step("object tags")
s3.create_bucket(Bucket=B)
s3.put_object(Bucket=B, Key="plain", Body=b"x")
check(tags("plain") == {}, "an untagged object has an empty set")
s3.put_object(Bucket=B, Key="k", Body=b"x", Tagging="project=blue&owner=a%20b")
check(tags("k") == {"project": "blue", "owner": "a b"}, f"tags from x-amz-tagging: {tags('k')}")
s3.put_object_tagging(Bucket=B, Key="k", Tagging=tag_set({"stage": "prod"}))
check(tags("k") == {"stage": "prod"}, "PutObjectTagging replaces the set")
s3.put_object(Bucket=B, Key="k", Body=b"y")
check(tags("k") == {}, "an overwrite does not inherit tags set on the object it replaced")
s3.put_object_tagging(Bucket=B, Key="k", Tagging=tag_set({"a": "1"}))
s3.delete_object_tagging(Bucket=B, Key="k")
check(tags("k") == {}, "DeleteObjectTagging empties the set")
check(code_of(s3.get_object_tagging, Bucket=B, Key="missing") == "NoSuchKey", "tags of a missing key")

step("copies")
s3.put_object(Bucket=B, Key="src", Body=b"z", Tagging="t=1")
s3.copy_object(Bucket=B, Key="copy", CopySource={"Bucket": B, "Key": "src"})
check(tags("copy") == {"t": "1"}, "a copy keeps the source's tags")
s3.copy_object(Bucket=B, Key="copy2", CopySource={"Bucket": B, "Key": "src"},
               TaggingDirective="REPLACE", Tagging="u=2")
check(tags("copy2") == {"u": "2"}, "REPLACE takes the request's tags")

step("limits")
eleven = "&".join(f"k{i}=v" for i in range(11))
check(code_of(s3.put_object, Bucket=B, Key="many", Body=b"", Tagging=eleven) == "InvalidTag",
      "11 object tags refused")
check(code_of(s3.head_object, Bucket=B, Key="many") == "404", "and nothing stored")
for bad in [{"k" * 129: "v"}, {"k": "v" * 257}, {"aws:x": "v"}]:
    check(code_of(s3.put_object_tagging, Bucket=B, Key="k", Tagging=tag_set(bad)) == "InvalidTag",
          f"refused: {list(bad)[0][:10]}")
dup = {"TagSet": [{"Key": "a", "Value": "1"}, {"Key": "a", "Value": "2"}]}
check(code_of(s3.put_object_tagging, Bucket=B, Key="k", Tagging=dup) == "InvalidTag", "duplicate keys")

step("versions")
s3.put_bucket_versioning(Bucket=B, VersioningConfiguration={"Status": "Enabled"})
v1 = s3.put_object(Bucket=B, Key="v", Body=b"1", Tagging="n=1")["VersionId"]
v2 = s3.put_object(Bucket=B, Key="v", Body=b"2")["VersionId"]
r = s3.put_object_tagging(Bucket=B, Key="v", VersionId=v1, Tagging=tag_set({"n": "one"}))
check(r.get("VersionId") == v1, "PutObjectTagging names the version")
check(tags("v", VersionId=v1) == {"n": "one"} and tags("v") == {}, "tags are per version")

step("bucket tags")
check(code_of(s3.get_bucket_tagging, Bucket=B) == "NoSuchTagSet", "no bucket tags yet")
s3.put_bucket_tagging(Bucket=B, Tagging=tag_set({f"k{i}": str(i) for i in range(50)}))
check(len(s3.get_bucket_tagging(Bucket=B)["TagSet"]) == 50, "50 bucket tags")
check(code_of(s3.put_bucket_tagging, Bucket=B, Tagging=tag_set({f"k{i}": "" for i in range(51)}))
      == "InvalidTag", "51 refused")
env = dict(os.environ, AWS_DEFAULT_REGION="us-east-1")
r = subprocess.run(["aws", "--endpoint-url", ENDPOINT, "s3api", "get-bucket-tagging", "--bucket", B],
                   env=env, capture_output=True, text=True, timeout=120)
check(r.returncode == 0 and len(json.loads(r.stdout)["TagSet"]) == 50, f"aws-cli: {r.stderr}")
s3.delete_bucket_tagging(Bucket=B)
check(code_of(s3.get_bucket_tagging, Bucket=B) == "NoSuchTagSet", "bucket tags deleted")

step("clean up")
empty_bucket(s3, B)

print("ALL TAGGING CHECKS PASSED", flush=True)
