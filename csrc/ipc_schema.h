// The one definition of what crosses the shared arena between the frontend and the
// workers: the request block, the batch descriptor and the result block. C++ uses
// these structs directly; Python reads and writes them only through _core.pyx, which
// declares the same header. Every struct is plain, little-endian, fixed-size and
// 8-byte aligned, so both languages see the same bytes with no parsing.
//
// JSON appears only for the variable, human-shaped parts (names, datatypes, shapes,
// parameters); offsets, sizes, counts and flags are always fields of these structs.
#pragma once

#include <cstdint>

namespace naiad {

// Where blocks align their tensors (and where the arena aligns blocks).
constexpr uint64_t kTensorAlign = 64;

inline uint64_t align_tensor(uint64_t value) {
  return (value + kTensorAlign - 1) & ~(kTensorAlign - 1);
}

// ---- Request block: one per queued request, written by Core::submit ----------------
//
//   RequestHeader | InputSlot[n_inputs] | metadata (metadata_size bytes)
//
// The metadata is the request as the worker sees it, JSON:
//   {"id": str, "inputs": [[name, datatype, shape], ...],
//    "outputs": [name, ...] | null, "parameters": {...}}
// with one InputSlot per metadata input, in the same order. A slot names the input's
// bytes anywhere in the arena: in the request's own block, in a staging slab, or in
// the batch tensor of the batch the request runs in (batch_assembler.h).
constexpr uint32_t kRequestMagic = 0x31515249;  // "IRQ1"

struct RequestHeader {
  uint32_t magic;
  uint32_t n_inputs;
  uint32_t metadata_size;
  uint32_t reserved;
};

struct InputSlot {
  uint64_t offset;  // arena offset of the input's bytes
  uint64_t size;    // bytes (wire layout: raw little-endian, BYTES length-prefixed)
};

inline uint64_t request_metadata_offset(uint32_t n_inputs) {
  return sizeof(RequestHeader) + uint64_t{n_inputs} * sizeof(InputSlot);
}

static_assert(sizeof(RequestHeader) == 16, "RequestHeader layout");
static_assert(sizeof(InputSlot) == 16, "InputSlot layout");

}  // namespace naiad
