#!/bin/bash
# usage: bench/flag_churn.sh BIN [PAIRS] -> an operator's script against a real cluster:
# `cairn up` (3 OSDs), then PAIRS times `cairn osd set noout` and `cairn osd unset noout`, each
# a short-lived client (two map epochs a pair). Every 500 pairs it prints the epoch reached,
# the last 500 commands' mean time and the monitor's sessions, subscribers and bytes held (from
# its metrics page); at the end, how long `cairn status` and a put and get of 1 MiB take, and
# whether the object read back is the one written (cmp).
B=$1; PAIRS=${2:-2500}
D=${CHURN_DIR:-/tmp}/flag-churn; M=127.0.0.1:7951
$B down --dir $D >/dev/null 2>&1; rm -rf $D
$B up --no-s3 --no-fs --dir $D --mon $M --osds 3 --device-mib 1024 --pg-num 32 >/dev/null || exit 1
page=$(grep -o "http://127.0.0.1:[0-9]*/metrics" $D/mon.log | head -1)
metric() { curl -s "$page" | awk -v m="$1" '$1 == m { print $2 }'; }
t0=$(date +%s.%N)
for i in $(seq 1 "$PAIRS"); do
  $B osd --mon $M set noout >/dev/null || { echo "set failed at pair $i"; break; }
  $B osd --mon $M unset noout >/dev/null || { echo "unset failed at pair $i"; break; }
  if (( i % 500 == 0 )); then
    t1=$(date +%s.%N)
    printf "pairs %5d  epoch %6s  %.1f ms a command  sessions %s  subscribers %s  held %s B\n" \
      "$i" "$(metric cairn_mon_epoch)" "$(echo "($t1 - $t0) * 1000 / 1000" | bc -l)" \
      "$(metric 'cairn_msgr_sessions{daemon="mon"}')" "$(metric cairn_mon_subscribers)" \
      "$(metric 'cairn_msgr_held_bytes{daemon="mon"}')"
    t0=$t1
  fi
done
head -c 1048576 /dev/urandom > $D/obj.in
s=$(date +%s.%N); $B status --mon $M >/dev/null && echo "status: $(echo "($(date +%s.%N) - $s) * 1000" | bc -l | cut -d. -f1) ms"
s=$(date +%s.%N); $B put --mon $M -p data churn-probe $D/obj.in && echo "put: $(echo "($(date +%s.%N) - $s) * 1000" | bc -l | cut -d. -f1) ms"
s=$(date +%s.%N); $B get --mon $M -p data churn-probe $D/obj.out && echo "get: $(echo "($(date +%s.%N) - $s) * 1000" | bc -l | cut -d. -f1) ms"
cmp $D/obj.in $D/obj.out && echo "read back: identical"
$B down --dir $D >/dev/null; rm -rf $D
