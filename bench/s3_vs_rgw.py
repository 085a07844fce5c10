#!/usr/bin/env python3
"""S3 load generator: cairn's gateway against Ceph 16.2's radosgw, in one run.

For each engine it starts the system, then measures with boto3 (threads, one client per
thread, path-style addressing; worker processes so the client is not one GIL), or with
`--client go` with bench/s3load (Go, standard library only: one goroutine and one connection
per concurrent request, SigV4 with signed payload like boto3; built here with `go build`),
which needs far less CPU per request than boto3:

  PUT 4 KiB, GET 4 KiB, PUT 4 MiB, GET 4 MiB at 1, 16 and 64 concurrent requests
  (fixed duration each): ops/s, MB/s, p50 / p99 / max latency, errors;
  LIST of 100,000 keys: the keys are created at 64 concurrent requests (a timed PUT phase
  of its own), then a full ListObjectsV2 pagination, 1000 keys per page, is timed twice.

Every GET reads the whole body; one GET in `--verify-every` checks the body (its first 64
bytes are the key, the rest a fixed pattern) and that ETag = MD5(body). The listing is
checked key by key. Each phase also records the load average and the CPU seconds the
client and the server processes used.

Systems (started and stopped here, one after the other):
  cairn: `cairn up --dir D --mon ... --s3 ...` (monitor, 3 OSDs, gateway), `cairn down`;
  rgw:   ceph-mini's up.sh (NUM_OSD=3, pools size 3) + bench/rgw.sh (radosgw, beast),
         bench/rgw.sh stop + ceph-mini's down.sh.

  python3 bench/s3_vs_rgw.py                       # both, results in bench/results/
  python3 bench/s3_vs_rgw.py --engines cairn --duration 5 --list-keys 10000
  python3 bench/s3_vs_rgw.py --client go           # the Go load generator for both engines
  python3 bench/s3_vs_rgw.py --table bench/results/FILE.json   # markdown table again
"""

import argparse
import configparser
import hashlib
import json
import multiprocessing as mp
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import boto3
from botocore.config import Config

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
KEY_PREFIX_BYTES = 64
GO_BIN = None  # bench/s3load, built by main() for --client go
SIZES = {"4KiB": 4096, "4MiB": 4 << 20}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def pattern(size):
    """The fixed body tail: the same bytes for every object of a size, on both engines."""
    return random.Random(size).randbytes(size)


def body_for(key, size, base):
    head = key.encode().ljust(KEY_PREFIX_BYTES, b".")[:KEY_PREFIX_BYTES]
    if size <= KEY_PREFIX_BYTES:
        return head[:size]
    return head + base[KEY_PREFIX_BYTES:]


def make_client(ep):
    cfg = Config(
        s3={"addressing_style": "path"},
        signature_version="s3v4",
        retries={"max_attempts": 1, "mode": "standard"},
        max_pool_connections=2,
        connect_timeout=10,
        read_timeout=300,
        # botocore >= 1.36 adds CRC32 trailers (aws-chunked) by default, which Pacific's RGW
        # predates: ask for checksums only where an operation requires one.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return boto3.session.Session().client(
        "s3",
        endpoint_url=ep["endpoint"],
        aws_access_key_id=ep["access_key"],
        aws_secret_access_key=ep["secret_key"],
        region_name="us-east-1",
        config=cfg,
    )


def proc_cpu(pid):
    """utime + stime of a process, in seconds (0 if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, max(0, int(round(p / 100.0 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[i]


# ---------------------------------------------------------------- workers


def _thread_main(ep, job, tid, slot, shared, ready, go):
    """One client, one thread. job: dict(op, bucket, size, duration|keys, ...)."""
    out = slot
    try:
        cli = make_client(ep)
        cli.head_bucket(Bucket=job["bucket"])  # opens the connection before the clock starts
    except Exception as e:  # noqa: BLE001
        out["errors"] += 1
        out["err_msgs"].append(f"setup: {e!r}"[:300])
        ready.wait()
        go.wait()
        return
    ready.wait()
    go.wait()
    start_at = shared["start_at"]
    op, bucket, size = job["op"], job["bucket"], job["size"]
    base = job["base"]
    lat = out["lat"]
    keys = job.get("keys")  # PUT: fixed keys (LIST fill); GET: keys to pick from
    rnd = random.Random(job["seed"] * 1000 + tid)
    n = 0
    while time.time() < start_at:
        time.sleep(0.0005)
    deadline = start_at + job["duration"] if job.get("duration") else None
    my_keys = keys[tid :: job["conc"]] if (op == "put" and keys is not None) else None
    while True:
        if deadline is not None and time.time() >= deadline:
            break
        if op == "put":
            if my_keys is not None:
                if n >= len(my_keys):
                    break
                key = my_keys[n]
            else:
                key = f"{job['prefix']}/t{tid:03d}-{n:07d}"
            body = body_for(key, size, base)
            t0 = time.perf_counter()
            try:
                r = cli.put_object(Bucket=bucket, Key=key, Body=body)
                dt = time.perf_counter() - t0
                lat.append(dt)
                out["bytes"] += size
                if my_keys is None:
                    out["keys"].append(key)
                if n % job["verify_every"] == 0:
                    out["verified"] += 1
                    if r["ETag"].strip('"') != hashlib.md5(body).hexdigest():
                        out["bad"] += 1
                        out["err_msgs"].append(f"PUT {key}: ETag {r['ETag']} != MD5")
            except Exception as e:  # noqa: BLE001
                out["errors"] += 1
                if len(out["err_msgs"]) < 5:
                    out["err_msgs"].append(f"PUT {key}: {e!r}"[:300])
        else:
            key = keys[rnd.randrange(len(keys))]
            t0 = time.perf_counter()
            try:
                r = cli.get_object(Bucket=bucket, Key=key)
                data = r["Body"].read()
                dt = time.perf_counter() - t0
                lat.append(dt)
                out["bytes"] += len(data)
                if n % job["verify_every"] == 0:
                    out["verified"] += 1
                    good = (
                        len(data) == size
                        and data == body_for(key, size, base)
                        and r["ETag"].strip('"') == hashlib.md5(data).hexdigest()
                    )
                    if not good:
                        out["bad"] += 1
                        if len(out["err_msgs"]) < 5:
                            out["err_msgs"].append(f"GET {key}: content or ETag mismatch")
            except Exception as e:  # noqa: BLE001
                out["errors"] += 1
                if len(out["err_msgs"]) < 5:
                    out["err_msgs"].append(f"GET {key}: {e!r}"[:300])
        n += 1


def _proc_main(ep, job, tid0, nthreads, pready, pgo, start_val, q):
    base = pattern(job["size"])
    job = dict(job, base=base)
    slots = [
        {"lat": [], "bytes": 0, "errors": 0, "err_msgs": [], "keys": [], "verified": 0, "bad": 0}
        for _ in range(nthreads)
    ]
    ready = threading.Barrier(nthreads + 1)
    go = threading.Barrier(nthreads + 1)
    shared = {}
    ths = []
    for i in range(nthreads):
        th = threading.Thread(
            target=_thread_main, args=(ep, job, tid0 + i, slots[i], shared, ready, go), daemon=True
        )
        th.start()
        ths.append(th)
    ready.wait()  # every client built and connected
    pready.wait()  # ... in every process
    pgo.wait()  # the parent has set the start time
    start_at = shared["start_at"] = start_val.value
    go.wait()
    t_cpu0 = os.times()
    while time.time() < start_at:
        time.sleep(0.001)
    for th in ths:
        th.join()
    end = time.time()
    t_cpu1 = os.times()
    cpu = (t_cpu1.user - t_cpu0.user) + (t_cpu1.system - t_cpu0.system)
    res = {
        "lat": [x for s in slots for x in s["lat"]],
        "bytes": sum(s["bytes"] for s in slots),
        "errors": sum(s["errors"] for s in slots),
        "err_msgs": [m for s in slots for m in s["err_msgs"]][:5],
        "keys": [k for s in slots for k in s["keys"]],
        "verified": sum(s["verified"] for s in slots),
        "bad": sum(s["bad"] for s in slots),
        "end": end,
        "cpu": cpu,
    }
    q.put(res)


def run_phase(ep, server_pids, name, op, bucket, size, conc, procs, duration=None, keys=None,
              prefix=None, verify_every=8, seed=0):
    if GO_BIN:
        return go_phase(ep, server_pids, name, op, bucket, size, conc, duration=duration,
                        keys=keys, prefix=prefix, verify_every=verify_every, seed=seed)
    nproc = max(1, min(procs, conc))
    per = [conc // nproc + (1 if i < conc % nproc else 0) for i in range(nproc)]
    job = {
        "op": op,
        "bucket": bucket,
        "size": size,
        "duration": duration,
        "keys": keys,
        "prefix": prefix,
        "conc": conc,
        "verify_every": verify_every,
        "seed": seed,
    }
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    pready, pgo = ctx.Barrier(nproc + 1), ctx.Barrier(nproc + 1)
    start_val = ctx.Value("d", 0.0)
    ps = [
        ctx.Process(target=_proc_main, args=(ep, job, sum(per[:i]), per[i], pready, pgo, start_val, q))
        for i in range(nproc)
    ]
    for p in ps:
        p.start()
    pready.wait(timeout=300)  # clients are built and connected before the clock starts
    start_at = time.time() + 0.2
    start_val.value = start_at
    la = loadavg()
    pgo.wait()
    while time.time() < start_at:
        time.sleep(0.005)
    srv0 = {n: proc_cpu(pid) for n, pid in server_pids.items()}
    results = [q.get() for _ in ps]
    for p in ps:
        p.join()
    srv1 = {n: proc_cpu(pid) for n, pid in server_pids.items()}
    wall = max(r["end"] for r in results) - start_at
    lat = sorted(x for r in results for x in r["lat"])
    nbytes = sum(r["bytes"] for r in results)
    ops = len(lat)
    res = {
        "phase": name,
        "op": op,
        "size": size,
        "conc": conc,
        "procs": nproc,
        "wall_s": round(wall, 3),
        "ops": ops,
        "ops_s": ops / wall if wall > 0 else 0.0,
        "mb_s": nbytes / wall / 1e6 if wall > 0 else 0.0,
        "p50_ms": pct(lat, 50) * 1e3 if lat else None,
        "p99_ms": pct(lat, 99) * 1e3 if lat else None,
        "max_ms": lat[-1] * 1e3 if lat else None,
        "mean_ms": sum(lat) / ops * 1e3 if lat else None,
        "errors": sum(r["errors"] for r in results),
        "err_msgs": [m for r in results for m in r["err_msgs"]][:5],
        "verified": sum(r["verified"] for r in results),
        "bad": sum(r["bad"] for r in results),
        "client_cpu_s": round(sum(r["cpu"] for r in results), 2),
        "server_cpu_s": round(sum(srv1[n] - srv0[n] for n in server_pids), 2),
        "server_cpu_by_proc": {n: round(srv1[n] - srv0[n], 2) for n in server_pids},
        "loadavg_before": la,
        "loadavg_after": loadavg(),
    }
    report_phase(res, name, conc, ops, la, "")
    keys_out = [k for r in results for k in r["keys"]]
    return res, keys_out


def go_start(cmd):
    """Starts bench/s3load; returns the process once it has connected ("ready")."""
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    if line != "ready":
        p.kill()
        p.wait()
        raise RuntimeError(f"s3load did not get ready: {line!r}")
    return p


def go_finish(p):
    """Starts the clock of a ready s3load; its JSON result and its CPU seconds."""
    p.stdin.write("go\n")
    p.stdin.flush()
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"s3load exited {p.returncode}")
    return json.loads(out.strip().splitlines()[-1]), ru.ru_utime + ru.ru_stime


def go_cmd(sub, ep):
    return [GO_BIN, sub, "-endpoint", ep["endpoint"], "-access-key", ep["access_key"],
            "-secret-key", ep["secret_key"]]


def go_phase(ep, server_pids, name, op, bucket, size, conc, duration=None, keys=None,
             prefix=None, verify_every=8, seed=0):
    """run_phase with bench/s3load: the same phase, the same result fields."""
    tmp = tempfile.mkdtemp(prefix="s3load-")
    try:
        pat = os.path.join(tmp, "pattern")
        with open(pat, "wb") as f:
            f.write(pattern(size))
        cmd = go_cmd("phase", ep) + [
            "-op", op, "-bucket", bucket, "-size", str(size), "-conc", str(conc),
            "-duration", str(duration or 0), "-pattern", pat, "-verify-every", str(verify_every),
            "-seed", str(seed)]
        if prefix:
            cmd += ["-prefix", prefix]
        if keys is not None:
            kf = os.path.join(tmp, "keys")
            with open(kf, "w") as f:
                f.write("\n".join(keys) + "\n")
            cmd += ["-keys", kf]
        ko = os.path.join(tmp, "keys-out")
        if op == "put" and duration:
            cmd += ["-keys-out", ko]
        p = go_start(cmd)
        la = loadavg()
        srv0 = {n: proc_cpu(pid) for n, pid in server_pids.items()}
        r, cpu = go_finish(p)
        srv1 = {n: proc_cpu(pid) for n, pid in server_pids.items()}
        keys_out = []
        if op == "put" and duration:
            with open(ko) as f:
                keys_out = [k for k in f.read().split("\n") if k]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wall, ops = r["wall_s"], r["ops"]
    res = {
        "phase": name, "op": op, "size": size, "conc": conc, "procs": 1, "client": "go",
        "wall_s": round(wall, 3), "ops": ops,
        "ops_s": ops / wall if wall > 0 else 0.0,
        "mb_s": r["bytes"] / wall / 1e6 if wall > 0 else 0.0,
        "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "max_ms": r.get("max_ms"),
        "mean_ms": r.get("mean_ms"), "errors": r["errors"], "err_msgs": r["err_msgs"] or [],
        "verified": r["verified"], "bad": r["bad"],
        "client_cpu_s": round(cpu, 2),
        "server_cpu_s": round(sum(srv1[n] - srv0[n] for n in server_pids), 2),
        "server_cpu_by_proc": {n: round(srv1[n] - srv0[n], 2) for n in server_pids},
        "loadavg_before": la,
        "loadavg_after": loadavg(),
    }
    report_phase(res, name, conc, ops, la, " (go)")
    return res, keys_out


def go_list(ep, bucket, expect, server_pids):
    """list_all with bench/s3load (HTTP part: request sent .. body read, before XML parsing)."""
    with tempfile.NamedTemporaryFile("w", prefix="s3load-keys-", delete=False) as f:
        f.write("\n".join(expect) + "\n")
    try:
        p = go_start(go_cmd("list", ep) + ["-bucket", bucket, "-keys", f.name])
        la = loadavg()
        srv0 = {n: proc_cpu(pid) for n, pid in server_pids.items()}
        r, cpu = go_finish(p)
        srv = sum(proc_cpu(pid) - srv0[n] for n, pid in server_pids.items())
    finally:
        os.unlink(f.name)
    res = dict(r, seconds=round(r["seconds"], 3), http_total_s=round(r["http_total_s"], 3),
               server_cpu_s=round(srv, 2), client_cpu_s=round(cpu, 2), loadavg_before=la,
               client="go")
    log(
        f"  LIST {res['keys']} keys in {res['seconds']:.2f} s ({res['keys_s']:.0f} keys/s), "
        f"{res['pages']} pages p50 {res['page_p50_ms']:.1f} ms p99 {res['page_p99_ms']:.1f} ms "
        f"(HTTP only: p50 {fmt(res['http_p50_ms'])} ms, {res['http_total_s']} s in all), "
        f"correct={res['correct']}, cpu server {srv:.2f} s client {res['client_cpu_s']} s (go)"
    )
    return res


def report_phase(res, name, conc, ops, la, tag):
    """Adds the per-op CPU figures to a phase's result and logs its one-line summary."""
    res["server_cpu_ms_per_op"] = res["server_cpu_s"] * 1e3 / ops if ops else None
    res["client_cpu_ms_per_op"] = res["client_cpu_s"] * 1e3 / ops if ops else None
    log(
        f"  {name:<16} c={conc:<3} {res['ops']:>7} ops {res['ops_s']:>9.1f} op/s "
        f"{res['mb_s']:>8.2f} MB/s p50 {fmt(res['p50_ms'])} ms p99 {fmt(res['p99_ms'])} ms "
        f"err {res['errors']} verified {res['verified']} bad {res['bad']} "
        f"cpu client {res['client_cpu_s']} s server {res['server_cpu_s']} s load {la[0]:.1f}{tag}"
    )
    for m in res["err_msgs"]:
        log(f"    error: {m}")


def fmt(v, nd=1):
    return "-" if v is None else f"{v:.{nd}f}"


def delete_keys(ep, bucket, keys):
    cli = make_client(ep)
    for i in range(0, len(keys), 1000):
        batch = keys[i : i + 1000]
        r = cli.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
        )
        if r.get("Errors"):
            log(f"  delete errors: {r['Errors'][:3]}")


def list_all(ep, bucket, expect, server_pids):
    if GO_BIN:
        return go_list(ep, bucket, expect, server_pids)
    cli = make_client(ep)
    cli.head_bucket(Bucket=bucket)
    # HTTP time of a page (request sent .. response read, before botocore parses the XML)
    http, mark = [], {}
    cli.meta.events.register("before-send.s3.ListObjectsV2",
                             lambda **kw: mark.__setitem__("t", time.perf_counter()))
    cli.meta.events.register("before-parse.s3.ListObjectsV2",
                             lambda **kw: http.append(time.perf_counter() - mark["t"]))
    srv0 = {n: proc_cpu(pid) for n, pid in server_pids.items()}
    la = loadavg()
    got, pages, token = [], [], None
    c0 = os.times()
    t0 = time.perf_counter()
    while True:
        kw = {"Bucket": bucket, "MaxKeys": 1000}
        if token:
            kw["ContinuationToken"] = token
        p0 = time.perf_counter()
        r = cli.list_objects_v2(**kw)
        pages.append(time.perf_counter() - p0)
        got.extend(o["Key"] for o in r.get("Contents", []))
        if not r.get("IsTruncated"):
            break
        token = r["NextContinuationToken"]
    total = time.perf_counter() - t0
    c1 = os.times()
    srv = sum(proc_cpu(p) - srv0[n] for n, p in server_pids.items())
    ok = got == expect
    pages.sort()
    http.sort()
    res = {
        "keys": len(got),
        "pages": len(pages),
        "seconds": round(total, 3),
        "keys_s": len(got) / total,
        "page_p50_ms": pct(pages, 50) * 1e3,
        "page_p99_ms": pct(pages, 99) * 1e3,
        "page_max_ms": pages[-1] * 1e3,
        "http_p50_ms": pct(http, 50) * 1e3 if http else None,
        "http_p99_ms": pct(http, 99) * 1e3 if http else None,
        "http_total_s": round(sum(http), 3),
        "correct": ok,
        "server_cpu_s": round(srv, 2),
        "client_cpu_s": round((c1.user - c0.user) + (c1.system - c0.system), 2),
        "loadavg_before": la,
    }
    log(
        f"  LIST {len(got)} keys in {total:.2f} s ({res['keys_s']:.0f} keys/s), "
        f"{len(pages)} pages p50 {res['page_p50_ms']:.1f} ms p99 {res['page_p99_ms']:.1f} ms "
        f"(HTTP only: p50 {fmt(res['http_p50_ms'])} ms, {res['http_total_s']} s in all), "
        f"correct={ok}, cpu server {srv:.2f} s client {res['client_cpu_s']} s"
    )
    return res


def run_workload(engine, ep, server_pids, args):
    cli = make_client(ep)
    for b in ("bench", "bench-list"):
        cli.create_bucket(Bucket=b)
    out = {"engine": engine, "phases": [], "list": None, "started": time.strftime("%F %T")}
    for sname in args.sizes:
        size = SIZES[sname]
        for c in args.conc:
            prefix = f"{sname}/c{c}"
            res, keys = run_phase(ep, server_pids, f"PUT {sname}", "put", "bench", size, c,
                                  args.procs, duration=args.duration, prefix=prefix,
                                  verify_every=args.verify_every)
            out["phases"].append(res)
            if not keys:
                log(f"  no {sname} objects written at c={c}; skipping GET")
                continue
            res, _ = run_phase(ep, server_pids, f"GET {sname}", "get", "bench", size, c,
                               args.procs, duration=args.duration, keys=keys,
                               verify_every=args.verify_every, seed=c)
            out["phases"].append(res)
            if size > 1 << 20:
                delete_keys(ep, "bench", keys)  # bounds the disk used by the 4 MiB phases
    if args.list_keys:
        keys = [f"k/{i:07d}" for i in range(args.list_keys)]
        res, _ = run_phase(ep, server_pids, "PUT 16B (fill)", "put", "bench-list", 16,
                           args.list_conc, args.procs, keys=keys,
                           verify_every=args.verify_every)
        out["list_fill"] = res
        out["list"] = [list_all(ep, "bench-list", keys, server_pids) for _ in range(2)]
    return out


# ---------------------------------------------------------------- engines


def sh(cmd, env=None, check=True, timeout=600, cwd=None):
    log("$ " + " ".join(cmd))
    r = subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True, cwd=cwd)
    if r.returncode != 0 and check:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
        raise RuntimeError(f"{cmd[0]} exited {r.returncode}")
    return r


def cairn_engine(args, binary):
    d = args.cairn_dir
    if os.path.exists(os.path.join(d, "pids")):
        raise RuntimeError(f"{d}/pids exists: a cluster may be running there (cairn down --dir {d})")
    shutil.rmtree(d, ignore_errors=True)
    sh([binary, "up", "--dir", d, "--mon", args.cairn_mon, "--s3", args.cairn_s3,
        "--device-mib", str(args.cairn_device_mib)] + args.cairn_up_arg, timeout=300)
    cp = configparser.ConfigParser()
    cp.read(os.path.join(d, "s3-credentials"))
    ep = {
        "endpoint": f"http://{args.cairn_s3}",
        "access_key": cp["default"]["aws_access_key_id"],
        "secret_key": cp["default"]["aws_secret_access_key"],
    }
    with open(os.path.join(d, "pids")) as f:
        nums = [int(x) for x in f.read().split()]
    # `cairn up` writes the monitor, the OSDs, then the gateway
    names = ["mon"] + [f"osd{i}" for i in range(len(nums) - 2)] + ["s3gw"]
    pids = dict(zip(names, nums))

    def stop():
        sh([binary, "down", "--dir", d], check=False)
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)

    return ep, pids, stop


def rgw_engine(args):
    env = dict(os.environ, CEPH_MINI_DIR=args.ceph_dir, MON_V2_PORT=str(args.ceph_mon_v2),
               MON_V1_PORT=str(args.ceph_mon_v1), CEPH_MINI=args.ceph_mini,
               NUM_OSD="3", BLOCK_GB=str(args.ceph_block_gb))
    rgw_sh = os.path.join(HERE, "rgw.sh")

    def stop():
        sh([rgw_sh, "stop"], env=env, check=False)
        denv = dict(env, KEEP="1") if args.keep else env
        sh([os.path.join(args.ceph_mini, "down.sh")], env=denv, check=False, timeout=300)

    try:
        sh([os.path.join(args.ceph_mini, "up.sh")], env=env, timeout=600)
        sh([rgw_sh, "start", args.rgw_addr], env=env, timeout=300)
        r = sh([rgw_sh, "user", "bench"], env=env, timeout=300)
        ak, sk = r.stdout.split()[-2:]
        pids = {}
        piddir = os.path.join(args.ceph_dir, "pids")
        for name in sorted(os.listdir(piddir)):
            with open(os.path.join(piddir, name)) as f:
                pids[name] = int(f.read().strip())
    except BaseException:
        stop()
        raise
    ep = {"endpoint": f"http://{args.rgw_addr}", "access_key": ak, "secret_key": sk}
    return ep, pids, stop


def env_info():
    info = {"nproc": os.cpu_count(), "loadavg": loadavg(), "boto3": boto3.__version__}
    try:
        info["radosgw"] = subprocess.run(["radosgw", "--version"], capture_output=True,
                                         text=True).stdout.strip()
    except OSError:
        info["radosgw"] = None
    try:
        info["cairn_commit"] = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                              capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    with open("/proc/meminfo") as f:
        info["mem_total_kb"] = int(f.readline().split()[1])
    return info


# ---------------------------------------------------------------- report


def g(x, k, nd=1):
    return fmt(x[k], nd) if x and x.get(k) is not None else "-"


def table(data, an="cairn", bn="rgw"):
    """Markdown: engine `an` against engine `bn` (ratios are an/bn for throughput)."""
    by = {e["engine"]: e for e in data["engines"]}
    c, r = by.get(an), by.get(bn)
    A, B = an, "RGW" if bn == "rgw" else bn
    lines = []
    lines.append(f"| op | size | conc | {A} op/s | {B} op/s | ratio | {A} MB/s | {B} MB/s "
                 f"| {A} p50 ms | {B} p50 ms | {A} p99 ms | {B} p99 ms | p99 {B}/{A} "
                 f"| errors | load avg |")
    lines.append("|" + "---|" * 15)
    rows = {}
    for e, tag in ((c, "c"), (r, "r")):
        if not e:
            continue
        for p in e["phases"] + ([e["list_fill"]] if e.get("list_fill") else []):
            rows.setdefault((p["phase"], p["conc"]), {})[tag] = p
    for (phase, conc), v in rows.items():
        a, b = v.get("c"), v.get("r")
        op, _, size = phase.partition(" ")
        ratio = f"{a['ops_s'] / b['ops_s']:.2f}x" if a and b and b["ops_s"] else "-"
        p99r = f"{b['p99_ms'] / a['p99_ms']:.2f}x" if a and b and a["p99_ms"] else "-"
        err = f"{a['errors'] if a else '-'} / {b['errors'] if b else '-'}"
        load = " / ".join(f"{x['loadavg_before'][0]:.1f}" if x else "-" for x in (a, b))
        lines.append(
            f"| {op} | {size} | {conc} | {g(a, 'ops_s')} | {g(b, 'ops_s')} | {ratio} "
            f"| {g(a, 'mb_s', 2)} | {g(b, 'mb_s', 2)} | {g(a, 'p50_ms')} | {g(b, 'p50_ms')} "
            f"| {g(a, 'p99_ms')} | {g(b, 'p99_ms')} | {p99r} | {err} | {load} |"
        )
    lines.append("")
    n = (c or r or {}).get("list") or []
    nkeys = n[0]["keys"] if n else 0
    lines.append(f"| LIST {nkeys:,} keys (ListObjectsV2, 1000/page) | run | {A} | {B} | {A} vs {B} |")
    lines.append("|---|---|---|---|---|")
    for i in range(len(n)):
        a = c["list"][i] if c and c.get("list") else None
        b = r["list"][i] if r and r.get("list") else None
        for label, k, nd, higher in (("seconds", "seconds", 2, False), ("keys/s", "keys_s", 0, True),
                                     ("page p50 ms", "page_p50_ms", 1, False),
                                     ("page p99 ms", "page_p99_ms", 1, False),
                                     ("HTTP part of a page, p50 ms", "http_p50_ms", 1, False),
                                     ("client CPU s", "client_cpu_s", 2, False),
                                     ("server CPU s", "server_cpu_s", 2, False)):
            av, bv = g(a, k, nd), g(b, k, nd)
            if a and b and a.get(k) and b.get(k):
                ratio = f"{(a[k] / b[k]) if higher else (b[k] / a[k]):.2f}x"
            else:
                ratio = "-"
            lines.append(f"| {label} | {i + 1} | {av} | {bv} | {ratio} |")
        lines.append(f"| all keys, in order | {i + 1} | {a['correct'] if a else '-'} "
                     f"| {b['correct'] if b else '-'} | |")
    lines.append("")
    lines.append(f"| CPU ms per op | conc | {A} server | {B} server | {A} client | {B} client |")
    lines.append("|---|---|---|---|---|---|")
    for (phase, conc), v in rows.items():
        a, b = v.get("c"), v.get("r")
        lines.append(f"| {phase} | {conc} | {g(a, 'server_cpu_ms_per_op', 2)} "
                     f"| {g(b, 'server_cpu_ms_per_op', 2)} | {g(a, 'client_cpu_ms_per_op', 2)} "
                     f"| {g(b, 'client_cpu_ms_per_op', 2)} |")
    return "\n".join(lines)


def tables(data):
    names = [e["engine"] for e in data["engines"]]
    others = [n for n in names if n != "rgw"] or names
    out = []
    for n in others:
        out.append(f"### {n} vs RGW\n")
        out.append(table(data, n, "rgw"))
        out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default="cairn,rgw",
                    help="comma list of: cairn, rgw, LABEL=PATH (another cairn binary)")
    ap.add_argument("--duration", type=float, default=12.0, help="seconds per PUT/GET phase")
    ap.add_argument("--conc", default="1,16,64")
    ap.add_argument("--sizes", default="4KiB,4MiB")
    ap.add_argument("--procs", type=int, default=2, help="client worker processes (threads split over them)")
    ap.add_argument("--list-keys", type=int, default=100_000)
    ap.add_argument("--list-conc", type=int, default=64)
    ap.add_argument("--verify-every", type=int, default=8)
    ap.add_argument("--out", default=None, help="JSON results (default bench/results/s3_vs_rgw-TIME.json)")
    ap.add_argument("--keep", action="store_true", help="keep the clusters' data after stopping")
    ap.add_argument("--cairn-bin", default=os.path.join(REPO, "target/release/cairn"))
    ap.add_argument("--cairn-up-arg", action="append", default=[],
                    help="one more argument for `cairn up` (repeatable), e.g. --cairn-up-arg=--no-fs")
    ap.add_argument("--cairn-dir", default="/tmp/s3bench-cairn")
    ap.add_argument("--cairn-mon", default="127.0.0.1:16789")
    ap.add_argument("--cairn-s3", default="127.0.0.1:17480")
    ap.add_argument("--cairn-device-mib", type=int, default=16384)
    ap.add_argument("--ceph-mini", default="/work/shared/peers/ceph-mini")
    ap.add_argument("--ceph-dir", default="/tmp/ceph-mini-s3bench")
    ap.add_argument("--ceph-mon-v2", type=int, default=13300)
    ap.add_argument("--ceph-mon-v1", type=int, default=16790)
    ap.add_argument("--ceph-block-gb", type=int, default=30)
    ap.add_argument("--rgw-addr", default="127.0.0.1:17481")
    ap.add_argument("--client", choices=("python", "go"), default="python",
                    help="load generator: boto3 (python) or bench/s3load (go)")
    ap.add_argument("--go", default=shutil.which("go") or "/usr/local/go/bin/go",
                    help="go binary (for --client go)")
    ap.add_argument("--table", help="print the markdown table of a results file and exit")
    args = ap.parse_args()
    if args.table:
        with open(args.table) as f:
            print(tables(json.load(f)))
        return
    global GO_BIN
    if args.client == "go":
        GO_BIN = os.path.join(tempfile.mkdtemp(prefix="s3load-bin-"), "s3load")
        sh([args.go, "build", "-o", GO_BIN, "."], cwd=os.path.join(HERE, "s3load"))
    args.conc = [int(x) for x in args.conc.split(",")]
    args.sizes = args.sizes.split(",")
    cb = os.environ.get("CARGO_TARGET_DIR")
    if not os.path.exists(args.cairn_bin) and cb:
        args.cairn_bin = os.path.join(cb, "release/cairn")
    out_path = args.out or os.path.join(HERE, "results", time.strftime("s3_vs_rgw-%Y%m%d-%H%M%S.json"))
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    data = {"args": {k: v for k, v in vars(args).items()}, "env": env_info(), "engines": []}
    if GO_BIN:
        data["env"]["go"] = subprocess.run([args.go, "version"], capture_output=True,
                                           text=True).stdout.strip()
    for engine in args.engines.split(","):
        log(f"== {engine}: starting (load {loadavg()})")
        if engine == "rgw":
            ep, pids, stop = rgw_engine(args)
        elif engine == "cairn":
            ep, pids, stop = cairn_engine(args, args.cairn_bin)
        else:  # LABEL=PATH: another cairn binary
            engine, _, path = engine.partition("=")
            ep, pids, stop = cairn_engine(args, path)
        try:
            log(f"== {engine}: {ep['endpoint']}, server pids {pids}")
            res = run_workload(engine, ep, pids, args)
            res["server_pids"] = pids
            data["engines"].append(res)
        finally:
            log(f"== {engine}: stopping")
            stop()
        with open(out_path, "w") as f:
            json.dump(data, f, indent=1)
    data["env"]["loadavg_end"] = loadavg()
    with open(out_path, "w") as f:
        json.dump(data, f, indent=1)
    log(f"results in {out_path}")
    print(tables(data))


if __name__ == "__main__":
    main()
