// Where the core finds the bytes of an input that is not inline in the request: a
// client's system shared-memory region or CUDA IPC allocation, named by a region id.
// The shared-memory registry (Triton's shm extension) implements this interface and
// hands it to Core::set_input_regions(); until then no region resolves and the core
// refuses such inputs with SubmitResult::kUnsupportedInput.
#pragma once

#include <cstdint>

namespace naiad {

enum class InputKind : uint32_t { kInline = 0, kSystemShm = 1, kCudaIpc = 2 };

class InputRegions {
 public:
  virtual ~InputRegions() = default;
  // The mapped bytes [offset, offset + size) of host region `region`, or nullptr when
  // the region is unknown, not host memory, or the range is outside it. The caller
  // copies them once (the registry counts it): the assembler, at dispatch, into a
  // batch of several requests. The submitter keeps the region referenced until its
  // request is answered, so the bytes stay mapped until then.
  virtual const uint8_t* map(InputKind kind, uint64_t region, uint64_t offset, uint64_t size) = 0;
  // True when [offset, offset + size) lies inside host region `region`: checked at
  // submit; the bytes stay in the region until dispatch (InputSlot::region).
  virtual bool host_range(uint64_t /*region*/, uint64_t /*offset*/, uint64_t /*size*/) {
    return false;
  }
  // True when [offset, offset + size) lies inside CUDA region `region`: such bytes
  // stay on the device; the core reserves room for them in the request block and the
  // worker owning the device fills it (pysrc/naiad/memory/cuda_ipc.py).
  virtual bool device_range(uint64_t /*region*/, uint64_t /*offset*/, uint64_t /*size*/) {
    return false;
  }
};

}  // namespace naiad
