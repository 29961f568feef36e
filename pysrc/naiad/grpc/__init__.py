"""The gRPC front end: HTTP/2 and gRPC framing in C++ (csrc/http2/grpc_connection.h, on the
I/O loop of csrc/http1/http_io.h), the GRPCInferenceService methods here, over the same
manager the HTTP front end uses."""
