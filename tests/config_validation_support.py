"""Models for the differential tests of configs refused at poll or at version load, over
HTTP (tests/test_config_validation_triton.py) and gRPC (tests/grpc_clients/
test_grpc_config_validation_triton.py): the repository, the answers Triton 2.51 gives."""

from __future__ import annotations

from pathlib import Path

from checksum_support import WRONG_MD5, checksum, write_model

BAD_DIMS = "dimension must be integer >= 1, or -1 to indicate a variable-size dimension"
# The identity model's input with a dimension no config may have.
_BAD_INPUT = 'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -2 ] } ]'


def version_error(name: str, versions: list[int], reason: str) -> str:
    """Triton's load error when every one of `versions` failed with `reason`."""
    states = "".join(
        f"version {v} is at UNAVAILABLE state: Invalid argument: {reason};" for v in versions
    )
    return f"load failed for model '{name}': {states}\n"


def clauses(message: str) -> tuple[str, set[str]]:
    """A version-level load error as (its frame, its per-version clauses): Triton lists
    the versions in the order their loads ended, Naiad ascending."""
    head, sep, rest = message.partition(": ")
    assert sep and rest.endswith(";\n"), message
    return head, set(rest[:-2].split(";"))


def refusal_repository(root: Path) -> Path:
    """Models refused per version by both (bad_dims, two_versions, gpu), refused while
    polling by both (parse, batch_size, checksum), and one only Naiad refuses
    (passive: a field it does not act on)."""
    repo = root / "models"
    repo.mkdir()
    for name in ("bad_dims", "two_versions"):
        folder = write_model(repo, name, "")
        config = folder / "config.pbtxt"
        text = config.read_text().replace(
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]', _BAD_INPUT
        )
        assert _BAD_INPUT in text
        config.write_text(text)
    two = repo / "two_versions"
    (two / "2").mkdir()
    (two / "2" / "model.py").write_text((two / "1" / "model.py").read_text())
    with open(two / "config.pbtxt", "a") as config:
        config.write("version_policy: { all { } }\n")
    gpu = write_model(repo, "gpu")
    config = gpu / "config.pbtxt"
    config.write_text(config.read_text().replace("KIND_CPU", "KIND_GPU"))
    parse = write_model(repo, "parse")
    config = parse / "config.pbtxt"
    config.write_text(config.read_text().replace("data_type: TYPE_FP32", "data_type: TYPE_NOPE", 1))
    batch = write_model(repo, "batch_size")
    config = batch / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: -3"))
    write_model(repo, "checksum", checksum("1/model.py", WRONG_MD5))
    write_model(repo, "passive", "instance_group [ { count: 1 kind: KIND_CPU passive: true } ]")
    write_model(repo, "override")  # loads as it is; refused with OVERRIDE_BAD_DIMS
    return repo


REFUSED_PER_VERSION = {
    "bad_dims": ([1], f"model input 'INPUT0' {BAD_DIMS} for bad_dims"),
    "two_versions": ([1, 2], f"model input 'INPUT0' {BAD_DIMS} for two_versions"),
    "gpu": ([1], "instance group gpu_0 of model gpu has kind KIND_GPU but no GPUs are available"),
}
REFUSED_AT_POLL = ["parse", "batch_size", "checksum"]

# A load request's config override for model `override` with a dimension no config may
# have: refused per version as the same config.pbtxt would be.
OVERRIDE_BAD_DIMS = {
    "name": "override",
    "backend": "python",
    "max_batch_size": 8,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-2]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
}
