"""Property-based fuzzing of config.pbtxt loading (naiad.repository.config).

Whatever text (or bytes) a config.pbtxt holds, load_model_config returns a completed,
validated config that renders as JSON, or raises ConfigError with a message naming the
file; never another exception. Inputs: the repository's own configs damaged
(characters flipped, lines dropped or repeated, values replaced), configs built from
ModelConfig's fields with values of every kind, and arbitrary text and bytes.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from naiad.protos import model_config_pb2
from naiad.repository.config import (
    ConfigError,
    config_to_json,
    load_model_config,
    parse_model_config,
)
from server_harness import REPO_ROOT

SEED_CONFIGS = sorted(
    path.read_text()
    for pattern in ("model_repository/*/config.pbtxt", "tests/*/*/config.pbtxt")
    for path in REPO_ROOT.glob(pattern)
)
FIELD_NAMES = sorted(
    {
        f.name
        for m in (model_config_pb2.ModelConfig, model_config_pb2.ModelInput)
        for f in m.DESCRIPTOR.fields
    }
    | {f.name for f in model_config_pb2.ModelDynamicBatching.DESCRIPTOR.fields}
    | {f.name for f in model_config_pb2.ModelInstanceGroup.DESCRIPTOR.fields}
)
TOKENS = ["{", "}", "[", "]", ":", ",", '"', "'", "\\", "<", ">", "#", "\n", "-", "."]
VALUES = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True).map(repr),
    st.sampled_from(
        ["TYPE_FP32", "TYPE_STRING", "KIND_GPU", "true", "nan", "-inf", "0x1f", "1e999"]
    ),
    st.text(max_size=12).map(lambda s: '"' + s.replace('"', '\\"') + '"'),
    st.text(alphabet="\\\"'xu0123456789abcdefn\x00\udcff", max_size=8).map(lambda s: '"' + s + '"'),
)


@st.composite
def damaged_config(draw) -> str:
    text = draw(st.sampled_from(SEED_CONFIGS))
    lines = text.splitlines()
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        at = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["drop", "repeat", "value", "token", "nest"]))
        if action == "drop":
            del lines[at]
        elif action == "repeat":
            lines.insert(at, lines[at])
        elif action == "value" and ":" in lines[at]:
            lines[at] = lines[at].split(":", 1)[0] + ": " + draw(VALUES)
        elif action == "nest":
            depth = draw(st.integers(1, 300))
            lines[at] = "parameters " + "{ key: " * depth + "}" * depth
        else:
            column = draw(st.integers(0, len(lines[at])))
            lines[at] = lines[at][:column] + draw(st.sampled_from(TOKENS)) + lines[at][column:]
    return "\n".join(lines)


@st.composite
def built_config(draw) -> str:
    parts = []
    for _ in range(draw(st.integers(0, 8))):
        name = draw(st.sampled_from(FIELD_NAMES))
        if draw(st.booleans()):
            parts.append(f"{name}: {draw(VALUES)}")
        else:
            inner = " ".join(
                f"{draw(st.sampled_from(FIELD_NAMES))}: {draw(VALUES)}"
                for _ in range(draw(st.integers(0, 3)))
            )
            parts.append(
                f"{name} [ {{ {inner} }} ]" if draw(st.booleans()) else f"{name} {{ {inner} }}"
            )
    return "\n".join(parts)


CONFIG_TEXT = st.one_of(damaged_config(), built_config(), st.text(max_size=200))


def check_loads_or_config_error(content: str | bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "fuzzed"
        model_dir.mkdir()
        path = model_dir / "config.pbtxt"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8", errors="surrogatepass")
        try:
            config = load_model_config(model_dir, "fuzzed")
        except ConfigError as exc:
            message = str(exc)
            assert message.strip(), "a ConfigError with no message"
            return
        # Accepted: it is complete and renders as Triton's config JSON.
        assert config.name == "fuzzed"
        assert config_to_json(config)["name"] == "fuzzed"


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(CONFIG_TEXT)
def test_any_config_text_loads_or_names_its_error(text):
    check_loads_or_config_error(text)


@settings(max_examples=100, deadline=None)
@given(
    st.binary(max_size=300)
    | damaged_config().map(lambda t: t.encode("utf-8", "surrogatepass") + b"\xff\xfe")
)
def test_any_config_bytes_load_or_name_their_error(data):
    check_loads_or_config_error(data)


def test_the_damaged_configs_start_from_the_repository_ones():
    # A glob that found no config would leave damaged_config() nothing to damage.
    assert len(SEED_CONFIGS) >= 10
    for text in SEED_CONFIGS:
        assert parse_model_config(text).name or "backend" in text
