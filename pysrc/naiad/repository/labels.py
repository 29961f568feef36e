"""The label files of a model's outputs (`label_filename` in config.pbtxt), read once at
load, for the classification extension (csrc/codec/classification.h names each class with
its line: the line at the class index, none when the line is empty or missing).

A missing or unreadable file fails the load, as in Triton."""

from __future__ import annotations

from pathlib import Path

from naiad.errors import InvalidArgument


def output_labels(config, model_dir) -> dict[str, list[bytes]]:
    """{output name: its label lines} for the outputs that name a label file."""
    labels: dict[str, list[bytes]] = {}
    for output in config.output:
        if not output.label_filename:
            continue
        path = Path(model_dir) / output.label_filename
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise InvalidArgument(
                f"failed to open text file for read {path}: {exc.strerror}"
            ) from None
        # As std::getline: a last line without its newline still counts.
        lines = text.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        labels[output.name] = lines
    return labels
