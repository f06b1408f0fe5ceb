"""The checkpoint API from Python against a real cluster (run by
cmd/libshoal's TestPython, which starts one and sets SHOAL_MDS, the
certificate variables and SHOAL_LIB)."""

import array
import os
import unittest
import uuid

import numpy as np

import shoal
from shoal import _tensors

if not os.environ.get("SHOAL_MDS"):
    raise unittest.SkipTest("SHOAL_MDS is not set: these tests need a cluster "
                            "(go test ./cmd/libshoal -run TestPython starts one)")

_client = None


def client():
    global _client
    if _client is None:
        _client = shoal.connect()
    return _client


def job(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def rand(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    n = int(np.prod(shape)) * dt.itemsize
    return np.frombuffer(rng.bytes(n), dtype=np.uint8).view(dt).reshape(shape).copy()


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


class RoundTrip(unittest.TestCase):
    def test_every_dtype(self):
        ck = client().checkpoints(job("dtypes"))
        tensors = {}
        for i, dt in enumerate(_tensors.SUPPORTED_NUMPY):
            tensors["t." + dt] = rand((3, 5, 7), dt, seed=i)
            tensors["scalar." + dt] = rand((), dt, seed=100 + i)
            tensors["empty." + dt] = np.zeros((0, 4), dtype=dt)
        try:
            import ml_dtypes
            tensors["t.bfloat16"] = rand((64,), ml_dtypes.bfloat16, seed=7)
            tensors["t.float8_e4m3fn"] = rand((64,), ml_dtypes.float8_e4m3fn, seed=8)
        except ImportError:
            print("\nNOTE: ml_dtypes not installed: BF16/F8 through NumPy not tested here (torch tests cover them)")
        tensors["from.bytearray"] = bytearray(b"\x01\x02\x03\x04")
        tensors["from.array"] = array.array("f", [1.5, -2.25, 3.0])
        r = ck.save(1, tensors, metadata={"epoch": 3, "lr": 0.5, "note": "héllo"})
        self.assertTrue(r.committed)
        self.assertEqual(ck.latest(), 1)
        got = ck.load()
        self.assertEqual(got.step, 1)
        self.assertTrue(got.verified)
        self.assertEqual(got.metadata, {"epoch": 3, "lr": 0.5, "note": "héllo"})
        self.assertEqual(set(got), set(tensors))
        for name, want in tensors.items():
            want = np.asarray(memoryview(want)) if not isinstance(want, np.ndarray) else want
            self.assertTrue(same(got[name], want), name)
        m = ck.manifest(1)
        dtypes = {t["name"]: t["dtype"] for t in m["shards"][0]["tensors"]}
        self.assertEqual(dtypes["t.float32"], "F32")
        self.assertEqual(dtypes["t.bool"], "BOOL")
        self.assertEqual(dtypes["from.array"], "F32")
        self.assertEqual(m["shards"][0]["name"], "model-00001-of-00001.safetensors")

    def test_into_is_zero_copy(self):
        ck = client().checkpoints(job("into"))
        w = rand((256, 128), "float32", seed=1)
        b = rand((128,), "int64", seed=2)
        ck.save(5, {"w": w, "b": b})
        dst = {"w": np.empty_like(w)}
        addr = dst["w"].__array_interface__["data"][0]
        got = ck.load(into=dst)
        self.assertIs(got["w"], dst["w"])
        self.assertEqual(got["w"].__array_interface__["data"][0], addr)
        self.assertEqual(list(got), ["w"])  # only what into names
        self.assertTrue(same(dst["w"], w))
        with self.assertRaises(shoal.InvalidArgument):
            ck.load(into={"w": np.empty((128, 256), np.float32)})  # wrong shape
        with self.assertRaises(shoal.InvalidArgument):
            ck.load(into={"w": np.empty((256, 128), np.float64)})  # wrong dtype
        with self.assertRaises(shoal.InvalidArgument):
            ck.load(into={"w": np.empty((256, 256), np.float32)[:, :128]})  # not contiguous
        ro = np.empty_like(w)
        ro.setflags(write=False)
        with self.assertRaises(shoal.InvalidArgument):
            ck.load(into={"w": ro})
        with self.assertRaises(shoal.NotFound):
            ck.load(into={"nope": np.empty(3)})

    def test_list_latest_verify_prune(self):
        ck = client().checkpoints(job("admin"))
        self.assertIsNone(ck.latest())
        self.assertEqual(ck.list(), [])
        x = rand((1000,), "float32")
        for s in (10, 20, 30, 40):
            x[0] = s
            ck.save(s, {"x": x})
        self.assertEqual(ck.steps(), [10, 20, 30, 40])
        self.assertEqual(ck.latest(), 40)
        rep = ck.verify(20)
        self.assertTrue(rep["ok"])
        self.assertEqual(ck.load(20)["x"][0], 20)
        ck.pin(10)
        self.assertEqual(sorted(ck.prune(keep=1)), [20, 30])
        self.assertEqual(ck.steps(), [10, 40])
        with self.assertRaises(shoal.Exists):
            ck.save(40, {"x": x})
        with self.assertRaises(FileExistsError):  # the built-in class too
            ck.save(40, {"x": x})
        with self.assertRaises(shoal.NotFound):
            ck.load(30)
        with self.assertRaises(FileNotFoundError):
            ck.verify(30)
        with self.assertRaises(shoal.NotFound):
            client().checkpoints(job("none")).load()

    def test_retention_on_save(self):
        ck = client().checkpoints(job("keep"), keep_last=2)
        for s in range(1, 5):
            r = ck.save(s, {"x": np.full(10, s, np.int32)})
        self.assertEqual(r.pruned, [2])
        self.assertEqual(ck.steps(), [3, 4])


class Reuse(unittest.TestCase):
    def test_unchanged_tensors_are_shared(self):
        ck = client().checkpoints(job("reuse"))
        frozen = rand((512, 1024), "float32", seed=3)  # 2 MiB
        head = rand((64, 64), "float32", seed=4)
        r1 = ck.save(100, {"embed": frozen, "head": head})
        self.assertEqual(r1.shared_bytes, 0)
        head2 = rand((64, 64), "float32", seed=5)
        r2 = ck.save(200, {"embed": frozen, "head": head2})
        self.assertGreaterEqual(r2.shared_bytes, frozen.nbytes)
        self.assertLess(r2.written_bytes, frozen.nbytes)
        m = ck.manifest(200)
        self.assertEqual(m["base"], 100)
        shared = {t["name"]: t.get("shared", False) for t in m["shards"][0]["tensors"]}
        self.assertEqual(shared, {"embed": True, "head": False})
        got = ck.load(200)
        self.assertTrue(same(got["embed"], frozen))
        self.assertTrue(same(got["head"], head2))
        r3 = ck.save(300, {"embed": frozen, "head": head2}, reuse=False)
        self.assertEqual(r3.shared_bytes, 0)
        ck.verify(300)


class Async(unittest.TestCase):
    def test_async_copies_then_commits(self):
        ck = client().checkpoints(job("async"))
        x = rand((1024, 1024), "float32", seed=5)  # 4 MiB
        want = x.copy()
        p = ck.save(1, {"x": x}, metadata={"k": 1}, async_=True)
        self.assertIsInstance(p, shoal.PendingSave)
        x[:] = 0  # the caller may reuse its buffers at once
        r = p.wait(timeout=60)
        self.assertTrue(r.committed)
        self.assertTrue(p.done())
        self.assertTrue(same(ck.load(1)["x"], want))
        ps = [ck.save(s, {"x": np.full(100, s, np.int16)}, async_=True) for s in (2, 3)]
        for q in ps:
            q.wait(60)
        self.assertEqual(ck.steps(), [1, 2, 3])
        bad = ck.save(3, {"x": np.zeros(4)}, async_=True)
        with self.assertRaises(shoal.Exists):
            bad.wait(60)

    def test_async_ranks(self):
        ck = client().checkpoints(job("async-ranks"))
        a, b = rand((4096,), "float64", seed=1), rand((4096,), "float64", seed=2)
        wa, wb = a.copy(), b.copy()
        p0 = ck.save(7, {"a": a}, rank=0, world=2, async_=True)
        a[:] = 0
        p1 = ck.save(7, {"b": b}, rank=1, world=2, async_=True)
        b[:] = 0
        rs = [p0.wait(60), p1.wait(60)]
        self.assertEqual(sorted(r.committed for r in rs), [False, True])
        got = ck.load(7)
        self.assertTrue(same(got["a"], wa) and same(got["b"], wb))


class BadInput(unittest.TestCase):
    def test_refused_with_clear_errors(self):
        ck = client().checkpoints(job("bad"))
        ok = np.zeros(4, np.float32)
        cases = [
            ({"c": np.zeros(3, np.complex128)}, "complex128"),
            ({"o": np.array([object()], dtype=object)}, "dtype object"),
            ({"s": np.array(["a", "b"])}, "is not supported"),
            ({"n": np.zeros((8, 8), np.float32)[:, ::2]}, "not C-contiguous"),
            ({"n": np.zeros((8, 8), np.float32).T}, "not C-contiguous"),
            ({"be": np.zeros(4, ">f4")}, "big-endian"),
            ({"": ok}, "not allowed"),
            ({"__metadata__": ok}, "not allowed"),
            ({7: ok}, "names are str"),
            ({"l": [1, 2, 3]}, "is not a tensor"),
            ({"i": 3}, "is not a tensor"),
        ]
        for tensors, msg in cases:
            with self.subTest(msg=msg):
                with self.assertRaises(shoal.InvalidArgument) as cm:
                    ck.save(1, tensors)
                self.assertIn(msg, str(cm.exception))
                self.assertIsInstance(cm.exception, ValueError)
        for kw, msg in [(dict(step=-1), "step"), (dict(step="1"), "step"),
                        (dict(rank=2, world=2), "rank"), (dict(metadata={"x": object()}), "JSON")]:
            with self.subTest(msg=msg):
                args = dict(step=1, tensors={"a": ok})
                args.update(kw)
                with self.assertRaises(shoal.InvalidArgument) as cm:
                    ck.save(**args)
                self.assertIn(msg, str(cm.exception))
        for name in (".hidden", "a/b", ""):
            with self.assertRaises(shoal.InvalidArgument):
                client().checkpoints(name)
        with self.assertRaises(shoal.InvalidArgument):
            ck.save(1, {"a": ok}, blobs={"manifest.json": b"x"})  # refused by Go: the manifest's name
        with self.assertRaises(shoal.InvalidArgument):
            ck.save(1, {"a": ok}, attempt="no spaces")
        self.assertIsNone(ck.latest())  # nothing was committed
        with self.assertRaises(shoal.InvalidArgument):
            ck.prune()

    def test_connect_errors(self):
        with self.assertRaises(shoal.InvalidArgument):
            shoal.connect(mds="", insecure=True) if not os.environ.get("SHOAL_MDS") else \
                shoal.Client("", insecure=True)
        with self.assertRaises(shoal.InvalidArgument) as cm:
            shoal.Client(os.environ["SHOAL_MDS"])  # no certificate, not insecure
        self.assertIn("SHOAL_CERT", str(cm.exception))
        with self.assertRaises(shoal.InvalidArgument):
            shoal.connect("/", insecure=True)  # a path, but no Shoal mount there


class Blobs(unittest.TestCase):
    def test_blob_round_trip(self):
        ck = client().checkpoints(job("blob"))
        ck.save(1, {"a": np.arange(5)}, blobs={"optimizer.bin": b"\x00state\xff" * 100, "empty": b""})
        self.assertEqual(ck.load_blob("optimizer.bin"), b"\x00state\xff" * 100)
        self.assertEqual(ck.load_blob("empty"), b"")
        self.assertEqual(list(ck.load()), ["a"])


class MountInfo(unittest.TestCase):
    def test_mount_source(self):
        import tempfile
        with tempfile.NamedTemporaryFile("w", delete=False) as f:
            f.write("36 35 0:40 / /mnt/sho\\040al rw,nosuid - fuse.shoal shoal:10.0.0.1:7000,10.0.0.2:7000 rw\n"
                    "37 35 0:41 / /mnt rw - ext4 /dev/sda1 rw\n")
        try:
            self.assertEqual(shoal.mount_mds("/mnt/sho al/ckpt", f.name), "10.0.0.1:7000,10.0.0.2:7000")
            self.assertIsNone(shoal.mount_mds("/mnt/other", f.name))
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main()
