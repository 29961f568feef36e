"""Tiny TorchScript models for the pytorch backend's tests, built from code into a repository.

    repository = build_repository(tmp_path / "models", ["pt_dtypes", "pt_named"])

Each entry of MODELS is (config.pbtxt text, a function returning the scripted module). Only
tests that have torch import this module (`pytest.importorskip("torch")` first).
"""

from __future__ import annotations

from pathlib import Path

import torch

# Triton's torch datatypes: config type, torch dtype.
DTYPES = [
    ("BOOL", torch.bool),
    ("UINT8", torch.uint8),
    ("INT8", torch.int8),
    ("INT16", torch.int16),
    ("INT32", torch.int32),
    ("INT64", torch.int64),
    ("FP16", torch.float16),
    ("FP32", torch.float32),
    ("FP64", torch.float64),
]

# Tests run many workers on few cores: one intra-op thread each.
ONE_THREAD = 'parameters { key: "INTRA_OP_THREAD_COUNT" value { string_value: "1" } }\n'


def _io(kind: str, entries: list[tuple[str, str, list[int]]]) -> str:
    body = ",\n".join(
        f'  {{ name: "{name}" data_type: TYPE_{dtype} dims: {dims} }}'
        for name, dtype, dims in entries
    )
    return f"{kind} [\n{body}\n]\n"


class Classifier(torch.nn.Module):
    """The example's shape: 4 features -> 3 probabilities and the arg-max class."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.hidden = torch.nn.Linear(4, 8)
        self.out = torch.nn.Linear(8, 3)

    def forward(self, INPUT__0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probabilities = torch.softmax(self.out(torch.relu(self.hidden(INPUT__0))), dim=1)
        return probabilities, torch.argmax(probabilities, dim=1, keepdim=True)


class Identities(torch.nn.Module):
    """One input per datatype, each returned as it came (cloned)."""

    def forward(
        self,
        INPUT__0: torch.Tensor,
        INPUT__1: torch.Tensor,
        INPUT__2: torch.Tensor,
        INPUT__3: torch.Tensor,
        INPUT__4: torch.Tensor,
        INPUT__5: torch.Tensor,
        INPUT__6: torch.Tensor,
        INPUT__7: torch.Tensor,
        INPUT__8: torch.Tensor,
    ) -> tuple[
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
    ]:
        return (
            INPUT__0.clone(),
            INPUT__1.clone(),
            INPUT__2.clone(),
            INPUT__3.clone(),
            INPUT__4.clone(),
            INPUT__5.clone(),
            INPUT__6.clone(),
            INPUT__7.clone(),
            INPUT__8.clone(),
        )


class Subtract(torch.nn.Module):
    """forward(minuend, subtrahend): bound by argument name whatever the config's order."""

    def forward(self, minuend: torch.Tensor, subtrahend: torch.Tensor) -> torch.Tensor:
        return minuend - subtrahend


class FirstTwiceplusSecond(torch.nn.Module):
    """Config names that are neither arguments nor <name>__<index>: config order."""

    def forward(self, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        return first * 2 + second


class DictSum(torch.nn.Module):
    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["x"] + inputs["y"] * 10


class Projection(torch.nn.Module):
    """[N, -1] @ [4, 2]: a request whose row is not 4 wide fails inside the model."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(4, 2), requires_grad=False)

    def forward(self, INPUT__0: torch.Tensor) -> torch.Tensor:
        return torch.matmul(INPUT__0, self.weight)


class Upper(torch.nn.Module):
    def forward(self, INPUT__0: list[str]) -> list[str]:
        return [text.upper() for text in INPUT__0]


class WrongType(torch.nn.Module):
    """Returns INT64 where the config says FP32."""

    def forward(self, INPUT__0: torch.Tensor) -> torch.Tensor:
        return INPUT__0.to(torch.int64)


class RaggedBatchIO(torch.nn.Module):
    """A ragged input and every batch input kind (tests/test_ragged_batching.py): IN doubled,
    and per request its row of each batch input."""

    def forward(
        self,
        IN: torch.Tensor,
        COUNT: torch.Tensor,
        ENDS: torch.Tensor,
        STARTS: torch.Tensor,
        LONGEST: torch.Tensor,
        SHAPES: torch.Tensor,
        FLAT: torch.Tensor,
    ):  # TorchScript infers the tuple it returns
        n = ENDS.shape[0]
        longest = torch.full((n, 1), LONGEST.shape[0], dtype=torch.int64)
        return (
            IN * 2,
            COUNT.unsqueeze(1),
            ENDS.unsqueeze(1),
            STARTS[:n].unsqueeze(1),
            longest,
            SHAPES,
            FLAT.unsqueeze(1),
        )


MODELS = {
    # The example's network with a batching window, so concurrent requests share a batch.
    "pt_batching": (
        'platform: "pytorch_libtorch"\nmax_batch_size: 8\n'
        + _io("input", [("INPUT__0", "FP32", [4])])
        + _io("output", [("OUTPUT__0", "FP32", [3]), ("OUTPUT__1", "INT64", [1])])
        + "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 2000000 }\n"
        + ONE_THREAD,
        Classifier,
    ),
    "pt_dtypes": (
        'backend: "pytorch"\nmax_batch_size: 4\n'
        + _io("input", [(f"INPUT__{i}", name, [-1]) for i, (name, _) in enumerate(DTYPES)])
        + _io("output", [(f"OUTPUT__{i}", name, [-1]) for i, (name, _) in enumerate(DTYPES)])
        + "dynamic_batching { }\n"
        + ONE_THREAD,
        Identities,
    ),
    # Config order differs from forward()'s: the names decide. No backend or platform: the
    # server's auto-complete finds them from 1/model.pt, as Triton's does.
    "pt_named": (
        "max_batch_size: 4\n"
        + _io("input", [("subtrahend", "FP32", [2]), ("minuend", "FP32", [2])])
        + _io("output", [("difference", "FP32", [2])])
        + ONE_THREAD,
        Subtract,
    ),
    "pt_strict": (
        'platform: "pytorch_libtorch"\nmax_batch_size: 0\n'
        + _io("input", [("A", "INT32", [3]), ("B", "INT32", [3])])
        + _io("output", [("RESULT", "INT32", [3])])
        + ONE_THREAD,
        FirstTwiceplusSecond,
    ),
    "pt_dict": (
        'platform: "pytorch_libtorch"\nmax_batch_size: 4\n'
        + _io("input", [("y", "FP64", [2]), ("x", "FP64", [2])])
        + _io("output", [("OUTPUT__0", "FP64", [2])])
        + ONE_THREAD,
        DictSum,
    ),
    "pt_rejects": (
        'platform: "pytorch_libtorch"\nmax_batch_size: 4\n'
        + _io("input", [("INPUT__0", "FP32", [-1])])
        + _io("output", [("OUTPUT__0", "FP32", [2])])
        + ONE_THREAD,
        Projection,
    ),
    "pt_strings": (
        'platform: "pytorch_libtorch"\nmax_batch_size: 0\n'
        + _io("input", [("INPUT__0", "STRING", [-1])])
        + _io("output", [("OUTPUT__0", "STRING", [-1])])
        + ONE_THREAD,
        Upper,
    ),
    "pt_wrong_type": (
        'platform: "pytorch_libtorch"\nmax_batch_size: 4\n'
        + _io("input", [("INPUT__0", "FP32", [2])])
        + _io("output", [("OUTPUT__0", "FP32", [2])])
        + ONE_THREAD,
        WrongType,
    ),
}


def build_model(dest: Path, name: str, config: str | None = None, module=None) -> Path:
    """`dest/<name>/config.pbtxt` and `dest/<name>/1/model.pt` for MODELS[name] (or the
    given config text and module class)."""
    default_config, default_module = MODELS.get(name, (None, None))
    config = config if config is not None else default_config
    module = module if module is not None else default_module
    folder = Path(dest) / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(config)
    torch.jit.script(module().eval()).save(str(folder / "1" / "model.pt"))
    return folder


def build_repository(dest: Path, names: list[str]) -> Path:
    for name in names:
        build_model(dest, name)
    return Path(dest)
