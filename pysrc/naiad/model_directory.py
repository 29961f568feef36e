"""The model directory: how a worker finds the model a BLS call or an ensemble step names.
The frontend writes it (ModelDirectory); a worker reads it (worker/bls.py Directory).

A worker submits its own requests to the core by ModelHandle (channel.h SubmitMessage),
so it needs name/version -> handle, and the target's inputs to validate and lay out the
request as the frontend would. The frontend writes that table, as JSON, to a file of its
own (atomically: a new file renamed over the old) whenever the served models change
(`ModelTable.publish` / `withdraw`, a version's state); workers find the file through
the NAIAD_MODEL_DIRECTORY environment variable they inherit and read it again only when
a name or version is not in the copy they have, or when the core answers that a handle
is gone (a reload or unload since). The core stays the authority: a stale handle is
refused (kModelGone), never delivered to another model.

    {"models": {name: {"serving": version | null,
                       "versions": {"1": {"handle": int, "ready": bool,
                                          "spec": [name, version, max_batch_size,
                                                   inputs, outputs],
                                          "decoupled": bool}}}}}

`spec` is what `_core.ModelSpec` is built from (validation.RequestValidator.spec_args).
"""

from __future__ import annotations

import os
import tempfile

import orjson

ENVIRONMENT_VARIABLE = "NAIAD_MODEL_DIRECTORY"


class ModelDirectory:
    """The frontend's writer of the table; one per ModelTable."""

    def __init__(self, table):
        self.model_table = table  # scheduling/model_table.py: the served models
        self.folder = tempfile.mkdtemp(prefix="naiad-directory-")
        self.path = os.path.join(self.folder, "models.json")
        # Workers started from now on inherit where the table is.
        os.environ[ENVIRONMENT_VARIABLE] = self.path
        self._last = b""
        self.update()

    def table(self) -> dict:
        models = {}
        serving = self.model_table.serving
        for name, versions in self.model_table.models.items():
            entry = {}
            for version, model in versions.items():
                handle = getattr(model, "core_model", None)
                validate = getattr(model, "_validate", None)
                if handle is None or validate is None:
                    continue
                policy = model.config.model_transaction_policy
                entry[str(version)] = {
                    "handle": handle,
                    "ready": bool(model.ready),
                    "spec": list(validate.spec_args),
                    "decoupled": bool(policy.decoupled),
                }
            default = serving.get(name)
            models[name] = {
                "serving": default.version if default is not None else None,
                "versions": entry,
            }
        return {"models": models}

    def update(self) -> None:
        """Writes the table if it changed (a temporary file renamed over the old)."""
        data = orjson.dumps(self.table())
        if data == self._last:
            return
        fd, temporary = tempfile.mkstemp(dir=self.folder, prefix=".models-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(temporary, self.path)
        except OSError:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise
        self._last = data

    def close(self) -> None:
        for name in os.listdir(self.folder):
            try:
                os.unlink(os.path.join(self.folder, name))
            except OSError:
                pass
        try:
            os.rmdir(self.folder)
        except OSError:
            pass
