"""Generate the Python protobuf/gRPC modules of naiad.protos from protos/*.proto.

protoc writes `import model_config_pb2` into the modules it generates, which only works
with the output folder on sys.path. We rewrite those imports to `from naiad.protos import
...` so the modules work as part of the package, and keep the .proto files where they are
(their names in the descriptor pool stay "model_config.proto" and "grpc_service.proto",
as in Triton).

Usage: python tools/gen_protos.py [REPO_ROOT]   (setup.py calls generate() at build time)
"""

from __future__ import annotations

import pathlib
import re
import sys

PROTOS = ("model_config.proto", "grpc_service.proto")
OUT_PACKAGE = "naiad.protos"
# The generated modules that may appear in a generated `import X as Y` line.
_MODULES = ("model_config_pb2", "grpc_service_pb2", "grpc_service_pb2_grpc")
_IMPORT = re.compile(rf"^import ({'|'.join(_MODULES)}) as (\w+)$", re.MULTILINE)


def generate(repo_root: pathlib.Path) -> None:
    """Write pysrc/naiad/protos/*_pb2.py and *_pb2_grpc.py; raise RuntimeError on failure."""
    # Imported here so that importing this module (e.g. from setup.py) never needs grpc_tools.
    from grpc_tools import protoc

    repo_root = pathlib.Path(repo_root).resolve()
    proto_dir = repo_root / "protos"
    out_dir = repo_root / "pysrc" / "naiad" / "protos"
    out_dir.mkdir(parents=True, exist_ok=True)
    # protoc needs the well-known types (none used today) from grpc_tools' bundled include dir.
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{proto_dir}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(proto_dir / name) for name in PROTOS),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {', '.join(PROTOS)} in {proto_dir}")
    # The grpc plugin also writes an empty model_config_pb2_grpc.py (no services there).
    (out_dir / "model_config_pb2_grpc.py").unlink(missing_ok=True)
    for path in sorted(out_dir.glob("*_pb2*.py")):
        _fix_imports(path)


def _fix_imports(path: pathlib.Path) -> None:
    text = path.read_text()
    fixed = _IMPORT.sub(rf"from {OUT_PACKAGE} import \1 as \2", text)
    if fixed != text:
        path.write_text(fixed)


if __name__ == "__main__":
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1]
    generate(root)
