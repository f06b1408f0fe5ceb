"""Shoal from Python: atomic, verified, deduplicated checkpoints.

    import shoal
    client = shoal.connect()                  # $SHOAL_MDS and certificates
    ckpt = client.checkpoints("llama")
    ckpt.save(1200, model_state, metadata={"epoch": 3})
    state = ckpt.load()                       # the latest step, every byte checked

The native part is libshoal (cmd/libshoal, Go's client built with
-buildmode=c-shared), loaded with ctypes. See docs/checkpoints.md.
"""

import os

from . import _lib
from .checkpoints import Checkpoints, Loaded, PendingSave, SaveResult, shard_name
from .errors import (Canceled, CorruptError, Exists, InvalidArgument, NoSpace, NotFound,
                     PermissionDenied, ShoalError, Unavailable)

__all__ = ["connect", "Client", "Checkpoints", "Loaded", "PendingSave", "SaveResult", "shard_name",
           "ShoalError", "NotFound", "CorruptError", "PermissionDenied", "Exists",
           "InvalidArgument", "NoSpace", "Unavailable", "Canceled"]

__version__ = "0.1.0"

_MOUNTINFO = "/proc/self/mountinfo"


def mount_mds(path, mountinfo=_MOUNTINFO):
    """The MDS addresses of the Shoal mount holding path (its source is
    shoal:ADDR, as `shoal mount` and `shoal local` set it), or None."""
    p = os.path.realpath(path)
    best = None
    try:
        with open(mountinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        pre, sep, post = line.partition(" - ")
        if not sep:
            continue
        a, b = pre.split(), post.split()
        if len(a) < 5 or len(b) < 2 or b[0] != "fuse.shoal" or not b[1].startswith("shoal:"):
            continue
        point = a[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
        if p == point or p.startswith(point.rstrip("/") + "/"):
            if best is None or len(point) > len(best[0]):
                best = (point, b[1][len("shoal:"):])
    return best[1] if best else None


class Client:
    """A connection to a cluster. Close it (or use ``with``) to wait for
    async saves and release it."""

    def __init__(self, mds, cert=None, key=None, ca=None, insecure=False, root="/ckpt",
                 name=None, parallelism=0):
        opts = {"mds": mds, "cert": cert or "", "key": key or "", "ca": ca or "",
                "insecure": bool(insecure), "root": root, "name": name or "python",
                "parallelism": int(parallelism)}
        self.mds, self.root = mds, root
        self._h, _ = _lib.call("shoal_open", _lib.enc(opts), out=False)

    def checkpoints(self, job, keep_last=None, keep_every=None):
        """The checkpoints of ``job``; ``keep_last``/``keep_every``
        prune after every committed save."""
        return Checkpoints(self, job, keep_last=keep_last, keep_every=keep_every)

    def jobs(self):
        _, r = _lib.call("shoal_call", self._h, b"jobs", b"{}")
        return r or []

    def close(self):
        if self._h:
            h, self._h = self._h, 0
            _lib.call("shoal_close", h, out=False)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def connect(mds=None, *, cert=None, key=None, ca=None, insecure=None, root="/ckpt", name=None,
            parallelism=0):
    """Connects to a cluster. ``mds`` is the MDS address (a group's
    addresses comma-separated) or the path of a Shoal mount (or anything
    under one), whose cluster is used; default ``$SHOAL_MDS``. The
    certificate comes from ``cert``/``key``/``ca`` or ``$SHOAL_CERT``,
    ``$SHOAL_KEY``, ``$SHOAL_CA``, as the CLI takes them (``. DIR/env``
    after ``shoal local``); ``insecure=True`` or ``$SHOAL_INSECURE=1`` is
    plaintext. ``root`` is the checkpoint root (default /ckpt)."""
    env = os.environ
    if mds is not None and (os.sep in mds or os.path.isdir(mds)) and os.path.exists(mds):
        addr = mount_mds(mds)
        if addr is None:
            raise InvalidArgument("%s is not on a Shoal mount (no fuse.shoal mount with a shoal:ADDR "
                                  "source holds it)" % mds)
        mds = addr
    mds = mds or env.get("SHOAL_MDS", "")
    if not mds:
        raise InvalidArgument("no cluster: pass mds= (an address or a mount path) or set SHOAL_MDS")
    explicit = cert is not None or key is not None or ca is not None
    if insecure is None:
        insecure = (not explicit) and env.get("SHOAL_INSECURE") == "1"
    if not insecure and not explicit:
        cert, key, ca = env.get("SHOAL_CERT"), env.get("SHOAL_KEY"), env.get("SHOAL_CA")
    return Client(mds, cert=cert, key=key, ca=ca, insecure=insecure, root=root, name=name,
                  parallelism=parallelism)
