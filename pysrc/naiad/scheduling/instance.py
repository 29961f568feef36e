"""One model instance: its worker process, start-up handshake, death and restart.

The worker inherits the arena, its wake eventfd, the frontend's notify eventfd and
the write end of a control pipe, on which it says `ready` (or why it failed) once the
model is loaded, and the read end of a settings pipe, on which the frontend writes the
server's log settings when it starts and after each change (`send_log_settings`,
naiad/observability/triton_log.py). The worker answers each later line with
`triton_log.SETTINGS_APPLIED` on its control pipe once it applies it, and a settings
change is answered only then, so that the next request's log lines follow it, as in
Triton, where the settings are the process's. A pidfd tells the event loop the moment
the process dies. A worker that runs one batch longer than its model's execution timeout
(repository/worker_limits.py) is killed, its requests fail saying so, and it restarts.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import signal
import subprocess
import sys
import weakref

from naiad import _core
from naiad.observability import custom_metrics, triton_log
from naiad.repository.worker_limits import EXECUTION_TIMEOUT_KEY, worker_limits
from naiad.worker.signals import WORKER_IGNORED_SIGNALS

log = logging.getLogger("naiad")

# Every instance whose worker has a settings pipe open (send_log_settings writes to them).
_FOLLOWING: weakref.WeakSet = weakref.WeakSet()
# How long a settings change waits for the workers: one stuck in C code holding the GIL
# cannot apply it, and must not hold the logging API (it applies it when it returns).
SETTINGS_WAIT_SECONDS = 2.0


def send_log_settings() -> asyncio.Future:
    """Tells every running worker the server's current log settings (after a change),
    at once; the future is done when each has applied them, or after
    SETTINGS_WAIT_SECONDS (an answer to the change waits for it)."""
    line = triton_log.settings_line()
    waits = [instance._send_settings(line) for instance in list(_FOLLOWING)]
    return asyncio.ensure_future(_all_applied([wait for wait in waits if wait is not None]))


def _finish(applied: asyncio.Future) -> None:
    if not applied.done():
        applied.set_result(None)


async def _all_applied(waits: list) -> None:
    if waits:
        await asyncio.wait(waits, timeout=SETTINGS_WAIT_SECONDS)


# A worker that keeps dying (or keeps failing to start again) is restarted with a growing
# pause, never in a tight loop; a worker that stayed up this long starts the count anew.
_RESTART_DELAYS = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
_STABLE_SECONDS = 30.0
# A loaded worker writes a byte on its control pipe every second (worker.main); one
# silent this long is frozen, and its model not ready until it beats again.
_HANG_SECONDS = 5.0


class WorkerStartError(Exception):
    pass


class Instance:
    def __init__(self, model, instance_id: int, channel_offset: int, wake_fd: int, args: dict):
        self.model = model  # scheduling.model.LoadedModel
        self.core = model.core
        self.instance_id = instance_id
        self.channel_offset = channel_offset
        self.wake_fd = wake_fd
        self.args = args  # Triton's initialize() args for this instance
        self.name = args["model_instance_name"]
        self.process: subprocess.Popen | None = None
        self._control_fd = -1
        self._settings_fd = -1  # write end of the worker's settings pipe
        # One future per settings line written and not yet applied, oldest first: the
        # worker applies them in order and says so once for each.
        self._settings_waits: collections.deque[asyncio.Future] = collections.deque()
        self._pidfd = -1
        self._stopping = False
        self._restarts = 0
        self._started_at = 0.0
        self._starting = False  # a failed start is reported by start(), not by _on_exit
        self._last_beat = 0.0
        self._hung = False
        self._watchdog: asyncio.TimerHandle | None = None
        self._exited: asyncio.Future | None = None
        self.limits = worker_limits(model.config)
        self._timed_out = False  # killed by the execution timeout: its requests say so
        # The watchdog also enforces the execution timeout, at a quarter of it.
        timeout = self.limits.execution_timeout_s
        self._watch_every = min(1.0, timeout / 4) if timeout else 1.0

    async def start(self, timeout: float = 300.0) -> None:
        """Starts the worker and waits until its model is loaded; raises WorkerStartError."""
        self._starting = True
        try:
            await self._start(timeout)
        finally:
            self._starting = False

    async def _start(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        settings_read, settings_write = os.pipe()
        # The worker reads this line before it loads the model: initialize() logs too.
        os.write(settings_write, triton_log.settings_line())
        os.set_blocking(settings_write, False)
        core = self.core
        command = [
            sys.executable,
            "-m",
            "naiad.worker",
            f"--arena-fd={core.arena_fd}",
            f"--channel-offset={self.channel_offset}",
            f"--wake-fd={self.wake_fd}",
            f"--notify-fd={core.notify_fd}",
            f"--control-fd={write_fd}",
            f"--settings-fd={settings_read}",
            # Not read by the worker: `ps` and /proc tell which model a worker serves.
            f"--instance={self.model.name}/{self.name}",
        ]
        if self.limits.memory_limit_bytes:
            command.append(f"--memory-limit={self.limits.memory_limit_bytes}")
        # From here until instance_down the core keeps the channel the worker maps.
        core.instance_starting(self.instance_id)
        # The worker ignores SIGINT/SIGTERM (the frontend owns shutdown), but only once
        # its interpreter reaches main(): a signal to the process group before that would
        # kill a starting worker. It starts with both blocked (a signal mask survives
        # exec) and unblocks them after ignoring them; a signal that arrives meanwhile
        # stays pending in the worker and is discarded there.
        unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, WORKER_IGNORED_SIGNALS)
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                pass_fds=(
                    core.arena_fd,
                    self.wake_fd,
                    core.notify_fd,
                    write_fd,
                    settings_read,
                ),
                env=self._env(),
                # A session (so a scheduling autogroup) of its own: where the kernel
                # groups by session, a worker sharing the frontend's group gets only part
                # of that group's weight on its CPU while the frontend runs on another, and
                # loses CPU to every other job there (perf/onnx_limit.py measured it). The
                # worker ignores the group's signals anyway and dies with the frontend
                # (PR_SET_PDEATHSIG), so nothing else changes.
                start_new_session=True,
            )
        except BaseException:
            os.close(read_fd)
            os.close(settings_write)
            core.instance_down(self.instance_id)  # no process was started
            raise
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
            os.close(write_fd)
            os.close(settings_read)
        self._close_settings()
        self._settings_fd = settings_write
        _FOLLOWING.add(self)
        self.process.stdin.write(json.dumps(self.args).encode())
        self.process.stdin.close()
        self._control_fd = read_fd
        self._exited = loop.create_future()
        self._pidfd = os.pidfd_open(self.process.pid)
        loop.add_reader(self._pidfd, self._on_exit)
        try:
            message = await asyncio.wait_for(self._read_control(), timeout)
        except asyncio.TimeoutError:
            self._kill()
            raise WorkerStartError(
                f"instance '{self.name}' did not load within {timeout:.0f}s"
            ) from None
        if message.get("status") != "ready":
            await self._wait_exit(5.0)
            raise WorkerStartError(message.get("message") or "worker exited while loading")
        core.instance_up(self.instance_id)
        self._started_at = self._last_beat = loop.time()
        loop.add_reader(read_fd, self._on_beat)
        self._watchdog = loop.call_later(self._watch_every, self._watch)

    async def _read_control(self) -> dict:
        """The next JSON line from the worker, or {} when it closed the pipe (it died)."""
        loop = asyncio.get_running_loop()
        buffer = b""
        while b"\n" not in buffer:
            ready = loop.create_future()
            loop.add_reader(self._control_fd, ready.set_result, None)
            try:
                await ready
            finally:
                loop.remove_reader(self._control_fd)
            chunk = os.read(self._control_fd, 4096)
            if not chunk:
                return {}
            buffer += chunk
        line, _, after = buffer.partition(b"\n")
        self._count_applied(after)  # acknowledgements go after the handshake line
        return json.loads(line)

    def _send_settings(self, line: bytes) -> asyncio.Future | None:
        """Writes a settings line; the future is done once the worker applied it (None
        when nothing was written)."""
        if self._settings_fd < 0:
            return None
        try:
            os.write(self._settings_fd, line)  # one short line: written whole or not at all
        except BlockingIOError:
            log.warning(
                "instance '%s' has not read its log settings; it keeps the previous ones",
                self.name,
            )
            return None
        except OSError:  # the worker is gone: _on_exit closes the pipe
            return None
        applied = asyncio.get_running_loop().create_future()
        self._settings_waits.append(applied)
        return applied

    def _count_applied(self, chunk: bytes) -> None:
        """Counts the settings lines the worker says it applied in `chunk` (control-pipe
        bytes) and finishes the waits they complete."""
        waits = self._settings_waits
        for _ in range(min(chunk.count(triton_log.SETTINGS_APPLIED), len(waits))):
            _finish(waits.popleft())

    def _env(self) -> dict:
        env = _worker_env()
        # Where the models' pb_utils metrics live (observability/custom_metrics.py), and the name
        # its refusals give.
        env[custom_metrics.CUSTOM_METRICS_DIR] = custom_metrics.server_folder()
        env[custom_metrics.INSTANCE_NAME] = self.name
        return env

    def _close_settings(self) -> None:
        _FOLLOWING.discard(self)
        if self._settings_fd >= 0:
            os.close(self._settings_fd)
            self._settings_fd = -1
        while self._settings_waits:  # the worker is gone: none to wait for
            _finish(self._settings_waits.popleft())

    def _on_beat(self) -> None:
        try:
            alive = os.read(self._control_fd, 4096)
        except OSError:
            alive = b""
        if not alive:  # the worker closed the pipe: _on_exit follows
            asyncio.get_running_loop().remove_reader(self._control_fd)
            return
        self._last_beat = asyncio.get_running_loop().time()
        self._count_applied(alive)

    def _watch(self) -> None:
        """Marks the model not ready while this worker is silent, ready again when it
        beats (a frozen worker is not killed: it may be in a long call that holds the GIL)."""
        loop = asyncio.get_running_loop()
        if self._execution_timed_out():
            return  # killed: _on_exit fails its batch and restarts it
        silent = loop.time() - self._last_beat
        if silent > _HANG_SECONDS and self.name not in self.model.instances_down:
            log.error(
                "instance '%s' of model '%s' has not answered for %.0fs: not ready until it does",
                self.name,
                self.model.name,
                silent,
            )
            self.model.instances_down.add(self.name)
            self._hung = True
        elif silent <= _HANG_SECONDS and self._hung:
            log.info("instance '%s' of model '%s' answers again", self.name, self.model.name)
            self.model.instances_down.discard(self.name)
            self._hung = False
        self._watchdog = loop.call_later(self._watch_every, self._watch)

    def _execution_timed_out(self) -> bool:
        """Kills the worker when its oldest running batch has run past the model's
        execution timeout; True when it did."""
        timeout = self.limits.execution_timeout_s
        if not timeout or self._timed_out:
            return self._timed_out
        since = self.core.running_since(self.instance_id)
        if not since:
            return False
        running = (_core.now_ns() - since) / 1e9
        if running <= timeout:
            return False
        log.error(
            "instance '%s' of model '%s' has run a batch for %.1fs, past its execution "
            "timeout of %gs (%s): killing it",
            self.name,
            self.model.name,
            running,
            timeout,
            EXECUTION_TIMEOUT_KEY,
        )
        self._timed_out = True
        self._kill()
        return True

    def _on_exit(self) -> None:
        loop = asyncio.get_running_loop()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._hung:
            self.model.instances_down.discard(self.name)  # the restart decides from here
            self._hung = False
        loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = -1
        returncode = self.process.wait()
        if self._control_fd >= 0:
            loop.remove_reader(self._control_fd)
            os.close(self._control_fd)
            self._control_fd = -1
        self._close_settings()
        failed = self.core.instance_down(self.instance_id)
        reason = None
        if self._timed_out:
            self._timed_out = False
            reason = (
                f"Failed to process the request(s) for model '{self.model.name}': the model "
                f"instance ran longer than its execution timeout of "
                f"{self.limits.execution_timeout_s:g}s ({EXECUTION_TIMEOUT_KEY}) and was "
                "killed; it is being restarted"
            )
        self.model.manager.on_completions(failed, reason)
        if not self._exited.done():
            self._exited.set_result(returncode)
        manager = self.model.manager
        if (
            self._stopping
            or self._starting
            or not self.model.ready_once
            or not manager.server_live()
        ):
            return  # asked to stop, never served, or the server is shutting down
        if loop.time() - self._started_at > _STABLE_SECONDS:
            self._restarts = 0
        # Not ready to health checks until the worker is back.
        self.model.instances_down.add(self.name)
        log.error(
            "instance '%s' of model '%s' exited with %s; failed %d batch(es) in flight; restarting",
            self.name,
            self.model.name,
            returncode,
            len(failed),
        )
        self._schedule_restart()

    def _schedule_restart(self) -> None:
        delay = _RESTART_DELAYS[min(self._restarts, len(_RESTART_DELAYS) - 1)]
        self._restarts += 1
        loop = asyncio.get_running_loop()
        loop.call_later(delay, lambda: asyncio.ensure_future(self._restart()))

    async def _restart(self) -> None:
        if self._stopping or not self.model.manager.server_live():
            return
        try:
            await self.start()
        except Exception as exc:
            if self._stopping:
                return
            # Try again later: a model whose initialize fails every time waits ever longer.
            log.error("instance '%s' failed to restart: %s", self.name, exc)
            self._schedule_restart()
            return
        self.model.instances_down.discard(self.name)

    async def _wait_exit(self, timeout: float):
        try:
            return await asyncio.wait_for(asyncio.shield(self._exited), timeout)
        except asyncio.TimeoutError:
            return None

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()

    async def stop(self, timeout: float = 30.0) -> None:
        """Asks the worker to finalize and exit; kills it when it does not in time."""
        self._stopping = True
        if self.process is None or self._exited is None or self._exited.done():
            return
        self.core.stop_instance(self.instance_id)
        if await self._wait_exit(timeout) is None:
            log.warning("instance '%s' did not stop within %.0fs; killing it", self.name, timeout)
            self._kill()
            await self._wait_exit(5.0)


def _worker_env() -> dict:
    env = dict(os.environ)
    # Make the naiad package importable in the worker exactly as in the frontend,
    # whether it is installed or run from a source tree.
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env
