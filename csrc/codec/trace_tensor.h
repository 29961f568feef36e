// Trace level TENSORS: the text Triton 2.51's trace file gives one tensor
// (server src/tracer.cc, TraceManager::TraceTensorActivity), written the same way for
// every path (the lanes' codec here, the general path through _core).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ipc/response_block.h"

namespace naiad {

// Which of a trace's tensor records, as Triton's TRITONSERVER_InferenceTraceActivity
// names them in the file.
enum class TensorActivity : uint8_t { kQueueInput = 0, kBackendOutput = 1 };
const char* tensor_activity_name(TensorActivity activity);

// A trace's tensor records, in the order they are written: (activity, tensor text).
using TensorRecords = std::vector<std::pair<TensorActivity, std::string>>;

// Appends `{"name":"<name>","data":"<values>","shape":"<d0,d1>","dtype":"<datatype>"}`
// for a tensor in wire layout (BYTES: u32 length before each element), byte for byte
// as Triton writes it: numbers as a C++ stream writes them (6 significant digits for
// FP32/FP64, BOOL as 0/1, INT8/UINT8 as the characters of their bytes), BYTES elements
// as \"text\" (the text unescaped), FP16/BF16 without data. Values past `size` bytes
// are not read (a short tensor ends its data there). `name` is put as given.
void append_trace_tensor(std::string* out, std::string_view name, std::string_view datatype,
                         const int64_t* shape, size_t dims, const uint8_t* data, uint64_t size);

// The dims of a shape's JSON array text ("[1,16]").
std::vector<int64_t> shape_dims(std::string_view text);

// Child traces (core.h ChildTrace) keep their tensors from the blocks the core sees.
// The TENSOR_QUEUE_INPUT records of the request block at arena offset `block` (`base`:
// the arena, `arena_size` bytes; the block already checked: request_block_fits, or the
// core's own), in its metadata's order; an input left in a client's region is not
// read (no record). False, and nothing added, when its metadata cannot be read.
bool append_request_tensors(TensorRecords* out, const uint8_t* base, uint64_t arena_size,
                            uint64_t block);
// The TENSOR_BACKEND_OUTPUT records of one response (`json`: {"outputs": [[name,
// datatype, shape], ...], ...}, its outputs' bytes in `outputs`, in that order; an error
// response has none). False, and nothing added, when its JSON cannot be read.
bool append_response_tensors(TensorRecords* out, std::string_view json,
                             const std::vector<OutputBytes>& outputs);

}  // namespace naiad
