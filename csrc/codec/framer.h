// How a wire protocol plugs into the request path. The path has three layers:
//
//   framer (one per protocol)      bytes <-> ParsedRequest / InferResponse
//     http1/http_framer.h: HTTP/1.1 + KServe REST JSON (kserve_json.h)
//     http2/grpc_lane.h: gRPC ModelInferRequest/Response (protobuf) over HTTP/2
//   KServe codec (kserve_codec.h)  validate, lay out, queue; result block -> InferResponse
//   core (core.h)                  queues, batches, workers
//
// A framer does four things and nothing else:
//
// 1. Find complete requests in received bytes and route them: its own framing (HTTP
//    head or HTTP/2 frames + HPACK) and URL/method -> a codec model index (`lane_model`). Requests
//    it cannot frame or route go to the Python front end, which answers them.
// 2. Read the request body into a ParsedRequest (infer_types.h): names, datatypes,
//    shapes, views of the tensor bytes, requested output names, id, parameters
//    (priority, timeout). A body its reader does not take goes to the Python general
//    path, which builds the same ParsedRequest and runs the same validator.
// 3. Call KServeCodec::submit(model, request, codec.new_request_id(), now, &error):
//    kQueued (keep a reply slot for the id), kInvalid (answer `error` with the
//    protocol's invalid-argument status, or leave it to the general path, which says
//    the same), kFallback (leave it to the general path).
// 4. When KServeCodec::complete() returns an Answer, serialize its InferResponse with a
//    ResponseWriter (below): the caller asks size(), allocates the destination once
//    (the Python bytes object handed to the socket) and write()s into it, so the
//    tensor bytes are copied once, from the result block to the destination.
//
// The codec never sees wire bytes and a framer never sees the model config, the
// validator or the block layouts, so a second framer adds files and touches none.
#pragma once

#include <cstddef>

#include "codec/infer_types.h"

namespace naiad {

// Serializes responses to one protocol's wire bytes. Implementations are stateless
// and const: any thread may call them.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // The bytes write() puts for `response`.
  virtual size_t size(const InferResponse& response) const = 0;
  // Writes exactly size(response) bytes at `out`.
  virtual void write(const InferResponse& response, char* out) const = 0;
};

}  // namespace naiad
