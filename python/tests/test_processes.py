"""Saves from several processes: sharded saves committed by the last
rank, and saves killed half way (SHOAL_LIBSHOAL_CRASH_AT makes libshoal
SIGKILL its own process at a named point of the save)."""

import json
import os
import signal
import subprocess
import sys
import unittest
import uuid

import numpy as np

import shoal

if not os.environ.get("SHOAL_MDS"):
    raise unittest.SkipTest("SHOAL_MDS is not set: these tests need a cluster "
                            "(go test ./cmd/libshoal -run TestPython starts one)")

RANK = r"""
import json, sys
import numpy as np
import shoal
job, step, rank, world, mib, attempt = sys.argv[1:7]
step, rank, world, mib = int(step), int(rank), int(world), float(mib)
x = (np.arange(int(mib * (1 << 20)) // 4, dtype=np.float32) + rank * 1000)
with shoal.connect() as c:
    r = c.checkpoints(job).save(step, {"x.%d" % rank: x, "bias": np.full(16, rank, np.int32)},
                                rank=rank, world=world, attempt=attempt or None, metadata={"rank": rank})
print(json.dumps({"committed": r.committed, "shared": r.shared_bytes}))
"""


def start(job, step, rank, world, mib=0.25, attempt="", crash=None):
    env = dict(os.environ)
    if crash:
        env["SHOAL_LIBSHOAL_CRASH_AT"] = crash
    return subprocess.Popen([sys.executable, "-c", RANK, job, str(step), str(rank), str(world), str(mib), attempt],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)


def finish(p, want_rc=0):
    out, err = p.communicate(timeout=120)
    if p.returncode != want_rc:
        raise AssertionError("rank process exited %s, want %s:\n%s%s" % (p.returncode, want_rc, out, err))
    return json.loads(out) if want_rc == 0 else None


def expect_x(rank, mib=0.25):
    return np.arange(int(mib * (1 << 20)) // 4, dtype=np.float32) + rank * 1000


class Sharded(unittest.TestCase):
    def setUp(self):
        self.client = shoal.connect()
        self.job = "ranks-" + uuid.uuid4().hex[:8]
        self.ck = self.client.checkpoints(self.job)

    def tearDown(self):
        self.client.close()

    def test_committed_when_the_last_rank_writes(self):
        ps = [start(self.job, 10, r, 3) for r in (0, 1)]
        outs = [finish(p) for p in ps]
        self.assertEqual([o["committed"] for o in outs], [False, False])
        self.assertIsNone(self.ck.latest())  # two of three ranks: nothing visible
        out = finish(start(self.job, 10, 2, 3))
        self.assertTrue(out["committed"])
        self.assertEqual(self.ck.latest(), 10)
        m = self.ck.manifest(10)
        self.assertEqual([s["name"] for s in m["shards"]],
                         [shoal.shard_name(r, 3) for r in range(3)])
        for r in range(3):
            got = self.ck.load(rank=r)
            self.assertEqual(sorted(got), sorted(["x.%d" % r, "bias"]))
            self.assertTrue(np.array_equal(got["x.%d" % r], expect_x(r)))
            self.assertEqual(got.metadata, {"rank": r})
            self.assertTrue(got.verified)
        with self.assertRaises(shoal.InvalidArgument):
            self.ck.load()  # "bias" is in every rank's shard
        self.ck.verify(10)

    def test_all_ranks_at_once_and_reuse(self):
        world = 4
        outs = [finish(p) for p in [start(self.job, 1, r, world) for r in range(world)]]
        self.assertEqual(sum(o["committed"] for o in outs), 1, outs)
        outs = [finish(p) for p in [start(self.job, 2, r, world) for r in range(world)]]
        self.assertEqual(sum(o["committed"] for o in outs), 1, outs)
        self.assertTrue(all(o["shared"] > 0 for o in outs), outs)  # unchanged: shared with step 1
        self.assertEqual(self.ck.steps(), [1, 2])
        m = self.ck.manifest(2)
        self.assertEqual(m["base"], 1)
        self.assertEqual(m["shared_bytes"], m["bytes"])
        got = self.ck.load(2, rank=3)
        self.assertTrue(np.array_equal(got["x.3"], expect_x(3)))

    def test_rank_killed_half_way(self):
        p0 = start(self.job, 5, 0, 2)
        p1 = start(self.job, 5, 1, 2, mib=20, crash="write:2")  # dies after 16 MiB of its shard
        self.assertFalse(finish(p0)["committed"])
        finish(p1, want_rc=-signal.SIGKILL)
        self.assertIsNone(self.ck.latest())
        self.assertEqual(self.ck.list(), [])
        # The job restarts rank 1 (same attempt): it clears what it left and commits.
        out = finish(start(self.job, 5, 1, 2, mib=20))
        self.assertTrue(out["committed"])
        self.assertTrue(np.array_equal(self.ck.load(5, rank=1)["x.1"], expect_x(1, mib=20)))

    def test_committer_killed(self):
        self.assertFalse(finish(start(self.job, 6, 0, 2))["committed"])
        finish(start(self.job, 6, 1, 2, crash="commit"), want_rc=-signal.SIGKILL)  # manifest written, no rename
        self.assertEqual(self.ck.list(), [])
        self.assertTrue(finish(start(self.job, 6, 1, 2))["committed"])  # restarted: clears the dead commit
        self.assertEqual(self.ck.steps(), [6])
        self.ck.verify(6)


SINGLE = r"""
import sys
import numpy as np
import shoal
job, step = sys.argv[1], int(sys.argv[2])
with shoal.connect() as c:
    c.checkpoints(job).save(step, {"big": np.ones(5 << 20, np.float32), "small": np.arange(10)})
print("saved")
"""


class Killed(unittest.TestCase):
    def test_save_killed_half_way_leaves_no_step(self):
        job = "killed-" + uuid.uuid4().hex[:8]
        with shoal.connect() as c:
            ck = c.checkpoints(job)
            ck.save(1, {"big": np.zeros(10, np.float32)})
            for crash in ("write:2", "close", "commit"):
                with self.subTest(crash=crash):
                    env = dict(os.environ, SHOAL_LIBSHOAL_CRASH_AT=crash)
                    p = subprocess.run([sys.executable, "-c", SINGLE, job, "2"], env=env,
                                       capture_output=True, text=True, timeout=120)
                    self.assertEqual(p.returncode, -signal.SIGKILL, p.stdout + p.stderr)
                    self.assertIn("SHOAL_LIBSHOAL_CRASH_AT", p.stderr)
                    self.assertEqual(ck.steps(), [1])
                    self.assertEqual(ck.latest(), 1)
            p = subprocess.run([sys.executable, "-c", SINGLE, job, "2"], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(ck.steps(), [1, 2])
            self.assertEqual(float(ck.load(2)["big"].sum()), float(5 << 20))


if __name__ == "__main__":
    unittest.main()
