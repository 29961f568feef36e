"""Differential: a model that is not decoupled answering through response senders
(tests/models/sender_plain), on Naiad and on the real Triton 2.51, one request per way
of sending. Left out: "none" (Triton never answers it) and "two" (Triton answers 500
with the first response's body). Errors raised in execute() are compared up to where
Triton and Naiad say it was raised."""

from __future__ import annotations

import pytest
from server_harness import NaiadServer, make_repository
from test_response_sender import ANSWERS, answer
from triton_peer import TritonPeer, needs_triton

pytestmark = [
    pytest.mark.timeout(600),
    needs_triton,
]


@pytest.fixture(scope="module")
def urls(tmp_path_factory):
    root = tmp_path_factory.mktemp("response_sender_triton")
    repository = make_repository(root / "models", ["sender_plain"])
    with NaiadServer(repository, log_dir=root) as naiad:
        with TritonPeer(repository, root, []) as triton:
            triton.wait_ready(["sender_plain"])
            yield naiad.url, triton.url


def _comparable(got: tuple) -> tuple:
    status, value = got
    if isinstance(value, str):
        value = value.split("\n\nAt:")[0].split(" (at ")[0]
    return status, value


@pytest.mark.parametrize("mode", sorted(set(ANSWERS) - {"none"}))
def test_same_answer_as_triton(urls, mode):
    naiad, triton = (_comparable(answer(url, mode)) for url in urls)
    assert naiad == triton
