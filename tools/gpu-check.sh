#!/usr/bin/env bash
# make gpu-check: proves the GPU read path on a machine with an NVIDIA GPU.
# It builds bin/shoal and bin/libshoalgds.so (GPU_CHECK_NO_BUILD=1: use
# the ones already in bin/, built beforehand), checks for a GPU first (and
# stops at once with "no GPU" without one; the probe prints the library
# files loaded, the cuFile mode confirmed by a test read, the glibc version
# and whether /run/udev is readable), starts `shoal local` (mutual TLS, no
# FUSE mount), then `shoal gpu-check` writes a checkpoint of random tensors
# (GPU_CHECK_SIZE, default 2GiB), restores it into GPU memory by each path,
# checks every byte on the device and prints GB/s beside plain cuFileRead
# and pread+cudaMemcpy of a local file; finally PyTorch restores the same
# checkpoint into CUDA tensors through the C ABI. A path that a step
# measures and that did not run (no cuFile, every local piece fell back,
# no torch) fails the check; GPU_CHECK_SKIP_TORCH=1 lets it pass without
# the PyTorch step, saying so. Everything runs under a 290 s limit.
# Results: $GPU_CHECK_DIR/result.json.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${GPU_CHECK_SIZE:-2GiB}
LIMIT=${GPU_CHECK_LIMIT:-290}
start=$(date +%s)
left() { echo $((LIMIT - ($(date +%s) - start))); }
fail() { echo "gpu-check: FAILED: $*" >&2; exit 1; }

if [ "${GPU_CHECK_NO_BUILD:-}" != 1 ]; then
	go build -o bin/shoal ./cmd/shoal
fi
[ -x bin/shoal ] || fail "no bin/shoal"
D=${GPU_CHECK_DIR:-$(mktemp -d -t shoal-gpu-check.XXXXXX)}
mkdir -p "$D"
# Fail fast without a GPU, before anything else is built or started. The
# test read goes to $D, the file system the checkpoint's chunks live on.
if ! bin/shoal gpu-check --probe --dir "$D"; then
	fail "no GPU (or no usable CUDA runtime, or cuFile's test read failed) on this machine; nothing was measured"
fi
if [ "${GPU_CHECK_NO_BUILD:-}" != 1 ]; then
	CGO_ENABLED=1 go build -buildmode=c-shared -o bin/libshoalgds.so ./cmd/libshoalgds ||
		echo "gpu-check: the C ABI did not build (no C compiler?)" >&2
fi

rm -rf "$D/cluster"
bin/shoal local --dir "$D/cluster" >"$D/local.log" 2>&1 &  # mutual TLS: DIR/tls/env names the administrator's certificate
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$D/cluster"; }
trap cleanup EXIT
for _ in $(seq 100); do [ -s "$D/cluster/mds.addr" ] && break; sleep 0.1; done
[ -s "$D/cluster/mds.addr" ] || { cat "$D/local.log" >&2; fail "shoal local did not start"; }
MDS=$(cat "$D/cluster/mds.addr")
. "$D/cluster/tls/env"  # exports SHOAL_CERT, SHOAL_KEY, SHOAL_CA: for gpu-check and the C ABI alike
DROP=""
[ "$(id -u)" = 0 ] && DROP=--drop-caches
timeout "$(left)" bin/shoal gpu-check --mds "$MDS" --ost-dirs "$D/cluster/ost-*" --size "$SIZE" --dir "$D" --json "$D/result.json" $DROP

torch=""
if [ ! -f bin/libshoalgds.so ]; then
	torch="no bin/libshoalgds.so (the C ABI)"
elif ! command -v python3 >/dev/null; then
	torch="no python3"
else
	OSTS=$(ls -d "$D"/cluster/ost-* | paste -sd:)
	rc=0
	SHOAL_GDS_LIB=bin/libshoalgds.so timeout "$(left)" python3 tools/python/gpu_check_torch.py "$D/ckpt.json" "$OSTS" || rc=$?
	case $rc in
	0) ;;
	2) torch="torch or its CUDA device missing (see above)" ;;
	*) fail "the PyTorch step (exit $rc)" ;;
	esac
fi
if [ -n "$torch" ]; then
	[ "${GPU_CHECK_SKIP_TORCH:-}" = 1 ] || fail "the PyTorch step did not run: $torch (GPU_CHECK_SKIP_TORCH=1 to pass without it)"
	echo "gpu-check: ok in $(( $(date +%s) - start ))s WITHOUT THE PYTORCH STEP ($torch); results in $D/result.json"
	exit 0
fi
echo "gpu-check: ok in $(( $(date +%s) - start ))s; results in $D/result.json"
