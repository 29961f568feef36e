"""What a client may read of a host path: a file inside a model repository, named from the
repository's root (`add_sub/1/model.py`), never the folders above it.

Load errors carry the paths where they happen (config parsing, a missing model file, a
framework's own message about the file it could not read); the operator's log keeps them
whole, and this is applied where a message leaves for a client (the load answer and the
repository index). Triton puts the absolute path in those answers; Naiad does not, so a
client learns nothing of the host's folders (issue 16's security promise).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

__all__ = ["PathRedactor"]


class PathRedactor:
    def __init__(self, repositories: list[Path]):
        prefixes: set[str] = set()
        for root in repositories:
            for form in (str(root), os.path.abspath(root), os.path.realpath(root)):
                prefixes.add(form.rstrip("/") + "/")
        # Longest first, so a repository inside another one loses all of its prefix.
        self._prefixes = sorted(prefixes, key=len, reverse=True)
        # The temporary copies that `file:` overrides are served from (overrides.py).
        temp = re.escape(tempfile.gettempdir().rstrip("/"))
        self._copies = re.compile(temp + r"/naiad-model-[^/\s'\"]+/")

    def for_client(self, text: str) -> str:
        """`text` with every repository root (and override copy) before a model's folder
        taken away."""
        if not text:
            return text
        for prefix in self._prefixes:
            text = text.replace(prefix, "")
        return self._copies.sub("", text)
