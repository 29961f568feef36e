"""Builds the C++ core as the Cython extension naiad._core and generates the protobuf
modules from protos/ before the Python files are collected."""

import importlib.util
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


def _extensions():
    import numpy
    from Cython.Build import cythonize

    core = Extension(
        "naiad._core",
        sources=["pysrc/naiad/_core.pyx", *CORE_SOURCES],
        # numpy's headers: pb_utils.Tensor's fields read arrays through numpy's C API.
        include_dirs=["csrc", numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_23_API_VERSION")],
        libraries=["z"],  # zlib: compressed HTTP answers (csrc/codec/http_compress.cc)
        language="c++",
        extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden"],
    )
    return cythonize([core], language_level=3)


# Editable installs skip build_py, so generate the protobuf modules here as well.
_generate_protos()
setup(ext_modules=_extensions(), cmdclass={"build_py": BuildPyWithProtos})
