#pragma once

#include <cstdint>
#include <cstring>

namespace naiad {

// A value of type T read from `at`, which need not be aligned for T (tensor bytes in a
// request body or a result block sit at any offset). memcpy is what compilers turn into
// a single load.
template <typename T>
T load_unaligned(const uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

}  // namespace naiad
