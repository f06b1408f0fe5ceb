#!/usr/bin/env bash
# Installs the system packages Shoal needs, when they are missing: fuse3
# (fusermount3, for mounting without root), iproute2 (test/netsim) and sqlite3 (the tests run
# programs on a mount), gcc (the C ABIs), python3 with NumPy (the Python package). Needs root or sudo for apt.
set -euo pipefail
need=()
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
# iproute2 (ip, tc): the simulated network of hosts (test/netsim, make scale).
{ command -v ip || command -v /usr/sbin/ip; } >/dev/null 2>&1 && { command -v tc || command -v /usr/sbin/tc; } >/dev/null 2>&1 || need+=(iproute2)
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
# gcc: the GPU path's C ABI (cmd/libshoalgds, a c-shared library) and its
# tests, and the fake CUDA library that checks gds's bindings.
command -v gcc >/dev/null 2>&1 || need+=(gcc)
# python3 and NumPy: the Python package (python/, loaded over cmd/libshoal)
# and its tests (cmd/libshoal TestPython). Debian's python3-numpy lands in
# /usr/bin/python3, which the tests use when the python3 on PATH has no numpy.
if ! python3 -c 'import numpy' >/dev/null 2>&1 && ! /usr/bin/python3 -c 'import numpy' >/dev/null 2>&1; then
	need+=(python3 python3-numpy)
fi
if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
echo "installing: ${need[*]}" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then
	command -v sudo >/dev/null 2>&1 || { echo "need root (or sudo) to apt-get install ${need[*]}" >&2; exit 1; }
	SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null || true
$SUDO apt-get install -y -qq "${need[@]}" >/dev/null
