#!/usr/bin/env python3
"""Balancer comparison, measured in one run: cairn's balancer against Ceph's
`osdmaptool --upmap --upmap-deviation 1` on the seed-002 map (5 hosts x 12 OSDs, size 3) at
several pg_num, on the unequal-weight map, and after adding one OSD to a host.

Needs Debian's ceph-base (crushtool, osdmaptool) and a release build of cairn
(`cargo build --release -p cairn-cli`). Prints a markdown report (write it to docs/).
Usage: bench/placement_vs_osdmaptool.py [--cairn PATH] [--vectors DIR] > docs/placement-balancer.md
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--cairn", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "cairn"))
ap.add_argument("--vectors", default=os.path.join(os.path.dirname(__file__), "..", "crates", "crush", "tests", "vectors"))
ap.add_argument("--pg-nums", default="60,240,960,3840,7680,8192,15360")
args = ap.parse_args()
CAIRN = os.path.abspath(args.cairn)
T = tempfile.mkdtemp(prefix="cairn-balbench-")


def run(cmd, **kw):
    """Runs a command; returns (stdout, cpu seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out.stdout + out.stderr, cpu


def progress(msg):
    print(msg, file=sys.stderr, flush=True)


def osdmap_geometry(pg_num):
    """osdmaptool --createsimple N --pg-bits B gives pg_num = N << B; pick N >= 60."""
    for bits in range(0, 12):
        n = pg_num >> bits
        if n << bits == pg_num and 60 <= n <= 240:
            return n, bits
    raise SystemExit(f"cannot make pg_num {pg_num} with osdmaptool --createsimple")


def dump(om):
    out, _ = run(["osdmaptool", om, "--mark-up-in", "--test-map-pgs-dump", "--pool", "1"])
    return [l for l in out.splitlines() if l.startswith("1.")]


def sets_of(lines):
    res = {}
    for l in lines:
        pg, osds, _ = l.split("\t")
        res[pg] = [int(x) for x in osds.strip("[]").split(",") if x]
    return res


def moved(a, b):
    sa, sb = sets_of(a), sets_of(b)
    return sum(len([o for o in sb[pg] if o not in sa[pg]]) for pg in sb)


def spread(map_txt, pg_num, dump_lines):
    path = os.path.join(T, "dump.txt")
    with open(path, "w") as f:
        f.write("\n".join(dump_lines) + "\n")
    out, _ = run([CAIRN, "crush", "analyze", "--map", map_txt, "--pg-num", str(pg_num), "--up-sets", path, "--json"])
    return json.loads(out)


def count_upmaps(path):
    pgs = pairs = 0
    for line in open(path):
        w = line.split()
        if "pg-upmap-items" in line:
            pgs += 1
            pairs += (len(w) - 4) // 2
    return pgs, pairs


def ceph_balance(map_bin, pg_num, om=None, extra_osds=0):
    n, bits = osdmap_geometry(pg_num)
    if om is None:
        om = os.path.join(T, f"om-{pg_num}")
        run(["osdmaptool", "--createsimple", str(n + extra_osds), "--with-default-pool", "--pg-bits", str(bits),
             "--pgp-bits", str(bits), om, "--clobber"])
    run(["osdmaptool", om, "--import-crush", map_bin])
    before = dump(om)
    upmap = os.path.join(T, "upmap.txt")
    _, cpu = run(["osdmaptool", om, "--mark-up-in", "--upmap", upmap, "--upmap-deviation", "1",
                  "--upmap-max", "1000000", "--upmap-pool", "rbd", "--save"])
    after = dump(om)
    return om, before, after, cpu, count_upmaps(upmap)


def fmt_spread(s):
    o = s["osds"]
    return f"{o['min']}~{o['max']}", f"{o['stdev_norm']:.3f}", f"{o['max_deviation']:.2f}", f"{s['primaries']['max_deviation']:.1f}"


def balance_case(name, map_txt, map_bin, pg_num):
    progress(f"{name} pg_num {pg_num}: osdmaptool")
    _, before, after, ceph_cpu, (ceph_pgs, ceph_pairs) = ceph_balance(map_bin, pg_num)
    s_before = spread(map_txt, pg_num, before)
    s_ceph = spread(map_txt, pg_num, after)
    progress(f"{name} pg_num {pg_num}: cairn")
    report = os.path.join(T, "report.json")
    exc = os.path.join(T, "cairn.exc")
    _, cairn_cpu = run([CAIRN, "crush", "balance", "--map", map_txt, "--pg-num", str(pg_num), "--out", exc, "--report", report])
    r = json.load(open(report))
    b = fmt_spread(s_before)
    c = fmt_spread(s_ceph)
    a = fmt_spread(r["after"])
    return (f"| {name} | {pg_num} | {b[0]} | {b[1]} | {b[2]} | {b[3]} "
            f"| {c[0]} | {c[1]} | {c[2]} | {c[3]} | {moved(before, after)} | {ceph_pgs} | {ceph_cpu:.2f} "
            f"| {a[0]} | {a[1]} | {a[2]} | {a[3]} | {r['moved_replicas']} (lb {r['lower_bound']}) | {r['exception_pgs']} | {r['cpu_seconds']:.3f} / {cairn_cpu:.2f} |")


def compile_map(txt, name):
    b = os.path.join(T, name + ".bin")
    run(["crushtool", "-c", txt, "-o", b])
    return b


eq_txt = os.path.join(args.vectors, "map-eq60.txt")
w_txt = os.path.join(args.vectors, "map-w60.txt")
eq_bin = compile_map(eq_txt, "eq60")
w_bin = compile_map(w_txt, "w60")

print("| map | pg# | CRUSH min~max | stdev | max dev | prim dev | osdmaptool min~max | stdev | max dev | prim dev | moved | upmap PGs | CPU s | cairn min~max | stdev | max dev | prim dev | moved | exception PGs | CPU s (plan / process) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for pg in [int(x) for x in args.pg_nums.split(",")]:
    print(balance_case("eq60", eq_txt, eq_bin, pg), flush=True)
print(balance_case("w60", w_txt, w_bin, 1920), flush=True)

# Movement after adding osd.60 (weight 1.0) to host0, starting from a balanced cluster.
pg = 3840
progress("movement: add one OSD")
new_bin = os.path.join(T, "eq61.bin")
run(["crushtool", "-i", eq_bin, "--add-item", "60", "1.0", "osd.60", "--loc", "host", "host0", "-o", new_bin])
new_txt = os.path.join(T, "eq61.txt")
out, _ = run(["crushtool", "-d", new_bin])
open(new_txt, "w").write(out)
om, raw_before, old_after, _, _ = ceph_balance(eq_bin, pg, extra_osds=1)
run(["osdmaptool", om, "--import-crush", new_bin])
crush_only_new = None
_, _, new_after, ceph_cpu, _ = ceph_balance(new_bin, pg, om=om)
# Pure CRUSH movement (no balancer on either side).
om2 = os.path.join(T, "om-raw")
n, bits = osdmap_geometry(pg)
run(["osdmaptool", "--createsimple", str(n + 1), "--with-default-pool", "--pg-bits", str(bits), "--pgp-bits", str(bits), om2, "--clobber"])
run(["osdmaptool", om2, "--import-crush", eq_bin])
raw_old = dump(om2)
run(["osdmaptool", om2, "--import-crush", new_bin])
raw_new = dump(om2)
minimum = 3 * pg / 61
old_exc = os.path.join(T, "old.exc")
new_exc = os.path.join(T, "new.exc")
run([CAIRN, "crush", "balance", "--map", eq_txt, "--pg-num", str(pg), "--out", old_exc])
run([CAIRN, "crush", "balance", "--map", new_txt, "--pg-num", str(pg), "--exceptions", old_exc,
     "--previous-map", eq_txt, "--previous-exceptions", old_exc, "--out", new_exc])
out, _ = run([CAIRN, "crush", "diff", "--map", eq_txt, "--exceptions", old_exc, "--map-b", new_txt,
              "--exceptions-b", new_exc, "--pg-num", str(pg), "--json"])
d = json.loads(out)
print()
print(f"Adding osd.60 (weight 1.0) to host0 at pg_num {pg} (minimum = its fair share, {minimum:.1f} replicas):")
print()
print("| placement | replicas moved | ratio to minimum |")
print("|---|---|---|")
m = moved(raw_old, raw_new)
print(f"| CRUSH alone (Ceph and cairn compute the same) | {m} | {m / minimum:.2f} |")
m = moved(old_after, new_after)
print(f"| osdmaptool --upmap before and after | {m} | {m / minimum:.2f} |")
print(f"| cairn balance, incremental | {d['moved_replicas']} | {d['ratio_to_minimum']:.2f} |")
