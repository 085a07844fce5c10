#!/bin/bash
# usage: bench/remap_latency.sh BIN [FILL_SECS] [BENCH_SECS] -> client 4 KiB write latency while
# PGs move: `cairn up --osds 4` (pool size 3), FILL_SECS of 64 KiB objects written, then a
# BENCH_SECS 4 KiB write bench during which osd.3 is marked out after 3 s (its PGs move to the
# other three OSDs, which need their copies backfilled). Prints the PG states every 3 s, the
# bench's summary and the PG states when it ended.
B=$1; FILL=${2:-20}; S=${3:-30}
D=${REMAP_DIR:-/tmp}/remap-bench; M=127.0.0.1:7941
$B down --dir $D >/dev/null 2>&1; rm -rf $D
$B up --no-s3 --no-fs --dir $D --mon $M --osds 4 --device-mib 8192 --pg-num 64 >/dev/null || exit 1
$B bench --mon $M -p data $FILL write -b 65536 -t 16 --no-cleanup | grep -E "Average IOPS|Bandwidth"
$B bench --mon $M -p data $S write -b 4096 -t 16 > $D/bench.txt 2>&1 &
sleep 3
$B osd --mon $M out 3
for i in $(seq 1 $(( (S - 3) / 3 ))); do sleep 3; $B status --mon $M | grep "pgs:" | sed "s/^/  +$((i * 3))s /"; done
wait
grep -E "Average IOPS|Average Latency|p9|Max latency" $D/bench.txt
$B status --mon $M | grep -E "pgs|HEALTH"
$B down --dir $D >/dev/null; rm -rf $D
