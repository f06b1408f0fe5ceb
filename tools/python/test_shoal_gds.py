"""Checks shoal_gds.py against a running cluster on the host backend
(no GPU, no torch): python3 test_shoal_gds.py MDS PATH SIZE SHA256 ST_PATH ST_SHA256 [OST_DIRS]
The cluster runs mutual TLS; SHOAL_CERT, SHOAL_KEY and SHOAL_CA name the
client's certificate.

PATH is a plain file of SIZE bytes whose SHA-256 is SHA256; ST_PATH a
safetensors shard whose data region hashes to ST_SHA256. Prints
"python: ok" on success."""

import ctypes
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shoal_gds  # noqa: E402


def main():
    mds, path, size, want, st_path, st_want = sys.argv[1:7]
    ost_dirs = sys.argv[7].split(":") if len(sys.argv) > 7 and sys.argv[7] else []
    size = int(size)
    try:
        shoal_gds.Shoal(mds, backend="nope")
        raise SystemExit("python: a bad backend was accepted")
    except shoal_gds.ShoalError as e:
        assert "backend" in str(e), e
    # The certificate: from the environment as the library saw it at
    # load, overridden by os.environ now, or given explicitly.
    files = {k: os.environ.pop(k) for k in ("SHOAL_CERT", "SHOAL_KEY", "SHOAL_CA")}
    try:
        shoal_gds.Shoal(mds, backend="host")
        raise SystemExit("python: opened without a certificate")
    except shoal_gds.ShoalError as e:
        assert "no certificate" in str(e), e
    try:
        shoal_gds.Shoal(mds, backend="host", cert=files["SHOAL_CERT"], insecure=True)
        raise SystemExit("python: insecure with a certificate accepted")
    except shoal_gds.ShoalError as e:
        assert "choose one" in str(e), e
    with shoal_gds.Shoal(mds, backend="host", cert=files["SHOAL_CERT"],
                         key=files["SHOAL_KEY"], ca=files["SHOAL_CA"]) as s:
        s.header(st_path)
    os.environ.update(files)
    with shoal_gds.Shoal(mds, backend="host", ost_dirs=ost_dirs) as s:
        assert s.info()["kind"] == "host", s.info()
        buf = (ctypes.c_ubyte * size)()
        rep = s.read_into(path, ctypes.addressof(buf), size)
        got = hashlib.sha256(bytes(buf)).hexdigest()
        assert got == want, (got, want)
        assert rep["bytes"] == size and rep["path"] == "host", rep
        if ost_dirs:
            assert rep["local"] > 0, rep
        try:
            s.read_into("/no/such/file", ctypes.addressof(buf), 10)
            raise SystemExit("python: reading a missing file succeeded")
        except shoal_gds.ShoalError:
            pass
        h = s.header(st_path)
        assert h["data_start"] % 4096 == 0 and h["tensors"], h
        n = h["data_len"]
        data = (ctypes.c_ubyte * n)()
        rep = s.read_into(st_path, ctypes.addressof(data), n, h["data_start"])
        got = hashlib.sha256(bytes(data)).hexdigest()
        assert got == st_want, (got, st_want)
        names = [t["name"] for t in h["tensors"]]
        print("python: ok: %d tensors %s, report %s" % (len(names), names[:3], rep))


if __name__ == "__main__":
    main()
