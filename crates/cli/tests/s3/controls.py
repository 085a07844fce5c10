"""A bucket's access controls beyond ACLs and policies, browser POST uploads and
virtual-hosted-style addressing, with boto3 and plain HTTP against the gateway at
S3_FAST_ENDPOINT (configured with the domain `s3.cairn.test`):
- public access block: each switch refuses or neutralises public ACLs and policies, the
  owner keeps access, anonymous callers lose it; GetBucketPolicyStatus;
- ownership controls: BucketOwnerEnforced disables ACLs (AccessControlListNotSupported),
  only bucket-owner-full-control passes, CreateBucket with the header;
- POST uploads with a signed policy (boto3's generate_presigned_post): stored and read back
  by checksum, success_action_status and redirect, conditions, expiry, a forged signature,
  a size over the policy's range;
- virtual-hosted requests (`BUCKET.s3.cairn.test`, resolved to the gateway here)."""

import hashlib
import os
import socket
import time
import urllib.parse

import urllib3

from s3common import check, client, code_of, empty_bucket, error_of, step

FAST = os.environ["S3_FAST_ENDPOINT"]
DOMAIN = "s3.cairn.test"
s3 = client(FAST)
http = urllib3.PoolManager(retries=False)
PUBLIC_POLICY = """{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*",
"Action":"s3:GetObject","Resource":"arn:aws:s3:::%s/*"}]}"""


def anon_get(bucket, key):
    return http.request("GET", f"{FAST}/{bucket}/{key}").status


def anon_list(bucket):
    return http.request("GET", f"{FAST}/{bucket}").status


step("public access block")
s3.create_bucket(Bucket="pab", ACL="public-read")
s3.put_object(Bucket="pab", Key="k", Body=b"public", ACL="public-read")
check(anon_get("pab", "k") == 200 and anon_list("pab") == 200, "public before the block")
check(code_of(s3.get_public_access_block, Bucket="pab") == "NoSuchPublicAccessBlockConfiguration",
      "no block yet")
s3.put_public_access_block(Bucket="pab", PublicAccessBlockConfiguration={
    "BlockPublicAcls": True, "IgnorePublicAcls": False,
    "BlockPublicPolicy": False, "RestrictPublicBuckets": False})
got = s3.get_public_access_block(Bucket="pab")["PublicAccessBlockConfiguration"]
check(got == {"BlockPublicAcls": True, "IgnorePublicAcls": False, "BlockPublicPolicy": False,
              "RestrictPublicBuckets": False}, f"block back: {got}")
for call, kw in [
    (s3.put_object, {"Key": "k2", "Body": b"x", "ACL": "public-read"}),
    (s3.put_object_acl, {"Key": "k", "ACL": "public-read-write"}),
    (s3.put_bucket_acl, {"ACL": "authenticated-read"}),
    (s3.create_multipart_upload, {"Key": "k3", "ACL": "public-read"}),
]:
    code, status = error_of(call, Bucket="pab", **kw)
    check((code, status) == ("AccessDenied", 403), f"{call.__name__} {kw}: {code} {status}")
s3.put_object(Bucket="pab", Key="k2", Body=b"private")
check(anon_get("pab", "k") == 200, "existing public ACLs still count without IgnorePublicAcls")
s3.put_public_access_block(Bucket="pab", PublicAccessBlockConfiguration={"IgnorePublicAcls": True})
check(anon_get("pab", "k") == 403 and anon_list("pab") == 403, "public ACLs ignored")
check(s3.get_object(Bucket="pab", Key="k")["Body"].read() == b"public", "the owner still reads")
s3.put_bucket_policy(Bucket="pab", Policy=PUBLIC_POLICY % "pab")
check(s3.get_bucket_policy_status(Bucket="pab")["PolicyStatus"]["IsPublic"] is True, "policy public")
check(anon_get("pab", "k") == 200, "a public policy grants without RestrictPublicBuckets")
s3.put_public_access_block(Bucket="pab", PublicAccessBlockConfiguration={
    "IgnorePublicAcls": True, "RestrictPublicBuckets": True})
check(anon_get("pab", "k") == 403, "RestrictPublicBuckets takes the public grant away")
s3.delete_bucket_policy(Bucket="pab")
s3.put_public_access_block(Bucket="pab", PublicAccessBlockConfiguration={"BlockPublicPolicy": True})
code, status = error_of(s3.put_bucket_policy, Bucket="pab", Policy=PUBLIC_POLICY % "pab")
check((code, status) == ("AccessDenied", 403), f"a public policy is blocked: {code} {status}")
check(code_of(s3.get_bucket_policy_status, Bucket="pab") == "NoSuchBucketPolicy", "no policy stored")
s3.delete_public_access_block(Bucket="pab")
check(code_of(s3.get_public_access_block, Bucket="pab") == "NoSuchPublicAccessBlockConfiguration",
      "block deleted")
check(anon_get("pab", "k") == 200, "public again once the block is gone")
check(code_of(s3.put_public_access_block, Bucket="no-such-bucket-pab",
              PublicAccessBlockConfiguration={"BlockPublicAcls": True}) == "NoSuchBucket",
      "missing bucket")

step("ownership controls")
check(code_of(s3.get_bucket_ownership_controls, Bucket="pab") == "OwnershipControlsNotFoundError",
      "no controls yet")
s3.put_bucket_ownership_controls(Bucket="pab", OwnershipControls={
    "Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]})
got = s3.get_bucket_ownership_controls(Bucket="pab")["OwnershipControls"]["Rules"]
check(got == [{"ObjectOwnership": "BucketOwnerEnforced"}], f"controls back: {got}")
check(anon_get("pab", "k") == 403 and anon_list("pab") == 403, "disabled ACLs grant nothing")
for call, kw in [
    (s3.put_object, {"Key": "k4", "Body": b"x", "ACL": "public-read"}),
    (s3.put_object, {"Key": "k4", "Body": b"x", "ACL": "private"}),
    (s3.put_object_acl, {"Key": "k", "ACL": "private"}),
    (s3.put_bucket_acl, {"ACL": "private"}),
]:
    code, status = error_of(call, Bucket="pab", **kw)
    check((code, status) == ("AccessControlListNotSupported", 400), f"{call.__name__} {kw}: {code}")
s3.put_object(Bucket="pab", Key="k4", Body=b"x", ACL="bucket-owner-full-control")
grants = s3.get_object_acl(Bucket="pab", Key="k")["Grants"]
check([g["Permission"] for g in grants] == ["FULL_CONTROL"], f"only the owner shown: {grants}")
check(code_of(s3.put_bucket_ownership_controls, Bucket="pab",
              OwnershipControls={"Rules": [{"ObjectOwnership": "Everyone"}]}) in ("InvalidArgument", "MalformedXML"),
      "unknown ownership refused")
s3.put_bucket_ownership_controls(Bucket="pab", OwnershipControls={
    "Rules": [{"ObjectOwnership": "ObjectWriter"}]})
check(anon_get("pab", "k") == 200, "ACLs in force again")
s3.delete_bucket_ownership_controls(Bucket="pab")
check(code_of(s3.get_bucket_ownership_controls, Bucket="pab") == "OwnershipControlsNotFoundError",
      "controls deleted")
s3.create_bucket(Bucket="owned", ObjectOwnership="BucketOwnerEnforced")
check(s3.get_bucket_ownership_controls(Bucket="owned")["OwnershipControls"]["Rules"][0]["ObjectOwnership"]
      == "BucketOwnerEnforced", "ownership set at creation")
check(code_of(s3.create_bucket, Bucket="owned2", ObjectOwnership="BucketOwnerEnforced",
              ACL="public-read") == "InvalidBucketAclWithObjectOwnership", "ACL with enforced ownership")
s3.delete_bucket(Bucket="owned")

step("POST uploads with a signed policy")
s3.create_bucket(Bucket="forms")
body = os.urandom(100_000)


def post(presigned, data, fields_extra=None):
    fields = dict(presigned["fields"])
    fields.update(fields_extra or {})
    fields["file"] = ("upload.bin", data, "application/octet-stream")
    # A connection of its own: the gateway closes one whose body it refused unread.
    once = urllib3.PoolManager(retries=False)
    return once.request("POST", presigned["url"], fields=fields, redirect=False)


p = s3.generate_presigned_post("forms", "up/one.bin", ExpiresIn=300,
                               Conditions=[["starts-with", "$key", "up/"],
                                           ["content-length-range", 1, 200_000]])
r = post(p, body)
check(r.status == 204, f"POST stored: {r.status} {r.data[:300]}")
pvar = s3.generate_presigned_post("forms", "up/${filename}")
r = post(pvar, body)
check(r.status == 400 and b"filename" in r.data, f"${{filename}} refused: {r.status} {r.data[:200]}")
got = s3.get_object(Bucket="forms", Key="up/one.bin")["Body"].read()
check(hashlib.sha256(got).digest() == hashlib.sha256(body).digest(), "POST body read back whole")
p201 = s3.generate_presigned_post("forms", "s201", Fields={"success_action_status": "201"},
                                  Conditions=[{"success_action_status": "201"}])
r = post(p201, b"created")
check(r.status == 201 and b"<Key>s201</Key>" in r.data, f"201 with a PostResponse: {r.status} {r.data}")
predir = s3.generate_presigned_post("forms", "sredir",
                                    Fields={"success_action_redirect": "http://example.test/done"},
                                    Conditions=[{"success_action_redirect": "http://example.test/done"}])
r = post(predir, b"redirected")
loc = r.headers.get("Location", "")
check(r.status == 303 and loc.startswith("http://example.test/done?") and "key=sredir" in loc,
      f"303 to the redirect: {r.status} {loc}")
r = post(p, b"x" * 300_000)
check(r.status == 400 and b"EntityTooLarge" in r.data,
      f"over the policy's size range refused: {r.status} {r.data[:200]}")
r = post(p, body, fields_extra={"key": "elsewhere/x"})
check(r.status == 403 and b"AccessDenied" in r.data and b"Invalid according to Policy" in r.data,
      f"a key outside the policy refused as AWS does: {r.status} {r.data[:200]}")
garbled = dict(p)
garbled["fields"] = dict(p["fields"], policy="bm90IGpzb24=")
r = post(garbled, body)
check(r.status in (400, 403), f"a policy that does not parse is refused: {r.status} {r.data[:200]}")
forged = dict(p)
forged["fields"] = dict(p["fields"])
sig = forged["fields"]["x-amz-signature"]
forged["fields"]["x-amz-signature"] = ("0" if sig[0] != "0" else "1") + sig[1:]
r = post(forged, body)
check(r.status == 403 and b"SignatureDoesNotMatch" in r.data, f"forged signature: {r.status} {r.data[:200]}")
expired = s3.generate_presigned_post("forms", "late", ExpiresIn=1)
time.sleep(2)
r = post(expired, b"late")
check(r.status == 403, f"an expired policy is refused: {r.status} {r.data[:200]}")
r = urllib3.PoolManager(retries=False).request("POST", f"{FAST}/forms",
                                               fields={"key": "anon", "file": ("a", b"anon")})
check(r.status == 403, f"an unsigned POST into a private bucket is refused: {r.status}")
check(code_of(s3.head_object, Bucket="forms", Key="anon") in ("403", "404"), "nothing stored")
keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="forms")["Contents"])
check(keys == ["s201", "sredir", "up/one.bin"], f"exactly the accepted uploads: {keys}")

step("virtual-hosted-style addressing")
real_getaddrinfo = socket.getaddrinfo


def resolve(host, *args, **kw):
    if isinstance(host, str) and (host == DOMAIN or host.endswith("." + DOMAIN)):
        host = "127.0.0.1"
    return real_getaddrinfo(host, *args, **kw)


socket.getaddrinfo = resolve
port = urllib.parse.urlparse(FAST).port
vs3 = client(f"http://{DOMAIN}:{port}", s3={"addressing_style": "virtual"})
vs3.create_bucket(Bucket="vhosted")
vs3.put_object(Bucket="vhosted", Key="dir/obj", Body=b"via the host")
check(vs3.get_object(Bucket="vhosted", Key="dir/obj")["Body"].read() == b"via the host", "virtual GET")
check([o["Key"] for o in vs3.list_objects_v2(Bucket="vhosted")["Contents"]] == ["dir/obj"],
      "virtual listing")
check(s3.get_object(Bucket="vhosted", Key="dir/obj")["Body"].read() == b"via the host",
      "the same object path style")
check(code_of(vs3.head_bucket, Bucket="no-such-vhost") in ("404", "NoSuchBucket"), "missing bucket")
vs3.delete_object(Bucket="vhosted", Key="dir/obj")
vs3.delete_bucket(Bucket="vhosted")
socket.getaddrinfo = real_getaddrinfo

empty_bucket(s3, "forms")
empty_bucket(s3, "pab")
print("ALL CONTROL CHECKS PASSED")
