#!/usr/bin/env bash
# Ceph radosgw (Debian package `radosgw`, Pacific 16.2) on a running ceph-mini cluster,
# for bench/s3_vs_rgw.py. Beast frontend on loopback, no SSL, no cephx (ceph-mini runs
# with auth none). Pools are created by RGW itself with the cluster's default size (3).
#
#   bench/rgw.sh start [ADDR]      # ADDR default 127.0.0.1:7481; waits until it answers
#   bench/rgw.sh user UID          # creates (or shows) a user; prints "ACCESS SECRET"
#   bench/rgw.sh stop              # SIGTERM to the recorded PID, SIGKILL after 30 s
#
# Env: CEPH_MINI (the ceph-mini folder, default /work/shared/peers/ceph-mini),
# CEPH_MINI_DIR (the cluster's run folder, as for ceph-mini's scripts),
# RGW_NAME (client.rgw.bench), RGW_EXTRA (extra radosgw command-line options).
# The daemon runs in the foreground (-f) under setsid and its exact PID is recorded in
# $CEPH_MINI_DIR/pids/rgw.NAME, like ceph-mini's lib.sh does for the other daemons.
set -euo pipefail
CEPH_MINI=${CEPH_MINI:-/work/shared/peers/ceph-mini}
# shellcheck source=/dev/null
. "$CEPH_MINI/lib.sh"
RGW_NAME=${RGW_NAME:-client.rgw.bench}
PID_FILE="$PIDS_DIR/rgw.${RGW_NAME#client.}"

start() {
  local addr=${1:-127.0.0.1:7481}
  command -v radosgw >/dev/null || die "radosgw is not installed (apt-get install -y radosgw)"
  [ -f "$CEPH_CONF" ] || die "no $CEPH_CONF: bring ceph-mini up first"
  [ -f "$PID_FILE" ] && die "$PID_FILE exists; run '$0 stop' first"
  mkdir -p "$CEPH_MINI_DIR/rgw" "$PIDS_DIR" "$CEPH_MINI_DIR/out"
  # radosgw's built-in defaults ask for a secure (cephx) monitor session, which a cluster
  # with auth none cannot give: without --ms-mon-client-mode crc it retries forever with
  # "get_initial_auth_request returned -13".
  # shellcheck disable=SC2086
  setsid radosgw -f -c "$CEPH_CONF" -n "$RGW_NAME" \
    --rgw-frontends "beast endpoint=$addr tcp_nodelay=${RGW_TCP_NODELAY:-1}" \
    --rgw-data "$CEPH_MINI_DIR/rgw" \
    --log-file "$CEPH_MINI_DIR/out/$RGW_NAME.log" \
    --admin-socket "$CEPH_MINI_DIR/run/$RGW_NAME.asok" \
    --debug-rgw 1/5 --debug-ms 0/0 --ms-mon-client-mode crc \
    ${RGW_EXTRA:-} </dev/null >>"$CEPH_MINI_DIR/out/$RGW_NAME.stdout" 2>&1 &
  local pid=$!
  echo "$pid" >"$PID_FILE"
  log "started radosgw $RGW_NAME pid=$pid on $addr"
  local i
  for i in $(seq 120); do
    kill -0 "$pid" 2>/dev/null || { tail -20 "$CEPH_MINI_DIR/out/$RGW_NAME.log" >&2 || true; rm -f "$PID_FILE"; die "radosgw exited"; }
    if curl -s -o /dev/null -m 2 "http://$addr/"; then
      log "radosgw answers on $addr after ${i}s"
      return 0
    fi
    sleep 1
  done
  die "radosgw did not answer on $addr within 120 s"
}

user() {
  local uid=${1:?uid}
  local json
  json=$(timeout 120 radosgw-admin -c "$CEPH_CONF" -n "$RGW_NAME" user info --uid="$uid" 2>/dev/null) ||
    json=$(timeout 120 radosgw-admin -c "$CEPH_CONF" -n "$RGW_NAME" user create --uid="$uid" --display-name="$uid")
  echo "$json" | jq -r '.keys[0] | "\(.access_key) \(.secret_key)"'
}

stop() {
  [ -f "$PID_FILE" ] || { log "no $PID_FILE"; return 0; }
  local pid comm i=0
  pid=$(cat "$PID_FILE")
  comm=$(cat /proc/"$pid"/comm 2>/dev/null || true)
  case "$comm" in
    radosgw*) ;;
    "") log "radosgw pid $pid already gone"; rm -f "$PID_FILE"; return 0 ;;
    *) log "pid $pid is '$comm', not radosgw; not killing"; rm -f "$PID_FILE"; return 0 ;;
  esac
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 150 ]; do sleep 0.2; i=$((i + 1)); done
  if kill -0 "$pid" 2>/dev/null; then
    log "radosgw pid $pid did not exit after 30 s; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PID_FILE"
  log "stopped radosgw (pid $pid)"
}

case "${1:-}" in
  start) start "${2:-}" ;;
  user) user "${2:-}" ;;
  stop) stop ;;
  *) echo "usage: $0 start [ADDR] | user UID | stop" >&2; exit 2 ;;
esac
