"""custom_metrics: a counter, a gauge and a histogram made by each of its two instances
(so shared between them, as in Triton), changed one operation per request.

OP is JSON [operation, value]; RESULT is "ok <counter> <gauge>" (the values after the
operation, as value() reads them) or "raised <type>: <message>"."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.requests = pb_utils.MetricFamily(
            name="custom_requests",
            description="requests counted",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.level = pb_utils.MetricFamily(
            name="custom_level", description="a level", kind=pb_utils.MetricFamily.GAUGE
        )
        self.latency = pb_utils.MetricFamily(
            name="custom_latency", description="a latency", kind=pb_utils.MetricFamily.HISTOGRAM
        )
        labels = {"model": "custom_metrics", "quote": 'say "hi"'}
        self.counter = self.requests.Metric(labels=labels)
        self.gauge = self.level.Metric(labels={"model": "custom_metrics"})
        self.histogram = self.latency.Metric(
            labels={"model": "custom_metrics"}, buckets=[0.5, 1, 2.5]
        )

    def _apply(self, operation, value):
        if operation == "increment":
            self.counter.increment(value)
        elif operation == "set":
            self.gauge.set(value)
        elif operation == "gauge_increment":
            self.gauge.increment(value)
        elif operation == "observe":
            self.histogram.observe(value)
        elif operation == "set_counter":
            self.counter.set(value)
        elif operation == "set_histogram":
            self.histogram.set(value)
        elif operation == "histogram_without_buckets":
            self.latency.Metric(labels={"other": "1"})
        elif operation == "counter_with_buckets":
            self.requests.Metric(labels={"other": "1"}, buckets=[1.0])
        elif operation == "unsorted_buckets":
            self.latency.Metric(labels={"other": "2"}, buckets=[2.0, 1.0])
        elif operation == "same_name_other_kind":
            pb_utils.MetricFamily(
                name="custom_requests", description="d", kind=pb_utils.MetricFamily.GAUGE
            )
        elif operation == "label_not_a_string":
            self.level.Metric(labels={"n": 1})

    def execute(self, requests):
        responses = []
        for request in requests:
            operation, value = json.loads(
                pb_utils.get_input_tensor_by_name(request, "OP").as_numpy()[0]
            )
            try:
                self._apply(operation, value)
                result = f"ok {self.counter.value()} {self.gauge.value()}"
            except pb_utils.TritonModelException as exc:
                result = f"raised TritonModelException: {exc.message()}"
            output = np.array([result.encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("RESULT", output)]))
        return responses
