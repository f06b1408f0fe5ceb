"""Tensors as libshoal sees them: a pointer, a byte length, a safetensors
dtype and a shape. NumPy arrays, PyTorch CPU tensors and any object with
the buffer protocol (through numpy.asarray, without a copy) are taken;
nothing is ever copied here: a tensor that is not C-contiguous, not
little-endian or of a dtype safetensors lacks is refused."""

import mmap
import sys

import numpy as np

from .errors import InvalidArgument

# numpy dtype name -> safetensors dtype. bfloat16 and float8 come from
# ml_dtypes (or jax) when installed.
_NP_TO_ST = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16",
    "float16": "F16", "bfloat16": "BF16", "int32": "I32", "uint32": "U32",
    "float32": "F32", "float64": "F64", "int64": "I64", "uint64": "U64",
    "complex64": "C64", "float8_e5m2": "F8_E5M2", "float8_e4m3fn": "F8_E4M3",
    "float8_e8m0fnu": "F8_E8M0",
}
_ST_TO_NP = {v: k for k, v in _NP_TO_ST.items()}

# torch dtype (str(dtype) without "torch.") -> safetensors dtype
_TORCH_TO_ST = dict(_NP_TO_ST)
_ST_TO_TORCH = {v: k for k, v in _TORCH_TO_ST.items()}

_MMAP_MIN = 1 << 20

ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
            "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
            "F64": 8, "I64": 8, "U64": 8, "C64": 8}



def _np_has(name):
    try:
        np.dtype(name)
        return True
    except TypeError:
        return False


# the dtypes NumPy itself has (bfloat16 and float8 need ml_dtypes)
SUPPORTED_NUMPY = sorted(k for k in _NP_TO_ST if _np_has(k))


def is_torch(obj):
    t = type(obj)
    return t.__module__.split(".")[0] == "torch" and hasattr(obj, "data_ptr")


class Buf:
    """One tensor's memory: ptr, nbytes, dtype (safetensors), shape; obj
    keeps the owner alive for as long as the Buf is."""
    __slots__ = ("ptr", "nbytes", "dtype", "shape", "obj", "writable")

    def __init__(self, ptr, nbytes, dtype, shape, obj, writable):
        self.ptr, self.nbytes, self.dtype, self.shape = ptr, nbytes, dtype, shape
        self.obj, self.writable = obj, writable


def buf_of(name, obj):
    """The Buf of obj, tensor name being its name (for messages)."""
    if is_torch(obj):
        return _torch_buf(name, obj)
    if not isinstance(obj, np.ndarray):
        if isinstance(obj, (list, tuple, int, float, str, bytes, dict)) or obj is None:
            raise InvalidArgument("tensor %r: %s is not a tensor (a NumPy array, a PyTorch CPU tensor, or "
                                  "an object with the buffer protocol and a dtype and shape)" % (name, type(obj).__name__))
        try:
            obj = np.asarray(memoryview(obj))
        except TypeError as e:
            raise InvalidArgument("tensor %r: %s has no buffer protocol: %s" % (name, type(obj).__name__, e)) from None
    a = obj
    dt = a.dtype
    st = _NP_TO_ST.get(dt.name)
    if st is None or dt.kind in "OUSVM":
        raise InvalidArgument("tensor %r: dtype %s is not supported (safetensors has %s)"
                              % (name, dt, ", ".join(sorted(_NP_TO_ST))))
    if dt.byteorder == ">" or (dt.byteorder == "=" and sys.byteorder == "big"):
        raise InvalidArgument("tensor %r: dtype %s is big-endian; safetensors stores little-endian "
                              "(a.astype(a.dtype.newbyteorder('<')))" % (name, dt))
    if not a.flags.c_contiguous:
        raise InvalidArgument("tensor %r: the array is not C-contiguous (strides %s): pass "
                              "numpy.ascontiguousarray(a); Shoal never copies behind your back" % (name, a.strides))
    return Buf(a.__array_interface__["data"][0], a.nbytes, st, [int(d) for d in a.shape], a, a.flags.writeable)


def _torch_buf(name, t):
    if t.device.type != "cpu":
        raise InvalidArgument("tensor %r is on %s: pass CPU tensors (t.cpu()); device memory is not "
                              "read through this path" % (name, t.device))
    dn = str(t.dtype).replace("torch.", "")
    st = _TORCH_TO_ST.get(dn)
    if st is None:
        raise InvalidArgument("tensor %r: dtype %s is not supported (safetensors has %s)"
                              % (name, t.dtype, ", ".join(sorted(_TORCH_TO_ST))))
    if not t.is_contiguous():
        raise InvalidArgument("tensor %r: the tensor is not contiguous (strides %s): pass t.contiguous()"
                              % (name, tuple(t.stride())))
    if getattr(t, "is_sparse", False):
        raise InvalidArgument("tensor %r is sparse" % name)
    return Buf(t.data_ptr(), t.numel() * t.element_size(), st, [int(d) for d in t.shape], t, True)


def nbytes(dtype, shape):
    n = ITEMSIZE.get(dtype)
    if n is None:
        raise InvalidArgument("dtype %s has no byte size here" % dtype)
    for d in shape:
        n *= d
    return n


def empty(dtype, shape, framework):
    """A new tensor of safetensors dtype and shape: numpy or torch."""
    if framework == "torch":
        import torch
        return torch.empty(shape, dtype=getattr(torch, _ST_TO_TORCH[dtype]))
    name = _ST_TO_NP[dtype]
    try:
        dt = np.dtype(name)
    except TypeError:
        try:
            import ml_dtypes  # noqa: F401  (registers bfloat16 and float8 with numpy)
            dt = np.dtype(getattr(ml_dtypes, name))
        except (ImportError, AttributeError):
            raise InvalidArgument("dtype %s has no NumPy type here: install ml_dtypes, pass "
                                  "framework='torch', or load into= buffers of your own" % dtype) from None
    n = dt.itemsize * int(np.prod(shape, dtype=np.int64))
    if n < _MMAP_MIN:
        return np.empty(shape, dtype=dt)
    # Large arrays on anonymous mappings of their own (freed with the
    # array): NumPy's allocator asks for transparent huge pages, whose
    # first touch (the kernel compacting memory to find them) made loads
    # 1.5-2x slower on a busy machine (docs/checkpoints.md, "From Python").
    return np.frombuffer(mmap.mmap(-1, n), dtype=dt).reshape(shape)
