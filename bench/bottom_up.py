#!/usr/bin/env python3
"""Bottom-up benchmark (seed 003's method), every layer measured in one run on this machine:

  fio on a raw device file -> `cairn store bench` on that file -> `cairn bench` against one OSD
  (pool size 1) -> three OSDs (size 3) -> real Ceph 16.2 (`rados bench`, 3 BlueStore OSDs,
  size 3, started with shared/peers/ceph-mini).

The network is a layer of its own, as in the seed ("block devices, backend file system, storage
network, parallel file system"): `cairn msgr bench` moves the same messages between two
processes on loopback with no storage behind them. One OSD stands on both the store and the
network, so its efficiency is given against each.

fio's buffers are huge pages (`--iomem=mmaphuge`, with huge pages reserved for the run and the
old reservation put back), as cairn's I/O buffers of 2 MiB and more are: a 4 MiB direct write
from small pages is split into ~10 device requests on this VM's virtio disk.

Workloads: 4 MiB writes and reads, 4 KiB writes and reads, 16 in flight. Writes are durable at
every layer (fio: fdatasync per write; store: one durable transaction; cluster: acknowledged
when every copy has committed). Prints a markdown table with each layer's efficiency against
the one below (replication accounted for: a size-3 write moves 3x the bytes to disk) and writes
it to --out. The store layer also runs the cluster bench's own 4 KiB workload (new 4 KiB objects,
then whole-object reads of random ones, `cairn store bench --small-objects`): one OSD's 4 KiB
cells are compared with that row, the same work without the network and the OSD.

Usage: bench/bottom_up.py [--seconds 10] [--rounds 1] [--out docs/results/DATE-bottom-up-bench.md] [--no-ceph] [--prefill]

With --rounds N every layer is measured N times in turn and the table gives medians with their
range; each ratio is the median of the rounds' own ratios (both layers of a ratio measured minutes
apart, at the machine's speed of that round).

The store layer's file and the cairn OSDs' device files are sparse, as Ceph's are (ceph-mini
creates them that way): every write to a new region pays the file system's block allocation.
So that the store's 4 MiB writes are compared with the same work, fio also writes 4 MiB blocks
into a new sparse file in that mode (row "fio, 4 MiB writes into a sparse file").
With --prefill every device file is written whole first, as a raw device is (and as fio's file
is in both modes): the store's, the cairn OSDs' (`cairn up --prefill`) and Ceph's BlueStore block
files (written with dd before `ceph-osd --mkfs`, which keeps a block file that exists). The store layer's 4 MiB writes are its 16-submitter phase (objects
rewritten whole), like the OSDs' 16 in flight.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAIRN = os.path.join(ROOT, "target", "release", "cairn")
CEPH_MINI = os.path.join(os.path.dirname(ROOT), "shared", "peers", "ceph-mini")


def run(cmd, **kw):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        print(done.stdout[-4000:] + done.stderr[:3000], file=sys.stderr, flush=True)
        done.check_returncode()
    return done.stdout


HUGEPAGES = "/proc/sys/vm/nr_hugepages"
# fio's 16 jobs each take at least one 2 MiB huge page per buffer (4 MiB: two), with room.
FIO_HUGEPAGES = 96


def reserve_hugepages(pages):
    """Reserves `pages` huge pages; returns the old reservation (None: could not reserve)."""
    try:
        with open(HUGEPAGES) as f:
            old = int(f.read())
        with open(HUGEPAGES, "w") as f:
            f.write(str(max(old, pages)))
        with open(HUGEPAGES) as f:
            if int(f.read()) >= pages:
                return old
        restore_hugepages(old)
        return None
    except OSError:
        return None


def restore_hugepages(old):
    try:
        with open(HUGEPAGES, "w") as f:
            f.write(str(old))
    except OSError:
        pass


def fio(path, rw, bs, jobs, seconds, sync, huge, span_mib=1024):
    args = [
        "fio", "--name=raw", f"--filename={path}", f"--rw={rw}", f"--bs={bs}",
        "--direct=1", "--ioengine=psync", f"--numjobs={jobs}", "--group_reporting",
        f"--runtime={seconds}", "--time_based", f"--size={span_mib}M", "--output-format=json",
        "--iomem=" + ("mmaphuge" if huge else "malloc"),
    ]
    if sync:
        args.append("--fdatasync=1")
    out = json.loads(run(args))
    job = out["jobs"][0]
    side = job["write"] if "write" in rw else job["read"]
    return side["iops"], side["bw_bytes"] / (1 << 20)


def fio_sparse_write(work, seconds, huge):
    """fio's 4 MiB writes into a new sparse file, each job in a region of its own that it does not
    finish in the run: every write pays the file system's block allocation, as the store's do on
    its sparse file (the raw file of the other fio rows is written whole first)."""
    path = os.path.join(work, "sparse.dev")
    with open(path, "wb") as f:
        f.truncate(16 << 30)
    args = [
        "fio", "--name=sparse", f"--filename={path}", "--rw=write", "--bs=4M", "--direct=1",
        "--ioengine=psync", "--numjobs=16", "--group_reporting", f"--runtime={seconds}",
        "--time_based", "--size=1G", "--offset_increment=1G", "--fallocate=none",
        "--fdatasync=1", "--output-format=json", "--iomem=" + ("mmaphuge" if huge else "malloc"),
    ]
    try:
        side = json.loads(run(args))["jobs"][0]["write"]
    finally:
        os.remove(path)
    return side["iops"], side["bw_bytes"] / (1 << 20), None


def msgr_bench(seconds, shape, size):
    out = run([CAIRN, "msgr", "bench", str(seconds), shape, "-b", str(size), "-t", "16"])
    bw = float(re.search(r"Bandwidth \(MB/sec\):\s+([\d.]+)", out).group(1))
    iops = float(re.search(r"Average IOPS:\s+([\d.]+)", out).group(1))
    return iops, bw, None


def store_span_mib(seconds):
    """MiB of 4 MiB objects the store layer writes and then overwrites and reads 4 KiB blocks
    inside: fio's 4 KiB phases span as many."""
    return 400 * seconds


def store_bench(path, seconds, prefill):
    # Only the QD16 phases are comparable; see docs/design/store.md. The 4 MiB phases write about
    # 400 MiB per second asked (1-3 s each at this machine's speed). The store runs on the I/O
    # engine an OSD gives it (native AIO), so that the next layer adds only the OSD.
    # The random phases run ~1-2 s each (shorter ones were mostly the store's warm-up: 8000
    # overwrites ran at ~18-21k a second where 40000 ran at ~30k). The small-object phases write about as many new 4 KiB objects as one OSD's 4 KiB write
    # run does (~15k a second), then read as many back at random, as `cairn bench ... rand`.
    ops = max(4000, 4000 * seconds)
    seq_mib = store_span_mib(seconds)
    small = 15000 * seconds
    size_mib = 2 * seq_mib + small * 4096 // (1 << 20) + 1024
    args = [CAIRN, "store", "bench", "--device", path, "--size-mib", str(size_mib),
            "--seq-mib", str(seq_mib), "--rand-ops", str(ops), "--queue-depths", "16",
            "--small-objects", str(small), "--io-engine", "aio"]
    if not prefill:
        args.append("--no-prefill")
    out = run(args)
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 4 and cells[1] == "cairn store":
            rows[cells[0]] = (float(cells[2]), float(cells[3]))
    return rows


def cairn_bench(mon, seconds, mode, size):
    out = run([CAIRN, "bench", "--mon", mon, "-p", "data", str(seconds), mode,
               "-b", str(size), "-t", "16", "--no-cleanup"])
    bw = float(re.search(r"Bandwidth \(MB/sec\):\s+([\d.]+)", out).group(1))
    iops = float(re.search(r"Average IOPS:\s+([\d.]+)", out).group(1))
    p99 = float(re.search(r"Latency p99 +\(ms\):\s+([\d.]+)", out).group(1))
    return iops, bw, p99


IMAGE_GIB = 2
BLOCK = "cairn NBD image, 3 OSDs, size 3"
CEPH = "Ceph 16.2, 3 OSDs, size 3"
CEPH_RBD = "Ceph 16.2 RBD image, 3 OSDs, size 3"
# fio's arguments of each workload on an image, at 16 in flight: sequential 4 MiB writes then
# reads over the image, random 4 KiB writes then reads.
IMAGE_WORKS = {"4M write": ("write", "4M"), "4M read": ("read", "4M"),
               "4K write": ("randwrite", "4k"), "4K read": ("randread", "4k")}


def fio_image(engine_args, seconds, env=None):
    """The four workloads on one image through fio (`engine_args` choose NBD or librbd):
    {workload: (IOPS, MiB/s, p99 ms)}, MiB/s as rados bench's "MB/sec" counts."""
    res = {}
    for w, (rw, bs) in IMAGE_WORKS.items():
        out = run(["fio", "--name=image", f"--rw={rw}", f"--bs={bs}", "--iodepth=16",
                   "--direct=1", "--time_based", f"--runtime={seconds}",
                   "--output-format=json"] + engine_args, env=env)
        job = json.loads(out[out.index("{"):])["jobs"][0]
        side = job["read"] if "read" in rw else job["write"]
        p99 = side["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1e6
        res[w] = (side["iops"], side["bw_bytes"] / (1 << 20), p99)
    return res


def nbd_image(mon, d, seconds):
    """A 2 GiB image of pool `data` exported by `cairn rbd nbd`, through fio's nbd engine."""
    run([CAIRN, "rbd", "--mon", mon, "create", "data/bench", "--size", f"{IMAGE_GIB}G"])
    port = 10809 + 7
    server = subprocess.Popen([CAIRN, "rbd", "--mon", mon, "nbd", "data", "--listen",
                               f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                              stderr=open(os.path.join(d, "nbd.log"), "w"))
    try:
        deadline = time.time() + 30
        while subprocess.run(["nbdinfo", f"nbd://127.0.0.1:{port}/bench"],
                             capture_output=True).returncode != 0:
            if time.time() > deadline:
                raise RuntimeError("the NBD server never served")
            time.sleep(0.2)
        return fio_image(["--ioengine=nbd", f"--uri=nbd://127.0.0.1:{port}/bench"], seconds)
    finally:
        server.terminate()
        server.wait()


def wait_for_room(path, need_bytes, timeout_s=300):
    """Waits until `path`'s file system has `need_bytes` free: the previous layer's deleted
    files are given back by the file system's online discard some time after they are gone
    (`cairn up --prefill` refuses to start without the room)."""
    deadline = time.time() + timeout_s
    while shutil.disk_usage(path).free < need_bytes and time.time() < deadline:
        time.sleep(5)


def cairn_cluster(osds, seconds, work, prefill, block=False):
    """`cairn bench` on a fresh cluster of `osds` OSDs; with `block`, also a 2 GiB image
    through NBD. Returns ({workload: numbers}, the image's or None)."""
    port = 7900 + osds
    mon = f"127.0.0.1:{port}"
    d = os.path.join(work, f"cluster{osds}")
    # Sparse files cost only what is written; prefilled ones are written whole, so they are
    # sized to what a run writes (one OSD takes every 4 MiB write; three share them).
    # Sized for ~3.3 GB/s of device writes for the run (one OSD takes them all).
    if prefill:
        device_mib = 40960 if osds == 1 else 16384
        extra = ["--prefill"]
    else:
        device_mib = 32768
        extra = []
    if prefill:
        wait_for_room(work, osds * device_mib << 20)
    run([CAIRN, "up", "--no-s3", "--no-fs", "--dir", d, "--mon", mon, "--osds", str(osds),
         "--device-mib", str(device_mib), "--pg-num", "64"] + extra)
    # The commands below act as the cluster's administrator, with the key `cairn up` made.
    os.environ["CAIRN_KEYRING"] = os.path.join(d, "keyring")
    try:
        res = {}
        res["4M write"] = cairn_bench(mon, seconds, "write", 4 << 20)
        res["4M read"] = cairn_bench(mon, seconds, "seq", 4 << 20)
        res["4K write"] = cairn_bench(mon, seconds, "write", 4096)
        res["4K read"] = cairn_bench(mon, seconds, "rand", 4096)
        return res, (nbd_image(mon, d, seconds) if block else None)
    except subprocess.CalledProcessError:
        for name in sorted(os.listdir(d)):
            if name.endswith(".log"):
                with open(os.path.join(d, name)) as log:
                    print(f"--- {name} (tail)\n" + "".join(log.readlines()[-30:]), file=sys.stderr)
        raise
    finally:
        run([CAIRN, "down", "--dir", d])
        shutil.rmtree(d, ignore_errors=True)


def rados_bench(seconds, mode, size):
    args = ["rados", "bench", "-p", "bench", str(seconds), mode, "-t", "16"]
    if mode == "write":
        args += ["-b", str(size), "--no-cleanup"]
    out = run(args, env=dict(os.environ, CEPH_CONF="/tmp/ceph-mini/ceph.conf"))
    bw = float(re.search(r"Bandwidth \(MB/sec\):\s+([\d.]+)", out).group(1))
    iops = float(re.search(r"Average IOPS:\s+([\d.]+)", out).group(1))
    lat = float(re.search(r"Max latency\(s\):\s+([\d.]+)", out).group(1)) * 1000
    return iops, bw, lat


CEPH_BLOCK_GB = 10
NETWORK = "cairn messenger, 2 processes (no storage)"
# The store running the cluster bench's own 4 KiB workload (new 4 KiB objects, then whole-object
# reads of random ones): one OSD's 4 KiB cells are compared with it, the same work without the
# network and the OSD; the "cairn store" row's 4 KiB cells are fio's workload (random 4 KiB
# writes and reads inside large objects).
STORE_OBJECTS = "cairn store, the cluster bench's 4 KiB objects"
# Without --prefill: fio's 4 MiB writes into a new sparse file, the base of the store's 4 MiB
# write cell (the store writes its sparse file's new regions; the raw file is written whole).
FIO_SPARSE = "fio, 4 MiB writes into a sparse file"
# Where a layer's cell is compared with another layer than its row's base: the same workload.
BASE_OVERRIDE = {("cairn 1 OSD, size 1", "4K write"): STORE_OBJECTS,
                 ("cairn 1 OSD, size 1", "4K read"): STORE_OBJECTS}


def ceph(seconds, work, prefill, block=False):
    """`rados bench` on ceph-mini; with `block`, also a 2 GiB RBD image through fio's rbd
    engine. Returns ({workload: numbers}, the image's or None)."""
    env = dict(os.environ, NUM_OSD="3", BLOCK_GB=str(CEPH_BLOCK_GB))
    if prefill:
        # A later bluestore_block_path in [osd] wins over ceph-mini's; BlueStore's mkfs opens an
        # existing block file of the configured size as it is.
        blocks = os.path.join(work, "ceph-blocks")
        os.makedirs(blocks, exist_ok=True)
        for i in range(3):
            run(["dd", "if=/dev/zero", f"of={blocks}/osd{i}.block", "bs=8M",
                 f"count={CEPH_BLOCK_GB * 128}", "conv=fsync", "status=none"])
        env["EXTRA_OSD_CONF"] = f"        bluestore_block_path = {blocks}/osd$id.block"
    subprocess.run(["bash", os.path.join(CEPH_MINI, "down.sh")], capture_output=True)
    run(["bash", os.path.join(CEPH_MINI, "up.sh")], env=env)
    try:
        conf = dict(os.environ, CEPH_CONF="/tmp/ceph-mini/ceph.conf")
        run(["ceph", "osd", "pool", "create", "bench", "64", "64", "replicated"], env=conf)
        run(["ceph", "osd", "pool", "set", "bench", "size", "3"], env=conf)
        for _ in range(120):
            st = run(["ceph", "pg", "stat"], env=conf)
            m = re.search(r"(\d+) pgs: (\d+) active\+clean;", st)
            if m and m.group(1) == m.group(2):
                break
            time.sleep(1)
        res = {}
        res["4M write"] = rados_bench(seconds, "write", 4 << 20)
        res["4M read"] = rados_bench(seconds, "seq", 4 << 20)
        run(["rados", "-p", "bench", "cleanup"], env=conf)
        res["4K write"] = rados_bench(seconds, "write", 4096)
        res["4K read"] = rados_bench(seconds, "rand", 4096)
        image = None
        if block:
            run(["rados", "-p", "bench", "cleanup"], env=conf)
            run(["ceph", "osd", "pool", "create", "rbdbench", "64", "64", "replicated"], env=conf)
            run(["ceph", "osd", "pool", "set", "rbdbench", "size", "3"], env=conf)
            run(["rbd", "pool", "init", "rbdbench"], env=conf)
            run(["rbd", "create", "rbdbench/bench", "--size", f"{IMAGE_GIB}G"], env=conf)
            image = fio_image(["--ioengine=rbd", "--clientname=admin", "--pool=rbdbench",
                               "--rbdname=bench"], seconds, env=conf)
        return res, image
    finally:
        subprocess.run(["bash", os.path.join(CEPH_MINI, "down.sh")], capture_output=True)


def measure(a, work):
    """One round: every layer once, in order. Returns {layer: {workload: (iops, MiB/s, ...)}} and
    whether fio's buffers were huge pages."""
    raw = os.path.join(work, "raw.dev")
    # fio's 4 KiB phases span as many bytes as the store's objects do (the store's 4 MiB
    # phase writes them), so both meet the same device cache; its 4 MiB phases keep 1 GiB.
    span_mib = store_span_mib(a.seconds)
    with open(raw, "wb") as f:
        f.truncate(span_mib << 20)
    run(["dd", "if=/dev/zero", f"of={raw}", "bs=4M", f"count={span_mib // 4}", "conv=fsync"])
    layers = {}
    old_huge = reserve_hugepages(FIO_HUGEPAGES)
    huge = old_huge is not None
    if not huge:
        print("could not reserve huge pages: fio runs from small pages", file=sys.stderr)
    try:
        layers["fio raw file"] = {
            "4M write": fio(raw, "write", "4M", 16, a.seconds, True, huge) + (None,),
            "4M read": fio(raw, "read", "4M", 16, a.seconds, False, huge) + (None,),
            "4K write": fio(raw, "randwrite", "4k", 16, a.seconds, True, huge, span_mib) + (None,),
            "4K read": fio(raw, "randread", "4k", 16, a.seconds, False, huge, span_mib) + (None,),
        }
        if not a.prefill:
            layers[FIO_SPARSE] = {"4M write": fio_sparse_write(work, a.seconds, huge)}
    finally:
        if huge:
            restore_hugepages(old_huge)
    os.remove(raw)
    layers[NETWORK] = {
        "4M write": msgr_bench(a.seconds, "write", 4 << 20),
        "4M read": msgr_bench(a.seconds, "read", 4 << 20),
        "4K write": msgr_bench(a.seconds, "write", 4096),
        "4K read": msgr_bench(a.seconds, "read", 4096),
    }
    store_dev = os.path.join(work, "store.dev")
    st = store_bench(store_dev, a.seconds, a.prefill)
    os.remove(store_dev)
    layers["cairn store"] = {
        "4M write": next(((r[0], r[1], None) for k, r in st.items() if k.startswith("4 MiB write QD16")), None),
        "4M read": next(((r[0], r[1], None) for k, r in st.items() if k.startswith("4 MiB read QD16")), None),
        "4K write": next(((r[0], r[1], None) for k, r in st.items() if k.startswith("4 KiB rand write QD16")), None),
        "4K read": next(((r[0], r[1], None) for k, r in st.items() if k.startswith("4 KiB rand read QD16")), None),
    }
    layers[STORE_OBJECTS] = {
        "4K write": next(((r[0], r[1], None) for k, r in st.items() if k.startswith("4 KiB object write QD16")), None),
        "4K read": next(((r[0], r[1], None) for k, r in st.items() if k.startswith("4 KiB object read QD16")), None),
    }
    layers["cairn 1 OSD, size 1"] = cairn_cluster(1, a.seconds, work, a.prefill)[0]
    return cluster_layers(a, work, layers), huge


def cluster_layers(a, work, layers):
    """The three-OSD layers (cairn's, its image over NBD unless --no-block; Ceph's and its RBD
    image unless --no-ceph) added to `layers`."""
    block = not a.no_block
    layers["cairn 3 OSDs, size 3"], image = cairn_cluster(3, a.seconds, work, a.prefill, block)
    if image:
        layers[BLOCK] = image
    if not a.no_ceph:
        layers[CEPH], image = ceph(a.seconds, work, a.prefill, block)
        if image:
            layers[CEPH_RBD] = image
    return layers


WORKS = ["4M write", "4M read", "4K write", "4K read"]


def value(layers, layer, w):
    """The cell's figure: MiB/s (rados bench's "MB/sec") for 4 MiB workloads, IOPS for 4 KiB ones (None when not run)."""
    v = layers.get(layer, {}).get(w)
    return None if not v else (v[1] if w.startswith("4M") else v[0])


def efficiency(layers, name, layer, row_base, w):
    """`layer` against the one below it in percent (a size-3 write counted as 3 device writes),
    and whether that was fio for want of the named layer below; None without the numbers."""
    base = BASE_OVERRIDE.get((name, w), row_base)
    x = value(layers, layer, w)
    y = value(layers, base, w)
    vs_fio = False
    if x is None:
        return None
    if not y:
        # A layer with no number (a store without a 4 MiB read phase, say): compare with fio.
        y, vs_fio = value(layers, "fio raw file", w), True
        if not y:
            return None
    # The NBD image stands on the three-OSD cluster bench: the same device writes each.
    factor = 3 if (layer.startswith("cairn 3") and "write" in w) else 1
    return 100 * x * factor / y, vs_fio


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def spread(xs, fmt, bare=None):
    """The median of `xs` as `fmt` writes it, with their range (written by `bare`, default
    `fmt`) when there is more than one."""
    bare = bare or fmt
    m = fmt(median(xs))
    return m if len(xs) == 1 else f"{m} ({bare(min(xs))}-{bare(max(xs))})"


def table(rounds):
    """The markdown tables of `rounds` (one {layer: {workload: numbers}} per round): each cell
    the median over the rounds, each ratio the median of the rounds' own ratios (a ratio is
    taken within one round, where both layers met the machine at the same speed), with the
    range when there are several rounds."""
    order = list(dict.fromkeys(l for r in rounds for l in r))
    def cell(layer, w):
        xs = [x for x in (value(r, layer, w) for r in rounds) if x is not None]
        if not xs:
            return "-"
        if w.startswith("4M"):
            return spread(xs, lambda v: f"{v:.1f} MiB/s", lambda v: f"{v:.1f}")
        return spread(xs, lambda v: f"{v:.0f} IOPS", lambda v: f"{v:.0f}")

    # (row name, layer, the layer below it); one OSD stands on the store and on the network.
    below = [("cairn store", "cairn store", "fio raw file"),
             (STORE_OBJECTS, STORE_OBJECTS, "fio raw file"),
             ("cairn 1 OSD, size 1", "cairn 1 OSD, size 1", "cairn store"),
             ("cairn 1 OSD, size 1 (vs messenger)", "cairn 1 OSD, size 1", NETWORK),
             ("cairn 3 OSDs, size 3", "cairn 3 OSDs, size 3", "cairn 1 OSD, size 1"),
             (BLOCK, BLOCK, "cairn 3 OSDs, size 3")]
    lines = []
    if len(rounds) > 1:
        lines += [f"Medians of {len(rounds)} rounds (each round measures every layer in turn), "
                  "the rounds' range in brackets.", ""]
    lines += ["| layer | " + " | ".join(WORKS) + " |", "|---|" + "---:|" * len(WORKS)]
    for layer in order:
        lines.append(f"| {layer} | " + " | ".join(cell(layer, w) for w in WORKS) + " |")
    lines.append("")
    sparse_note = ("; the store's 4 MiB writes, into its sparse file's new regions, against fio's into a "
                   "sparse file" if FIO_SPARSE in order else "")
    lines.append("Efficiency of each layer against the one below (a size-3 write is counted as 3 device writes; "
                 "one OSD's 4 KiB cells against the store running the same 4 KiB objects" + sparse_note + "):")
    lines.append("")
    lines.append("| layer | " + " | ".join(WORKS) + " |")
    lines.append("|---|" + "---:|" * len(WORKS))
    for name, layer, row_base in below:
        row = []
        for w in WORKS:
            effs = [e for e in (efficiency(r, name, layer, row_base, w) for r in rounds) if e]
            if not effs:
                row.append("-")
                continue
            text = spread([e[0] for e in effs], lambda v: f"{v:.0f}%", lambda v: f"{v:.0f}")
            row.append(text + (" (vs fio)" if any(e[1] for e in effs) else ""))
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    pairs = [("cairn 3 OSDs, size 3", CEPH, "objects (`cairn bench` against `rados bench`)"),
             (BLOCK, CEPH_RBD, "block images (NBD against librbd, both through fio)")]
    present = [(x, y, what) for x, y, what in pairs if x in order and y in order]
    if present:
        lines.append("")
        lines.append("cairn against Ceph 16.2 (3 OSDs, size 3), same machine, same run:")
        lines.append("")
        lines.append("| | " + " | ".join(WORKS) + " |")
        lines.append("|---|" + "---:|" * len(WORKS))
        for mine, theirs, what in present:
            row = []
            for w in WORKS:
                xs = []
                for r in rounds:
                    x, y = value(r, mine, w), value(r, theirs, w)
                    if x and y:
                        xs.append(x / y)
                row.append("-" if not xs else spread(xs, lambda v: f"{v:.2f}x", lambda v: f"{v:.2f}"))
            lines.append(f"| {what} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure every layer this many times, in turn, and report medians with "
                         "their range (this machine's speed drifts by tens of percent over minutes)")
    ap.add_argument("--out", help="markdown table to write (default: "
                                  "docs/results/DATE-bottom-up-bench[-prefill].md)")
    ap.add_argument("--no-ceph", action="store_true")
    ap.add_argument("--no-block", action="store_true",
                    help="skip the block layers (a cairn image over NBD, Ceph's over librbd)")
    ap.add_argument("--only-cluster", action="store_true",
                    help="measure only the three-OSD layers (cairn's, its image, Ceph's and its "
                         "image), not the store, the messenger or one OSD")
    ap.add_argument("--prefill", action="store_true",
                    help="write zeros over every device file first (the store's, the cairn "
                         "OSDs' with `cairn up --prefill`, Ceph's block files): every layer then "
                         "writes over allocated blocks, as on a raw device")
    a = ap.parse_args()
    if not 1 <= a.rounds <= 20:
        ap.error("--rounds must be 1..=20")
    if a.out is None:
        stamp = time.strftime("%Y-%m-%d")
        name = f"{stamp}-bottom-up-bench{'-prefill' if a.prefill else ''}.md"
        a.out = os.path.join(ROOT, "docs", "results", name)
    rounds = []
    huge = True
    for i in range(a.rounds):
        print(f"== round {i + 1} of {a.rounds}", file=sys.stderr, flush=True)
        work = tempfile.mkdtemp(prefix="cairn-bottom-up-", dir="/work" if os.path.isdir("/work") else None)
        try:
            if a.only_cluster:
                layers, round_huge = cluster_layers(a, work, {}), True
            else:
                layers, round_huge = measure(a, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        rounds.append(layers)
        huge = huge and round_huge
        if FIO_SPARSE in layers:
            BASE_OVERRIDE[("cairn store", "4M write")] = FIO_SPARSE
        if a.rounds > 1:
            print(table([layers]), file=sys.stderr, flush=True)
    text = table(rounds)
    print(text)
    with open(a.out, "w") as f:
        flags = " --prefill" if a.prefill else ""
        flags += f" --rounds {a.rounds}" if a.rounds > 1 else ""
        fio_mem = "huge pages" if huge else "small pages (no huge pages could be reserved)"
        f.write(f"<!-- written by bench/bottom_up.py --seconds {a.seconds}{flags} on "
                f"{time.strftime('%Y-%m-%d %H:%M')}; fio's buffers: {fio_mem} -->\n" + text)


if __name__ == "__main__":
    main()
