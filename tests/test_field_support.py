"""Every field of model_config.proto is honoured, refused or warned (repository/field_support.py),
and the checksum repository agent (repository/agents.py), without a server."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from naiad.protos import model_config_pb2
from naiad.repository import field_support
from naiad.repository.config import ConfigError, load_model_config
from naiad.repository.repository import scan_model

BASE = """
name: "{name}"
backend: "{backend}"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

MODEL_PY = b"# a model file whose bytes the checksum agent digests\n"


def _paths(descriptor, prefix="", seen=()):
    """Every field path of a message type, maps' values walked like repeated messages."""
    for field in descriptor.fields:
        path = prefix + field.name
        yield path
        message = field.message_type
        if message is None:
            continue
        if message.GetOptions().map_entry:
            message = message.fields_by_name["value"].message_type
            if message is None:
                continue
        if message.full_name not in seen:
            yield from _paths(message, path + ".", (*seen, message.full_name))


ALL_PATHS = list(_paths(model_config_pb2.ModelConfig.DESCRIPTOR))


def _decided_by(path: str) -> list[str]:
    parts = path.split(".")
    return [
        ".".join(parts[:i])
        for i in range(1, len(parts) + 1)
        if ".".join(parts[:i]) in field_support.FIELDS
    ]


@pytest.mark.parametrize("path", ALL_PATHS)
def test_every_field_of_the_proto_has_one_decision(path):
    # A field added to model_config.proto fails here until the table decides it.
    deciders = _decided_by(path)
    assert len(deciders) <= 1, f"{path} is decided twice: {deciders}"
    message_field = any(other.startswith(path + ".") for other in ALL_PATHS)
    if not message_field:
        assert deciders, (
            f"field '{path}' of model_config.proto has no entry in field_support.FIELDS"
        )


def test_every_entry_is_a_field_of_the_proto():
    unknown = sorted(set(field_support.FIELDS) - set(ALL_PATHS))
    assert not unknown, unknown


def test_every_entry_says_why():
    for path, support in field_support.FIELDS.items():
        assert support.decision in (
            field_support.HONOURED,
            field_support.REFUSED,
            field_support.WARNED,
        )
        assert support.why.strip(), path


def _model(tmp_path: Path, extra: str, name: str = "m", backend: str = "python") -> Path:
    folder = tmp_path / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_bytes(MODEL_PY)
    (folder / "config.pbtxt").write_text(BASE.format(name=name, backend=backend) + extra)
    return folder


def _refusal(tmp_path: Path, extra: str, backend: str = "python") -> str:
    folder = _model(tmp_path, extra, backend=backend)
    with pytest.raises(ConfigError) as caught:
        load_model_config(folder, folder.name)
    return caught.value.message


# The fields the issue found silently ignored, and others Naiad does not act on.
REFUSED = [
    (
        'model_metrics { metric_control [ { metric_identifier { family: "x" } } ] }',
        "model_metrics",
    ),
    ('runtime: "libfoo.so"', "runtime"),
    ("instance_group [ { count: 1 kind: KIND_CPU passive: true } ]", "instance_group.passive"),
    (
        "instance_group [ { kind: KIND_CPU secondary_devices [ { device_id: 0 } ] } ]",
        "instance_group.secondary_devices",
    ),
    ('cc_model_filenames { key: "8.0" value: "x.py" }', "cc_model_filenames"),
]


@pytest.mark.parametrize("extra, path", REFUSED, ids=[p for _, p in REFUSED])
def test_a_refused_field_keeps_the_model_from_loading_and_is_named(tmp_path, extra, path):
    message = _refusal(tmp_path, extra)
    assert f"field '{path}' of model 'm' is not supported" in message


WARNED = [
    ("optimization { cuda { graphs: true } }", "optimization.cuda"),
    ("optimization { priority: PRIORITY_MAX }", "optimization.priority"),
    ("optimization { graph { level: 1 } }", "optimization.graph"),
    ("optimization { eager_batching: true }", "optimization.eager_batching"),
    ("optimization { input_pinned_memory { enable: false } }", "optimization.input_pinned_memory"),
    (
        'instance_group [ { count: 1 kind: KIND_CPU host_policy: "numa0" } ]',
        "instance_group.host_policy",
    ),
    ('metric_tags { key: "team" value: "a" }', "metric_tags"),
    (
        'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }',
        "optimization.execution_accelerators",
    ),
    ('model_operations { op_library_filename: "libop.so" }', "model_operations"),
]


@pytest.mark.parametrize("extra, path", WARNED, ids=[p for _, p in WARNED])
def test_a_hint_loads_with_a_warning_naming_it(tmp_path, extra, path):
    entry = scan_model(_model(tmp_path, extra))
    assert entry.ok, entry.error
    assert any(f"field '{path}' of model 'm' is ignored" in hint for hint in entry.hints), (
        entry.hints
    )
    assert entry.hints[0] in entry.warnings  # logged with the other warnings at load


def test_a_plain_config_has_nothing_to_say(tmp_path):
    # Naiad itself fills pinned buffers on, version policy, instance names...: none of it warns.
    entry = scan_model(_model(tmp_path, ""))
    assert entry.ok and entry.hints == [] and entry.warnings == []


def test_the_backends_default_runtime_is_accepted(tmp_path):
    entry = scan_model(_model(tmp_path, 'runtime: "libtriton_python.so"'))
    assert entry.ok, entry.error


def test_an_onnxruntime_field_is_honoured_there(tmp_path):
    config = model_config_pb2.ModelConfig(name="m", backend="onnxruntime")
    config.optimization.graph.level = 1
    config.optimization.execution_accelerators.cpu_execution_accelerator.add(name="openvino")
    config.model_operations.op_library_filename.append("libop.so")
    assert field_support.findings(config) == []


def _with_batch_io(backend: str):
    config = model_config_pb2.ModelConfig(name="m", backend=backend)
    config.input.add(name="IN", allow_ragged_batch=True)
    config.output.add(name="OUT")
    config.batch_input.add(target_name=["B"], source_input=["IN"])
    config.batch_output.add(target_name=["OUT"], source_input=["IN"])
    return config


@pytest.mark.parametrize("backend", ["python", "onnxruntime", "pytorch"])
def test_batch_io_is_honoured_by_the_backends_that_compute_it(backend):
    assert field_support.findings(_with_batch_io(backend)) == []


def test_iterative_sequences_are_honoured_by_python_models_only():
    config = model_config_pb2.ModelConfig(name="m", backend="python")
    config.sequence_batching.iterative_sequence = True
    assert field_support.findings(config) == []
    config.backend = "onnxruntime"
    paths = [finding.path for finding in field_support.findings(config)]
    assert paths == ["sequence_batching.iterative_sequence"]


def test_batch_io_is_refused_elsewhere():
    paths = [finding.path for finding in field_support.findings(_with_batch_io("tensorrt"))]
    assert paths == ["batch_input", "batch_output"]


# Where Triton 2.51 refuses the field too, its words (checked against it with a Python model).
TRITON_WORDS = [
    (
        'input [ { name: "S" data_type: TYPE_INT32 dims: [ 1 ] is_shape_tensor: true } ]',
        "shape tensors are only supported for TensorRT platform for m",
    ),
    (
        'output [ { name: "O2" data_type: TYPE_FP32 dims: [ 1 ] is_non_linear_format_io: true } ]',
        "Non-linear IO format is only supported for the TensorRT platform for m",
    ),
    (
        'instance_group [ { count: 1 kind: KIND_CPU profile: "0" } ]',
        "instance group m_1 of model m and platform specifies profile field which is only "
        "supported for TensorRT models",
    ),
    (
        'input [ { name: "I2" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [ 1 ] } ]',
        "model input NHWC/NCHW require 3 dims for m",
    ),
]


@pytest.mark.parametrize("extra, words", TRITON_WORDS)
def test_tritons_own_refusals_keep_its_words(tmp_path, extra, words):
    # Refused as each version loads, with the status Triton puts before its words there.
    assert _refusal(tmp_path, extra) == "Invalid argument: " + words


def test_an_image_format_with_three_dims_loads(tmp_path):
    extra = 'input [ { name: "I2" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 2, 2 ] } ]'
    assert scan_model(_model(tmp_path, extra)).ok


# ---- the checksum repository agent ----


def _checksum(key: str, value: str) -> str:
    return (
        'model_repository_agents { agents [ { name: "checksum" '
        f'parameters {{ key: "{key}" value: "{value}" }} }} ] }}'
    )


GOOD_MD5 = hashlib.md5(MODEL_PY).hexdigest()


def test_checksum_that_matches_loads(tmp_path):
    entry = scan_model(_model(tmp_path, _checksum("MD5:1/model.py", GOOD_MD5)))
    assert entry.ok, entry.error


def test_checksum_algorithm_name_is_read_in_any_case(tmp_path):
    assert scan_model(_model(tmp_path, _checksum("md5:1/model.py", GOOD_MD5))).ok


def test_checksum_mismatch_keeps_the_model_from_loading(tmp_path):
    wrong = "0" * 32
    entry = scan_model(_model(tmp_path, _checksum("MD5:1/model.py", wrong)))
    assert entry.error == (
        f"Mismatched MD5 hash for file 1/model.py, expect: {wrong}, got: {GOOD_MD5}"
    )


def test_checksum_of_a_changed_file_fails(tmp_path):
    folder = _model(tmp_path, _checksum("MD5:1/model.py", GOOD_MD5))
    (folder / "1" / "model.py").write_bytes(MODEL_PY + b"import os\n")
    assert scan_model(folder).error.startswith("Mismatched MD5 hash for file 1/model.py")


def test_checksum_of_a_missing_file_fails(tmp_path):
    entry = scan_model(_model(tmp_path, _checksum("MD5:1/weights.bin", GOOD_MD5)))
    assert (
        entry.error == "failed to open text file for read 1/weights.bin: No such file or directory"
    )


def test_checksum_key_without_algorithm_fails(tmp_path):
    entry = scan_model(_model(tmp_path, _checksum("1/model.py", GOOD_MD5)))
    assert entry.error == "failed to parse key: 1/model.py"


def test_checksum_other_algorithm_fails(tmp_path):
    entry = scan_model(_model(tmp_path, _checksum("SHA256:1/model.py", GOOD_MD5)))
    assert entry.error == "Unsupported checksum algorithm: SHA256"


def test_another_agent_is_refused_by_name(tmp_path):
    entry = scan_model(
        _model(tmp_path, 'model_repository_agents { agents [ { name: "relocation" } ] }')
    )
    assert "repo agent 'relocation' of model 'm'" in entry.error
    assert "model_repository_agents.agents.name" in entry.error


def test_the_docs_page_names_every_field_that_is_not_simply_honoured():
    page = (Path(__file__).resolve().parent.parent / "docs" / "model_config.md").read_text()
    for path, support in field_support.FIELDS.items():
        if support.decision != field_support.HONOURED or support.backends:
            assert f"`{path}`" in page, f"docs/model_config.md does not mention `{path}`"
