"""Part of make gpu-check: restores the checkpoint that `shoal gpu-check`
wrote (its ckpt.json) into CUDA tensors through shoal_gds.py (the C ABI
and ctypes), and checks the bytes against the SHA-256 of the source.
Usage: python3 gpu_check_torch.py DIR/ckpt.json OST_DIR[:OST_DIR...]
Prints "torch: ok" or "torch: skipped (...)"; exits 1 on a mismatch."""

import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shoal_gds  # noqa: E402


def main():
    try:
        import torch
    except ImportError as e:
        print("torch: skipped (no torch: %s)" % e)
        return
    if not torch.cuda.is_available():
        print("torch: skipped (torch sees no CUDA device)")
        return
    ck = json.load(open(sys.argv[1]))
    ost_dirs = [d for d in sys.argv[2].split(":") if d] if len(sys.argv) > 2 else []
    with shoal_gds.Shoal(ck["mds"], backend="cuda", ost_dirs=ost_dirs) as s:
        print("torch: device", s.info())
        torch.cuda.synchronize()
        t0 = time.time()
        tensors, rep = s.load_safetensors(ck["path"])
        torch.cuda.synchronize()
        dt = time.time() - t0
        h = hashlib.sha256()
        for name, t in sorted(tensors.items(), key=lambda kv: kv[1].data_ptr()):
            h.update(t.contiguous().view(torch.uint8).cpu().numpy().tobytes() if t.numel() else b"")
        got = h.hexdigest()
        n = ck["data_len"]
        print("torch: %d tensors, %.2f GB/s through the C ABI (path %s)" % (len(tensors), n / dt / 1e9, rep.get("path")))
        if got != ck["data_sha256"]:
            print("torch: MISMATCH: sha256 %s, want %s" % (got, ck["data_sha256"]))
            sys.exit(1)
        print("torch: ok")


if __name__ == "__main__":
    main()
