"""What the latency summaries cost the fast lane's answer loop while they are off.

ModelManager._answer_lane walks a batch's replies in Python; with summaries off its only
new step per reply is `if each is not None`. This times that loop body (a copy of it, over
64 replies) with and without the check, side by side in one run, three times. The
machine is shared and noisy: read the differences against their spread.

    .venv/bin/python perf/summary_off_cost.py
"""

import timeit

REPLIES = [(i, True, 1, 1000 + i, 100 + i, b"x") for i in range(64)]


def loop_before():
    successes = inferences = request_ns = queue_ns = 0
    for _request_id, ok, batch_size, took_ns, queued_ns, _http in REPLIES:
        if ok:
            successes += 1
            inferences += batch_size
            request_ns += took_ns
            queue_ns += queued_ns


def loop_now(each=None):
    successes = inferences = request_ns = queue_ns = 0
    for _request_id, ok, batch_size, took_ns, queued_ns, _http in REPLIES:
        if ok:
            successes += 1
            inferences += batch_size
            request_ns += took_ns
            queue_ns += queued_ns
            if each is not None:
                each.append((took_ns, queued_ns))


def per_reply_ns(function) -> float:
    return min(timeit.repeat(function, number=20000, repeat=5)) / 20000 / len(REPLIES) * 1e9


if __name__ == "__main__":
    for _ in range(3):
        before, now = per_reply_ns(loop_before), per_reply_ns(loop_now)
        print(f"per reply: {before:.1f} ns before, {now:.1f} ns now ({now - before:+.1f} ns)")
