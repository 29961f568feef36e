"""Build the TorchScript example model_repository/mlp_torch/1/model.pt from code.

A small classifier (4 features -> 16 hidden, ReLU -> 3 class probabilities), its weights
drawn from a fixed seed, scripted with torch.jit.script and saved. Its forward() takes
INPUT__0 and returns OUTPUT__0 (probabilities) and OUTPUT__1 (the arg-max class), which is
how config.pbtxt names them (Triton's <name>__<index> convention).

    .venv/bin/python tools/build_torch_example.py [output path]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "model_repository/mlp_torch/1/model.pt"


class Classifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(4, 16)
        self.out = torch.nn.Linear(16, 3)

    def forward(self, INPUT__0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probabilities = torch.softmax(self.out(torch.relu(self.hidden(INPUT__0))), dim=1)
        return probabilities, torch.argmax(probabilities, dim=1, keepdim=True).to(torch.int64)


def build(output: Path = DEFAULT_OUTPUT) -> Path:
    torch.manual_seed(0)
    model = torch.jit.script(Classifier().eval())
    output.parent.mkdir(parents=True, exist_ok=True)
    model.save(str(output))
    return output


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUTPUT))
