"""Read Shoal files and checkpoints straight into GPU memory from Python.

A ctypes binding of libshoalgds (cmd/libshoalgds, built with
``go build -buildmode=c-shared -o bin/libshoalgds.so ./cmd/libshoalgds``).
It needs nothing but the standard library; the PyTorch helpers import
torch only when called.

    import torch, shoal_gds
    s = shoal_gds.Shoal(mds="127.0.0.1:7000", backend="cuda",
                        ost_dirs=["/data/shoal/ost-01"])
    t = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    report = s.read_into("/ckpt/rank0.safetensors", t.data_ptr(), t.numel())
    tensors = s.load_safetensors("/ckpt/rank0.safetensors")  # name -> tensor

backend "cuda" takes device pointers (tensor.data_ptr() of CUDA tensors);
"host" takes host memory and needs no GPU. The library is found from
``lib``, ``$SHOAL_GDS_LIB``, or bin/libshoalgds.so of this repository.

The cluster is reached as by the shoal command: with mutual TLS, the
certificate in $SHOAL_CERT, $SHOAL_KEY and $SHOAL_CA (``. DIR/tls/env`` of
a ``shoal local``), or cert=, key=, ca=; in plaintext with
$SHOAL_INSECURE=1 or insecure=True. mds defaults to $SHOAL_MDS. The CUDA
libraries are looked for first in this Python's own installation
(sys.prefix and the lib directories of its nvidia wheels), then as
$SHOAL_CUDA_LIB, $SHOAL_CUFILE_LIB and $SHOAL_CUDA_LIB_DIRS say.
"""

import ctypes
import glob
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ERRLEN = 4096

# safetensors dtype -> torch dtype name
_TORCH_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32",
    "F32": "float32", "F64": "float64", "I64": "int64", "U64": "uint64",
    "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu",
    "C64": "complex64",
}


# The variables the library reads, passed with each open as os.environ
# has them now (absent: ""): a Go library reads the environment once,
# when it is loaded.
_ENV_KEYS = (
    "SHOAL_MDS", "SHOAL_CERT", "SHOAL_KEY", "SHOAL_CA", "SHOAL_INSECURE",
    "SHOAL_CUDA_LIB", "SHOAL_CUFILE_LIB", "SHOAL_CUDA_LIB_DIRS",
    "HOME", "PATH", "PWD", "VIRTUAL_ENV", "CONDA_PREFIX", "UV_PROJECT_ENVIRONMENT",
    "UV_PYTHON_INSTALL_DIR", "PYENV_ROOT", "XDG_DATA_HOME",
)


class ShoalError(RuntimeError):
    """An error from libshoalgds."""


def _python_prefixes():
    out = []
    for p in (sys.prefix, sys.exec_prefix, getattr(sys, "base_prefix", None)):
        if p and p not in out:
            out.append(p)
    return out


def _nvidia_lib_dirs():
    """The lib directories of this Python's NVIDIA wheels (nvidia/cu13/lib,
    nvidia/cufile/lib...), wherever site-packages is."""
    try:
        import nvidia  # a namespace package: cheap, imports no library
    except ImportError:
        return []
    out = []
    for root in getattr(nvidia, "__path__", []):
        out.extend(sorted(d for d in glob.glob(os.path.join(root, "*", "lib")) if os.path.isdir(d)))
    return out


def _find_lib(lib):
    for p in (lib, os.environ.get("SHOAL_GDS_LIB"),
              os.path.join(_HERE, "..", "..", "bin", "libshoalgds.so")):
        if p and os.path.exists(p):
            return p
    raise ShoalError("libshoalgds.so not found: build it with "
                     "go build -buildmode=c-shared -o bin/libshoalgds.so ./cmd/libshoalgds "
                     "and pass lib= or set SHOAL_GDS_LIB")


def _load(path):
    L = ctypes.CDLL(path)
    i64, cp, vp = ctypes.c_int64, ctypes.c_char_p, ctypes.c_void_p
    L.shoal_gds_open.argtypes = [cp, cp, cp, ctypes.c_int, cp, i64]
    L.shoal_gds_open.restype = i64
    L.shoal_gds_open2.argtypes = [cp, cp, cp, ctypes.c_int, cp, cp, i64]
    L.shoal_gds_open2.restype = i64
    L.shoal_gds_close.argtypes = [i64, cp, i64]
    L.shoal_gds_close.restype = ctypes.c_int
    L.shoal_gds_read.argtypes = [i64, cp, i64, i64, vp, i64, cp, i64, cp, i64]
    L.shoal_gds_read.restype = i64
    L.shoal_gds_register.argtypes = [i64, vp, i64, cp, i64]
    L.shoal_gds_register.restype = i64
    L.shoal_gds_unregister.argtypes = [i64, vp, cp, i64]
    L.shoal_gds_unregister.restype = i64
    L.shoal_gds_header.argtypes = [i64, cp, cp, i64, cp, i64]
    L.shoal_gds_header.restype = i64
    L.shoal_gds_info.argtypes = [i64, cp, i64, cp, i64]
    L.shoal_gds_info.restype = i64
    return L


class Shoal:
    """A connection to a Shoal cluster that reads into device memory."""

    def __init__(self, mds=None, backend="cuda", ost_dirs=(), device=0, lib=None,
                 cert=None, key=None, ca=None, insecure=None):
        self._h = 0
        self._lib = _load(_find_lib(lib))
        opts = {
            "env": {k: os.environ.get(k, "") for k in _ENV_KEYS},
            "python_prefixes": _python_prefixes(),
            "lib_dirs": _nvidia_lib_dirs(),
        }
        for name, v in (("cert", cert), ("key", key), ("ca", ca)):
            if v is not None:
                opts[name] = os.fspath(v)
        if insecure is not None:
            opts["insecure"] = bool(insecure)
        err = ctypes.create_string_buffer(_ERRLEN)
        h = self._lib.shoal_gds_open2((mds or "").encode(), backend.encode(),
                                      ":".join(ost_dirs).encode(), device,
                                      json.dumps(opts).encode(), err, _ERRLEN)
        if h < 0:
            raise ShoalError(err.value.decode(errors="replace"))
        self._h = h
        self.backend = backend

    def close(self):
        if self._h:
            err = ctypes.create_string_buffer(_ERRLEN)
            rc = self._lib.shoal_gds_close(self._h, err, _ERRLEN)
            self._h = 0
            if rc < 0:
                raise ShoalError(err.value.decode(errors="replace"))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _json(self, fn, *args):
        size = 1 << 16
        while True:
            buf = ctypes.create_string_buffer(size)
            err = ctypes.create_string_buffer(_ERRLEN)
            n = fn(self._h, *args, buf, size, err, _ERRLEN)
            if n < 0:
                raise ShoalError(err.value.decode(errors="replace"))
            if n < size:
                return json.loads(buf.value.decode())
            size = n + 1

    def info(self):
        """The device: kind, name, direct_path, cufile_mode (at open),
        cufile_mode_now, cufile_stats, libraries, glibc."""
        return self._json(self._lib.shoal_gds_info)

    def header(self, path):
        """The safetensors header of path: data_start, data_len, metadata,
        tensors [{name, dtype, shape, begin, end}]."""
        return self._json(self._lib.shoal_gds_header, path.encode())

    def read_into(self, path, ptr, nbytes, offset=0, length=None):
        """Reads file bytes [offset, offset+length) of path (length defaults
        to nbytes) into the memory at ptr (nbytes long). Returns the read's
        report: bytes, path ("direct", "compat", "bounce", "host" or a
        mix), per-path bytes, local/remote/zero bytes, elapsed_s."""
        if length is None:
            length = nbytes
        rep = ctypes.create_string_buffer(2048)
        err = ctypes.create_string_buffer(_ERRLEN)
        n = self._lib.shoal_gds_read(self._h, path.encode(), offset, length,
                                     ctypes.c_void_p(ptr), nbytes, rep, 2048, err, _ERRLEN)
        if n < 0:
            raise ShoalError(err.value.decode(errors="replace"))
        return json.loads(rep.value.decode())

    def register(self, ptr, nbytes):
        """Registers a long-lived device buffer with cuFile (once)."""
        err = ctypes.create_string_buffer(_ERRLEN)
        if self._lib.shoal_gds_register(self._h, ctypes.c_void_p(ptr), nbytes, err, _ERRLEN) < 0:
            raise ShoalError(err.value.decode(errors="replace"))

    def unregister(self, ptr):
        err = ctypes.create_string_buffer(_ERRLEN)
        if self._lib.shoal_gds_unregister(self._h, ctypes.c_void_p(ptr), err, _ERRLEN) < 0:
            raise ShoalError(err.value.decode(errors="replace"))

    # --- PyTorch helpers -------------------------------------------------

    def read_tensor(self, path, tensor, offset=0):
        """Fills a contiguous tensor with file bytes starting at offset."""
        if not tensor.is_contiguous():
            raise ShoalError("tensor is not contiguous")
        if (tensor.device.type == "cuda") != (self.backend == "cuda"):
            raise ShoalError("a %s tensor with the %s backend" % (tensor.device.type, self.backend))
        nbytes = tensor.numel() * tensor.element_size()
        return self.read_into(path, tensor.data_ptr(), nbytes, offset)

    def load_safetensors(self, path, device=None):
        """Restores a safetensors shard: its data region read with one call
        into one uint8 tensor, each tensor a view of it (a copy when its
        offset does not suit its dtype). Returns (dict name -> tensor,
        report)."""
        import torch
        if device is None:
            device = "cuda" if self.backend == "cuda" else "cpu"
        h = self.header(path)
        n = h["data_len"]
        # Direct reads need the buffer's address and the file offset to
        # agree modulo 4 KiB. Shoal keeps headers as they were written, so
        # the data region may start on any 8-byte boundary: place it so.
        whole = torch.empty(max(n, 1) + 4096, dtype=torch.uint8, device=device)
        pad = (h["data_start"] - whole.data_ptr()) % 4096
        buf = whole[pad:pad + max(n, 1)]
        rep = self.read_into(path, buf.data_ptr(), n, h["data_start"]) if n else {}
        out = {}
        for t in h["tensors"]:
            dt = getattr(torch, _TORCH_DTYPES[t["dtype"]])
            raw = buf[t["begin"]:t["end"]]
            size = torch.empty((), dtype=dt).element_size()
            if t["begin"] % size:
                raw = raw.clone()
            out[t["name"]] = raw.view(dt).reshape(t["shape"])
        return out, rep
