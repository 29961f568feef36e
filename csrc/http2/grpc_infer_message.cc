#include "http2/grpc_infer_message.h"

#include <cstring>

#include "http2/grpc_contents.h"
#include "http2/protobuf_wire.h"

namespace naiad::grpc {

namespace {

using wire::kFixed32;
using wire::kFixed64;
using wire::kLength;
using wire::kVarint;
using wire::Reader;
using wire::sub;

// The wire type each field number of a message is read with (by number, from 0), in
// the tables below: kUnknown for a number the message has not, kRepeatedVarint for a
// repeated integer (one element, or packed).
constexpr uint32_t kUnknown = 8;
constexpr uint32_t kRepeatedVarint = 9;

// True when field `field` is one of the message's (`wires`) and came with its wire
// type; else protobuf keeps it as an unknown field, which the reader skips.
template <size_t N>
bool known(uint32_t field, uint32_t wire, const uint32_t (&wires)[N]) {
  if (field >= N) return false;
  if (wires[field] == kRepeatedVarint) return wire == kVarint || wire == kLength;
  return wires[field] == wire;
}

bool read_parameter_value(std::string_view bytes, Parameter* out, std::string* error) {
  Reader r = sub(bytes, error);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.tag(&field, &wire)) return false;
    static constexpr uint32_t kWires[] = {kUnknown, kVarint, kVarint, kLength, kFixed64, kVarint};
    if (!known(field, wire, kWires)) {
      if (!r.skip(wire, field)) return false;
      continue;
    }
    uint64_t v;
    switch (field) {
      case 1:
        if (!r.varint(&v)) return false;
        out->kind = Parameter::Kind::kBool;
        out->bool_value = v != 0;
        break;
      case 2:
        if (!r.varint(&v)) return false;
        out->kind = Parameter::Kind::kInt64;
        out->int64_value = static_cast<int64_t>(v);
        break;
      case 3:
        if (!r.string(&out->string_value)) return false;
        out->kind = Parameter::Kind::kString;
        break;
      case 4:
        if (!r.fixed(8, &v)) return false;
        out->kind = Parameter::Kind::kDouble;
        std::memcpy(&out->double_value, &v, 8);
        break;
      default:  // 5
        if (!r.varint(&v)) return false;
        out->kind = Parameter::Kind::kUint64;
        out->uint64_value = v;
    }
  }
  return true;
}

// A map<string, InferParameter> entry: key = 1, value = 2.
bool read_parameter_entry(std::string_view bytes, std::vector<Parameter>* out, std::string* error) {
  Reader r = sub(bytes, error);
  Parameter parameter;
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.tag(&field, &wire)) return false;
    static constexpr uint32_t kWires[] = {kUnknown, kLength, kLength};
    if (!known(field, wire, kWires)) {
      if (!r.skip(wire, field)) return false;
      continue;
    }
    std::string_view view;
    if (field == 1) {
      if (!r.string(&parameter.key)) return false;
    } else {
      if (!r.bytes(&view) || !read_parameter_value(view, &parameter, error)) return false;
    }
  }
  // protobuf maps: a later entry with the same key replaces the earlier one.
  for (Parameter& existing : *out) {
    if (existing.key == parameter.key) {
      existing = parameter;
      return true;
    }
  }
  out->push_back(parameter);
  return true;
}

// A repeated int64, packed (kLength) or one element (kVarint).
bool read_shape(Reader& r, uint32_t wire, std::vector<int64_t>* shape) {
  uint64_t v;
  if (wire == kVarint) {
    if (!r.varint(&v)) return false;
    shape->push_back(static_cast<int64_t>(v));
    return true;
  }
  std::string_view packed;
  if (!r.bytes(&packed)) return false;
  Reader p = sub(packed, r.error);
  while (!p.done()) {
    if (!p.varint(&v)) return false;
    shape->push_back(static_cast<int64_t>(v));
  }
  return true;
}

bool read_input(std::string_view bytes, InferInputView* in, std::string* error) {
  Reader r = sub(bytes, error);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.tag(&field, &wire)) return false;
    static constexpr uint32_t kWires[] = {kUnknown,        kLength, kLength,
                                          kRepeatedVarint, kLength, kLength};
    if (!known(field, wire, kWires)) {
      if (!r.skip(wire, field)) return false;
      continue;
    }
    std::string_view view;
    switch (field) {
      case 1:
        if (!r.string(&in->name)) return false;
        break;
      case 2:
        if (!r.string(&in->datatype)) return false;
        break;
      case 3:
        if (!read_shape(r, wire, &in->shape)) return false;
        break;
      case 4:
        if (!r.bytes(&view) || !read_parameter_entry(view, &in->parameters, error)) return false;
        break;
      default:  // 5
        if (!r.bytes(&view)) return false;
        if (!contents_well_formed(view)) return r.fail("malformed typed contents");
        in->contents.push_back(view);
    }
  }
  return true;
}

bool read_output(std::string_view bytes, RequestedOutputView* out, std::string* error) {
  Reader r = sub(bytes, error);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.tag(&field, &wire)) return false;
    static constexpr uint32_t kWires[] = {kUnknown, kLength, kLength};
    if (!known(field, wire, kWires)) {
      if (!r.skip(wire, field)) return false;
      continue;
    }
    std::string_view view;
    if (field == 1) {
      if (!r.string(&out->name)) return false;
    } else {
      if (!r.bytes(&view) || !read_parameter_entry(view, &out->parameters, error)) return false;
    }
  }
  return true;
}

}  // namespace

bool read_infer_request(std::string_view message, InferRequestView* out, std::string* error) {
  *out = InferRequestView();
  error->clear();
  Reader r = sub(message, error);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.tag(&field, &wire)) return false;
    static constexpr uint32_t kWires[] = {kUnknown, kLength, kLength, kLength,
                                          kLength,  kLength, kLength, kLength};
    if (!known(field, wire, kWires)) {
      if (!r.skip(wire, field)) return false;
      continue;
    }
    std::string_view view;
    switch (field) {
      case 1:
        if (!r.string(&out->model_name)) return false;
        break;
      case 2:
        if (!r.string(&out->model_version)) return false;
        break;
      case 3:
        if (!r.string(&out->id)) return false;
        break;
      case 4:
        if (!r.bytes(&view) || !read_parameter_entry(view, &out->parameters, error)) return false;
        break;
      case 5:
        if (!r.bytes(&view)) return false;
        out->inputs.emplace_back();
        if (!read_input(view, &out->inputs.back(), error)) return false;
        break;
      case 6:
        if (!r.bytes(&view)) return false;
        out->outputs.emplace_back();
        if (!read_output(view, &out->outputs.back(), error)) return false;
        break;
      default:  // 7
        if (!r.bytes(&out->raw_input_contents.emplace_back())) return false;
    }
  }
  return true;
}

// ------------------------------------------------------------------------------ writer

namespace {

size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

size_t field_size(size_t payload) { return 1 + varint_size(payload) + payload; }

size_t shape_size(const std::vector<int64_t>& shape) {
  size_t n = 0;
  for (int64_t d : shape) n += varint_size(static_cast<uint64_t>(d));
  return n;
}

size_t output_size(const OutputToWrite& o) {
  size_t n = 0;
  if (!o.name.empty()) n += field_size(o.name.size());
  if (!o.datatype.empty()) n += field_size(o.datatype.size());
  if (!o.shape.empty()) n += field_size(shape_size(o.shape));
  return n;
}

// An InferParameter message: its one set field of the oneof.
size_t parameter_value_size(const Parameter& p) {
  switch (p.kind) {
    case Parameter::Kind::kBool:
      return 2;
    case Parameter::Kind::kInt64:
      return 1 + varint_size(static_cast<uint64_t>(p.int64_value));
    case Parameter::Kind::kString:
      return field_size(p.string_value.size());
    case Parameter::Kind::kDouble:
      return 1 + 8;
    case Parameter::Kind::kUint64:
      return 1 + varint_size(p.uint64_value);
    case Parameter::Kind::kNone:
      break;
  }
  return 0;
}

// A map entry: key (field 1) and value (field 2), both always written as protobuf does.
size_t parameter_entry_size(const Parameter& p) {
  return field_size(p.key.size()) + field_size(parameter_value_size(p));
}

size_t body_size(const ResponseToWrite& r) {
  size_t n = 0;
  if (!r.model_name.empty()) n += field_size(r.model_name.size());
  if (!r.model_version.empty()) n += field_size(r.model_version.size());
  if (!r.id.empty()) n += field_size(r.id.size());
  for (const Parameter& p : r.parameters) n += field_size(parameter_entry_size(p));
  for (const OutputToWrite& o : r.outputs) n += field_size(output_size(o));
  for (const OutputToWrite& o : r.outputs) n += field_size(o.size);
  return n;
}

struct Writer {
  char* p;
  void byte(uint8_t b) { *p++ = static_cast<char>(b); }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      byte(static_cast<uint8_t>(v | 0x80));
      v >>= 7;
    }
    byte(static_cast<uint8_t>(v));
  }
  void key(uint32_t field, uint32_t wire) { byte(static_cast<uint8_t>((field << 3) | wire)); }
  void raw(const void* data, size_t n) {
    if (n) std::memcpy(p, data, n);
    p += n;
  }
  void bytes(uint32_t field, std::string_view s) {
    key(field, kLength);
    varint(s.size());
    raw(s.data(), s.size());
  }
};

// Everything of a response before its raw_output_contents: the stream wrapper's key and
// length, the names and id, each output's metadata. Both writers below start with it,
// so the bytes they produce cannot drift apart.
void write_response_head(Writer& w, const ResponseToWrite& response, bool streamed) {
  if (streamed) {
    w.key(2, kLength);  // ModelStreamInferResponse.infer_response
    w.varint(body_size(response));
  }
  if (!response.model_name.empty()) w.bytes(1, response.model_name);
  if (!response.model_version.empty()) w.bytes(2, response.model_version);
  if (!response.id.empty()) w.bytes(3, response.id);
  for (const Parameter& p : response.parameters) {
    w.key(4, kLength);
    w.varint(parameter_entry_size(p));
    w.bytes(1, p.key);
    w.key(2, kLength);
    w.varint(parameter_value_size(p));
    switch (p.kind) {
      case Parameter::Kind::kBool:
        w.key(1, kVarint);
        w.byte(p.bool_value ? 1 : 0);
        break;
      case Parameter::Kind::kInt64:
        w.key(2, kVarint);
        w.varint(static_cast<uint64_t>(p.int64_value));
        break;
      case Parameter::Kind::kString:
        w.bytes(3, p.string_value);
        break;
      case Parameter::Kind::kDouble: {
        w.key(4, kFixed64);
        uint64_t bits = 0;
        std::memcpy(&bits, &p.double_value, sizeof bits);
        for (int i = 0; i < 8; ++i) w.byte(static_cast<uint8_t>(bits >> (8 * i)));
        break;
      }
      case Parameter::Kind::kUint64:
        w.key(5, kVarint);
        w.varint(p.uint64_value);
        break;
      case Parameter::Kind::kNone:
        break;
    }
  }
  for (const OutputToWrite& o : response.outputs) {
    w.key(5, kLength);
    w.varint(output_size(o));
    if (!o.name.empty()) w.bytes(1, o.name);
    if (!o.datatype.empty()) w.bytes(2, o.datatype);
    if (!o.shape.empty()) {
      w.key(3, kLength);  // packed, as protobuf 3 writes repeated scalars
      w.varint(shape_size(o.shape));
      for (int64_t d : o.shape) w.varint(static_cast<uint64_t>(d));
    }
  }
}

}  // namespace

size_t infer_response_size(const ResponseToWrite& response, bool streamed) {
  size_t n = body_size(response);
  return streamed ? field_size(n) : n;
}

void write_infer_response(const ResponseToWrite& response, char* out, bool streamed) {
  Writer w{out};
  write_response_head(w, response, streamed);
  for (const OutputToWrite& o : response.outputs) {
    w.key(6, kLength);
    w.varint(o.size);
    w.raw(o.data, o.size);
  }
}

void infer_response_parts(const ResponseToWrite& response, bool streamed, std::string* scratch,
                          std::vector<std::string_view>* parts) {
  // Everything but the tensors' bytes goes into scratch; where a tensor goes, a part
  // boundary. Written with the same Writer as write_infer_response, so the bytes match.
  size_t tensors = 0;
  for (const OutputToWrite& o : response.outputs) tensors += o.size;
  size_t total = infer_response_size(response, streamed);
  scratch->resize(total - tensors);
  std::vector<size_t> cuts;  // scratch offsets where output i's data goes
  cuts.reserve(response.outputs.size());
  // The message without tensor bytes: the same fields, lengths as if they were there.
  Writer w{scratch->data()};
  write_response_head(w, response, streamed);
  for (const OutputToWrite& o : response.outputs) {
    w.key(6, kLength);
    w.varint(o.size);
    cuts.push_back(static_cast<size_t>(w.p - scratch->data()));
  }
  parts->clear();
  std::string_view all(*scratch);
  size_t from = 0;
  for (size_t i = 0; i < response.outputs.size(); ++i) {
    parts->push_back(all.substr(from, cuts[i] - from));
    const OutputToWrite& o = response.outputs[i];
    parts->push_back(std::string_view(reinterpret_cast<const char*>(o.data), o.size));
    from = cuts[i];
  }
  parts->push_back(all.substr(from));
}

}  // namespace naiad::grpc
