"""Triton's decoupled rules for ensembles (scheduling/ensemble.py decoupled_workflow), on
configs alone: which data flows are refused, with Triton 2.51's message, and when the
ensemble is decoupled. The black-box and differential cases are in test_pipelines*.py."""

from __future__ import annotations

from google.protobuf import text_format
from naiad.protos import model_config_pb2
from naiad.scheduling.ensemble import decoupled_workflow


def _config(text: str):
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def _model(name: str, inputs, outputs, decoupled: bool = False):
    tensors = lambda names: ", ".join(  # noqa: E731
        f'{{ name: "{n}" data_type: TYPE_INT32 dims: [ 1 ] }}' for n in names
    )
    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    return _config(
        f'name: "{name}" {policy} input [ {tensors(inputs)} ] output [ {tensors(outputs)} ]'
    )


# The composing models: "stream" is decoupled (one input, two outputs), "join" takes two.
MODELS = {
    "stream": _model("stream", ["X"], ["P", "Q"], decoupled=True),
    "join": _model("join", ["X", "Y"], ["Z"]),
    "double": _model("double", ["X"], ["Z"]),
}


def _ensemble(steps: list[tuple[str, dict, dict]], outputs=("OUT",), decoupled=False):
    text = 'name: "ens" platform: "ensemble" '
    if decoupled:
        text += "model_transaction_policy { decoupled: true } "
    text += 'input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ] output [ '
    text += ", ".join(f'{{ name: "{o}" data_type: TYPE_INT32 dims: [ 1 ] }}' for o in outputs)
    maps = [
        " ".join(f'{kind} {{ key: "{k}" value: "{v}" }}' for k, v in mapping.items())
        for _m, inputs, outs in steps
        for kind, mapping in (("input_map", inputs), ("output_map", outs))
    ]
    text += " ] ensemble_scheduling { step [ "
    text += ", ".join(
        f'{{ model_name: "{model}" model_version: -1 {maps[2 * i]} {maps[2 * i + 1]} }}'
        for i, (model, _i, _o) in enumerate(steps)
    )
    config = _config(text + " ] }")
    return decoupled_workflow(config, [MODELS[model] for model, _i, _o in steps])


def _mixed(model: str) -> str:
    return (
        f"in ensemble ens, step of model '{model}' receives inputs originated from different "
        "decoupled models"
    )


def test_a_step_fed_by_a_stream_and_the_request_is_refused_naming_its_model():
    steps = [
        ("stream", {"X": "N"}, {"P": "p"}),
        ("join", {"X": "p", "Y": "N"}, {"Z": "z"}),
        ("double", {"X": "z"}, {"Z": "OUT"}),
    ]
    assert _ensemble(steps) == (_mixed("join"), False)


def test_outputs_from_a_stream_and_the_request_are_refused_naming_the_ensemble():
    steps = [("stream", {"X": "N"}, {"P": "OUT"}), ("double", {"X": "N"}, {"Z": "OTHER"})]
    assert _ensemble(steps, outputs=("OUT", "OTHER")) == (_mixed("ens"), False)


def test_two_outputs_of_one_decoupled_step_may_meet_again():
    steps = [
        ("stream", {"X": "N"}, {"P": "p", "Q": "q"}),
        ("join", {"X": "p", "Y": "q"}, {"Z": "OUT"}),
    ]
    assert _ensemble(steps) == (None, True)


def test_two_decoupled_steps_in_a_row_are_a_decoupled_ensemble():
    steps = [("stream", {"X": "N"}, {"P": "p"}), ("stream", {"X": "p"}, {"Q": "OUT"})]
    assert _ensemble(steps) == (None, True)


def test_two_separate_streams_joined_are_refused():
    steps = [
        ("stream", {"X": "N"}, {"P": "a"}),
        ("stream", {"X": "N"}, {"P": "b"}),
        ("join", {"X": "a", "Y": "b"}, {"Z": "z"}),
        ("double", {"X": "z"}, {"Z": "OUT"}),
    ]
    assert _ensemble(steps) == (_mixed("join"), False)


def test_without_a_decoupled_step_the_ensemble_is_not_decoupled_whatever_its_config_says():
    steps = [("double", {"X": "N"}, {"Z": "d"}), ("join", {"X": "d", "Y": "N"}, {"Z": "OUT"})]
    assert _ensemble(steps, decoupled=True) == (None, False)
    assert _ensemble(steps) == (None, False)
