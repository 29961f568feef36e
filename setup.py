"""Builds the C++ core as the Cython extension naiad._core and generates the protobuf
modules from protos/ before the Python files are collected."""

import hashlib
import importlib.util
import os
import pathlib
import platform
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent
CYTHON_OUTPUT = "pysrc/naiad/_core.cpp"
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


def _dependencies_changed(obj: str) -> bool:
    """Whether `obj` must be compiled again: it is missing, or a file of this tree that it
    was compiled from (its source and the headers gcc's -MMD listed) is newer. Files outside
    the tree (Python's and numpy's headers, which pip's build environment moves on each
    build) are covered by the object folder's key instead."""
    try:
        built = os.stat(obj).st_mtime_ns
        with open(obj + ".d") as listing:
            text = listing.read()
    except OSError:
        return True
    for dep in text.replace("\\\n", " ").partition(":")[2].split():
        path = (ROOT / dep).resolve()
        if ROOT not in path.parents:
            continue
        try:
            if os.stat(path).st_mtime_ns > built:
                return True
        except OSError:
            return True
    return False


class BuildCoreIncrementally(build_ext):
    """Compiles the core's sources into build/core-objects/ (kept between builds: pip's own
    build folder is new each time), only those whose object is stale, as many at a time as
    there are cores: a rebuild after a one-file change compiles one file, and a fresh
    build runs the large Cython output beside the csrc/ files."""

    def build_extension(self, ext):
        compiler = self.compiler
        import numpy
        from Cython import __version__ as cython_version

        key = repr(
            (
                compiler.compiler_so,
                ext.extra_compile_args,
                ext.define_macros,
                ext.include_dirs[:1],
                platform.python_version(),
                numpy.__version__,
                cython_version,
            )
        )
        self.build_temp = str(
            ROOT / "build" / "core-objects" / hashlib.sha256(key.encode()).hexdigest()[:16]
        )
        compile_one = compiler._compile

        def compile_stale(
            sources,
            output_dir=None,
            macros=None,
            include_dirs=None,
            debug=False,
            extra_preargs=None,
            extra_postargs=None,
            depends=None,
        ):
            _, objects, extra, pp_opts, build = compiler._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs
            )
            cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)
            stale = [obj for obj in objects if _dependencies_changed(obj)]
            # The largest first (the Cython output), so the others compile beside it.
            stale.sort(key=lambda obj: -os.path.getsize(build[obj][0]))

            def compile_into_place(obj):
                source, suffix = build[obj]
                partial = obj + ".partial.o"
                compile_one(
                    partial, source, suffix, cc_args, [*extra, "-MMD", "-MF", obj + ".d"], pp_opts
                )
                # A compile that was stopped half way leaves no object that looks built.
                os.replace(partial, obj)

            jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
            with ThreadPoolExecutor(max(1, jobs)) as pool:
                list(pool.map(compile_into_place, stale))
            return objects

        compiler.compile = compile_stale
        super().build_extension(ext)


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
    if _cython_output_current():
        # cythonize would write it again: it counts numpy's .pxd, which pip's build
        # environment installs anew on every build, as newer than the output.
        core.sources[0] = CYTHON_OUTPUT
        return [core]
    return cythonize([core], language_level=3)


def _cython_output_current() -> bool:
    """Whether pysrc/naiad/_core.cpp was written by this Cython after every .pyx/.pxd/.pxi
    of the tree last changed."""
    from Cython import __version__ as cython_version

    output = ROOT / CYTHON_OUTPUT
    try:
        written = output.stat().st_mtime_ns
        with open(output) as text:
            first_line = text.readline()
    except OSError:
        return False
    if first_line.strip() != f"/* Generated by Cython {cython_version} */":
        return False
    inputs = [p for pattern in ("*.pyx", "*.pxd", "*.pxi") for p in (ROOT / "pysrc").rglob(pattern)]
    return all(p.stat().st_mtime_ns < written for p in inputs)


# Editable installs skip build_py, so generate the protobuf modules here as well.
_generate_protos()
setup(
    ext_modules=_extensions(),
    cmdclass={"build_py": BuildPyWithProtos, "build_ext": BuildCoreIncrementally},
)
