"""Memory shared with clients and devices: system and CUDA shared-memory regions, GPU
discovery and pinning, and the collector's settings for the serving processes."""
