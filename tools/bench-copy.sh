#!/usr/bin/env bash
# The foundation's copy benchmark: a 256 MiB file copied into and out of a
# `shoal local` mount, next to dd on the bare disk under the same directory,
# in the same run. Usage: tools/bench-copy.sh [WORKDIR] [SIZE_MIB]
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d -p "$PWD" bench.XXXX)}
mib=${2:-256}
bin=bin/shoal
mkdir -p "$work"
data=$work/data mnt=$work/mnt src=$work/src.bin
rm -rf "$data"; mkdir -p "$data" "$mnt"

drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
rate() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.0f", b / 1048576 / s }'; }
timeit() { local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'; }

head -c $((mib << 20)) /dev/urandom > "$src"
bytes=$((mib << 20))

# Baseline: the bare disk under the OST directories.
drop
t=$(timeit dd if="$src" of="$work/disk.bin" bs=1M conv=fsync status=none)
disk_w=$(rate $bytes "$t")
drop
t=$(timeit dd if="$work/disk.bin" of=/dev/null bs=1M status=none)
disk_r=$(rate $bytes "$t")
rm -f "$work/disk.bin"

$bin local --dir "$data" --mount "$mnt" --log-level warn > "$work/local.log" 2>&1 &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "mounted at" "$work/local.log" 2>/dev/null && break; sleep 0.1; done
grep -q "mounted at" "$work/local.log" || { cat "$work/local.log"; exit 1; }

drop
t=$(timeit bash -c "cp '$src' '$mnt/big.bin' && sync '$mnt/big.bin'")
shoal_w=$(rate $bytes "$t")
drop
t=$(timeit cp "$mnt/big.bin" "$work/out.bin")
shoal_r=$(rate $bytes "$t")
cmp "$src" "$work/out.bin" || { echo "MISMATCH: bytes read back differ" >&2; exit 1; }
rm -f "$work/out.bin"

printf '%-34s %10s %12s %8s\n' "figure ($mib MiB file)" "MiB/s" "disk MiB/s" "ratio"
printf '%-34s %10s %12s %8s\n' "write: cp into mount (+sync)" "$shoal_w" "$disk_w" "$(awk -v a=$shoal_w -v b=$disk_w 'BEGIN{printf "%.2f", a/b}')"
printf '%-34s %10s %12s %8s\n' "read: cp out of mount (cold)" "$shoal_r" "$disk_r" "$(awk -v a=$shoal_r -v b=$disk_r 'BEGIN{printf "%.2f", a/b}')"
echo "baseline: dd bs=1M to/from the same disk (write with conv=fsync; read after drop_caches)"
