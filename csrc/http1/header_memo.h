// The fast lane's reading of the last inference header it parsed, kept so that the same
// header again is not parsed again. A client sending one kind of request (perf_analyzer,
// tritonclient in a loop, a service with fixed shapes) sends the same JSON header before
// every request's binary inputs: comparing its bytes and copying the kept reading costs
// a fraction of the JSON reader (perf/lane_bench.cc).
//
// Only a header whose inputs all lie in the binary part after it is kept: its reading is
// then a function of the header's bytes and the binary part's size alone (each input's
// data at a fixed offset there), so a copy with the data pointers moved to the new body
// is exactly what parsing would give. Anything else (JSON `data`, shm inputs or outputs)
// is read as before, every time.
//
// Threads: one at a time, as the HttpLane that holds it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "codec/infer_types.h"
#include "codec/kserve_json.h"

namespace naiad {

class HeaderMemo {
 public:
  // As read_infer_header(body, body_size, header_size, out) (kserve_json.h), with one
  // difference in lifetime: `out`'s views of the header point into this memo's copy of
  // it, valid until the next read(). `out` is assigned whole (its vectors' capacity is
  // reused). True when it reads a request, from the memo or parsed; false with
  // `refusal` set when Triton refuses it (kserve_json.h).
  bool read(const uint8_t* body, size_t body_size, size_t header_size, ParsedRequest* out,
            Refusal* refusal);

  // Requests read from the memo (tests, benchmarks).
  uint64_t hits() const { return hits_; }

 private:
  // Whether `parsed` (read from header_) can be kept: every input's data in the binary
  // part, at offsets then recorded in offsets_.
  bool keep(const uint8_t* binary, size_t binary_size);

  std::string header_;  // the header read last; its views point here
  bool kept_ = false;   // parsed_ and offsets_ hold header_'s reading
  size_t binary_size_ = 0;
  // As read, before validation. Its inputs' `data` still point into the body it was
  // read with (gone since): read() sets them from offsets_, each input's data's offset
  // in the binary part.
  ParsedRequest parsed_;
  std::vector<uint64_t> offsets_;
  uint64_t hits_ = 0;
};

}  // namespace naiad
