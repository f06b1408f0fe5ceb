#!/usr/bin/env bash
# make gpu-check: proves the GPU read path on a machine with an NVIDIA GPU.
# It builds bin/shoal and bin/libshoalgds.so, checks for a GPU first (and
# stops at once with "no GPU" without one), starts `shoal local` (no FUSE
# mount), then `shoal gpu-check` writes a checkpoint of random tensors
# (GPU_CHECK_SIZE, default 2GiB), restores it into GPU memory by each path,
# checks every byte on the device and prints GB/s beside plain cuFileRead
# and pread+cudaMemcpy of a local file; finally PyTorch (when importable)
# restores the same checkpoint into CUDA tensors through the C ABI.
# Everything runs under a 290 s limit. Results: $GPU_CHECK_DIR/result.json.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${GPU_CHECK_SIZE:-2GiB}
LIMIT=${GPU_CHECK_LIMIT:-290}
start=$(date +%s)
left() { echo $((LIMIT - ($(date +%s) - start))); }

go build -o bin/shoal ./cmd/shoal
# Fail fast without a GPU, before anything else is built or started.
if ! bin/shoal gpu-check --probe; then
	echo "gpu-check: FAILED: no GPU (or no usable CUDA runtime) on this machine; nothing was measured" >&2
	exit 1
fi
CGO_ENABLED=1 go build -buildmode=c-shared -o bin/libshoalgds.so ./cmd/libshoalgds || echo "gpu-check: no C ABI (c-shared build failed); the PyTorch step is skipped" >&2

D=${GPU_CHECK_DIR:-$(mktemp -d -t shoal-gpu-check.XXXXXX)}
mkdir -p "$D"
rm -rf "$D/cluster"
bin/shoal local --dir "$D/cluster" >"$D/local.log" 2>&1 &  # mutual TLS: gpu-check takes DIR/tls/env's certificate
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$D/cluster"; }
trap cleanup EXIT
for _ in $(seq 100); do [ -s "$D/cluster/mds.addr" ] && break; sleep 0.1; done
[ -s "$D/cluster/mds.addr" ] || { echo "gpu-check: shoal local did not start:" >&2; cat "$D/local.log" >&2; exit 1; }
MDS=$(cat "$D/cluster/mds.addr")
. "$D/cluster/tls/env"  # SHOAL_CERT, SHOAL_KEY, SHOAL_CA for gpu-check
DROP=""
[ "$(id -u)" = 0 ] && DROP=--drop-caches
timeout "$(left)" bin/shoal gpu-check --mds "$MDS" --ost-dirs "$D/cluster/ost-*" --size "$SIZE" --dir "$D" --json "$D/result.json" $DROP
if [ -f bin/libshoalgds.so ] && command -v python3 >/dev/null; then
	OSTS=$(ls -d "$D"/cluster/ost-* | paste -sd:)
	SHOAL_GDS_LIB=bin/libshoalgds.so timeout "$(left)" python3 tools/python/gpu_check_torch.py "$D/ckpt.json" "$OSTS"
fi
echo "gpu-check: ok in $(( $(date +%s) - start ))s; results in $D/result.json"
