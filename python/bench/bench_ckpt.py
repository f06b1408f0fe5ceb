"""Save and load of N MiB of tensors through the Python package, timed.

Run by cmd/libshoal's TestPythonBench beside the same through the Go API
(SHOAL_PYBENCH_MIB=1024 go test -count=1 -v -run TestPythonBench
./cmd/libshoal), or on its own against any cluster (SHOAL_MDS and the
certificate variables set):

    python3 python/bench/bench_ckpt.py --mib 1024 --tensor-mib 16

Prints one JSON object: MiB/s of save (every byte written, reuse off),
load (into new arrays) and load into preallocated arrays (best of
--repeat runs each).
"""

import argparse
import json
import time
import uuid

import numpy as np

import shoal


def tensors(mib, tensor_mib, seed):
    rng = np.random.default_rng(seed)
    n = max(1, mib // tensor_mib)
    return {"layers.%03d.weight" % i: np.frombuffer(rng.bytes(tensor_mib << 20), dtype=np.float32).copy()
            for i in range(n)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--tensor-mib", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--job", default="pybench-" + uuid.uuid4().hex[:8])
    a = ap.parse_args()
    c = shoal.connect()
    ck = c.checkpoints(a.job)
    t = tensors(a.mib, a.tensor_mib, 1)
    size = sum(x.nbytes for x in t.values())
    ck.save(0, {"warm": np.zeros(1 << 20, np.float32)})  # dial every OST
    best = {"save": 0.0, "load": 0.0, "load_into": 0.0}
    dst = {k: np.empty_like(v) for k, v in t.items()}
    for r in range(a.repeat):
        step = r + 1
        t0 = time.perf_counter()
        ck.save(step, t, reuse=False)
        best["save"] = max(best["save"], size / (time.perf_counter() - t0) / (1 << 20))
        t0 = time.perf_counter()
        got = ck.load(step)
        best["load"] = max(best["load"], size / (time.perf_counter() - t0) / (1 << 20))
        assert all(got[k].tobytes() == t[k].tobytes() for k in ("layers.000.weight",))
        del got
        t0 = time.perf_counter()
        ck.load(step, into=dst)
        best["load_into"] = max(best["load_into"], size / (time.perf_counter() - t0) / (1 << 20))
        ck.delete(step)
    print(json.dumps({"bytes": size, "tensors": len(t), "MiB/s": best}), flush=True)
    c.close()


if __name__ == "__main__":
    main()
