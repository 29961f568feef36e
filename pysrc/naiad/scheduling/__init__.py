"""The Python side of the core: loaded models, their worker instances, statistics."""
