// Trace level TENSORS: the text Triton 2.51's trace file gives one tensor
// (server src/tracer.cc, TraceManager::TraceTensorActivity), written the same way for
// every path (the lanes' codec here, the general path through _core).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace naiad {

// Which of a trace's tensor records, as Triton's TRITONSERVER_InferenceTraceActivity
// names them in the file.
enum class TensorActivity : uint8_t { kQueueInput = 0, kBackendOutput = 1 };
const char* tensor_activity_name(TensorActivity activity);

// Appends `{"name":"<name>","data":"<values>","shape":"<d0,d1>","dtype":"<datatype>"}`
// for a tensor in wire layout (BYTES: u32 length before each element), byte for byte
// as Triton writes it: numbers as a C++ stream writes them (6 significant digits for
// FP32/FP64, BOOL as 0/1, INT8/UINT8 as the characters of their bytes), BYTES elements
// as \"text\" (the text unescaped), FP16/BF16 without data. Values past `size` bytes
// are not read (a short tensor ends its data there). `name` is put as given.
void append_trace_tensor(std::string* out, std::string_view name, std::string_view datatype,
                         const int64_t* shape, size_t dims, const uint8_t* data, uint64_t size);

}  // namespace naiad
