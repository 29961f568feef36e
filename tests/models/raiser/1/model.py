"""raiser: execute() raises ValueError with a recognizable message."""

import triton_python_backend_utils as pb_utils  # noqa: F401


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, requests):
        self.calls += 1
        raise ValueError(f"raiser refuses to run: deliberate failure number {self.calls}")
