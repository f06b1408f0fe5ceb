"""Checkpoints of one job: save, load, list, latest, verify, prune.

A step is a set of safetensors shards, one per rank
(``model-<rank+1>-of-<world>.safetensors``, 5 digits each), plus the
manifest of checksums; see docs/checkpoints.md.
"""

import base64
import json
import os
import re
import threading

import numpy as np

from . import _lib
from ._tensors import buf_of, empty, nbytes
from .errors import InvalidArgument, NotFound, ShoalError, from_json

METADATA_KEY = "shoal.metadata"
_SHARD_RE = re.compile(r"^model-(\d{5})-of-(\d{5})\.safetensors$")


def shard_name(rank, world):
    return "model-%05d-of-%05d.safetensors" % (rank + 1, world)


class SaveResult:
    """The outcome of a save. ``committed``: this call made the step
    visible (with several ranks, only the last rank to finish does;
    the others' parts are durable and wait for it). ``manifest``: the
    checkpoint's manifest (a dict) when committed. ``shards``: this
    rank's manifest entries. ``written_bytes``/``shared_bytes`` count
    this rank's shards."""

    def __init__(self, step, r):
        self.step = step
        self.committed = r["committed"]
        self.manifest = r.get("manifest")
        self.shards = r.get("part") or []
        self.pruned = r.get("pruned") or []
        self.prune_error = r.get("prune_error")
        self.elapsed = r.get("elapsed_s", 0.0)
        self.shared_bytes = sum(s.get("shared_bytes", 0) for s in self.shards)
        self.bytes = sum(s.get("size", 0) for s in self.shards)
        self.written_bytes = self.bytes - self.shared_bytes

    def __repr__(self):
        return "SaveResult(step=%d, committed=%s, bytes=%d, shared_bytes=%d)" % (
            self.step, self.committed, self.bytes, self.shared_bytes)


class PendingSave:
    """An async save: the tensors were copied when ``save`` returned; the
    write and commit go on in the background. ``wait()`` returns the
    SaveResult or raises the save's error."""

    def __init__(self, client, step, pid, stall):
        self.step, self.stall = step, stall
        self._client, self._pid = client, pid
        self._done = threading.Event()
        self._result = self._error = None
        self._thread = threading.Thread(target=self._run, name="shoal-save-%d" % step, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            _, r = _lib.call("shoal_wait", self._client._h, self._pid)
            self._result = SaveResult(self.step, r)
        except BaseException as e:  # handed to wait()
            self._error = e
        finally:
            self._done.set()

    def done(self):
        return self._done.is_set()

    def wait(self, timeout=None):
        if not self._done.wait(timeout):
            raise TimeoutError("save of step %d still running after %ss" % (self.step, timeout))
        if self._error is not None:
            raise self._error
        return self._result


class Loaded(dict):
    """Tensors by name, with ``step``, ``metadata`` (what save was given)
    and ``verified`` (every byte checked against the manifest)."""

    step = None
    metadata = None
    verified = False


class Checkpoints:
    """The checkpoints of one job. Get one with ``client.checkpoints(job)``."""

    def __init__(self, client, job, keep_last=None, keep_every=None):
        if not isinstance(job, str) or not job or job.startswith(".") or "/" in job or "\0" in job:
            raise InvalidArgument("job name %r: a non-empty name without '/', NUL or a leading '.'" % (job,))
        self.client, self.job = client, job
        self.keep_last, self.keep_every = keep_last, keep_every

    # -- save --------------------------------------------------------------

    def save(self, step, tensors, metadata=None, async_=False, rank=0, world=1,
             attempt=None, pin=False, reuse=True, blobs=None, shard=None):
        """Saves ``tensors`` (name -> array) as this rank's shard of
        ``step``. With ``world`` > 1, every rank calls save with its own
        tensors and the step is committed, atomically, when the last rank
        has written; the ranks of one save share ``attempt`` (default from
        TORCHELASTIC_RESTART_COUNT or SLURM_RESTART_COUNT, else the
        world size), and a retry after a rank died should pass a new one.
        ``metadata`` is any JSON value, stored in the shard's header.
        Tensors whose bytes equal the previous step's are shared with it,
        not written (``reuse=False`` writes everything). ``blobs`` (name
        -> bytes-like) are stored as opaque files. ``async_=True`` returns
        a PendingSave once the bytes are copied. ``shard`` names the
        tensors' file (default model-<rank+1>-of-<world>.safetensors); with
        no tensors and some blobs, there is none."""
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise InvalidArgument("step %r: an int >= 0" % (step,))
        if not isinstance(world, int) or not isinstance(rank, int) or world < 1 or not 0 <= rank < world:
            raise InvalidArgument("rank %r of world %r" % (rank, world))
        if not hasattr(tensors, "items"):
            raise InvalidArgument("tensors: a mapping of names to arrays, not %s" % type(tensors).__name__)
        bufs, specs, fw = [], [], "np"
        for name, obj in tensors.items():
            _check_name(name)
            b = buf_of(name, obj)
            if type(obj).__module__.split(".")[0] == "torch":
                fw = "pt"
            specs.append({"name": name, "dtype": b.dtype, "shape": b.shape, "ptr": len(bufs), "len": b.nbytes})
            bufs.append(b)
        md = {"format": fw}
        if metadata is not None:
            try:
                md[METADATA_KEY] = json.dumps(metadata, sort_keys=True)
            except (TypeError, ValueError) as e:
                raise InvalidArgument("metadata is not JSON: %s" % e) from None
        shards = []
        if specs or not blobs:
            shards.append({"name": shard or shard_name(rank, world), "metadata": md, "tensors": specs})
        for bname, data in (blobs or {}).items():
            try:
                mv = memoryview(data).cast("B")
            except TypeError as e:
                raise InvalidArgument("blob %r: %s is not bytes-like (%s)" % (bname, type(data).__name__, e)) from None
            a = np.frombuffer(mv, dtype=np.uint8) if mv.nbytes else np.zeros(0, np.uint8)
            shards.append({"name": bname, "blob": len(bufs), "blob_len": mv.nbytes})
            bufs.append(buf_of(bname, a))  # keeps a (and so data) alive through the call
        req = {"job": self.job, "step": step, "rank": rank, "world": world,
               "attempt": _attempt(attempt, world), "async": bool(async_), "pin": bool(pin),
               "no_reuse": not reuse, "shards": shards}
        ptrs = _lib.pointers([b.ptr for b in bufs])
        rc, r = _lib.call("shoal_save", self.client._h, _lib.enc(req), ptrs, len(bufs))
        if async_:
            return PendingSave(self.client, step, rc, r.get("stall_s", 0.0))
        res = SaveResult(step, r)
        self._retain(res)
        return res

    def _retain(self, res):
        if res.committed and (self.keep_last or self.keep_every):
            res.pruned = self.prune(keep=self.keep_last or 0, every=self.keep_every or 0)

    # -- load --------------------------------------------------------------

    def manifest(self, step=None):
        """The manifest of ``step`` (default the latest) as a dict, with
        its step number in ``manifest['step']``."""
        req = {"job": self.job}
        if step is not None:
            req["step"] = _step(step)
        _, r = _lib.call("shoal_call", self.client._h, b"manifest", _lib.enc(req))
        return r["manifest"]

    def load(self, step=None, into=None, rank=None, framework="numpy", verify=True):
        """Loads ``step`` (default the latest): every tensor, or only
        ``rank``'s shard. With ``into`` (name -> array or tensor of the
        right dtype and shape), exactly those tensors are read straight
        into those buffers, no copy, and returned. Every byte is checked
        against the manifest (``verify=False`` leaves that to the servers'
        block checksums). Returns a Loaded dict."""
        m = self.manifest(step)
        step = m["step"]
        shards = [s for s in m["shards"] if s["kind"] == "safetensors"]
        if rank is not None:
            shards = [s for s in shards if _rank_of(s["name"]) == rank]
            if not shards:
                raise NotFound("%s step %d has no shard of rank %d" % (self.job, step, rank))
        where = {}
        for s in shards:
            for t in s["tensors"]:
                if t["name"] in where:
                    raise InvalidArgument("tensor %r is in shards %s and %s: load one rank's with rank="
                                          % (t["name"], where[t["name"]][0]["name"], s["name"]))
                where[t["name"]] = (s, t)
        out = Loaded()
        out.step = step
        bufs, req_tensors = [], []
        names = list(into.keys()) if into is not None else list(where)
        for name in names:
            if name not in where:
                raise NotFound("%s step %d has no tensor %r" % (self.job, step, name))
            s, t = where[name]
            if into is not None:
                obj = into[name]
                b = buf_of(name, obj)
                if b.dtype != t["dtype"] or b.shape != list(t["shape"]):
                    raise InvalidArgument("into[%r] is %s%s, the checkpoint has %s%s"
                                          % (name, b.dtype, b.shape, t["dtype"], t["shape"]))
                if not b.writable:
                    raise InvalidArgument("into[%r] is read-only" % name)
            else:
                obj = empty(t["dtype"], t["shape"], framework)
                b = buf_of(name, obj)
            if b.nbytes != t["length"] or b.nbytes != nbytes(t["dtype"], t["shape"]):
                raise ShoalError("tensor %r: %d bytes, the manifest says %d" % (name, b.nbytes, t["length"]))
            req_tensors.append({"shard": s["name"], "name": name, "ptr": len(bufs)})
            bufs.append(b)
            out[name] = obj
        out.verified = self._read(step, req_tensors, bufs, verify)
        md = {}
        for s in shards:
            if METADATA_KEY in (s.get("metadata") or {}):
                md = json.loads(s["metadata"][METADATA_KEY])
                break
        out.metadata = md
        return out

    def _read(self, step, req_tensors, bufs, verify=True):
        """Reads tensors ({shard, name, ptr}) into bufs[ptr]; returns
        whether every byte was checked against the manifest."""
        req = {"job": self.job, "step": step, "verify": bool(verify), "tensors": req_tensors}
        _, r = _lib.call("shoal_load", self.client._h, _lib.enc(req), _lib.pointers([b.ptr for b in bufs]),
                         _lib.lengths([b.nbytes for b in bufs]), len(bufs))
        return r["verified"]

    def read_tensors(self, step, items, framework="numpy", verify=True):
        """Reads the tensors named by items, (shard, tensor name) pairs,
        of ``step`` into new arrays; returns them in the same order."""
        m = self.manifest(step)
        ents = {}
        for s in m["shards"]:
            for t in s.get("tensors") or []:
                ents[(s["name"], t["name"])] = t
        objs, bufs, reqs = [], [], []
        for shard, name in items:
            t = ents.get((shard, name))
            if t is None:
                raise NotFound("%s step %d has no tensor %r in shard %r" % (self.job, m["step"], name, shard))
            obj = empty(t["dtype"], t["shape"], framework)
            reqs.append({"shard": shard, "name": name, "ptr": len(bufs)})
            bufs.append(buf_of(name, obj))
            objs.append(obj)
        self._read(m["step"], reqs, bufs, verify)
        return objs

    def load_blob(self, name, step=None):
        """The bytes of blob ``name`` of ``step`` (default the latest),
        checked against the manifest."""
        m = self.manifest(step)
        req = {"job": self.job, "step": m["step"], "blobs": [name]}
        _, r = _lib.call("shoal_load", self.client._h, _lib.enc(req), _lib.pointers([]), _lib.lengths([]), 0)
        return base64.b64decode(r["blobs"][name] or "")

    # -- the rest ----------------------------------------------------------

    def list(self):
        """Committed steps, oldest first: dicts with step, name, time,
        pinned, has_manifest."""
        return self._call("list") or []

    def steps(self):
        return [i["step"] for i in self.list()]

    def latest(self):
        """The newest committed step's number, or None when there is none."""
        try:
            return self._call("latest")["step"]
        except NotFound:
            return None

    def verify(self, step=None):
        """Reads every byte of ``step`` (default the latest) and checks it;
        raises CorruptError naming the first bad shard and tensor, else
        returns the report (dict)."""
        rep = self._call("verify", step=step)
        if not rep["ok"]:
            p = rep["problems"][0]
            info = dict(p)
            info["message"] = "%s step %d: %d problem(s); first: %s" % (
                self.job, rep["info"]["step"], len(rep["problems"]), p["message"])
            info["kind"] = "corrupt" if p["kind"] in ("corrupt", "error") else p["kind"]
            e = from_json(info)
            e.info["report"] = rep
            raise e
        return rep

    def prune(self, keep=None, every=0):
        """Deletes all but the newest ``keep`` steps (and multiples of
        ``every``, and pinned steps); returns the steps deleted."""
        if keep is None and not every:
            raise InvalidArgument("prune: give keep= (and/or every=)")
        return self._call("prune", keep_last=int(keep or 0), keep_every=int(every)) or []

    def delete(self, step, force=False):
        self._call("delete", step=step, force=bool(force))

    def pin(self, step):
        self._call("pin", step=step)

    def unpin(self, step):
        self._call("unpin", step=step)

    def gc(self):
        """Removes staging directories of dead saves (unchanged for 15
        minutes) and unfinished deletes."""
        return self._call("gc")

    def _call(self, op, step=None, **kw):
        req = {"job": self.job}
        if step is not None:
            req["step"] = _step(step)
        req.update(kw)
        _, r = _lib.call("shoal_call", self.client._h, op.encode(), _lib.enc(req))
        return r


def _check_name(name):
    if not isinstance(name, str):
        raise InvalidArgument("tensor name %r: names are str" % (name,))
    if not name or name == "__metadata__" or "\0" in name:
        raise InvalidArgument("tensor name %r is not allowed (empty, NUL or __metadata__)" % (name,))


def _step(step):
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise InvalidArgument("step %r: an int >= 0" % (step,))
    return step


def _rank_of(shard):
    m = _SHARD_RE.match(shard)
    return int(m.group(1)) - 1 if m else None


def _attempt(attempt, world):
    if attempt is not None:
        return str(attempt)
    for v in ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"):
        if os.environ.get(v):
            return "w%d-r%s" % (world, os.environ[v])
    return ""
