"""Part of make gpu-check: restores the checkpoint that `shoal gpu-check`
wrote (its ckpt.json) into CUDA tensors through shoal_gds.py (the C ABI
and ctypes), and checks the bytes against the SHA-256 of the source.
Usage: python3 gpu_check_torch.py DIR/ckpt.json OST_DIR[:OST_DIR...]
The cluster's certificate comes from SHOAL_CERT, SHOAL_KEY and SHOAL_CA
(. DIR/tls/env of the shoal local).
Prints "torch: ok" and exits 0; exits 1 on a mismatch, or when local OST
directories were given and no byte went through cuFile (the path this step
measures did not run); exits 2, "torch: skipped (...)", without torch or
a CUDA device."""

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
        return 2
    if not torch.cuda.is_available():
        print("torch: skipped (torch sees no CUDA device)")
        return 2
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
        info = s.info()
        print("torch: %d tensors, %.2f GB/s through the C ABI (path %s, bytes by path %s, %d fell back)"
              % (len(tensors), n / dt / 1e9, rep.get("path"), rep.get("paths"), rep.get("fallback", 0)))
        print("torch: cuFile now: %s; statistics %s %s" % (info.get("cufile_mode_now"), info.get("cufile_stats"),
                                                          info.get("cufile_stats_error") or ""))
        if got != ck["data_sha256"]:
            print("torch: MISMATCH: sha256 %s, want %s" % (got, ck["data_sha256"]))
            return 1
        paths = rep.get("paths", {})
        if ost_dirs and paths.get("direct", 0) + paths.get("compat", 0) == 0:
            print("torch: FAILED: no byte went through cuFile (path %s; cuFile: %s)" % (rep.get("path"), info.get("cufile_mode")))
            return 1
        print("torch: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
