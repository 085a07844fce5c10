"""CORS against a running cairn gateway: Put/Get/DeleteBucketCors with boto3 and aws-cli, bad
configurations refused, browser preflights (OPTIONS) allowed and refused as S3 answers them,
and Access-Control-Allow-Origin on an actual cross-origin GET.

Run by crates/cli/tests/s3_gateway.rs with S3_ENDPOINT, AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY set. Exits non-zero with a message on the first failed check.
"""

import http.client
import json
import os
import subprocess
import urllib.parse

from s3common import check, client, code_of, step, ENDPOINT


B = "cors"
HOST = urllib.parse.urlparse(ENDPOINT).netloc

s3 = client()


def request(method, path, headers):
    """(status, lower-cased headers, body) of a plain HTTP request."""
    c = http.client.HTTPConnection(HOST, timeout=30)
    c.request(method, path, headers=headers)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def preflight(origin, method, req_headers=None, path=f"/{B}/k"):
    h = {"Origin": origin, "Access-Control-Request-Method": method}
    if req_headers:
        h["Access-Control-Request-Headers"] = req_headers
    return request("OPTIONS", path, h)


step("no configuration")
s3.create_bucket(Bucket=B)
s3.put_object(Bucket=B, Key="k", Body=b"hello")
check(code_of(s3.get_bucket_cors, Bucket=B) == "NoSuchCORSConfiguration", "none yet")
status, _, body = preflight("https://app.example.com", "GET")
check(status == 403 and b"CORS" in body, f"a preflight without rules: {status} {body}")

step("configuration")
rules = {"CORSRules": [
    {"AllowedOrigins": ["https://*.example.com"], "AllowedMethods": ["GET", "PUT"],
     "AllowedHeaders": ["content-type", "x-amz-*"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 600},
    {"AllowedOrigins": ["*"], "AllowedMethods": ["GET"]},
]}
s3.put_bucket_cors(Bucket=B, CORSConfiguration=rules)
got = s3.get_bucket_cors(Bucket=B)["CORSRules"]
check(len(got) == 2 and got[0]["AllowedOrigins"] == ["https://*.example.com"]
      and got[0].get("MaxAgeSeconds") == 600 and got[0].get("ExposeHeaders") == ["ETag"], f"rules: {got}")
bad = {"CORSRules": [{"AllowedOrigins": ["*"], "AllowedMethods": ["PATCH"]}]}
check(code_of(s3.put_bucket_cors, Bucket=B, CORSConfiguration=bad) == "InvalidRequest", "PATCH refused")
bad = {"CORSRules": [{"AllowedOrigins": ["https://*.*.com"], "AllowedMethods": ["GET"]}]}
check(code_of(s3.put_bucket_cors, Bucket=B, CORSConfiguration=bad) == "InvalidRequest", "two wildcards")
check(len(s3.get_bucket_cors(Bucket=B)["CORSRules"]) == 2, "a refused configuration changes nothing")
env = dict(os.environ, AWS_DEFAULT_REGION="us-east-1")
r = subprocess.run(["aws", "--endpoint-url", ENDPOINT, "s3api", "get-bucket-cors", "--bucket", B],
                   env=env, capture_output=True, text=True, timeout=120)
check(r.returncode == 0 and len(json.loads(r.stdout)["CORSRules"]) == 2, f"aws-cli: {r.stderr}")

step("preflights")
status, h, _ = preflight("https://app.example.com", "PUT", "Content-Type, X-Amz-Date")
check(status == 200 and h.get("access-control-allow-origin") == "https://app.example.com"
      and "PUT" in h.get("access-control-allow-methods", "")
      and h.get("access-control-max-age") == "600"
      and "x-amz-date" in h.get("access-control-allow-headers", "").lower(), f"allowed: {status} {h}")
status, h, _ = preflight("https://evil.com", "GET")
check(status == 200 and h.get("access-control-allow-origin") == "*", f"any origin may GET: {status} {h}")
status, _, _ = preflight("https://evil.com", "PUT")
check(status == 403, f"but not PUT: {status}")
status, _, _ = preflight("https://app.example.com", "PUT", "Authorization")
check(status == 403, f"a header no rule allows: {status}")
status, _, _ = request("OPTIONS", f"/{B}/k", {"Access-Control-Request-Method": "GET"})
check(status == 400, f"no Origin: {status}")
status, _, _ = preflight("https://evil.com", "GET", path="/no-such-bucket/k")
check(status == 404, f"a missing bucket: {status}")

step("actual requests")
url = urllib.parse.urlparse(s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "k"}))
status, h, body = request("GET", f"{url.path}?{url.query}", {"Origin": "https://app.example.com"})
check(status == 200 and body == b"hello" and h.get("access-control-allow-origin") == "https://app.example.com"
      and h.get("access-control-expose-headers") == "ETag", f"a cross-origin GET: {status} {h}")
status, h, _ = request("GET", f"{url.path}?{url.query}", {})
check(status == 200 and "access-control-allow-origin" not in h, "no Origin, no CORS headers")

step("delete")
s3.delete_bucket_cors(Bucket=B)
check(code_of(s3.get_bucket_cors, Bucket=B) == "NoSuchCORSConfiguration", "deleted")
status, _, _ = preflight("https://evil.com", "GET")
check(status == 403, f"a preflight after the rules went: {status}")
s3.delete_object(Bucket=B, Key="k")
s3.delete_bucket(Bucket=B)

print("ALL CORS CHECKS PASSED", flush=True)
