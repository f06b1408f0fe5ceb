"""The ctypes binding of libshoal (cmd/libshoal, a Go c-shared library).

Only this module touches ctypes. Requests and results are JSON; tensor
bytes travel as pointers. ctypes releases the GIL during every call, so
other Python threads run while Go saves or loads.
"""

import ctypes
import json
import os
import threading

from . import errors

_HERE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_lib = None


def _candidates():
    env = os.environ.get("SHOAL_LIB")
    if env:
        return [env]
    return [os.path.join(_HERE, "libshoal.so"),
            os.path.join(_HERE, "..", "..", "bin", "libshoal.so")]


def lib():
    """The loaded library (loaded once)."""
    global _lib
    with _lock:
        if _lib is None:
            for p in _candidates():
                if os.path.exists(p):
                    _lib = _load(p)
                    break
            else:
                raise errors.ShoalError(
                    "libshoal.so not found (looked at %s): install the package with "
                    "`pip install ./python` (needs Go), or build it with "
                    "`go build -buildmode=c-shared -o bin/libshoal.so ./cmd/libshoal` "
                    "and set SHOAL_LIB" % ", ".join(_candidates()))
        return _lib


def _load(path):
    L = ctypes.CDLL(path)
    i64, cp, vp = ctypes.c_int64, ctypes.c_char_p, ctypes.c_void_p
    pvp = ctypes.POINTER(vp)
    L.shoal_open.argtypes = [cp, pvp]
    L.shoal_close.argtypes = [i64, pvp]
    L.shoal_save.argtypes = [i64, cp, pvp, i64, pvp, pvp]
    L.shoal_wait.argtypes = [i64, i64, pvp, pvp]
    L.shoal_load.argtypes = [i64, cp, pvp, ctypes.POINTER(i64), i64, pvp, pvp]
    L.shoal_call.argtypes = [i64, cp, cp, pvp, pvp]
    for f in (L.shoal_open, L.shoal_close, L.shoal_save, L.shoal_wait, L.shoal_load, L.shoal_call):
        f.restype = i64
    L.shoal_free.argtypes = [vp]
    L.shoal_free.restype = None
    return L


def _take(p):
    """The C string p as a str, freed."""
    if not p.value:
        return None
    try:
        return ctypes.string_at(p.value).decode("utf-8")
    finally:
        lib().shoal_free(p)


def call(fn, *args, out=True):
    """Calls libshoal's fn with args and two out-pointers (result,
    error); raises the matching exception on failure; returns (rc,
    decoded result)."""
    L = lib()
    res, err = ctypes.c_void_p(), ctypes.c_void_p()
    outargs = (ctypes.byref(res), ctypes.byref(err)) if out else (ctypes.byref(err),)
    rc = getattr(L, fn)(*args, *outargs)
    r = _take(res) if out else None
    e = _take(err)
    if rc < 0:
        raise errors.from_json(json.loads(e) if e else {"message": "%s failed" % fn})
    return rc, (json.loads(r) if r else None)


def enc(obj):
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def pointers(addrs):
    """A C array of void* from a list of addresses."""
    arr = (ctypes.c_void_p * max(len(addrs), 1))()
    for i, a in enumerate(addrs):
        arr[i] = a
    return arr


def lengths(ns):
    arr = (ctypes.c_int64 * max(len(ns), 1))()
    for i, n in enumerate(ns):
        arr[i] = n
    return arr
