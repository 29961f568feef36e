"""Answering completed batches: each request of a completion gets its response or error.

Owns routing the core's completions (from `Core.poll`, or those the C++ I/O loop leaves
to Python) to their requests in flight: the lane's answers (HTTP or gRPC, made by the
codec), the general path's InferResponses, streamed responses, failed batches, and the
requests' statistics; routed-request records go to RoutedStats, control requests to
the ControlRelay. Called only on the event loop (the core's notify eventfd wakes it), so
it has no lock; a result block is freed once its completion is answered.
"""

from __future__ import annotations

import logging

from naiad import _core, outcome_record
from naiad.errors import (
    Cancelled,
    Internal,
    InvalidArgument,
    Unavailable,
    error_of_kind,
    error_of_triton_code,
)
from naiad.memory.shm import truncated_error as shm_truncated_error
from naiad.memory.shm import write_returned_outputs as shm_write_returned_outputs
from naiad.scheduling.ensemble import EnsembleModel
from naiad.scheduling.in_flight import GRPC_STREAM, QUEUE_FAILURE_REASONS
from naiad.scheduling.stats import record_executions
from naiad.sequence_parameters import SEQUENCE_TIMEOUT
from naiad.types import InferResponse, OutputTensor

log = logging.getLogger("naiad")


class CompletionRouter:
    def __init__(
        self,
        core,
        lane,
        grpc_lane,
        in_flight,
        table,
        traces,
        routed_stats,
        control_relay,
        io_link,
        arrivals,
        live,
    ):
        self.core = core
        self.lane = lane  # _core.FastLane: answers the HTTP lane's requests
        self.grpc_lane = grpc_lane  # _core.GrpcLane: answers the gRPC lane's
        self.in_flight = in_flight  # scheduling/in_flight.py: who waits for which answer
        self.table = table  # scheduling/model_table.py
        self.traces = traces  # scheduling/request_traces.py
        self.routed_stats = routed_stats  # COMPLETION_ROUTED(_REFUSED) records
        self.control_relay = control_relay  # COMPLETION_CONTROL requests
        self.io_link = io_link  # the C++ I/O loop, whose requests it may adopt
        self.arrivals = arrivals  # scheduling/arrivals.py: for the core's poll
        self.live = live  # () -> bool: False once the server is shutting down

    def drain(self) -> None:
        """The core's notify eventfd fired: its completions are answered."""
        if self.io_link.engine is not None:  # it answers its own requests, in C++
            self.io_link.engine.drain()
            return
        self.on_completions(self.core.poll(self.arrivals.possible()))

    def on_completions(self, completions: list, reason: str | None = None) -> None:
        """Answers the requests of completed batches and frees their result blocks.

        A request stays in `in_flight` until the moment it is answered. So whatever goes
        wrong while one completion is answered (an unreadable result block, a bug), the
        requests it left unanswered get an internal error and the other completions are
        answered as usual: no client waits forever. `reason`: what failed requests
        are told instead of the status's own words."""
        for completion in completions:
            try:
                self._complete(completion, reason)
            except Exception:
                log.exception(
                    "answering the requests of a completed batch failed; those not answered "
                    "yet get an internal error"
                )
                self.in_flight.fail_unanswered(completion.request_ids)

    def _complete(self, completion, reason):
        status, request_ids = completion.status, completion.request_ids
        _batch, _instance = completion.batch_id, completion.instance_id
        offset, size = completion.result_offset, completion.result_size
        dispatch_ns = completion.dispatch_ns
        if status == _core.COMPLETION_ROUTED:
            self.routed_stats.record(_instance, request_ids, _batch)
            return
        if status == _core.COMPLETION_ROUTED_REFUSED:
            self.routed_stats.record_refused(_instance, request_ids)
            return
        if status == _core.COMPLETION_CONTROL:  # the block is freed when read
            try:
                self.control_relay.take(
                    _instance, _batch, self.core.read_control_block(offset, size)
                )
            finally:
                self.core.free(offset)
            return
        try:
            get = self.in_flight.get
            pendings = [get(request_id) for request_id in request_ids]
            if None in pendings and self.io_link.in_flight_count:
                # The I/O loop's requests in a completion it left to Python.
                theirs = self.io_link.adopt(request_ids)
                if theirs:
                    pendings = [p or theirs.get(i) for p, i in zip(pendings, request_ids)]
            live = [p for p in pendings if p is not None]
            if not live:
                if offset and status == _core.COMPLETION_OK:
                    self._late_execution(_instance, offset, size, len(request_ids))
                return
            end_ns = _core.now_ns()
            if status != _core.COMPLETION_OK:
                self._fail_batch(live, status, end_ns, reason)
                return
            timings = None
            lane = [p for p in live if p.lane]
            # By lane: another I/O loop's requests are answered from its own lane.
            by_lane: dict = {}
            for p in lane:
                by_lane.setdefault(id(p.fast_lane), []).append(p)
            for ones in by_lane.values():
                timings = self._answer_lane(ones, offset, size, request_ids, dispatch_ns, end_ns)
            if len(lane) != len(live):
                timings = self._answer_general(pendings, offset, size, dispatch_ns, end_ns)
            if timings is not None and timings[0]:  # streamed responses carry none
                model = live[0].model
                record_executions(model.stats, _instance, [p.batch_size for p in live], timings)
                if getattr(model, "iterative", False):
                    self._count_runs(live, timings, dispatch_ns, end_ns)
        finally:
            if offset:
                self.core.free(offset)

    def _answer_lane(self, lane, offset, size, request_ids, dispatch_ns, end_ns):
        """Sends the fast lane's requests of a batch their responses, HTTP's or gRPC's
        (one codec answers both, so a batch is read once); returns the timings."""
        grpc_ids = {p.request_id for p in lane if p.grpc}
        if grpc_ids:
            streamed = {p.request_id for p in lane if p.grpc == GRPC_STREAM} or None
            result = self.grpc_lane.complete(
                offset, size, request_ids, grpc_ids, dispatch_ns, end_ns, streamed
            )
            if result is not None:
                self._send_stream_partials(result.partials)  # before the finals: block order
        else:
            result = lane[0].fast_lane.complete(offset, size, request_ids, dispatch_ns, end_ns)
        if result is None:
            self._fail_batch(lane, _core.COMPLETION_WORKER_FAILED, end_ns)
            return None
        timings = result.timings
        if timings[0]:  # the answers were made where compute_output ends: the traces' end
            end_ns = max(end_ns, timings[0] + timings[1] + timings[2] + timings[3])
        pop = self.in_flight.pop
        stats = lane[0].model.stats
        successes = inferences = request_ns = queue_ns = 0
        # Per-request durations only for the latency summaries (off unless configured).
        each = None if stats.summaries is None else []
        traces = self.traces.open_traces
        for reply in result.replies:
            request_id = reply.request_id
            pending = pop(request_id, None)
            if pending is None:  # answered already (failed, or the server is stopping)
                continue
            traced = traces and request_id in traces
            if traced:
                send_ns = _core.now_ns()
            if reply.status != _core.REPLY_FAILED:  # a model's error counts as a success
                successes += 1
                inferences += reply.batch_size
                request_ns += reply.request_ns
                queue_ns += reply.queue_ns
                if each is not None:
                    each.append((reply.request_ns, reply.queue_ns))
            else:
                stats.record_failure(reply.request_ns)
            try:
                if reply.error_kind:  # a gRPC request's failure
                    pending.on_done(None, error_of_kind(reply.error_kind, reply.error_message))
                else:  # HTTP's response bytes; gRPC's message bytes or GrpcAnswer
                    pending.on_done(reply.payload if reply.view is None else reply.view, None)
            except Exception:  # that client's connection; the others still get theirs
                log.exception("sending the response of request %d failed", request_id)
            if traced:
                self.traces.finish(request_id, timings, end_ns, (send_ns, _core.now_ns()))
        if grpc_ids:
            self.grpc_lane.release_answers()  # GrpcAnswers end before the block is freed
        if successes:
            stats.record_successes(successes, inferences, request_ns, queue_ns, timings, each)
        # A lane request whose final response is in the block is answered now; one without
        # gets it in a later block or fails when the batch ends (it stays pending).
        pending = self.in_flight
        final = set(result.finals)
        lost = [p.request_id for p in lane if p.request_id in final and p.request_id in pending]
        if lost:
            self.in_flight.fail_lost(lost, len(lane))
        return timings

    def _send_stream_partials(self, partials: list) -> None:
        """The responses before the last of ModelStreamInfer requests (a decoupled
        model's): each goes out at once; the request stays pending until its final one."""
        get = self.in_flight.get
        for reply in partials:
            pending = get(reply.request_id)
            if pending is None:
                continue
            try:
                if reply.error_kind:
                    error = error_of_kind(reply.error_kind, reply.error_message)
                    pending.on_done(None, error, False)
                else:
                    answer = reply.payload if reply.view is None else reply.view
                    pending.on_done(answer, None, False)
            except Exception:
                log.exception("sending a response of request %d failed", reply.request_id)

    def _answer_general(self, pendings, offset, size, dispatch_ns, end_ns):
        """Resolves the general path's requests of a batch from its response block
        (csrc/ipc/ipc_schema.h, read through _core); returns the timings."""
        block = _core.read_response_block(self.core.arena, offset, size)
        if block is None:
            raise ValueError(f"the response block at {offset} ({size} bytes) is not readable")
        timings = block.timings
        # The queue ends when the worker starts the batch (Triton's backend start), as
        # KServeCodec::complete counts the lane's.
        dispatch_ns = max(dispatch_ns, timings[0])
        if any(r.request_index >= len(pendings) for r in block.responses):
            raise ValueError(
                f"the response block names a request beyond the batch of {len(pendings)}"
            )
        arena = self.core.arena
        # Ensemble requests answered together started apart: each its own start.
        started = _core.response_started(arena, offset, size)
        # HTTP answers once: a request's final response is its answer. A request without
        # one in this block gets it in a later block, or fails when the batch ends (the
        # core's completion for it): it stays pending until then.
        for record, response in enumerate(block.responses):
            index = response.request_index
            flags, code = response.flags, response.error_code
            json, slots = response.json, response.outputs
            pending = pendings[index]
            if started is not None:
                dispatch_ns = started[record]
            if pending is not None and pending.stream:
                self._deliver_stream(
                    pending, flags, code, json, slots, timings, dispatch_ns, end_ns
                )
                continue
            if not flags & _core.RESPONSE_FINAL:
                continue
            if pending is not None and not pending.lane:
                error = code if flags & _core.RESPONSE_ERROR else None
                if pending.cache is not None and pending.model.lane_model is not None:
                    miss = pending.cache  # its result goes in the cache
                    self.lane.cache_insert(
                        pending.model.lane_model, miss.key, miss.lookup_ns, offset, size, index
                    )
                outcome = outcome_record.read(json)
                self._resolve(
                    pending, outcome, flags, error, arena, slots, timings, dispatch_ns, end_ns
                )
        return timings

    def _count_final(self, pending, flags: int, timings, dispatch_ns: int, end_ns: int) -> None:
        """Counts a request's final response (`flags`: RESPONSE_*) in its model's
        statistics, a failure or a success as _core.response_counts_as_failure says."""
        stats = pending.model.stats
        if _core.response_counts_as_failure(flags):
            stats.record_failure(end_ns - pending.submit_ns)
        else:
            stats.record_success(
                pending.batch_size,
                end_ns - pending.submit_ns,
                dispatch_ns - pending.submit_ns,
                timings,
            )
        if getattr(pending.model, "iterative", False) and pending.request.parameters.get(
            "sequence_start"
        ):
            # Triton 2.51 ends an iterative sequence with a cancelled request of its own,
            # which its statistics count as a failure (CANCELED; no duration of its own).
            stats.record_failure(0, "CANCELED")

    def _resolve(
        self, pending, outcome, flags, code, arena, slots, timings, dispatch_ns, end_ns
    ) -> None:
        """Answers a general-path request from its final response (`flags`, and `code`
        when it is an error)."""
        model = pending.model
        future = pending.future
        if future.done():  # the client went away; nothing to answer
            self.in_flight.pop(pending.request_id, None)
            return
        if code is not None:
            self._count_final(pending, flags, timings, dispatch_ns, end_ns)
            self.in_flight.pop(pending.request_id, None)
            future.set_exception(error_of_triton_code(code, outcome.error or ""))
            return
        # Copied out so the response block can be freed at once.
        tensors = [bytes(arena[start : start + nbytes]) for start, nbytes in slots]
        response = infer_response(model, pending.request.id, outcome, tensors)
        failure = None
        if isinstance(model, EnsembleModel):  # its outputs reach the frontend whole
            try:
                shm_write_returned_outputs(pending.request, response)
            except Internal as exc:
                failure = exc
        truncated = shm_truncated_error(pending.request)
        if truncated is not None:  # a region it used shrank under it (naiad/memory/shm.py)
            failure = InvalidArgument(truncated)
        if failure is not None:
            model.stats.record_failure(end_ns - pending.submit_ns)
            self.in_flight.pop(pending.request_id, None)
            future.set_exception(failure)
            return
        self._count_final(pending, flags, timings, dispatch_ns, end_ns)
        self.in_flight.pop(pending.request_id, None)
        future.set_result(response)
        if self.traces.open_traces:
            self.traces.finish_with_outputs(pending.request_id, response.outputs, timings, end_ns)

    def _count_runs(self, live: list, timings, dispatch_ns: int, end_ns: int) -> None:
        """An iterative model's execution (`timings`): each of its requests `live` that
        ran in it without finishing (the model rescheduled it) counts an inference and a
        success, as Triton counts every run of a request; the run that answers it counts
        with its answer."""
        pending = self.in_flight
        start_ns = max(dispatch_ns, timings[0])
        for p in live:
            if pending.get(p.request_id) is p:
                p.model.stats.record_success(
                    p.batch_size, end_ns - p.submit_ns, start_ns - p.submit_ns, timings
                )

    def _late_execution(self, instance_id: int, offset: int, size: int, batch_size: int) -> None:
        """A decoupled model's batch ended after its requests all had their final
        responses: its end block (no responses, the timings) still counts an execution."""
        block = _core.read_response_block(self.core.arena, offset, size)
        if block is None or block.responses or not block.timings[0]:
            return
        for versions in self.table.models.values():
            for model in versions.values():
                if not getattr(model, "decoupled", False):
                    continue
                if any(i.instance_id == instance_id for i in model.instances):
                    model.stats.record_execution(batch_size, block.timings)
                    return

    def _deliver_stream(
        self, pending, flags, code, json, slots, timings, dispatch_ns, end_ns
    ) -> None:
        """Hands one response of a streamed request to its consumer; the request is
        over (and counted) at its final one."""
        final = bool(flags & _core.RESPONSE_FINAL)
        error = code if flags & _core.RESPONSE_ERROR else None
        if final:
            self.in_flight.pop(pending.request_id, None)
            if self.traces.open_traces:
                self.traces.drop(pending.request_id)
            self._count_final(pending, flags, timings, dispatch_ns, end_ns)
        pending.deliver(flags, error, json, slots, self.core.arena, final)

    def _fail_batch(self, pendings: list, status: int, end_ns: int, reason=None) -> None:
        pop = self.in_flight.pop
        for pending in pendings:
            pop(pending.request_id, None)
            if self.traces.open_traces:  # a failed request's trace ends with it
                self.traces.finish(pending.request_id, None, end_ns)
            model = pending.model
            model.stats.record_failure(
                end_ns - pending.submit_ns, QUEUE_FAILURE_REASONS.get(status, "OTHER")
            )
            if status == _core.COMPLETION_CANCELLED:
                pending.fail(Cancelled("Request was cancelled"))
                continue
            if status == _core.COMPLETION_TIMED_OUT:
                pending.fail(Unavailable("Request timeout expired"))
                continue
            if status == _core.COMPLETION_SEQUENCE_TIMED_OUT:  # waited in the backlog
                pending.fail(Unavailable(SEQUENCE_TIMEOUT))
                continue
            if status == _core.COMPLETION_MODEL_GONE:
                # At shutdown every model goes: say why, as for the requests that outlive it.
                reason = not_ready_message(model) if self.live() else "server is shutting down"
                pending.fail(Unavailable(reason))
                continue
            if reason is not None:
                message = reason
            elif status == _core.COMPLETION_ARENA_FULL:
                pending.fail(
                    Unavailable(
                        f"Failed to process the request(s) for model '{model.name}': the "
                        "shared-memory arena has no room for the batch's outputs (--arena-size)"
                    )
                )
                continue
            elif status == _core.COMPLETION_INSTANCE_DIED:
                message = (
                    f"Failed to process the request(s) for model '{model.name}': the model "
                    "instance's worker process exited while running it; it is being restarted"
                )
            else:
                message = (
                    f"Failed to process the request(s) for model '{model.name}': the worker "
                    "could not run the batch (see the server log)"
                )
            pending.fail(Internal(message))


def infer_response(model, request_id: str, outcome, tensors: list) -> InferResponse:
    """The general path's response from a worker's outcome record (outcome_record.read)
    and the output bytes, or a cache entry's."""
    outputs = [
        OutputTensor(name, datatype, shape, data)
        for (name, datatype, shape), data in zip(outcome.outputs, tensors)
    ]
    return InferResponse(model.name, str(model.version), request_id, outputs, outcome.parameters)


def not_ready_message(model) -> str:
    """Triton's words for a request to a version that is not (or no longer) loaded."""
    return (
        f"Request for unknown model: '{model.name}' version {model.version} is not at ready state"
    )
