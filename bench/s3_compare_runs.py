#!/usr/bin/env python3
"""Before/after table of bench/s3_vs_rgw.py runs of one engine (cairn): the op/s of each run
per phase, the ratio of the means (after/before) and the mean p99s; LIST as keys/s and page
p99.

  python3 bench/s3_compare_runs.py --before 'R/before-*.json' --after 'R/after-*.json'
"""

import argparse
import glob
import json


def phases(paths):
    """(phase, conc) -> [{"ops_s", "p99_ms"}] over the runs in `paths`."""
    out = {}
    for path in sorted(paths):
        with open(path) as f:
            data = json.load(f)
        e = [x for x in data["engines"] if x["engine"] == "cairn"][0]
        for p in e["phases"]:
            out.setdefault((p["phase"], p["conc"]), []).append(p)
        for listing in e.get("list") or []:
            key = (f"LIST {listing['keys']} keys", 1)
            out.setdefault(key, []).append({"ops_s": listing["keys_s"], "p99_ms": listing["page_p99_ms"]})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="glob of the before runs' JSON files")
    ap.add_argument("--after", required=True, help="glob of the after runs' JSON files")
    args = ap.parse_args()
    before, after = phases(glob.glob(args.before)), phases(glob.glob(args.after))
    print("| phase | conc | before op/s (runs) | after op/s (runs) | after/before "
          "| before p99 ms | after p99 ms | p99 after/before |")
    print("|---|---|---|---|---|---|---|---|")
    for key, b in before.items():
        a = after.get(key)
        if not a:
            continue
        mean = lambda rows, k: sum(r[k] for r in rows) / len(rows)
        runs = lambda rows: " / ".join(f"{r['ops_s']:.0f}" for r in rows)
        print(f"| {key[0]} | {key[1]} | {runs(b)} | {runs(a)} | {mean(a, 'ops_s') / mean(b, 'ops_s'):.2f} "
              f"| {mean(b, 'p99_ms'):.1f} | {mean(a, 'p99_ms'):.1f} | {mean(a, 'p99_ms') / mean(b, 'p99_ms'):.2f} |")


if __name__ == "__main__":
    main()
