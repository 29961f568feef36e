"""README.md and docs/ say what is true: every relative link and #anchor resolves, and every
command the README shows works as shown.

- Links: each relative Markdown link in README.md and docs/**/*.md names a file that exists,
  and its #anchor a heading of that file, as GitHub and mkdocs both spell it.
- Paths: each repository path README.md names in backticks exists.
- Commands: each `make` target named in a shell block exists in the Makefile; each
  `naiad serve` line parses with the real command line (`naiad.cli.build_parser`); the
  README's curl lines and Python blocks run, ports substituted, against `example_server`
  (model_repository/, what `make serve` serves), and the curl lines answer what the README
  says they answer.

`make docs` (mkdocs build --strict) checks the site's own links; this checks the README,
which is not part of the site, and the commands.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from naiad.cli import build_parser
from server_harness import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
DOCUMENTS = [README, *sorted(DOCS.rglob("*.md"))]

FENCE = re.compile(r"^(```|~~~)")
# [text](target) not preceded by '!' (images are links too, and checked the same way)
LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, code spans blanked out."""
    out = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)))
    return out


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block."""
    blocks = []
    language, body = None, []
    for line in text.splitlines():
        stripped = line.lstrip()
        if FENCE.match(stripped):
            if language is None:
                language, body = stripped[3:].strip() or "text", []
            else:
                blocks.append((language, "\n".join(body)))
                language = None
            continue
        if language is not None:
            body.append(line)
    return blocks


def _plain(heading: str) -> str:
    heading = re.sub(r"`([^`]*)`", r"\1", heading)
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return unicodedata.normalize("NFKD", heading).strip().lower()


def github_slug(heading: str) -> str:
    """GitHub's heading anchor: lowercase, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", _plain(heading)).replace(" ", "-")


def mkdocs_slug(heading: str) -> str:
    """Python-Markdown's toc.slugify (mkdocs' default): runs of spaces and hyphens are one."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", _plain(heading)).strip())


def anchors(path: Path) -> set[str]:
    """Anchors that both GitHub and mkdocs give a heading of `path`."""
    found = set()
    for _, line in prose_lines(path.read_text()):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            heading = match.group(1)
            if github_slug(heading) == mkdocs_slug(heading):
                found.add(github_slug(heading))
    return found


def relative_links(path: Path) -> list[tuple[int, str]]:
    links = []
    for number, line in prose_lines(path.read_text()):
        for match in LINK.finditer(line):
            target = match.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            links.append((number, target))
    return links


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_relative_links_and_anchors_resolve(document):
    broken = []
    for number, target in relative_links(document):
        file_part, _, anchor = target.partition("#")
        resolved = (document.parent / file_part).resolve() if file_part else document
        where = f"{document.relative_to(REPO_ROOT)}:{number}: {target}"
        if not resolved.exists():
            broken.append(f"{where}: no file {resolved}")
        elif resolved.is_relative_to(REPO_ROOT) is False:
            broken.append(f"{where}: outside the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(
                f"{where}: no heading with anchor '#{anchor}' in {resolved.relative_to(REPO_ROOT)} "
                f"(its anchors: {sorted(anchors(resolved))})"
            )
    assert not broken, "\n".join(broken)


def test_readme_links_into_docs():
    """The README is the way in: it links the site's index and, from its compatibility
    table, the pages of what differs and what is not done yet."""
    targets = {target.partition("#")[0] for _, target in relative_links(README)}
    for page in ("docs/index.md", "docs/differences.md", "docs/not_yet.md"):
        assert page in targets, f"README.md never links {page}"


def test_readme_stays_short():
    lines = README.read_text().count("\n")
    assert lines <= 200, f"README.md has {lines} lines; the rest belongs in docs/ (issue 44)"


def _build_output(path: str) -> bool:
    """A path git ignores (`build/site/`) is made by a make target, not kept in the
    repository: whether it exists says which targets ran, not whether the README is true."""
    return (
        subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO_ROOT, check=False).returncode
        == 0
    )


def test_repository_paths_in_readme_exist():
    tops = {entry.name for entry in REPO_ROOT.iterdir()}
    missing = []
    for number, line in enumerate(README.read_text().splitlines(), 1):
        for match in CODE_SPAN.finditer(line):
            span = match.group(2).strip()
            if not re.fullmatch(r"[\w.\-/]+", span) or "/" not in span:
                continue
            if span.split("/")[0] not in tops or "*" in span:
                continue
            if not (REPO_ROOT / span).exists() and not _build_output(span):
                missing.append(f"README.md:{number}: `{span}`")
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)


def shell_commands(text: str) -> list[str]:
    """The commands of every sh block of `text`: continuation lines and quoted newlines
    joined, comments dropped."""
    commands = []
    for language, body in code_blocks(text):
        if language not in ("sh", "bash", "shell", "console"):
            continue
        pending = ""
        for line in body.splitlines():
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            pending = pending + "\n" + line if pending else line
            try:
                shlex.split(pending.rstrip("\\"), comments=True)
            except ValueError:  # an open quote: the command goes on
                continue
            if pending.rstrip().endswith("\\"):
                pending = pending.rstrip()[:-1]
                continue
            commands.append(pending)
            pending = ""
        assert not pending, f"unterminated command in a shell block: {pending!r}"
    return commands


def _words(command: str) -> list[str]:
    return shlex.split(command, comments=True)


def makefile_targets() -> set[str]:
    """Targets the Makefile (and what it includes) defines, from make's own database."""
    database = subprocess.run(
        ["make", "--no-print-directory", "-pRrq", "-f", "Makefile", "__no_such_goal__"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    ).stdout
    return set(re.findall(r"^([A-Za-z0-9][\w./-]*):(?!=)", database, re.M))


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_make_targets_exist(document):
    targets = makefile_targets()
    assert {"serve", "test", "docs"} <= targets, "make's database was not read"
    named = []
    for command in shell_commands(document.read_text()):
        words = _words(command)
        if words and words[0] == "make":
            named += [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    unknown = sorted(set(named) - targets)
    assert not unknown, f"{document.name} runs make targets the Makefile lacks: {unknown}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_naiad_serve_lines_parse(document):
    parser = build_parser()
    for command in shell_commands(document.read_text()):
        words = _words(command)
        if len(words) >= 2 and Path(words[0]).name == "naiad" and words[1] == "serve":
            try:
                parser.parse_args(words[1:])
            except SystemExit:
                pytest.fail(f"{document.name}: `naiad serve` does not take: {command}")


def test_readme_names_the_make_serve_command():
    """The command the README says `make serve` runs is the Makefile's."""
    serve = [
        _words(c)
        for c in shell_commands(README.read_text())
        if _words(c)[:2] == [".venv/bin/naiad", "serve"]
    ]
    assert serve, "README.md shows no `.venv/bin/naiad serve` line"
    dry_run = subprocess.run(
        ["make", "--no-print-directory", "-n", "serve"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # The recipe is the last command make prints (after the install's, when it is due).
    recipe = dry_run[dry_run.rindex(".venv/bin/naiad serve") :].replace("\\\n", " ")
    assert _words(recipe) == serve[0], recipe


def _on_server(text: str, server) -> str:
    return text.replace("localhost:8000", f"127.0.0.1:{server.http_port}").replace(
        "localhost:8001", f"127.0.0.1:{server.grpc_port}"
    )


def test_readme_curl_lines_answer_as_shown(example_server, tmp_path):
    curls = [c for c in shell_commands(README.read_text()) if _words(c)[0] == "curl"]
    assert len(curls) >= 3, "README.md lost its curl examples"
    for command in curls:
        shown = re.search(r"#\s*(\S.*)$", command.splitlines()[0])
        # Exit status 22 on an HTTP error; the body still printed.
        ran = subprocess.run(
            [
                "bash",
                "-c",
                _on_server(command.replace("curl -s", "curl -s --fail-with-body"), example_server),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, f"{command}\nexit {ran.returncode}: {ran.stdout}{ran.stderr}"
        if shown and "-w" in _words(command):
            assert ran.stdout.strip() == shown.group(1).strip(), (command, ran.stdout)
            continue
        answer = json.loads(ran.stdout)
        model = re.search(r"/v2/models/([^/]+)/infer", command).group(1)
        assert answer["model_name"] == model and answer["outputs"], ran.stdout
        for output in answer["outputs"]:
            assert len(output["data"]) == math.prod(output["shape"]), output


def test_readme_mlp_torch_answer_is_the_one_shown(example_server):
    """The README prints mlp_torch's answer: its names, shapes and predicted classes."""
    readme = README.read_text()
    command = next(c for c in shell_commands(readme) if "mlp_torch" in c)
    shown = json.loads(
        re.sub(
            r",\.\.\.\]",
            "]",
            "".join(re.findall(r"^# (.*)$", readme.split(command)[1].split("```")[0], re.M)),
        )
    )
    ran = subprocess.run(
        ["bash", "-c", _on_server(command, example_server)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    answer = json.loads(ran.stdout)
    for got, want in zip(answer["outputs"], shown["outputs"], strict=True):
        assert (got["name"], got["datatype"], got["shape"]) == (
            want["name"],
            want["datatype"],
            want["shape"],
        )
        if want["datatype"] == "INT64":
            assert got["data"] == want["data"]
        else:
            assert got["data"][: len(want["data"])] == pytest.approx(want["data"], abs=1e-4)


def test_readme_python_blocks_run(example_server, tmp_path):
    """The README's Python blocks, in order in one interpreter (later ones use earlier
    names), against the example server."""
    blocks = [body for language, body in code_blocks(README.read_text()) if language == "python"]
    assert blocks, "README.md shows no Python"
    script = tmp_path / "readme_blocks.py"
    script.write_text(_on_server("\n\n".join(blocks), example_server))
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # add_sub's a + b, printed once over HTTP and once over gRPC
    a_plus_b = str(np.arange(16, dtype=np.float32).reshape(1, 16) + 1)
    assert ran.stdout.count(a_plus_b) == 2, ran.stdout
