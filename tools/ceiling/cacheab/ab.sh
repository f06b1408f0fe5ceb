#!/bin/bash
# Hand A/B of the shards' first read: no cache, cache on vda, cache on tmpfs,
# no cache with a paced O_DIRECT writer on vda (disk contention alone).
# usage: SZ=MiB-per-file [PERF=1] ABDIR=dir ab.sh BIN ROUNDS VARIANTS...   (variants: nocache vda shm nocache+w; root)
# docs/cache.md, "2026-12-06/07".
set -u
BIN=$1; ROUNDS=$2; shift 2
P=${ABDIR:-/var/tmp/pc}; mkdir -p $P; cp "$(dirname "$0")/pace.py" $P/; CL=$P/cl; MNT=$P/mnt
mkdir -p $MNT
start() { # args: extra flags
  $BIN local --dir $CL --mount $MNT "$@" > $P/local.log 2>&1 &
  LPID=$!
  for i in $(seq 100); do [ -f $MNT/f0 ] && break; sleep 0.2; done
}
stop() { kill -INT $LPID; wait $LPID; }
if [ ! -f $CL/.made ]; then
  rm -rf $CL; start
  for i in 0 1 2 3; do head -c ${SZ:-256}M /dev/urandom > $MNT/f$i; done; sync
  stop; touch $CL/.made
fi
readall() {
  sync; echo 3 > /proc/sys/vm/drop_caches
  local c0=$(awk '{print $14+$15}' /proc/$LPID/stat) i0=$(awk '/^cpu /{print $5+$6}' /proc/stat)
  local t0=$(date +%s.%N)
  local pids=()
  for i in 0 1 2 3; do dd if=$MNT/f$i of=/dev/null bs=1M status=none & pids+=($!); done
  wait "${pids[@]}"
  local t1=$(date +%s.%N)
  local c1=$(awk '{print $14+$15}' /proc/$LPID/stat) i1=$(awk '/^cpu /{print $5+$6}' /proc/stat)
  echo "cpu(shoal) $(( (c1-c0) ))cs idle $(( (i1-i0) ))cs wall $(echo "($t1-$t0)*100" | bc | cut -d. -f1)cs" >&2
  echo "scale=0; 4*${SZ:-256}/($t1-$t0)" | bc
}
for r in $(seq $ROUNDS); do
 for v in "$@"; do
  case $v in
   nocache) start;;
   vda) rm -rf $P/cache; start --cache-dir $P/cache --cache-size 4GiB;;
   shm) rm -rf /dev/shm/pccache; start --cache-dir /dev/shm/pccache --cache-size 4GiB;;
   nocache+w) start;;
  esac
  sleep 1
  if [ $v = nocache+w ]; then python3 $P/pace.py $P/wfile 700 & WP=$!; sleep 0.5; fi
  if [ -n "${PERF:-}" ]; then perf record -a -g -o $P/perf.$v.$r.data -- sleep 1.5 >/dev/null 2>&1 & PP=$!; fi
  m=$(readall)
  [ -n "${PERF:-}" ] && wait $PP
  if [ $v = nocache+w ]; then kill $WP; wait $WP 2>/dev/null; rm -f $P/wfile; fi
  stop
  echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) round $r $v $m MiB/s"
 done
done
