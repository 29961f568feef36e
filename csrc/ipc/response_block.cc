#include "ipc/response_block.h"

#include <cstring>
#include <stdexcept>

namespace naiad {

namespace {

uint32_t output_count(const std::vector<ResponseEntry>& entries) {
  uint64_t count = 0;
  for (const ResponseEntry& entry : entries) count += entry.outputs.size();
  return static_cast<uint32_t>(count);
}

uint64_t json_end(const std::vector<ResponseEntry>& entries) {
  uint64_t end = response_outputs_offset(static_cast<uint32_t>(entries.size())) +
                 uint64_t{output_count(entries)} * sizeof(OutputSlot);
  for (const ResponseEntry& entry : entries) end += entry.json.size();
  return end;
}

}  // namespace

uint64_t response_block_size(const std::vector<ResponseEntry>& entries, bool started_each) {
  uint64_t end = json_end(entries);
  for (const ResponseEntry& entry : entries) {
    for (const OutputBytes& output : entry.outputs) end = align_tensor(end) + output.size;
  }
  if (started_each) end += entries.size() * sizeof(uint64_t);
  return end;
}

void write_response_block(uint8_t* block, const std::vector<ResponseEntry>& entries,
                          const uint64_t timings[4], const uint64_t* started) {
  const uint32_t n_responses = static_cast<uint32_t>(entries.size());
  auto* header = reinterpret_cast<ResponseHeader*>(block);
  const uint32_t flags = started != nullptr ? kResponseStartedEach : 0;
  *header = ResponseHeader{kResponseMagic, n_responses, output_count(entries), flags, {0, 0, 0, 0}};
  for (int i = 0; i < 4; ++i) header->timings[i] = timings[i];
  auto* records = reinterpret_cast<ResponseRecord*>(block + response_records_offset());
  auto* slots = reinterpret_cast<OutputSlot*>(block + response_outputs_offset(n_responses));
  uint64_t json_cursor =
      response_outputs_offset(n_responses) + uint64_t{header->n_outputs} * sizeof(OutputSlot);
  uint64_t data_cursor = json_end(entries);
  uint32_t output = 0;
  for (uint32_t r = 0; r < n_responses; ++r) {
    const ResponseEntry& entry = entries[r];
    records[r] = ResponseRecord{entry.request_index,
                                entry.flags,
                                entry.error_code,
                                static_cast<uint32_t>(entry.outputs.size()),
                                output,
                                static_cast<uint32_t>(entry.json.size()),
                                json_cursor};
    if (!entry.json.empty()) std::memcpy(block + json_cursor, entry.json.data(), entry.json.size());
    json_cursor += entry.json.size();
    for (const OutputBytes& out : entry.outputs) {
      data_cursor = align_tensor(data_cursor);
      slots[output++] = OutputSlot{data_cursor, out.size};
      if (out.size != 0) std::memcpy(block + data_cursor, out.data, out.size);
      data_cursor += out.size;
    }
  }
  if (started != nullptr) {  // right after the last output: where the size puts it
    std::memcpy(block + data_cursor, started, uint64_t{n_responses} * sizeof(uint64_t));
  }
}

namespace {

// The output count every entry of an output-major block has.
uint32_t outputs_per_entry(const std::vector<ResponseEntry>& entries) {
  const size_t count = entries.empty() ? 0 : entries.front().outputs.size();
  for (const ResponseEntry& entry : entries) {
    if (entry.outputs.size() != count) {
      throw std::invalid_argument(
          "an output-major response block needs the same outputs in "
          "every response");
    }
  }
  return static_cast<uint32_t>(count);
}

}  // namespace

uint64_t output_major_block_size(const std::vector<ResponseEntry>& entries) {
  const uint32_t per_entry = outputs_per_entry(entries);
  uint64_t end = json_end(entries);
  for (uint32_t j = 0; j < per_entry; ++j) {
    end = align_tensor(end);
    for (const ResponseEntry& entry : entries) end += entry.outputs[j].size;
  }
  return end;
}

void layout_output_major_block(uint8_t* block, const std::vector<ResponseEntry>& entries,
                               uint64_t* runs) {
  const uint32_t per_entry = outputs_per_entry(entries);
  const uint32_t n_responses = static_cast<uint32_t>(entries.size());
  auto* header = reinterpret_cast<ResponseHeader*>(block);
  *header = ResponseHeader{
      kResponseMagic, n_responses, output_count(entries), kResponseOutputsInPlace, {0, 0, 0, 0}};
  auto* records = reinterpret_cast<ResponseRecord*>(block + response_records_offset());
  auto* slots = reinterpret_cast<OutputSlot*>(block + response_outputs_offset(n_responses));
  uint64_t json_cursor =
      response_outputs_offset(n_responses) + uint64_t{header->n_outputs} * sizeof(OutputSlot);
  for (uint32_t r = 0; r < n_responses; ++r) {
    const ResponseEntry& entry = entries[r];
    // Its slots are the r-th group of per_entry; their offsets point into the runs.
    records[r] =
        ResponseRecord{entry.request_index, entry.flags,   entry.error_code,
                       per_entry,           r * per_entry, static_cast<uint32_t>(entry.json.size()),
                       json_cursor};
    if (!entry.json.empty()) std::memcpy(block + json_cursor, entry.json.data(), entry.json.size());
    json_cursor += entry.json.size();
  }
  uint64_t data_cursor = json_end(entries);
  for (uint32_t j = 0; j < per_entry; ++j) {
    data_cursor = align_tensor(data_cursor);
    runs[j] = data_cursor;
    for (uint32_t r = 0; r < n_responses; ++r) {
      const uint64_t size = entries[r].outputs[j].size;
      slots[r * per_entry + j] = OutputSlot{data_cursor, size};
      data_cursor += size;
    }
  }
}

void set_response_timings(uint8_t* block, const uint64_t timings[4]) {
  auto* header = reinterpret_cast<ResponseHeader*>(block);
  for (int i = 0; i < 4; ++i) header->timings[i] = timings[i];
}

bool view_response_block(const uint8_t* block, uint64_t size, ResponseBlockView* out) {
  if (size < sizeof(ResponseHeader)) return false;
  const auto* header = reinterpret_cast<const ResponseHeader*>(block);
  if (header->magic != kResponseMagic) return false;
  const uint64_t slots_at = response_outputs_offset(header->n_responses);
  if (header->n_responses > size / sizeof(ResponseRecord) ||
      header->n_outputs > size / sizeof(OutputSlot) ||
      slots_at + uint64_t{header->n_outputs} * sizeof(OutputSlot) > size) {
    return false;
  }
  const auto* records = reinterpret_cast<const ResponseRecord*>(block + response_records_offset());
  const auto* slots = reinterpret_cast<const OutputSlot*>(block + slots_at);
  for (uint32_t r = 0; r < header->n_responses; ++r) {
    const ResponseRecord& record = records[r];
    if (record.json_offset > size || record.json_size > size - record.json_offset) return false;
    if (record.first_output > header->n_outputs ||
        record.n_outputs > header->n_outputs - record.first_output) {
      return false;
    }
  }
  for (uint32_t o = 0; o < header->n_outputs; ++o) {
    if (slots[o].offset > size || slots[o].size > size - slots[o].offset) return false;
  }
  const uint8_t* started = nullptr;
  if ((header->flags & kResponseStartedEach) != 0) {
    const uint64_t stamps = uint64_t{header->n_responses} * sizeof(uint64_t);
    if (stamps > size - slots_at) return false;
    started = block + (size - stamps);
  }
  *out = ResponseBlockView{block, size, header, records, slots, started};
  return true;
}

uint64_t ResponseBlockView::started_ns(uint32_t r) const {
  if (started == nullptr) return 0;
  uint64_t stamp = 0;
  std::memcpy(&stamp, started + uint64_t{r} * sizeof(uint64_t), sizeof stamp);
  return stamp;
}

ResponseEntry entry_of(const ResponseBlockView& view, uint32_t index) {
  const ResponseRecord& record = view.records[index];
  ResponseEntry entry;
  entry.request_index = 0;
  entry.flags = record.flags;
  entry.error_code = record.error_code;
  entry.json = view.json(record);
  for (uint32_t o = 0; o < record.n_outputs; ++o) {
    const OutputSlot& slot = view.outputs[record.first_output + o];
    entry.outputs.push_back(OutputBytes{view.block + slot.offset, slot.size});
  }
  return entry;
}

}  // namespace naiad
