#!/bin/bash
# usage: bench/cpu_per_op.sh BIN OSDS SIZE write|rand [SECS] -> IOPS, client and OSD CPU (us per op)
# and how busy the whole machine was, for `cairn bench` at 16 in flight on a fresh `cairn up`.
B=$1; N=$2; SZ=$3; MODE=$4; S=${5:-8}
D=${ACCT_DIR:-/tmp}/acct-$N; $B down --dir $D >/dev/null 2>&1; rm -rf $D
$B up --no-s3 --no-fs --dir $D --mon 127.0.0.1:7931 --osds $N --device-mib 16384 --pg-num ${PG:-64} >/dev/null || exit 1
pids=$(tail -n +2 $D/pids)
cpu() { t=0; for p in $pids; do t=$((t + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $t; }
if [ $MODE = rand ]; then $B bench --mon 127.0.0.1:7931 -p data 5 write -b $SZ -t 16 --no-cleanup >/dev/null 2>&1; fi
idle0=$(awk '/^cpu /{print $5+$6}' /proc/stat); tot0=$(awk '/^cpu /{s=0; for(i=2;i<=NF;i++) s+=$i; print s}' /proc/stat)
a=$(cpu)
out=$( { /usr/bin/time -f "CLIENTCPU %U %S" $B bench --mon 127.0.0.1:7931 -p data $S $MODE -b $SZ -t 16 --no-cleanup; } 2>&1)
b=$(cpu)
idle1=$(awk '/^cpu /{print $5+$6}' /proc/stat); tot1=$(awk '/^cpu /{s=0; for(i=2;i<=NF;i++) s+=$i; print s}' /proc/stat)
iops=$(echo "$out" | grep "Average IOPS" | awk '{print $3}')
ccpu=$(echo "$out" | grep CLIENTCPU | awk '{print $2+$3}')
python3 -c "
iops=$iops; s=$S; ops=iops*s
print('osds=$N size=$SZ mode=$MODE iops=%.0f client_us_per_op=%.1f osd_us_per_op=%.1f machine_busy=%.0f%%' % (iops, $ccpu*1e6/ops, ($b-$a)*1e4/ops, 100*(1-($idle1-$idle0)/($tot1-$tot0))))"
$B down --dir $D >/dev/null; rm -rf $D
