"""Builds libshoal.so (cmd/libshoal, Go's client with -buildmode=c-shared)
into the package. Needs Go and a C compiler; or set SHOAL_LIB_PREBUILT to
a libshoal.so built already (go build -buildmode=c-shared -o bin/libshoal.so
./cmd/libshoal), which is copied instead."""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


class BuildWithLib(build_py):
    def run(self):
        super().run()
        self.build_lib_so()

    def build_lib_so(self):
        dst = os.path.abspath(os.path.join(self.build_lib, "shoal", "libshoal.so"))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        pre = os.environ.get("SHOAL_LIB_PREBUILT")
        if pre:
            shutil.copyfile(pre, dst)
            return
        if not os.path.isdir(os.path.join(REPO, "cmd", "libshoal")):
            raise SystemExit("shoal: %s is not a Shoal checkout (no cmd/libshoal): install from the "
                             "repository (pip install ./python) or set SHOAL_LIB_PREBUILT" % REPO)
        go = shutil.which("go") or "go"
        env = dict(os.environ, CGO_ENABLED="1")
        subprocess.check_call([go, "build", "-buildmode=c-shared", "-o", dst, "./cmd/libshoal"], cwd=REPO, env=env)
        h = dst[:-3] + ".h"
        if os.path.exists(h):
            os.remove(h)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a platform wheel: it holds a native library


setup(cmdclass={"build_py": BuildWithLib}, distclass=BinaryDistribution)
