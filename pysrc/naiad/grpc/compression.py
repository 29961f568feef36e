"""--grpc-infer-response-compression-level: Triton's level names, in the order of gRPC
core's level numbers (the C++ connection's response_compression, csrc/http2/grpc_connection.h
response_encoding_for)."""

COMPRESSION_LEVELS = ("none", "low", "medium", "high")
