"""Statistics of the requests workers submit themselves (BLS calls, ensemble steps).

Owns the counting of the core's COMPLETION_ROUTED and COMPLETION_ROUTED_REFUSED
records on the called model, as Triton counts them, and a cache of which model version
each instance serves. Called only on the event loop (the completions router), no lock.
"""

from __future__ import annotations

from naiad import _core
from naiad.scheduling.in_flight import QUEUE_FAILURE_REASONS


class RoutedStats:
    def __init__(self, table):
        self.table = table  # the served models: .models, .core_models()
        self._instance_models: dict = {}  # instance id -> the model version it serves

    def record(self, instance_id: int, numbers: list, batch_id: int = 0) -> None:
        """Statistics of requests workers submitted (BLS, ensemble steps) that instance
        `instance_id` answered: counted for its model as Triton counts them."""
        if instance_id == _core.NO_INSTANCE:  # a worker's request to an ensemble
            model = self.table.core_models().get(batch_id)
            if model is not None and len(numbers) >= 11:
                count, rows, _queue_ns, request_ns, _in, c_infer, _out, _whole = numbers[:8]
                timings = [0, 0, c_infer, 0]
                model.stats.record_successes(count, rows, request_ns, 0, timings)
                model.stats.record_execution(rows, timings)
            return
        model = self._model_of_instance(instance_id)
        if model is None or len(numbers) < 11:
            return
        count, rows, queue_ns, request_ns, c_input, c_infer, c_output, whole = numbers[:8]
        failed, failed_rows, failed_ns = numbers[8:11]
        timings = [0, c_input, c_infer, c_output]
        if count:
            model.stats.record_successes(count, rows, request_ns, queue_ns, timings)
        # Those the model failed are its failures, as a client's (Triton counts a BLS
        # call its backend failed on the called model).
        for _ in range(failed):
            model.stats.record_failure(failed_ns // failed)
        if whole:
            model.stats.record_execution(rows + failed_rows, timings)

    def record_refused(self, instance_id: int, numbers: list) -> None:
        """Workers' requests (BLS calls) the model of instance `instance_id` refused from
        its queue: its failures, with the reason a client's request refused so gets."""
        model = self._model_of_instance(instance_id)
        if model is None or len(numbers) < 3:
            return
        status, count, refused_ns = numbers[:3]
        reason = QUEUE_FAILURE_REASONS.get(status, "OTHER")
        for _ in range(count):
            model.stats.record_failure(refused_ns // max(count, 1), reason)

    def _model_of_instance(self, instance_id: int):
        """The loaded model version instance `instance_id` serves, or None."""
        model = self._instance_models.get(instance_id)
        if model is None:
            for versions in self.table.models.values():
                for candidate in versions.values():
                    for instance in getattr(candidate, "instances", ()):
                        self._instance_models[instance.instance_id] = candidate
            model = self._instance_models.get(instance_id)
        return model
