"""mkdocs hook: a page's relative link to a repository file outside docs/ (a source file, a
test, perf/README.md) works on GitHub but would be a dead link on the built site. On the
site it becomes the file's path in backticks, or, with `repo_url` set in mkdocs.yml, a link
to the file there. A link whose file does not exist is left alone, so `mkdocs build
--strict` still fails on it (tests/test_docs.py checks the same on GitHub's side)."""

from __future__ import annotations

import re
from pathlib import Path

LINK = re.compile(r"(?<!!)\[([^\]\n]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def _rewrite(line: str, page_dir: Path, docs: Path, root: Path, repo_url: str | None) -> str:
    def replace(match: re.Match) -> str:
        text, target, anchor = match.group(1), match.group(2), match.group(3) or ""
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            return match.group(0)
        resolved = (page_dir / target).resolve()
        if resolved.is_relative_to(docs) or not resolved.is_relative_to(root):
            return match.group(0)
        if not resolved.exists():
            return match.group(0)  # mkdocs reports it
        path = resolved.relative_to(root).as_posix()
        if repo_url:
            return f"[{text}]({repo_url.rstrip('/')}/blob/main/{path}{anchor})"
        shown = text.strip("`")
        return f"`{path}`" if shown == path or shown == Path(path).name else f"{text} (`{path}`)"

    return LINK.sub(replace, line)


def on_page_markdown(markdown: str, *, page, config, files) -> str:
    docs = Path(config["docs_dir"]).resolve()
    root = Path(config["config_file_path"]).resolve().parent
    page_dir = (docs / page.file.src_path).parent
    out, fenced = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        out.append(line if fenced else _rewrite(line, page_dir, docs, root, config.get("repo_url")))
    return "\n".join(out)
