#include "http1/io_group.h"

#include <stdexcept>
#include <string>

#include "http1/http_io.h"

namespace naiad {

void IoGroup::add(HttpIo& io) {
  if (loops_.size() >= Core::kMaxOwner) {
    throw std::length_error("an I/O group holds at most " + std::to_string(Core::kMaxOwner) +
                            " loops");
  }
  loops_.push_back(&io);
  // Every loop's connection ids step by the group's size, which grows as loops join.
  for (uint32_t index = 0; index < loops_.size(); ++index) loops_[index]->join(this, index);
}

}  // namespace naiad
