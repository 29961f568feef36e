"""The gRPC front end: HTTP/2 and gRPC framing in C++ (csrc/http2/grpc_connection.h, through
naiad._core.GrpcConnection), the GRPCInferenceService methods here, over the same manager
the HTTP front end uses."""
