#!/usr/bin/env python3
"""The file system on its FUSE mount against the object layer under it, on one `cairn up`
cluster: `cairn bench` (4 MiB objects, -t DEPTH) writes and reads, then fio on the mount with
DEPTH jobs: IOR-like file-per-process (FPP) and single-shared-file (SSF) at 4 MiB and 64 KiB
transfers, one dd-like 1 MiB stream, and mdtest-like metadata rates (fio's filecreate,
filestat and filedelete engines), the last also on a local directory of the same disk (the
ceiling a local file system gives). With --cephfs, the same metadata jobs also run on CephFS
through ceph-fuse, on a real Ceph cluster of as many OSDs started after cairn's is down
(../shared/peers/ceph-mini, one MDS). Prints a markdown table (units as fio and rados bench
print them: MiB/s) and writes it with --out.

    python3 bench/fs_bench.py [--cairn target/release/cairn] [--depth 4] [--seconds 8]
        [--metadata-only] [--without-leases] [--without-kernel-cache]
        [--without-early-creates] [--one-fuse-thread] [--cephfs]
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, **kw):
    print("+ " + " ".join(args), file=sys.stderr, flush=True)
    done = subprocess.run(args, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        sys.exit(f"{args[0]} failed with status {done.returncode}:\n{done.stdout[-4000:]}{done.stderr[-4000:]}")
    return done.stdout


def cairn_bench(cairn, mon, seconds, mode, depth):
    args = [cairn, "bench", "--mon", mon, "-p", "data", str(seconds), mode, "-t", str(depth)]
    if mode == "write":
        args += ["-b", str(4 << 20), "--no-cleanup"]
    out = run(args)
    return float(re.search(r"Bandwidth \(MB/sec\):\s+([\d.]+)", out).group(1))


def fio(name, directory, extra):
    """Runs one fio job on `directory`; a write job and the read job after it share `name`,
    so the read finds the files the write made (fio names files after the job) instead of
    laying out new ones."""
    args = ["fio", "--output-format=json", f"--name={name}", f"--directory={directory}",
            "--group_reporting"] + extra
    job = json.loads(run(args))["jobs"][0]
    return job


def mib_s(job, op):
    return job[op]["bw"] / 1024.0


def mounted(path):
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


def wait_mounted(path, limit_s=60):
    deadline = time.time() + limit_s
    while not mounted(path):
        if time.time() > deadline:
            raise RuntimeError(f"{path} was not mounted")
        time.sleep(0.1)


def metadata_rates(top, depth, files_per_job):
    """fio's filecreate, filestat and filedelete engines in TOP/md: operations per second."""
    sub = os.path.join(top, "md")
    os.makedirs(sub, exist_ok=True)
    m = [f"--numjobs={depth}", f"--nrfiles={files_per_job}", "--filesize=4k", "--openfiles=1"]
    rates = []
    for engine in ["filecreate", "filestat", "filedelete"]:
        job = fio(engine, sub, m + [f"--ioengine={engine}"])
        # fio counts these engines' files under whichever direction it booked them.
        rates.append(max(job["read"]["iops"], job["write"]["iops"]))
    return tuple(rates)


def cephfs_rates(ceph_mini, osds, depth, files_per_job):
    """The metadata jobs on CephFS via ceph-fuse: a ceph-mini cluster of OSDS BlueStore OSDs,
    a metadata pool, a data pool and one MDS, torn down after."""
    env = dict(os.environ, NUM_OSD=str(osds), BLOCK_GB="8")
    conf = "/tmp/ceph-mini/ceph.conf"
    env["CEPH_CONF"] = conf
    mnt = tempfile.mkdtemp(prefix="cephfs-mnt-")
    mds = None
    fuse = None
    try:
        run(["bash", os.path.join(ceph_mini, "up.sh")], env=env)
        ceph = ["timeout", "60", "ceph", "-c", conf]
        run(ceph + ["osd", "pool", "create", "cephfs.meta", "16"], env=env)
        run(ceph + ["osd", "pool", "create", "cephfs.data", "64"], env=env)
        run(ceph + ["fs", "new", "cephfs", "cephfs.meta", "cephfs.data"], env=env)
        with open(conf, "a") as f:
            f.write("\n[mds]\n        mds_data = /tmp/ceph-mini/mds.$id\n")
        os.makedirs("/tmp/ceph-mini/mds.a", exist_ok=True)
        mds = subprocess.Popen(["ceph-mds", "-f", "-c", conf, "-i", "a"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while "active" not in run(ceph + ["fs", "status", "cephfs"], env=env):
            if time.time() > deadline:
                raise RuntimeError("the Ceph MDS did not become active")
            time.sleep(1)
        fuse = subprocess.Popen(["ceph-fuse", "-f", "-c", conf, mnt], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_mounted(mnt)
        return metadata_rates(mnt, depth, files_per_job)
    finally:
        subprocess.run(["umount", "-l", mnt])
        for p in [fuse, mds]:
            if p is not None:
                p.kill()  # the cluster and its data go next; ceph-mds may take minutes to stop
                p.wait(timeout=30)
        subprocess.run(["bash", os.path.join(ceph_mini, "down.sh")], env=env,
                       capture_output=True)
        shutil.rmtree(mnt, ignore_errors=True)


def other_mount_rates(cairn, mon, work, flag, depth, files_per_job):
    """The metadata jobs on a second mount of the same file system, mounted with `flag`."""
    name = flag.strip("-")
    other_mnt = os.path.join(work, f"mnt-{name}")
    os.makedirs(other_mnt)
    other = subprocess.Popen([cairn, "fs", "mount", "--mon", mon, flag, "cairnfs", other_mnt],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_mounted(other_mnt, 30)
        top = os.path.join(other_mnt, name)
        os.makedirs(top)
        return metadata_rates(top, depth, files_per_job)
    finally:
        subprocess.run(["umount", "-l", other_mnt])
        other.terminate()
        other.wait(timeout=20)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cairn", default="target/release/cairn")
    p.add_argument("--depth", type=int, default=4, help="fio jobs and cairn bench -t")
    p.add_argument("--seconds", type=int, default=8,
                   help="cairn bench seconds; its objects stay for the read, so "
                        "8 s at 450 MiB/s fill 30%% of the 12 GiB devices")
    p.add_argument("--mib-per-job", type=int, default=256, help="fio bytes per job, MiB")
    p.add_argument("--files-per-job", type=int, default=1000, help="mdtest-like files per job")
    p.add_argument("--out", help="write the markdown table here too")
    p.add_argument("--metadata-only", action="store_true",
                   help="only the mdtest-like jobs (no cairn bench, no bandwidth)")
    p.add_argument("--without-leases", action="store_true",
                   help="also run the metadata jobs on a second mount with --no-dir-leases")
    p.add_argument("--without-kernel-cache", action="store_true",
                   help="also run the metadata jobs on a second mount with --no-kernel-cache")
    p.add_argument("--without-early-creates", action="store_true",
                   help="also run the metadata jobs on a second mount with --no-early-creates")
    p.add_argument("--one-fuse-thread", action="store_true",
                   help="metadata rates on a second mount reading requests on one thread too")
    p.add_argument("--cephfs", action="store_true",
                   help="the metadata jobs on CephFS via ceph-fuse too (needs ceph-mds, ceph-fuse)")
    p.add_argument("--ceph-mini", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                       "shared", "peers", "ceph-mini"))
    a = p.parse_args()
    cairn = os.path.abspath(a.cairn)
    work = tempfile.mkdtemp(prefix="cairn-fs-bench-")
    d = os.path.join(work, "cluster")
    mnt = os.path.join(work, "mnt")
    local = os.path.join(work, "local")
    os.makedirs(mnt)
    os.makedirs(local)
    mon = f"127.0.0.1:{free_port()}"
    mds = f"127.0.0.1:{free_port()}"
    run([cairn, "up", "--no-s3", "--dir", d, "--mon", mon, "--mds", mds, "--osds", "3",
         "--device-mib", "12288", "--pg-num", "64"])
    os.environ["CAIRN_KEYRING"] = os.path.join(d, "keyring")
    mount = None
    rows = []
    meta = {}
    try:
        if not a.metadata_only:
            w = cairn_bench(cairn, mon, a.seconds, "write", a.depth)
            r = cairn_bench(cairn, mon, a.seconds, "seq", a.depth)
            rows.append((f"cairn bench 4 MiB objects, -t {a.depth}", w, r, None))
        mount = subprocess.Popen([cairn, "fs", "mount", "--mon", mon, "cairnfs", mnt],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_mounted(mnt, 30)
        size = f"--size={a.mib_per_job}M"
        jobs = f"--numjobs={a.depth}"
        bandwidth = [] if a.metadata_only else [
            ("FPP 4 MiB", "4M", False), ("SSF 4 MiB", "4M", True),
            ("FPP 64 KiB", "64k", False), ("SSF 64 KiB", "64k", True)]
        for label, bs, shared in bandwidth:
            sub = os.path.join(mnt, label.replace(" ", "-"))
            os.makedirs(sub)
            common = [f"--bs={bs}", size, jobs, "--ioengine=psync"]
            if shared:
                common += ["--filename=shared", f"--offset_increment={a.mib_per_job}M"]
            wj = fio("io", sub, common + ["--rw=write", "--end_fsync=1"])
            rj = fio("io", sub, common + ["--rw=read"])
            rows.append((f"fio {label}, {a.depth} jobs", mib_s(wj, "write"), mib_s(rj, "read"),
                         None))
            # Each row's files go before the next row writes: the cluster holds one row's.
            shutil.rmtree(sub)
        if not a.metadata_only:
            sub = os.path.join(mnt, "dd")
            os.makedirs(sub)
            dd = ["--bs=1M", f"--size={a.mib_per_job * 2}M", "--numjobs=1", "--ioengine=psync"]
            wj = fio("io", sub, dd + ["--rw=write", "--end_fsync=1"])
            rj = fio("io", sub, dd + ["--rw=read"])
            rows.append(("fio dd-like stream, 1 MiB", mib_s(wj, "write"), mib_s(rj, "read"),
                         None))
        for where, top in [("cairnfs", mnt), ("local ext4", local)]:
            meta[where] = metadata_rates(top, a.depth, a.files_per_job)
        others = [("--no-dir-leases", "cairnfs without directory leases", a.without_leases),
                  ("--no-kernel-cache", "cairnfs without kernel caching", a.without_kernel_cache),
                  ("--no-early-creates", "cairnfs without early creates",
                   a.without_early_creates),
                  ("--fuse-threads=1", "cairnfs on one FUSE thread", a.one_fuse_thread)]
        for flag, label, wanted in others:
            if wanted:
                meta[label] = other_mount_rates(cairn, mon, work, flag, a.depth,
                                                a.files_per_job)
    finally:
        if mount is not None:
            subprocess.run(["umount", "-l", mnt])
            mount.terminate()
            mount.wait(timeout=20)
        subprocess.run([cairn, "down", "--dir", d], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    if a.cephfs:
        meta["CephFS via ceph-fuse"] = cephfs_rates(a.ceph_mini, 3, a.depth, a.files_per_job)
    for label, (c, s, x) in meta.items():
        rows.append((f"mdtest-like on {label}, {a.depth} jobs: create/stat/delete per s",
                     None, None, (c, s, x)))
    base_w, base_r = (rows[0][1], rows[0][2]) if not a.metadata_only else (None, None)
    lines = ["| workload | write MiB/s | read MiB/s | write / cairn bench | read / cairn bench |",
             "|---|---|---|---|---|"]
    for label, w, r, m in rows:
        if m is not None:
            lines.append(f"| {label} | {m[0]:.0f} / {m[1]:.0f} / {m[2]:.0f} | | | |")
        else:
            lines.append(f"| {label} | {w:.1f} | {r:.1f} | {w / base_w:.2f} | {r / base_r:.2f} |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
