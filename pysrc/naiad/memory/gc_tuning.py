"""Garbage-collector settings for the serving processes.

Each request allocates a few dozen short-lived containers; with the default threshold (700)
the cyclic collector runs a young-generation pass every few requests. Once a process has
loaded its models, what exists then lives for the process's lifetime: freeze it out of
the collector's scans and let young garbage accumulate longer between passes. Reference
counting still frees almost everything at once; only cycles wait for a pass.
"""

import gc

YOUNG_THRESHOLD = 50_000


def settle_after_startup() -> None:
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
