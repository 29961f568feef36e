"""Model repository: config.pbtxt parsing and defaults, version selection, metadata JSON.

Expected messages and JSON were checked against Triton 2.51 on the same repositories.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _ensure_protos() -> None:
    # The *_pb2 modules are build outputs; generate them for a bare checkout.
    if importlib.util.find_spec("naiad.protos.model_config_pb2") is not None:
        return
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "tools" / "gen_protos.py")
    gen_protos = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_protos)
    gen_protos.generate(ROOT)


_ensure_protos()

from naiad.errors import InvalidArgument  # noqa: E402
from naiad.memory import gpu  # noqa: E402
from naiad.protos import grpc_service_pb2, model_config_pb2  # noqa: E402
from naiad.repository import (  # noqa: E402
    SUPPORTED_EXTENSIONS,
    ConfigError,
    config_to_json,
    load_model_config,
    model_metadata,
    scan_repository,
    server_metadata,
)

IO = """
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

REALISTIC = """
backend: "python"
max_batch_size: 8
input [
  { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "MASK" data_type: TYPE_BOOL dims: [ -1 ] optional: true allow_ragged_batch: true }
]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
dynamic_batching {
  preferred_batch_size: [ 2, 4 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000 }
  priority_queue_policy { key: 1 value { max_queue_size: 3 } }
}
version_policy { all {} }
parameters { key: "foo" value { string_value: "bar" } }
instance_group [ { count: 2 kind: KIND_CPU }, { name: "gpu_group" kind: KIND_GPU gpus: [ 0, 1 ] } ]
model_transaction_policy { decoupled: false }
response_cache { enable: true }
"""

# Triton 2.51's GET /v2/models/good/config for the `good` model below, verbatim.
TRITON_GOOD_JSON = (
    '{"name":"good","platform":"","backend":"python","runtime":"","version_policy":{"all":{}},'
    '"max_batch_size":8,"input":[{"name":"IN","data_type":"TYPE_FP32","format":"FORMAT_NONE",'
    '"dims":[4],"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,'
    '"is_non_linear_format_io":false}],"output":[{"name":"OUT","data_type":"TYPE_FP32",'
    '"dims":[4],"label_filename":"","is_shape_tensor":false,"is_non_linear_format_io":false}],'
    '"batch_input":[],"batch_output":[],"optimization":{"priority":"PRIORITY_DEFAULT",'
    '"input_pinned_memory":{"enable":true},"output_pinned_memory":{"enable":true},'
    '"gather_kernel_buffer_threshold":0,"eager_batching":false},"dynamic_batching":'
    '{"preferred_batch_size":[2,4],"max_queue_delay_microseconds":100,"preserve_ordering":false,'
    '"priority_levels":2,"default_priority_level":1,"default_queue_policy":{"timeout_action":'
    '"DELAY","default_timeout_microseconds":5000,"allow_timeout_override":false,'
    '"max_queue_size":0},"priority_queue_policy":{"1":{"timeout_action":"REJECT",'
    '"default_timeout_microseconds":0,"allow_timeout_override":false,"max_queue_size":3}}},'
    '"instance_group":[{"name":"good_0","kind":"KIND_CPU","count":2,"gpus":[],'
    '"secondary_devices":[],"profile":[],"passive":false,"host_policy":""}],'
    '"default_model_filename":"model.py","cc_model_filenames":{},"metric_tags":{},'
    '"parameters":{"foo":{"string_value":"bar"}},"model_warmup":[]}'
)
GOOD = """
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { preferred_batch_size: [2, 4] max_queue_delay_microseconds: 100
  priority_levels: 2 default_priority_level: 1
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000 }
  priority_queue_policy { key: 1 value { max_queue_size: 3 } } }
version_policy { all {} }
parameters { key: "foo" value { string_value: "bar" } }
instance_group [ { count: 2 kind: KIND_CPU } ]
"""


def make_model(repo: pathlib.Path, name: str, config: str | None, versions=(1,)) -> pathlib.Path:
    model_dir = repo / name
    model_dir.mkdir(parents=True)
    if config is not None:
        (model_dir / "config.pbtxt").write_text(textwrap.dedent(config))
    for version in versions:
        (model_dir / str(version)).mkdir()
        (model_dir / str(version) / "model.py").write_text("")
    return model_dir


def config_error(tmp_path, text: str, name: str = "m") -> str:
    model_dir = make_model(tmp_path, name, text)
    with pytest.raises(ConfigError) as info:
        load_model_config(model_dir, name)
    assert isinstance(info.value, InvalidArgument)
    return info.value.message


# ---- parsing ----


def test_realistic_triton_config_parses(tmp_path, monkeypatch):
    # Its KIND_GPU group needs GPUs 0 and 1 (refused on a host without them).
    monkeypatch.setattr("naiad.memory.gpu.supported_gpus", lambda *args: [0, 1])
    config = load_model_config(make_model(tmp_path, "m", REALISTIC), "m")
    assert config.name == "m"
    assert config.max_batch_size == 8
    batching = config.dynamic_batching
    assert list(batching.preferred_batch_size) == [2, 4]
    assert batching.priority_levels == 2
    assert batching.default_queue_policy.timeout_action == model_config_pb2.ModelQueuePolicy.DELAY
    assert batching.priority_queue_policy[1].max_queue_size == 3
    assert config.version_policy.WhichOneof("policy_choice") == "all"
    assert config.parameters["foo"].string_value == "bar"
    mask = config.input[1]
    assert mask.optional and mask.allow_ragged_batch and list(mask.dims) == [-1]
    assert [g.name for g in config.instance_group] == ["m_0", "gpu_group"]
    assert list(config.instance_group[1].gpus) == [0, 1]
    assert config.response_cache.enable


def test_sequence_batching_and_ensemble_fields_parse(tmp_path):
    sequence = (
        IO
        + """
    max_batch_size: 4
    sequence_batching {
      max_sequence_idle_microseconds: 5000000
      control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START
                                                   int32_false_true: [ 0, 1 ] } ] } ]
      state [ { input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_INT32 dims: [ 1 ]
                initial_state { name: "zero" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } ]
      oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] }
    }
    """
    )
    config = load_model_config(make_model(tmp_path, "seq", "backend: 'python'" + sequence), "seq")
    assert config.sequence_batching.oldest.max_candidate_sequences == 4
    ensemble = (
        IO
        + """
    platform: "ensemble"
    ensemble_scheduling { step [ { model_name: "a" model_version: -1
        input_map { key: "x" value: "IN" } output_map { key: "y" value: "OUT" } } ] }
    """
    )
    config = load_model_config(make_model(tmp_path, "ens", ensemble), "ens")
    assert config.platform == "ensemble" and config.backend == ""
    assert config.ensemble_scheduling.step[0].input_map["x"] == "IN"


def test_unknown_field_names_file_line_and_field(tmp_path):
    message = config_error(tmp_path, 'backend: "python"\nmax_batch_size: 8\nmax_batch_sze: 3\n')
    path = tmp_path / "m" / "config.pbtxt"
    assert message == f"{path}:3:1: unknown field 'max_batch_sze' in inference.ModelConfig"


def test_unknown_nested_field_names_its_message(tmp_path):
    message = config_error(tmp_path, IO + "dynamic_batching { max_queue_delay_ms: 5 }\n")
    assert "unknown field 'max_queue_delay_ms' in inference.ModelDynamicBatching" in message
    assert ":4:" in message


def test_bad_value_names_field(tmp_path):
    message = config_error(tmp_path, 'backend: "python"\nmax_batch_size: "x"\n')
    path = tmp_path / "m" / "config.pbtxt"
    assert message.startswith(f"{path}:2:17: bad value for field 'max_batch_size'")
    message = config_error(tmp_path / "b", 'input [ { name: "a" data_type: TYPE_FLOAT } ]')
    assert "field 'data_type'" in message and "TYPE_FLOAT" in message


def test_enum_number_out_of_range_is_a_config_error(tmp_path):
    # A number the text parser accepts but protobuf's enum setter rejects (found by
    # tests/test_fuzz_config.py): the model fails to load with the value named.
    message = config_error(tmp_path, 'input [ { name: "a" data_type: 2147483648 dims: [1] } ]')
    path = tmp_path / "m" / "config.pbtxt"
    assert message == f"{path}: Value out of range: 2147483648"


def test_missing_config_file(tmp_path):
    model_dir = make_model(tmp_path, "m", None)
    with pytest.raises(ConfigError, match="failed to open text file for read .*config.pbtxt"):
        load_model_config(model_dir, "m")


# ---- defaults ----


def test_defaults_name_instance_group_version_policy(tmp_path):
    config = load_model_config(make_model(tmp_path, "m", 'backend: "python"' + IO), "m")
    assert config.name == "m"
    (group,) = config.instance_group
    # Triton names the group it adds after the model itself; KIND_AUTO is a GPU where the
    # host has one (a Python model's too).
    kinds = model_config_pb2.ModelInstanceGroup
    assert (group.name, group.count, group.kind) == (
        "m",
        1,
        kinds.KIND_GPU if gpu.supported_gpus() else kinds.KIND_CPU,
    )
    assert config.version_policy.latest.num_versions == 1
    assert config.default_model_filename == "model.py"


def test_unnamed_groups_are_numbered_and_count_zero_is_one(tmp_path):
    text = IO + 'instance_group [ { count: 0 kind: KIND_CPU }, { name: "mine" kind: KIND_CPU } ]'
    config = load_model_config(make_model(tmp_path, "m", text), "m")
    assert [(g.name, g.count) for g in config.instance_group] == [("m_0", 1), ("mine", 1)]


def test_platform_and_backend_complete_each_other(tmp_path):
    config = load_model_config(make_model(tmp_path, "a", 'platform: "onnxruntime_onnx"' + IO), "a")
    assert (config.backend, config.default_model_filename) == ("onnxruntime", "model.onnx")
    config = load_model_config(make_model(tmp_path, "b", 'backend: "pytorch"' + IO), "b")
    assert config.platform == "pytorch_libtorch"


def test_explicit_name_must_match_directory(tmp_path):
    message = config_error(tmp_path, 'name: "other"' + IO, name="dir")
    assert message == (
        "unexpected directory name 'dir' for model 'other', directory name must equal model name"
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        ("max_batch_size: -1" + IO, "'max_batch_size' must be non-negative value for m"),
        (
            'input [ { name: "IN" data_type: TYPE_FP32 } ]',
            "model input 'IN' must specify 'dims' for m",
        ),
        ('input [ { name: "IN" dims: [4] } ]', "model input 'IN' must specify 'data_type' for m"),
        ("input [ { data_type: TYPE_FP32 dims: [4] } ]", "model input must specify 'name' for m"),
        (
            'output [ { name: "O" data_type: TYPE_FP32 dims: [0] } ]',
            "model output 'O' dimension must be integer >= 1, or -1",
        ),
        (
            'input [ { name: "A" data_type: TYPE_FP32 dims: [1] },'
            ' { name: "A" data_type: TYPE_FP32 dims: [1] } ]',
            "model input 'A' is specified more than once for m",
        ),
        (
            "max_batch_size: 4" + IO + "dynamic_batching { preferred_batch_size: [ 8 ] }",
            "dynamic batching preferred size must be <= max batch size for m",
        ),
        (
            "max_batch_size: 4" + IO + "dynamic_batching { priority_levels: 2 }",
            "default priority level must be in range [1, 2] for m",
        ),
        (
            IO
            + 'parameters: { key: "NAIAD_EXECUTION_TIMEOUT_SECONDS" value: { string_value: "0" } }',
            "parameter 'NAIAD_EXECUTION_TIMEOUT_SECONDS' of model m must be a positive number "
            "of seconds, got '0'",
        ),
        (
            IO
            + 'parameters: { key: "NAIAD_WORKER_MEMORY_LIMIT_BYTES" value: { string_value: "2G" } }',
            "parameter 'NAIAD_WORKER_MEMORY_LIMIT_BYTES' of model m must be a positive number "
            "of bytes, got '2G'",
        ),
    ],
)
def test_validation_errors(tmp_path, text, expected):
    assert expected in config_error(tmp_path, text)


def test_dynamic_batching_without_batch_size_is_accepted_like_triton(tmp_path):
    config = load_model_config(make_model(tmp_path, "m", IO + "dynamic_batching { }"), "m")
    assert config.HasField("dynamic_batching") and config.max_batch_size == 0


# ---- JSON ----


def test_config_json_is_identical_to_triton(tmp_path):
    config = load_model_config(make_model(tmp_path, "good", GOOD), "good")
    assert json.dumps(config_to_json(config), separators=(",", ":")) == TRITON_GOOD_JSON


def test_config_json_int64_are_numbers_and_defaults_present(tmp_path):
    text = "max_batch_size: 8" + IO + "dynamic_batching { max_queue_delay_microseconds: 100 }"
    rendered = config_to_json(load_model_config(make_model(tmp_path, "m", text), "m"))
    assert rendered["max_batch_size"] == 8
    # Triton renders int64 dims as numbers, unlike protobuf's own JSON mapping.
    assert rendered["input"][0]["dims"] == [4]
    assert rendered["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert rendered["dynamic_batching"]["preserve_ordering"] is False
    assert rendered["output"][0]["label_filename"] == ""
    assert "sequence_batching" not in rendered


# ---- repository scan and versions ----


def test_scan_versions_by_policy(tmp_path):
    make_model(tmp_path, "latest", IO, versions=(1, 5, 12))
    make_model(
        tmp_path, "latest2", IO + "version_policy { latest { num_versions: 2 } }", (1, 5, 12)
    )
    make_model(tmp_path, "all", IO + "version_policy { all { } }", versions=(3, 1))
    make_model(
        tmp_path, "specific", IO + "version_policy { specific { versions: [1, 3] } }", (1, 2, 3)
    )
    entries = {entry.name: entry for entry in scan_repository(tmp_path)}
    assert entries["latest"].versions == [12]
    assert entries["latest2"].versions == [5, 12]
    assert entries["all"].versions == [1, 3]
    assert entries["specific"].versions == [1, 3]
    assert all(entry.error is None for entry in entries.values())


def test_specific_version_missing_is_reported_and_rest_served(tmp_path):
    make_model(tmp_path, "m", IO + "version_policy { specific { versions: [1, 2] } }", (1,))
    (entry,) = scan_repository(tmp_path)
    assert entry.error is None and entry.versions == [1]
    assert entry.warnings == [
        "version 2 is specified for model 'm', but the version directory is not present"
    ]


def test_specific_versions_all_missing_is_an_error(tmp_path):
    make_model(tmp_path, "m", IO + "version_policy { specific { versions: [7] } }", (1,))
    (entry,) = scan_repository(tmp_path)
    assert entry.versions == [] and "at least one version must be available" in entry.error


def test_scan_errors_sorting_and_skips(tmp_path):
    make_model(tmp_path, "zeta", IO)
    make_model(tmp_path, "alpha", IO, versions=())
    make_model(tmp_path, "nocfg", None)
    make_model(tmp_path, ".hidden", IO)
    make_model(tmp_path, "broken", "max_batch_sze: 1")
    (tmp_path / "zeta" / "not_a_version").mkdir()
    (tmp_path / "README.md").write_text("not a model")
    entries = scan_repository(tmp_path)
    assert [entry.name for entry in entries] == ["alpha", "broken", "nocfg", "zeta"]
    alpha, broken, nocfg, zeta = entries
    assert alpha.error == (
        "at least one version must be available under the version policy of model 'alpha'"
    )
    assert alpha.config is not None
    assert broken.config is None and "unknown field 'max_batch_sze'" in broken.error
    # Auto-complete is on (Triton's default): a folder with no config.pbtxt gets one from
    # its files (strict mode: tests/test_onnx_backend.py::test_strict_mode_needs_the_config).
    assert nocfg.error is None and nocfg.config.backend == "python"
    assert zeta.ok and zeta.versions == [1] and zeta.path == tmp_path / "zeta"


# ---- metadata ----


def test_model_metadata_batched_and_bytes(tmp_path):
    text = """
    backend: "python"
    max_batch_size: 8
    input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
    output [ { name: "SCORES" data_type: TYPE_FP16 dims: [ 3, 2 ] } ]
    """
    config = load_model_config(make_model(tmp_path, "m", text), "m")
    assert model_metadata(config, [3, 1]) == {
        "name": "m",
        "versions": ["1", "3"],
        "platform": "python",
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [-1, -1]}],
        "outputs": [{"name": "SCORES", "datatype": "FP16", "shape": [-1, 3, 2]}],
    }


def test_model_metadata_unbatched_keeps_dims_and_platform(tmp_path):
    config = load_model_config(make_model(tmp_path, "m", 'platform: "onnxruntime_onnx"' + IO), "m")
    metadata = model_metadata(config, [1])
    assert metadata["platform"] == "onnxruntime_onnx"
    assert metadata["inputs"] == [{"name": "IN", "datatype": "FP32", "shape": [4]}]


def test_server_metadata():
    metadata = server_metadata()
    assert metadata["name"] == "naiad"
    assert sorted(metadata["extensions"]) == sorted(SUPPORTED_EXTENSIONS)
    assert "binary_tensor_data" in metadata["extensions"]


# ---- generated modules ----


def test_grpc_service_uses_package_model_config():
    response = grpc_service_pb2.ModelConfigResponse()
    assert response.config.DESCRIPTOR is model_config_pb2.ModelConfig.DESCRIPTOR
    assert grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name == (
        "inference.GRPCInferenceService"
    )
