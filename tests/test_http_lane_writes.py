"""How the HTTP protocol writes the fast lane's answers (naiad/http/protocol.py), driven
in-process with a fake lane and a fake transport that records each write: answers due in
one wake-up go out in one write per connection, in request order; answers the lane gives
at once (cache hits, refusals) need no reply slot when none is owed before them, and wait
behind those that are."""

from __future__ import annotations

import asyncio

import pytest
from naiad.http.protocol import HttpProtocol


class FakeTransport:
    def __init__(self):
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data) -> None:
        self.writes.append(bytes(data))

    def writelines(self, parts) -> None:
        self.writes.append(b"".join(bytes(p) for p in parts))

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return False


class Arrivals:
    """The batcher's hint (scheduling/arrivals.py): connections open and waiting."""

    open = 0
    waiting = 0


class FakeManager:
    def __init__(self):
        self.cancelled: list[int] = []

    def cancel(self, request_id: int) -> None:
        self.cancelled.append(request_id)


class FakeLane:
    """A router whose lane takes every request of a read: 'Q<n>;' is queued as request n
    (its answer later, through `answer`), 'H<text>;' is answered at once with <text>."""

    def __init__(self):
        self.manager = FakeManager()
        self.on_done: dict[int, object] = {}

    def take_http(self, data: bytes, max_body: int, new_on_done, max_requests: int) -> int:
        for item in data.decode().split(";")[:-1]:
            if item[0] == "Q":
                self.on_done[int(item[1:])] = new_on_done(int(item[1:]))
            else:
                new_on_done(0, ("hit " + item[1:] + "|").encode())
        return len(data)

    def answer(self, request_id: int) -> None:
        self.on_done.pop(request_id)(f"answer {request_id}|".encode(), None)


@pytest.fixture
def connection():
    loop = asyncio.new_event_loop()
    lane = FakeLane()
    arrivals = Arrivals()
    protocol = HttpProtocol(lane, loop=loop, arrivals=arrivals)
    transport = FakeTransport()
    protocol.connection_made(transport)
    yield loop, lane, protocol, transport, arrivals
    loop.close()


def _turn(loop) -> None:
    """Runs the callbacks scheduled so far (one pass of the event loop)."""
    loop.run_until_complete(asyncio.sleep(0))


def test_pipelined_answers_of_one_wake_up_go_out_in_one_write(connection):
    loop, lane, protocol, transport, arrivals = connection
    protocol.data_received(b"Q1;Q2;Q3;")
    assert arrivals.waiting == 1 and transport.writes == []
    for request_id in (1, 2, 3):  # one batch's completions, delivered in one callback
        lane.answer(request_id)
    _turn(loop)
    assert transport.writes == [b"answer 1|answer 2|answer 3|"]
    assert not protocol.pending and arrivals.waiting == 0


def test_answers_finishing_out_of_order_are_written_in_request_order(connection):
    loop, lane, protocol, transport, _ = connection
    protocol.data_received(b"Q1;Q2;Q3;")
    lane.answer(3)
    _turn(loop)
    assert transport.writes == []  # 1 and 2 are still owed before it
    lane.answer(1)
    _turn(loop)
    assert transport.writes == [b"answer 1|"]
    lane.answer(2)
    _turn(loop)
    assert transport.writes == [b"answer 1|", b"answer 2|answer 3|"]


def test_one_request_at_a_time_is_written_at_once(connection):
    loop, lane, protocol, transport, arrivals = connection
    protocol.data_received(b"Q1;")
    lane.answer(1)  # no loop turn needed: the only reply owed goes out in deliver
    assert transport.writes == [b"answer 1|"] and arrivals.waiting == 0


def test_answers_given_at_once_go_out_together_without_slots(connection):
    _, _, protocol, transport, arrivals = connection
    protocol.data_received(b"Ha;Hb;Hc;")
    assert transport.writes == [b"hit a|hit b|hit c|"]
    assert not protocol.pending and arrivals.waiting == 0


def test_an_answer_given_at_once_waits_behind_a_queued_request(connection):
    loop, lane, protocol, transport, _ = connection
    protocol.data_received(b"Ha;Q1;Hb;")
    assert transport.writes == [b"hit a|"]  # before the queued one: sent with the take
    lane.answer(1)
    _turn(loop)
    assert transport.writes == [b"hit a|", b"answer 1|hit b|"]


def test_a_closed_connection_cancels_only_its_unanswered_requests(connection):
    _, lane, protocol, transport, arrivals = connection
    protocol.data_received(b"Q1;Q2;Hb;")
    lane.answer(2)
    protocol.connection_lost(None)
    assert lane.manager.cancelled == [1]
    assert arrivals.open == 0 and arrivals.waiting == 0
    lane.answer(1)  # a late answer of a closed connection is dropped
    assert transport.writes == []
