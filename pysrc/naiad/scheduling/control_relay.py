"""A model's own model control (pb_utils.load_model / unload_model), relayed to ModelControl.

Owns the worker's control requests in progress (their tasks) and which models, still in
their initialize, wait for which loads, to refuse a load that would wait for itself.
Called only on the event loop (the completions router hands it COMPLETION_CONTROL), so
it has no lock; the answer goes back to the waiting worker through the core.
"""

from __future__ import annotations

import asyncio
import logging

import orjson

from naiad.errors import Internal, InvalidArgument, NaiadError

log = logging.getLogger("naiad")


class ControlRelay:
    def __init__(self, core, control):
        self.core = core
        self.control = control  # repository.control.ModelControl: the same rules, messages
        self._tasks: set = set()  # loads and unloads running for a worker
        # Model -> the models its instances in initialize wait to load or unload.
        self._initialize_waits: dict[str, list[str]] = {}

    def take(self, instance_id: int, tag: int, read) -> None:
        """A worker's control request (COMPLETION_CONTROL; `read`: its control block's
        (JSON, file contents), or None): run as the repository extension's load or
        unload, answered to the worker while it waits."""
        task = asyncio.ensure_future(self._answer(instance_id, tag, read))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, instance_id: int, tag: int, read) -> None:
        loop = asyncio.get_running_loop()
        served = loop.create_future()

        def on_served() -> None:
            if not served.done():
                served.set_result(None)

        caller, name = None, ""
        try:
            if read is None:
                raise Internal("the model's load or unload request could not be read")
            text, contents = read
            request = orjson.loads(text)
            name = str(request.get("name", ""))
            op = "load" if request.get("op") == "load" else "unload"
            # A caller still in its initialize holds its own model's load: it must not
            # wait for a load that waits for it (itself, or a cycle of initializes).
            caller = str(request.get("model", "")) if request.get("initializing") else None
            if caller is not None:
                self._refuse_wait_cycle(caller, name, op)
                self._initialize_waits.setdefault(caller, []).append(name)
            if op == "load":
                parameters: dict = {}
                if request.get("config"):
                    parameters["config"] = request["config"]
                parameters.update(zip(request.get("files") or (), contents))
                work = self.control.load(name, parameters, from_model=True, served=on_served)
            else:
                dependents = bool(request.get("unload_dependents"))
                work = self.control.unload(name, dependents, served=on_served)
            task = asyncio.ensure_future(work)
            # Answered once the change serves: versions it replaces (the caller's own,
            # when a model reloads or unloads itself) drain after the answer, or the
            # caller would wait for itself.
            await asyncio.wait({task, served}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                task.result()
            else:
                self._tasks.add(task)
                task.add_done_callback(_log_late_failure)
                task.add_done_callback(self._tasks.discard)
            reply = {}
        except NaiadError as exc:
            reply = {"error": exc.message}
        except Exception as exc:  # a bug: the model still gets an answer
            log.exception("a model's load or unload request failed")
            reply = {"error": str(exc) or type(exc).__name__}
        finally:
            waits = self._initialize_waits.get(caller) if caller is not None else None
            if waits is not None and name in waits:
                waits.remove(name)
                if not waits:
                    del self._initialize_waits[caller]
        self.core.reply_control(instance_id, tag, orjson.dumps(reply))

    def _refuse_wait_cycle(self, caller: str, name: str, op: str) -> None:
        """Refuses `caller`'s (in its initialize) load or unload of `name` when `name`'s
        load waits for `caller`: `name` is `caller`, or its initialize waits (through
        others') for a load of `caller`."""
        chain, stack, seen = {name: [caller, name]}, [name], set()
        while stack:
            current = stack.pop()
            if current == caller:
                raise InvalidArgument(
                    f"failed to {op} '{name}' from the initialize of '{caller}': it waits for "
                    f"that initialize ({' -> '.join(chain[current])})"
                )
            if current in seen:
                continue
            seen.add(current)
            for target in self._initialize_waits.get(current, ()):
                chain.setdefault(target, [*chain[current], target])
                stack.append(target)


def _log_late_failure(task) -> None:
    """A model's unload or reload that failed after its caller was answered (while the
    replaced versions drained): logged, as the HTTP route's would be."""
    if not task.cancelled() and task.exception() is not None:
        log.error("unloading the replaced versions failed: %s", task.exception())
