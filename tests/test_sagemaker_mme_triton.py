"""The SageMaker multi-model endpoint against the real Triton 2.51 (where it is installed,
tests/triton_peer.py; its build has the endpoint: `tritonserver --help` lists
--allow-sagemaker): the same story (tests/sagemaker_mme_cases.py), each server loading
from its own copy of the folders, gets the same status, content type and body."""

from __future__ import annotations

import pytest
from sagemaker_mme_cases import make_folders, run_story
from server_harness import NaiadServer, _free_ports
from test_sagemaker_vertex_triton import _wait_listening
from triton_peer import TritonPeer, needs_triton

pytestmark = needs_triton

_ARGS = ["--model-control-mode=explicit", "--allow-sagemaker=true"]
# Load errors whose wording is each server's own (a config parser's message): the
# status and content type are compared, and that the body is an error.
_OWN_WORDING = ("load broken",)


def _folders(root) -> dict:
    """An empty start-up repository and the story's folders under `root`."""
    (root / "repository").mkdir(parents=True)
    return make_folders(root)


def _rooted(value, root: str):
    """`value` (an answer's JSON) with the server's own folder root written as ROOT."""
    if isinstance(value, dict):
        return {k: _rooted(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [_rooted(v, root) for v in value]
    if isinstance(value, str):
        return value.replace(root, "ROOT")
    return value


def _normalized(answers: dict, root) -> dict:
    return {case: (s, kind, _rooted(body, str(root))) for case, (s, kind, body) in answers.items()}


def test_the_multi_model_endpoint_answers_as_triton(tmp_path):
    naiad_folders = _folders(tmp_path / "naiad")
    triton_folders = _folders(tmp_path / "triton")
    naiad_port, triton_port = _free_ports(2)
    with TritonPeer(
        tmp_path / "triton" / "repository", tmp_path, [*_ARGS, f"--sagemaker-port={triton_port}"]
    ) as triton:
        triton.wait_ready([])
        _wait_listening(triton_port, triton.log_path)
        triton_answers = _normalized(run_story(triton_port, triton_folders), tmp_path / "triton")
    with NaiadServer(
        tmp_path / "naiad" / "repository",
        log_dir=tmp_path,
        extra_args=[*_ARGS, f"--sagemaker-port={naiad_port}"],
    ) as naiad:
        naiad.wait_for("ready")
        naiad_answers = _normalized(run_story(naiad_port, naiad_folders), tmp_path / "naiad")
    assert triton_answers["load plain"][0] == 200, triton_answers["load plain"]
    assert triton_answers["invoke ens"][0] == 200, triton_answers["invoke ens"]
    differing = []
    for case, theirs in triton_answers.items():
        ours = naiad_answers[case]
        if case in _OWN_WORDING:
            same = ours[:2] == theirs[:2] and "error" in ours[2] and "error" in theirs[2]
        else:
            same = ours == theirs
        if not same:
            differing.append(f"{case}:\n  naiad  {ours!r:.400}\n  triton {theirs!r:.400}")
    if differing:
        pytest.fail("\n".join(differing), pytrace=False)
