"""Dockerfile and Dockerfile.gpu: their build steps, run here without Docker (base images
cannot be pulled on these machines).

Both Dockerfiles keep their install steps in deploy/docker/build-wheel.sh (builder stage) and
deploy/docker/install.sh (runtime stage). This test reads the CPU Dockerfile, copies the
builder stage's COPY sources (minus .dockerignore) into a fresh folder, runs the builder's
RUN line there, then the runtime stage's install RUN line into a fresh virtual environment,
with the image paths (/src, /wheels, /opt/naiad, /tmp/install.sh) mapped to temporary
folders; then the installed `naiad serve --help` must work and the image's ENTRYPOINT + CMD
must serve the example repository. pip's cache is reused; the wheel itself is always built.
The GPU Dockerfile runs the same scripts with NAIAD_EXTRAS=gpu,openai, which is checked
statically (the gpu extra needs CUDA hosts and is never installed here); the CPU image's
NAIAD_EXTRAS=openai (tokenizers, for the example tiny_llm) is installed here.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import requests
from deploy_support import ManifestServer
from server_harness import EXAMPLE_MODELS, REPO_ROOT, _free_ports

DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERFILE_GPU = REPO_ROOT / "Dockerfile.gpu"
BUILD_TIMEOUT = 600


def parse_dockerfile(path: Path) -> list[dict]:
    """Stages: [{"from": str, "name": str|None, "instructions": [(KEYWORD, text)]}], with
    continuation lines joined and comments dropped."""
    logical, current = [], ""
    for line in path.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    stages: list[dict] = []
    for line in logical:
        keyword, _, text = line.strip().partition(" ")
        keyword = keyword.upper()
        text = " ".join(text.split())
        if keyword == "FROM":
            image, _, name = text.partition(" AS ")
            stages.append({"from": image, "name": name or None, "instructions": []})
        elif stages:
            stages[-1]["instructions"].append((keyword, text))
    return stages


def _args(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"ARG (\w+)=(\S+)", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def _instructions(stage: dict, keyword: str) -> list[str]:
    return [text for kw, text in stage["instructions"] if kw == keyword]


def _dockerignore() -> list[str]:
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _ignored(relative: str, patterns: list[str]) -> bool:
    for pattern in patterns:
        if pattern.startswith("**/"):
            tail = pattern[3:]
            if fnmatch.fnmatch(relative, tail) or fnmatch.fnmatch(relative, "*/" + tail):
                return True
        elif fnmatch.fnmatch(relative, pattern) or relative.startswith(pattern + "/"):
            return True
    return False


def copy_context(stage: dict, dest: Path) -> None:
    """The stage's `COPY src... dst` from the build context (this checkout) into `dest`
    (the stage's WORKDIR), leaving out what .dockerignore leaves out of the context."""
    patterns = _dockerignore()
    for text in _instructions(stage, "COPY"):
        assert not text.startswith("--from"), "builder stages copy from the context only"
        *sources, target = shlex.split(text)
        for source in sources:
            src = REPO_ROOT / source.rstrip("/")
            files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
            for file in files:
                relative = str(file.relative_to(REPO_ROOT))
                if _ignored(relative, patterns):
                    continue
                if src.is_file():
                    out = dest / target / file.name if target.endswith("/") else dest / target
                else:
                    out = dest / target / file.relative_to(src)
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, out)


def _stages(path: Path) -> tuple[dict, dict]:
    builder, runtime = parse_dockerfile(path)
    assert builder["name"] == "builder"
    return builder, runtime


# -- static checks of both Dockerfiles ------------------------------------------------------


@pytest.mark.parametrize("path", [DOCKERFILE, DOCKERFILE_GPU], ids=lambda p: p.name)
def test_dockerfile_shape(path):
    builder, runtime = _stages(path)
    assert _instructions(builder, "WORKDIR") == ["/src"]
    assert "sh deploy/docker/build-wheel.sh /wheels" in _instructions(builder, "RUN")
    assert _instructions(runtime, "COPY")[:2] == [
        "--from=builder /wheels /wheels",
        "deploy/docker/install.sh /tmp/install.sh",
    ]
    install = [run for run in _instructions(runtime, "RUN") if "/tmp/install.sh" in run]
    assert len(install) == 1 and "NAIAD_PREFIX=/opt/naiad" in install[0]
    # No compiler in the runtime stage: the core arrives compiled, in the wheel.
    assert not any("g++" in run for run in _instructions(runtime, "RUN"))
    (user,) = _instructions(runtime, "USER")
    assert user.split(":")[0] not in ("0", "root")
    assert _instructions(runtime, "EXPOSE") == ["8000 8001 8002"]
    assert [json.loads(e) for e in _instructions(runtime, "ENTRYPOINT")] == [["naiad", "serve"]]
    env = " ".join(_instructions(runtime, "ENV"))
    assert "PATH=/opt/naiad/bin:$PATH" in env and "PIP_NO_CACHE_DIR=1" in env


def test_cpu_image_is_slim_python_and_gpu_image_is_cuda_runtime_with_gpu_extra():
    cpu_base = _args(DOCKERFILE)["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", cpu_base), cpu_base
    gpu_base = _args(DOCKERFILE_GPU)["CUDA_IMAGE"]
    assert gpu_base.startswith("nvidia/cuda:") and "-runtime-" in gpu_base, gpu_base
    _, runtime = _stages(DOCKERFILE_GPU)
    install = next(run for run in _instructions(runtime, "RUN") if "/tmp/install.sh" in run)
    assert "NAIAD_EXTRAS=gpu,openai " in install
    # Both images serve the example repository, whose tiny_llm needs the openai extra.
    _, cpu_runtime = _stages(DOCKERFILE)
    assert "NAIAD_EXTRAS=openai " in " ".join(_instructions(cpu_runtime, "RUN"))
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    (gpu,) = re.findall(r"^gpu = \[(.*)\]$", pyproject, re.MULTILINE)
    names = {re.split(r"[<>=\[ ;]", requirement)[0] for requirement in json.loads(f"[{gpu}]")}
    assert names == {"onnxruntime-gpu", "tensorrt", "cuda-python", "nvidia-ml-py"}


def test_both_images_build_from_the_same_sources():
    assert _instructions(_stages(DOCKERFILE)[0], "COPY") == _instructions(
        _stages(DOCKERFILE_GPU)[0], "COPY"
    )


def test_dockerignore_matching():
    patterns = ["**/__pycache__", "**/*.so", "pysrc/naiad/_core.cpp", ".venv"]
    assert _ignored("pysrc/naiad/_core.cpython-311-x86_64-linux-gnu.so", patterns)
    assert _ignored("pysrc/naiad/__pycache__", patterns)
    assert _ignored("pysrc/naiad/_core.cpp", patterns)
    assert _ignored(".venv/bin/python", patterns)
    assert not _ignored("pysrc/naiad/_core.pyx", patterns)


# -- the CPU Dockerfile's steps, run --------------------------------------------------------


def _run(command: str, cwd: Path, env: dict[str, str], log: Path) -> None:
    with open(log, "ab") as out:
        out.write(f"$ {command}\n".encode())
        out.flush()
        done = subprocess.run(
            ["sh", "-c", command],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=BUILD_TIMEOUT,
        )
    assert done.returncode == 0, f"{command} failed:\n" + log.read_text()[-4000:]


def test_cpu_image_steps_install_a_working_naiad(tmp_path):
    builder, runtime = _stages(DOCKERFILE)
    image = {  # paths inside the image -> here
        "/src": tmp_path / "src",
        "/wheels": tmp_path / "wheels",
        "/opt/naiad": tmp_path / "opt" / "naiad",
        "/tmp/install.sh": tmp_path / "install.sh",
    }

    def here(command: str) -> str:
        for inside, outside in sorted(image.items(), key=lambda kv: -len(kv[0])):
            command = re.sub(
                r"(?<![\w./-])" + re.escape(inside) + r"(?=[\s/]|$)", str(outside), command
            )
        return command

    log = tmp_path / "build.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    # The interpreter of this test run stands in for the base image's python3.
    env["PYTHON"] = sys.executable
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if Path(p) != Path(sys.executable).parent
    )

    # builder: COPY the sources into /src, then its RUN lines that build (apt-get is the
    # base image's business: this machine has a compiler already).
    copy_context(builder, image["/src"])
    assert not list(image["/src"].rglob("*.so")), ".dockerignore must keep local builds out"
    for run in _instructions(builder, "RUN"):
        if run.startswith("apt-get"):
            continue
        _run(here(run), image["/src"], env, log)
    (wheel,) = image["/wheels"].glob("naiad-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert any(re.fullmatch(r"naiad/_core\..*\.so", n) for n in names), names
    assert "naiad/protos/grpc_service_pb2.py" in names

    # runtime: the install RUN line (its env assignments included) with the script the
    # Dockerfile copies to /tmp/install.sh.
    shutil.copy2(REPO_ROOT / "deploy" / "docker" / "install.sh", image["/tmp/install.sh"])
    install = next(run for run in _instructions(runtime, "RUN") if "/tmp/install.sh" in run)
    _run(here(install), tmp_path, env, log)
    assert not image["/tmp/install.sh"].exists() and not image["/wheels"].exists()

    naiad = image["/opt/naiad"] / "bin" / "naiad"
    help_text = subprocess.run(
        [str(naiad), "serve", "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    for flag in ("--model-repository", "--http-port", "--grpc-port", "--metrics-port"):
        assert flag in help_text

    # ENTRYPOINT + CMD, as `docker run` would start it, with the example repository the image
    # copies to /models, on free ports and loopback.
    entrypoint = json.loads(_instructions(runtime, "ENTRYPOINT")[0])
    cmd = json.loads(_instructions(runtime, "CMD")[0])
    assert cmd == ["--model-repository=/models"]
    # /models: model_repository/ as the image's COPY takes it (.dockerignore applies).
    models = tmp_path / "models"
    patterns = _dockerignore()
    for file in sorted(p for p in EXAMPLE_MODELS.rglob("*") if p.is_file()):
        if not _ignored(str(file.relative_to(REPO_ROOT)), patterns):
            (models / file.relative_to(EXAMPLE_MODELS)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, models / file.relative_to(EXAMPLE_MODELS))
    http_port, grpc_port, metrics_port = _free_ports(3)  # distinct, unlike three free_port()s
    argv = [
        str(image["/opt/naiad"] / "bin" / entrypoint[0]),
        *entrypoint[1:],
        f"--model-repository={models}",
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        f"--metrics-port={metrics_port}",
        "--host=127.0.0.1",
    ]
    server = ManifestServer(
        argv,
        http_port=http_port,
        metrics_port=metrics_port,
        repository=models,
        log_dir=tmp_path,
        name="image",
    )
    server.start(wait="ready", timeout=120)
    try:
        assert requests.get(f"{server.url}/v2/models/add_sub", timeout=10).status_code == 200
    finally:
        assert server.stop() == 0, server.stderr_text()[-3000:]
