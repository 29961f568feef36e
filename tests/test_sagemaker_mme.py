"""The SageMaker multi-model endpoint (http/sagemaker_models.py, the /models routes of
csrc/http1/endpoint_routes.h), black-box: a server with --allow-sagemaker in explicit
model control loads models from folders the test makes, lists, describes, invokes and
unloads them. tests/test_sagemaker_mme_triton.py sends the same story to Triton 2.51.
The repository registration under it (repository/registry.py) is tested here too."""

from __future__ import annotations

import asyncio
import json

import pytest
import requests
from endpoint_cases import send_all
from naiad import _core
from naiad.errors import InvalidArgument
from naiad.http.routes import HttpRequest
from naiad.http.sagemaker_models import SageMakerModels, model_layout
from naiad.repository.catalog import Catalog
from naiad.repository.registry import RegistrationError
from sagemaker_mme_cases import make_folders, run_story
from server_harness import NaiadServer, _free_ports


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    """The story's answers, and the server (still up) that gave them."""
    root = tmp_path_factory.mktemp("mme")
    (root / "repository").mkdir()
    folders = make_folders(root)
    port = _free_ports(1)[0]
    server = NaiadServer(
        root / "repository",
        log_dir=tmp_path_factory.mktemp("logs"),
        extra_args=[
            "--model-control-mode=explicit",
            "--allow-sagemaker=true",
            f"--sagemaker-port={port}",
        ],
    )
    server.start()
    server.sagemaker_port = port
    try:
        yield run_story(port, folders), folders, server
    finally:
        server.stop()


def _outputs(answer) -> dict:
    assert answer[0] == 200, answer
    return {o["name"]: o["data"] for o in answer[2]["outputs"]}


def test_loaded_models_are_listed_described_and_invoked(story):
    answers, folders, _ = story
    assert answers["load plain"][:1] == (200,), answers["load plain"]
    assert answers["load ens"][:1] == (200,), answers["load ens"]
    assert answers["list"][0] == 200
    assert answers["list"][2] == {
        "models": [
            {"modelName": "ens_hash", "modelUrl": str(folders["ens"])},
            {"modelName": "plain_hash", "modelUrl": str(folders["plain"])},
        ]
    }
    assert answers["describe plain"][2] == {
        "modelName": "plain_hash",
        "modelUrl": str(folders["plain"]),
    }
    assert answers["describe unknown"][0] == 404
    a, b = list(range(16)), [1] * 16
    plain = _outputs(answers["invoke plain"])
    assert plain == {
        "OUTPUT0": [x + y for x, y in zip(a, b)],
        "OUTPUT1": [x - y for x, y in zip(a, b)],
    }
    # ensemble_add_sub: add_sub twice, (a + b) + (a - b), (a + b) - (a - b).
    ens = _outputs(answers["invoke ens"])
    assert ens == {"OUTPUT0": [2.0 * x for x in a], "OUTPUT1": [2.0 * y for y in b]}
    assert answers["invoke unknown"][:2] == (404, "text/plain")
    assert _outputs(answers["invoke plain as ens"]) == ens
    # An invoke's errors are 400s, as Triton answers them (an unknown model included).
    assert answers["invoke plain as unknown"][:2] == (400, "application/json")
    assert "unknown model" in answers["invoke plain as unknown"][2]["error"]
    assert answers["invoke plain bad input"][:2] == (400, "application/json")


def test_a_name_loaded_twice_is_a_conflict(story):
    answers, folders, _ = story
    assert answers["load plain again"] == (
        409,
        "text/plain",
        {"error": f"model repository '{folders['plain']}' has already been registered"},
    )
    # A loaded folder under another name: the folder is registered already.
    assert answers["load ens name again"] == answers["load plain again"]
    # Another folder under a loaded name: the name's mapping conflicts.
    assert answers["load ens name from another folder"] == (
        409,
        "text/plain",
        {"error": "failed to register 'ens_hash', there is a conflicting mapping for 'ens_hash'"},
    )


def test_a_failed_load_leaves_nothing_registered(story):
    answers, _, _ = story
    status, kind, body = answers["load broken"]
    assert (status, kind) == (400, "text/plain")
    assert "max_batch_size" in body["error"], body
    assert answers["describe broken"][0] == 404
    # The same name and folder load once the config is good: nothing was left behind.
    assert answers["load broken fixed"][0] == 200, answers["load broken fixed"]
    assert _outputs(answers["invoke broken fixed"])["OUTPUT1"] == [float(i - 1) for i in range(16)]
    assert answers["load without a body"] == (
        400,
        "text/plain",
        {"error": "failed to register '', repository not found"},
    )


def test_a_load_body_that_is_no_json_is_refused(story):
    # Triton 2.51 aborts on this one (its parse error leaves the load without a url).
    _, _, server = story
    answer = send_all(server.sagemaker_port, [("not JSON", "POST", "/models", b"{nope", {})])
    status, kind, body = answer["not JSON"]
    assert (status, kind) == (400, "text/plain")
    assert body["error"].startswith("failed to parse the request JSON buffer: "), body


def test_unload_takes_the_model_and_its_composing_models_away(story):
    answers, _, server = story
    assert answers["unload ens"][0] == 200
    assert answers["invoke ens unloaded"][0] == 404
    assert answers["describe ens unloaded"][0] == 404
    assert answers["unload ens again"][0] == 404
    assert answers["load ens again"][0] == 200, answers["load ens again"]
    assert _outputs(answers["invoke ens loaded again"])["OUTPUT0"] == [2.0 * x for x in range(16)]
    for case in ("unload all ens", "unload plain", "unload broken fixed"):
        assert answers[case][0] == 200, (case, answers[case])
    assert answers["list empty"][2] == {"models": []}
    # Nothing registered is left: the index lists none of the folders' models, and the
    # composing add_sub is not served.
    index = requests.post(server.url + "/v2/repository/index", timeout=10).json()
    assert index == []
    assert requests.get(server.url + "/v2/models/add_sub/ready", timeout=10).status_code != 200


def test_registration_maps_a_folder_to_a_name(tmp_path):
    fixed = tmp_path / "fixed"
    (fixed / "m").mkdir(parents=True)
    extra = tmp_path / "extra"
    for name in ("model", "other", "m2"):
        (extra / name).mkdir(parents=True)
    catalog = Catalog([fixed])
    catalog.register(str(extra), {"served_as": "model"})
    folders, duplicates = catalog.scan()
    assert folders == {
        "m": fixed / "m",
        "served_as": extra / "model",
        "other": extra / "other",
        "m2": extra / "m2",
    }
    assert catalog.locate("served_as") == extra / "model"
    with pytest.raises(LookupError):
        catalog.locate("model")  # a mapped folder is found by its mapped name only
    with pytest.raises(RegistrationError, match="has already been registered") as info:
        catalog.register(str(fixed), {})
    assert info.value.conflict
    with pytest.raises(RegistrationError, match="conflicting mapping for 'served_as'"):
        catalog.register(str(tmp_path / "fixed" / "m"), {"served_as": "x"})
    with pytest.raises(RegistrationError, match="repository not found") as info:
        catalog.register(str(tmp_path / "none"), {})
    assert not info.value.conflict
    catalog.unregister(str(extra))
    assert catalog.scan()[0] == {"m": fixed / "m"}
    with pytest.raises(RegistrationError, match="failed to unregister"):
        catalog.unregister(str(extra))


def test_the_model_folder_of_a_load_follows_tritons_rules(tmp_path):
    one = tmp_path / "one"
    (one / "only").mkdir(parents=True)
    assert model_layout(str(one)) == (str(one), "only")
    several = tmp_path / "several"
    for name in ("a_step", "pipeline", "z_step"):
        (several / name).mkdir(parents=True)
    (several / "pipeline" / "config.pbtxt").write_text('platform:  "ensemble"\n')
    (several / "z_step" / "config.pbtxt").write_text('backend: "python"\n')
    assert model_layout(str(several)) == (str(several), "pipeline")
    # config.pbtxt at the url's root: only SageMaker's /opt/ml/models/<hash>/model path
    # names a repository (its parent), as in Triton.
    (one / "config.pbtxt").write_text("")
    assert model_layout(str(one)) == ("", "")
    assert model_layout(str(tmp_path / "missing")) == (str(tmp_path / "missing"), "")


class _Control:
    """ModelControl's registration, recorded."""

    def __init__(self):
        self.registered: dict[str, dict] = {}

    def register_repository(self, repository, mapping):
        self.registered[repository] = mapping

    def unregister_repository(self, repository):
        del self.registered[repository]


class _OutOfMemory:
    """A manager whose loads fail with one of Triton's out-of-memory messages."""

    def __init__(self):
        self.control = _Control()

    async def load_model(self, name):
        raise InvalidArgument(f"load failed for model '{name}': CUDA out of memory")


def test_a_load_out_of_memory_is_507_and_unregisters(tmp_path):
    (tmp_path / "m").mkdir()
    models = SageMakerModels(_OutOfMemory())
    body = json.dumps({"model_name": "h", "url": str(tmp_path)}).encode()
    request = HttpRequest("POST", _core.SAGEMAKER_MODELS_PATH, "", {}, body)
    reply = asyncio.run(models.load(request))
    assert reply.status == 507
    assert json.loads(b"".join(reply.body)) == {
        "error": "load failed for model 'h': CUDA out of memory"
    }
    assert models.manager.control.registered == {} and models.loaded == {}
    assert "h" not in models.names
