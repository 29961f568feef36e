"""Triton's trace extension: settings (settings.py), the trace file (trace_file.py) and
the traces of sampled requests (tracer.py)."""
