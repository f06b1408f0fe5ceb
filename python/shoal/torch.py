"""PyTorch Distributed Checkpoint (DCP) on Shoal, for PyTorch 2.x.

    import torch.distributed.checkpoint as dcp
    import shoal, shoal.torch

    client = shoal.connect()
    dcp.save(state_dict, storage_writer=shoal.torch.StorageWriter(client, "llama", step))
    dcp.load(state_dict, storage_reader=shoal.torch.StorageReader(client, "llama"))  # latest

A DCP save is one Shoal checkpoint, committed atomically: every rank
writes its tensors (one safetensors shard per rank, each tensor chunk a
tensor) and its byte items (blobs) as its part of a save by W+1 ranks; the
coordinator's finish() adds DCP's metadata (the blob ``.metadata``) as the
last part, which commits the step. Every tensor is checked against the
manifest on load, and tensors unchanged since the step before are shared
with it, not written. The coordinator draws the attempt name in
prepare_global_plan, so a retried save never mixes with a dead one.
"""

import dataclasses
import io
import pickle
import uuid

import torch.distributed as dist
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.distributed.checkpoint.storage import StorageReader as _Reader
from torch.distributed.checkpoint.storage import StorageWriter as _Writer
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from .checkpoints import shard_name

METADATA_BLOB = ".metadata"


def _rank_world():
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _parse_id(checkpoint_id):
    """checkpoint_id "JOB/STEP" (or shoal://JOB/STEP) -> (job, step)."""
    s = str(checkpoint_id)
    if s.startswith("shoal://"):
        s = s[len("shoal://"):]
    job, _, step = s.rpartition("/")
    if not job or not step.isdigit():
        raise ValueError("checkpoint_id %r: want JOB/STEP" % (checkpoint_id,))
    return job, int(step)


def _tensor_name(index):
    off = ",".join(str(o) for o in (index.offset or ()))
    return "%s@%s" % (index.fqn, off) if off else index.fqn


class StorageWriter(_Writer):
    """Writes a DCP checkpoint as step ``step`` of ``job``."""

    def __init__(self, client, job=None, step=None, reuse=True):
        super().__init__()
        self.client, self.job, self.step, self.reuse = client, job, step, reuse
        self._attempt = None
        self.rank, self.world = _rank_world()
        self.is_coordinator = self.rank == 0

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.job, self.step = _parse_id(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        try:
            _parse_id(checkpoint_id)
            return str(checkpoint_id).startswith("shoal://")
        except ValueError:
            return False

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        self.is_coordinator = is_coordinator
        self.rank, self.world = _rank_world()
        if "rank" in kwargs:
            self.rank = kwargs["rank"]
        if self.job is None or self.step is None:
            raise ValueError("shoal.torch.StorageWriter needs job and step (or checkpoint_id='shoal://JOB/STEP')")

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        attempt = "dcp-" + uuid.uuid4().hex[:12]
        return [dataclasses.replace(p, storage_data=attempt) for p in plans]

    def _ckpt(self):
        return self.client.checkpoints(self.job)

    def write_data(self, plan, planner):
        attempt = self._attempt = plan.storage_data
        shard = shard_name(self.rank, self.world)
        tensors, blobs, results = {}, {}, []
        for i, item in enumerate(plan.items):
            data = planner.resolve_data(item)
            if item.type == WriteItemType.BYTE_IO:
                b = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
                name = "__%d_%d.bin" % (self.rank, i)
                blobs[name] = b
                results.append(WriteResult(index=item.index, size_in_bytes=len(b), storage_data={"blob": name}))
            else:
                t = data.detach()
                if t.device.type != "cpu":
                    t = t.cpu()
                t = t.contiguous()
                name = _tensor_name(item.index)
                tensors[name] = t
                results.append(WriteResult(index=item.index, size_in_bytes=t.numel() * t.element_size(),
                                           storage_data={"shard": shard, "tensor": name}))
        # One rank of world+1: the coordinator's finish() is the last part.
        self._ckpt().save(self.step, tensors, rank=self.rank, world=self.world + 1, attempt=attempt,
                          shard=shard, blobs=blobs, reuse=self.reuse)
        fut = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata, results):
        md = dict(metadata.storage_data or {})
        for rs in results:
            for r in rs:
                md[r.index] = r.storage_data
        metadata.storage_data = md
        # The coordinator wrote its own part in write_data, so it knows the
        # attempt prepare_global_plan drew; its finish is the last part.
        self._ckpt().save(self.step, {}, rank=self.world, world=self.world + 1, attempt=self._attempt,
                          blobs={METADATA_BLOB: pickle.dumps(metadata)})

    def storage_meta(self):
        return None


class StorageReader(_Reader):
    """Reads step ``step`` (default the latest) of ``job`` for DCP."""

    def __init__(self, client, job=None, step=None, verify=True):
        super().__init__()
        self.client, self.job, self.step, self.verify = client, job, step, verify

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.job, self.step = _parse_id(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return StorageWriter.validate_checkpoint_id(checkpoint_id)

    def _ckpt(self):
        return self.client.checkpoints(self.job)

    def read_metadata(self, *args, **kwargs):
        if self.step is None:
            self.step = self._ckpt().latest()
            if self.step is None:
                from .errors import NotFound
                raise NotFound("job %s has no checkpoint" % self.job)
        return pickle.loads(self._ckpt().load_blob(METADATA_BLOB, self.step))

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        self.storage_data = metadata.storage_data

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        ck = self._ckpt()
        tensor_reqs, keys = [], []
        for req in plan.items:
            sd = self.storage_data[req.storage_index]
            if req.type == LoadItemType.BYTE_IO:
                planner.load_bytes(req, io.BytesIO(ck.load_blob(sd["blob"], self.step)))
            else:
                tensor_reqs.append(req)
                keys.append((sd["shard"], sd["tensor"]))
        # Distinct stored tensors, read once each (checked), then narrowed.
        uniq = list(dict.fromkeys(keys))
        got = dict(zip(uniq, ck.read_tensors(self.step, uniq, framework="torch", verify=self.verify)))
        for req, key in zip(tensor_reqs, keys):
            t = got[key]
            for dim, (off, n) in enumerate(zip(req.storage_offsets, req.lengths)):
                t = t.narrow(dim, off, n)
            target = planner.resolve_tensor(req).detach()
            if target.size() != t.size():
                raise ValueError("tensor %s: stored %s, wanted %s" % (req.storage_index, tuple(t.size()),
                                                                       tuple(target.size())))
            target.copy_(t)
            planner.commit_tensor(req, target)
        fut = Future()
        fut.set_result(None)
        return fut


__all__ = ["StorageWriter", "StorageReader"]
