#!/usr/bin/env python3
"""Whole-process mapping speed, cairn vs Ceph's crushtool, measured in one run on the same map
and inputs: `--test --num-rep 3 --min-x 0 --max-x 999999 --show-mappings`, output compared
byte for byte. Reports CPU seconds (user+sys), mappings per CPU-second, and, when valgrind is
present, instructions per mapping (repeatable even on a loaded machine).
Usage: bench/mapping_vs_crushtool.py [--cairn PATH] [--max-x N] [--map TXT]
"""
import argparse
import os
import resource
import shutil
import subprocess
import tempfile

ap = argparse.ArgumentParser()
here = os.path.dirname(os.path.abspath(__file__))
ap.add_argument("--cairn", default=os.path.join(here, "..", "target", "release", "cairn"))
ap.add_argument("--map", default=os.path.join(here, "..", "crates", "crush", "tests", "vectors", "map-eq60.txt"))
ap.add_argument("--max-x", type=int, default=999_999)
args = ap.parse_args()
T = tempfile.mkdtemp(prefix="cairn-mapbench-")
binmap = os.path.join(T, "map.bin")
subprocess.run(["crushtool", "-c", args.map, "-o", binmap], check=True)


def timed(cmd, out_path):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out_path, "w") as f:
        subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def instructions(cmd):
    log = os.path.join(T, "cg.log")
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={T}/cg.out"] + cmd,
                   check=True, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    for line in open(log):
        if "Collected" in line:
            return int(line.split(":")[-1].strip())
    return None


ct_args = ["--rule", "0", "--num-rep", "3", "--min-x", "0"]
ct = ["crushtool", "-i", binmap, "--test", "--show-mappings"] + ct_args
me = [args.cairn, "crush", "test", "--map", args.map] + ct_args
n = args.max_x + 1
ct_cpu = timed(ct + ["--max-x", str(args.max_x)], os.path.join(T, "ct.txt"))
me_cpu = timed(me + ["--max-x", str(args.max_x)], os.path.join(T, "me.txt"))
ct_lines = [l for l in open(os.path.join(T, "ct.txt")) if l.startswith("CRUSH rule")]
me_lines = open(os.path.join(T, "me.txt")).readlines()
same = ct_lines == me_lines
print(f"inputs: {n}, outputs identical: {same}")
print("| tool | CPU s | mappings per CPU-second | instructions per mapping |")
print("|---|---|---|---|")
rows = []
for name, cmd, cpu in [("crushtool (Ceph 16.2)", ct, ct_cpu), ("cairn crush test", me, me_cpu)]:
    per = "n/a"
    if shutil.which("valgrind"):
        small = 20_000
        full = instructions(cmd + ["--max-x", str(small - 1)])
        base = instructions(cmd + ["--max-x", "0"])
        per = f"{(full - base) / (small - 1):,.0f}"
    rows.append(f"| {name} | {cpu:.2f} | {n / cpu:,.0f} | {per} |")
print("\n".join(rows))
print(f"\nratio (crushtool CPU / cairn CPU): {ct_cpu / me_cpu:.2f}")
if not same:
    raise SystemExit("outputs differ")
