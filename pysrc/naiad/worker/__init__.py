"""The worker process: one per model instance. See worker/main.py."""
