#!/usr/bin/env python3
"""What versioning costs on cairn's S3 gateway: the same work on a bucket never versioned and
on a versioned one, in one run against one gateway.

  PUT of N 4 KiB objects at C concurrent requests (each key written twice in the versioned
  bucket's second pass, so it holds two versions of every key), GET of every key, a full
  ListObjectsV2 of each bucket and a full ListObjectVersions of the versioned one (1000 keys per
  page), each timed; ratios versioned / unversioned. Last, versioning is enabled on the
  unversioned bucket, which then holds N objects written before it: the time
  PutBucketVersioning takes to record each as its key's null version.

  python3 bench/s3_versioning.py --endpoint http://127.0.0.1:17480 --keys 10000 --conc 16

Needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY of a gateway user (`cairn s3 user create`).
Prints a markdown table and writes JSON (`--out`).
"""

import argparse
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
from botocore.config import Config


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def client(endpoint, conc):
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                      max_pool_connections=conc, retries={"max_attempts": 1, "mode": "standard"}))


def timed_ops(s3, fn, keys, conc):
    """Runs fn(key) for every key at `conc` in flight: (seconds, sorted latencies)."""
    lat = []
    lock = threading.Lock()

    def one(k):
        t = time.perf_counter()
        fn(k)
        d = time.perf_counter() - t
        with lock:
            lat.append(d)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(conc) as ex:
        list(ex.map(one, keys))
    return time.perf_counter() - t0, sorted(lat)


def timed_listing(s3, op, bucket):
    t0 = time.perf_counter()
    n = 0
    for page in s3.get_paginator(op).paginate(Bucket=bucket, PaginationConfig={"PageSize": 1000}):
        n += len(page.get("Contents", page.get("Versions", [])))
    return time.perf_counter() - t0, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    s3 = client(a.endpoint, a.conc)
    body = b"v" * 4096
    keys = [f"obj/{i:07d}" for i in range(a.keys)]
    rows = {}
    for bucket, versioned in (("bench-plain", False), ("bench-versioned", True)):
        s3.create_bucket(Bucket=bucket)
        if versioned:
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        r = {}
        for rnd in (1, 2):
            log(f"{bucket}: PUT round {rnd}")
            secs, lat = timed_ops(s3, lambda k: s3.put_object(Bucket=bucket, Key=k, Body=body), keys, a.conc)
            r[f"put{rnd}"] = {"ops_s": len(keys) / secs, "p50_ms": lat[len(lat) // 2] * 1e3,
                              "p99_ms": lat[int(len(lat) * 0.99)] * 1e3}
        log(f"{bucket}: GET")
        secs, lat = timed_ops(s3, lambda k: s3.get_object(Bucket=bucket, Key=k)["Body"].read(), keys, a.conc)
        r["get"] = {"ops_s": len(keys) / secs, "p50_ms": lat[len(lat) // 2] * 1e3,
                    "p99_ms": lat[int(len(lat) * 0.99)] * 1e3}
        best = min(timed_listing(s3, "list_objects_v2", bucket)[0] for _ in range(2))
        r["list_v2_s"] = best
        if versioned:
            runs = [timed_listing(s3, "list_object_versions", bucket) for _ in range(2)]
            assert all(n == 2 * len(keys) for _, n in runs), runs
            r["list_versions_s"] = min(s for s, _ in runs)
        rows[bucket] = r
    log(f"bench-plain: enabling versioning over {len(keys)} objects")
    t0 = time.perf_counter()
    s3.put_bucket_versioning(Bucket="bench-plain", VersioningConfiguration={"Status": "Enabled"})
    enable_s = time.perf_counter() - t0
    nulls = sum(1 for page in s3.get_paginator("list_object_versions").paginate(Bucket="bench-plain")
                for v in page.get("Versions", []) if v["VersionId"] == "null")
    assert nulls == len(keys), f"{nulls} null versions of {len(keys)} objects"
    rows["bench-plain"]["enable_versioning_s"] = enable_s
    p, v = rows["bench-plain"], rows["bench-versioned"]
    out = {"keys": a.keys, "conc": a.conc, "rows": rows, "ratios": {
        "put_ops": v["put2"]["ops_s"] / p["put2"]["ops_s"],
        "put_p99": v["put2"]["p99_ms"] / p["put2"]["p99_ms"],
        "get_ops": v["get"]["ops_s"] / p["get"]["ops_s"],
        "get_p99": v["get"]["p99_ms"] / p["get"]["p99_ms"],
        "list_v2": v["list_v2_s"] / p["list_v2_s"],
        "list_versions_vs_plain_v2": v["list_versions_s"] / p["list_v2_s"],
    }}
    print("| measure | unversioned | versioned | ratio |\n|---|---|---|---|")
    for name, key in (("PUT 4 KiB (overwrite) ops/s", "put2"), ("GET 4 KiB ops/s", "get")):
        print(f"| {name} | {p[key]['ops_s']:.0f} | {v[key]['ops_s']:.0f} | {v[key]['ops_s'] / p[key]['ops_s']:.2f} |")
        print(f"| {name.split(' ops')[0]} p99 ms | {p[key]['p99_ms']:.1f} | {v[key]['p99_ms']:.1f} | "
              f"{v[key]['p99_ms'] / p[key]['p99_ms']:.2f} |")
    print(f"| ListObjectsV2 of {a.keys} keys, s | {p['list_v2_s']:.2f} | {v['list_v2_s']:.2f} | "
          f"{out['ratios']['list_v2']:.2f} |")
    print(f"| ListObjectVersions ({2 * a.keys} versions) vs ListObjectsV2 unversioned, s | "
          f"{p['list_v2_s']:.2f} | {v['list_versions_s']:.2f} | {out['ratios']['list_versions_vs_plain_v2']:.2f} |")
    print(f"| PutBucketVersioning over {a.keys} objects, s | {enable_s:.2f} | | |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
