#!/bin/bash
# usage: bench/scrub_impact.sh BIN [FILL_SECS] [BENCH_SECS]
# Deep scrub's rate and what it costs clients, on a fresh `cairn up` (3 OSDs, size 3, 64 PGs):
# FILL_SECS of 4 MiB writes, then every PG deep-scrubbed one after the other (timed: objects and
# logical bytes per second; every copy is read, so the disks read 3x that), then BENCH_SECS of
# 4 KiB writes at 16 in flight twice: alone, and while every PG is deep-scrubbed over and over.
B=$1; FILL=${2:-3}; S=${3:-20}
D=${SCRUB_DIR:-/tmp}/scrub-impact; MON=127.0.0.1:7941
$B down --dir $D >/dev/null 2>&1; rm -rf $D
$B up --no-s3 --no-fs --dir $D --mon $MON --osds 3 --device-mib 16384 >/dev/null || exit 1
$B bench --mon $MON -p data $FILL write -b 4194304 -t 16 --no-cleanup 2>/dev/null | grep -E "Bandwidth"
pgs=$($B pg --mon $MON dump | awk 'NR>1 {print $1}')
scrub_all() { for pg in $pgs; do $B pg --mon $MON deep-scrub $pg; done; }
t0=$(date +%s.%N)
out=$(scrub_all)
t1=$(date +%s.%N)
objects=$(echo "$out" | awk '/deep-scrub:/ {n += $4} END {print n}')
bad=$(echo "$out" | awk '/deep-scrub:/ {n += $6} END {print n}')
python3 -c "
s=$t1-$t0; o=$objects
print('deep scrub of 64 PGs: %d objects (%d inconsistent) in %.1f s: %.0f objects/s, %.0f MB/s of 4 MiB objects per copy' % (o, $bad, s, o/s, o*4.194304/s))"
bench() { $B bench --mon $MON -p data $S write -b 4096 -t 16 2>/dev/null | grep -E "Average IOPS|p99 |Max latency|Latency p50"; }
echo "== 4 KiB writes alone"; bench
echo "== 4 KiB writes while every PG is deep-scrubbed in turn"
( while true; do scrub_all >/dev/null 2>&1; done ) & loop=$!
bench
kill $loop 2>/dev/null; wait $loop 2>/dev/null
$B down --dir $D >/dev/null; rm -rf $D
