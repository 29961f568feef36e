"""Builds the C++ core as the Cython extension naiad._core and generates the protobuf
modules from protos/ before the Python files are collected."""

import importlib.util
import os
import pathlib

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent
CORE_SOURCES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").glob("*/*.cc"))


def _generate_protos():
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "tools" / "gen_protos.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate(ROOT)


class BuildPyWithProtos(build_py):
    def run(self):
        _generate_protos()
        super().run()


def _require_openssl():
    """TLS (csrc/tls/) is built in: without OpenSSL's headers the build stops here,
    saying what to install, rather than at a compiler error."""
    import sysconfig

    dirs = [sysconfig.get_paths()["include"], "/usr/include", "/usr/local/include"]
    dirs += os.environ.get("CPATH", "").split(os.pathsep)
    if not any(d and os.path.exists(os.path.join(d, "openssl", "ssl.h")) for d in dirs):
        raise SystemExit(
            "error: Naiad's core needs the OpenSSL 3 headers (openssl/ssl.h) for TLS: "
            "install libssl-dev (Debian/Ubuntu) or openssl-devel (Fedora/RHEL), or point "
            "CPATH at their include directory"
        )


def _extensions():
    import numpy
    from Cython.Build import cythonize

    _require_openssl()

    core = Extension(
        "naiad._core",
        sources=["pysrc/naiad/_core.pyx", *CORE_SOURCES],
        # numpy's headers: pb_utils.Tensor's fields read arrays through numpy's C API.
        include_dirs=["csrc", numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_23_API_VERSION")],
        # zlib: compressed HTTP answers (csrc/codec/http_compress.cc); OpenSSL: TLS
        # (csrc/tls/tls_stream.cc).
        libraries=["z", "ssl", "crypto"],
        language="c++",
        extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden"],
    )
    return cythonize([core], language_level=3)


# Editable installs skip build_py, so generate the protobuf modules here as well.
_generate_protos()
setup(ext_modules=_extensions(), cmdclass={"build_py": BuildPyWithProtos})
