#!/bin/bash
# usage: bench/cluster_write.sh BIN OSDS SIZE [SECS] -> write bandwidth, IOPS, p99 and OSD CPU (ms per op)
# of `cairn bench -p data SECS write -b SIZE -t 16` on a fresh `cairn up --osds OSDS` (64 PGs,
# sparse 32 GiB device files under /tmp). Alternate two binaries to compare them: the disk drifts.
B=$1; N=$2; SZ=$3; S=${4:-10}
D=${ACCT_DIR:-/tmp}/ab-$N; $B down --dir $D >/dev/null 2>&1; rm -rf $D
$B up --no-s3 --no-fs --dir $D --mon 127.0.0.1:7911 --osds $N --device-mib 32768 --pg-num 64 >/dev/null || exit 1
pids=$(tail -n +2 $D/pids)
cpu() { t=0; for p in $pids; do t=$((t + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $t; }
a=$(cpu)
out=$($B bench --mon 127.0.0.1:7911 -p data $S write -b $SZ -t 16 --no-cleanup 2>&1)
b=$(cpu)
bw=$(echo "$out" | grep "Bandwidth" | awk '{print $3}'); iops=$(echo "$out" | grep "Average IOPS" | awk '{print $3}'); p99=$(echo "$out" | grep "Latency p99 " | awk '{print $4}')
ops=$(python3 -c "print($iops*$S)")
echo "$(basename $B) osds=$N size=$SZ bw=$bw iops=$iops p99=$p99 osd_cpu_ms_per_op=$(python3 -c "print(round(($b-$a)*10/$ops,3))")"
$B down --dir $D >/dev/null
rm -rf $D
