"""Protobuf and gRPC modules generated from protos/ (Triton-compatible, package `inference`).

The *_pb2.py modules are build outputs of tools/gen_protos.py and are not checked in:
model_config_pb2 (ModelConfig and friends), grpc_service_pb2 (KServe v2 + Triton messages)
and grpc_service_pb2_grpc (the GRPCInferenceService stub and servicer).
"""
