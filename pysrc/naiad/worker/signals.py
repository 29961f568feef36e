"""The signals a worker ignores, and how it starts ignoring them.

The frontend owns shutdown and asks a worker through its channel; a Ctrl-C in the
terminal, or a supervisor's SIGTERM to the process group, reaches the workers too and
must not kill them. The frontend spawns a worker with these signals blocked (a signal
mask survives exec) so that none arrives before the worker ignores them.
"""

from __future__ import annotations

import signal

WORKER_IGNORED_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


def ignore_shutdown_signals() -> None:
    """Ignores the signals, then unblocks them: one that arrived meanwhile is discarded."""
    for signum in WORKER_IGNORED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, WORKER_IGNORED_SIGNALS)
