// The dynamic batching config the assembler's tests build their models with.
#pragma once

#include <cstdint>

#include "core/dynamic_batcher.h"

namespace naiad_testing {

inline naiad::BatcherConfig batching(uint32_t max_batch_size, uint32_t priority_levels = 0) {
  naiad::BatcherConfig config;
  config.dynamic_batching = true;
  config.max_batch_size = max_batch_size;
  config.priority_levels = priority_levels;
  return config;
}

}  // namespace naiad_testing
