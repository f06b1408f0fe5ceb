"""PyTorch: CPU tensors through the API, and Distributed Checkpoint
(shoal.torch). Skipped, loudly, where PyTorch 2.x is not installed."""

import os
import sys
import unittest
import uuid

try:
    import torch
    _WHY = None
except ImportError as e:
    _WHY = "PyTorch is not installed (%s)" % e
_DCP_WHY = _WHY
if _WHY is None:
    try:
        if int(torch.__version__.split(".")[0]) < 2:
            raise ImportError("PyTorch %s is older than 2.0" % torch.__version__)
        import torch.distributed.checkpoint as dcp
    except ImportError as e:
        _DCP_WHY = "no PyTorch 2.x Distributed Checkpoint: %s" % e

if _WHY is not None:
    print("\nSKIP tests.test_torch: %s: PyTorch tensors and shoal.torch (DCP) are NOT tested here" % _WHY,
          file=sys.stderr)
    raise unittest.SkipTest(_WHY)
if _DCP_WHY is not None:
    print("\nSKIP tests.test_torch.DCP: %s: shoal.torch is NOT tested here" % _DCP_WHY, file=sys.stderr)
if not os.environ.get("SHOAL_MDS"):
    raise unittest.SkipTest("SHOAL_MDS is not set: these tests need a cluster")

import shoal  # noqa: E402

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64]
for _n in ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _n):
        DTYPES.append(getattr(torch, _n))


def rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.Size(shape).numel()) * torch.empty((), dtype=dtype).element_size()
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g).view(dtype).reshape(shape).clone()


class Tensors(unittest.TestCase):
    def setUp(self):
        self.client = shoal.connect()
        self.ck = self.client.checkpoints("torch-" + uuid.uuid4().hex[:8])

    def tearDown(self):
        self.client.close()

    def test_every_dtype(self):
        ts = {str(dt): rand((4, 6), dt, i) for i, dt in enumerate(DTYPES)}
        self.ck.save(1, ts)
        got = self.ck.load(framework="torch")
        for k, v in ts.items():
            self.assertEqual(got[k].dtype, v.dtype, k)
            self.assertTrue(torch.equal(got[k].view(torch.uint8), v.view(torch.uint8)), k)
        self.assertEqual(self.ck.manifest()["shards"][0]["metadata"]["format"], "pt")

    def test_into_and_bad_input(self):
        w = rand((64, 32), torch.bfloat16, 1)
        self.ck.save(1, {"w": w})
        dst = torch.empty_like(w)
        got = self.ck.load(into={"w": dst})
        self.assertEqual(got["w"].data_ptr(), dst.data_ptr())
        self.assertTrue(torch.equal(dst.view(torch.uint8), w.view(torch.uint8)))  # random bits: NaNs too
        with self.assertRaises(shoal.InvalidArgument):
            self.ck.save(2, {"t": torch.zeros(8, 8).t()})
        if torch.cuda.is_available():
            with self.assertRaises(shoal.InvalidArgument):
                self.ck.save(2, {"c": torch.zeros(8, device="cuda")})


@unittest.skipIf(_DCP_WHY is not None, _DCP_WHY or "")
class DCP(unittest.TestCase):
    def test_save_load_reuse(self):
        import shoal.torch
        client = shoal.connect()
        job = "dcp-" + uuid.uuid4().hex[:8]
        state = {"embed": rand((256, 64), torch.float32, 1), "head": rand((64, 8), torch.bfloat16, 2),
                 "step": 7, "extra": {"lr": 0.1}}
        dcp.save(state, storage_writer=shoal.torch.StorageWriter(client, job, 100))
        ck = client.checkpoints(job)
        self.assertEqual(ck.steps(), [100])
        ck.verify(100)
        state2 = dict(state, head=rand((64, 8), torch.bfloat16, 3))
        dcp.save(state2, storage_writer=shoal.torch.StorageWriter(client, job, 200))
        m = ck.manifest(200)
        self.assertEqual(m["base"], 100)
        self.assertGreaterEqual(m["shared_bytes"], state["embed"].numel() * 4)  # embed unchanged: shared
        into = {"embed": torch.zeros(256, 64), "head": torch.zeros(64, 8, dtype=torch.bfloat16),
                "step": 0, "extra": {"lr": 0.0}}
        dcp.load(into, storage_reader=shoal.torch.StorageReader(client, job))  # the latest
        self.assertTrue(torch.equal(into["embed"], state["embed"]))
        self.assertTrue(torch.equal(into["head"], state2["head"]))
        self.assertEqual(into["step"], 7)
        self.assertEqual(into["extra"], {"lr": 0.1})
        client.close()


if __name__ == "__main__":
    unittest.main()
