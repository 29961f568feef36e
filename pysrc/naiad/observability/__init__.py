"""What the server tells about itself: Prometheus metrics (Triton's names), the custom
metrics of Python models, GPU readings, latency summaries and the server log."""
