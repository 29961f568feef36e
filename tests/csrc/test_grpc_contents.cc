// Typed contents (InferTensorContents) as wire bytes with Triton 2.51's checks and
// messages (http2/grpc_contents.h), and the gRPC lane taking typed requests: queued with
// the converted bytes, or refused with Triton's message. Messages are built here with the
// protobuf wire format by hand.
#include <cstring>
#include <string>
#include <vector>

#include "add_sub_model.h"
#include "core/core.h"
#include "grpc_lane_fixture.h"
#include "grpc_request_support.h"
#include "http1/http_framer.h"
#include "http2/grpc_contents.h"
#include "http2/grpc_infer_message.h"
#include "http2/grpc_lane.h"
#include "testing.h"

using namespace naiad;
using namespace grpctest;

namespace {

void fixed(std::string* out, uint64_t bits, size_t size) {
  for (size_t i = 0; i < size; ++i) out->push_back(static_cast<char>(bits >> (8 * i)));
}
uint32_t f32(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return bits;
}

// A packed repeated varint field.
std::string packed_varints(uint32_t field, const std::vector<uint64_t>& values) {
  std::string packed, out;
  for (uint64_t v : values) varint(&packed, v);
  bytes(&out, field, packed);
  return out;
}

std::string fp32s(const std::vector<float>& values) {
  std::string packed, out;
  for (float v : values) fixed(&packed, f32(v), 4);
  bytes(&out, 6, packed);
  return out;
}

std::vector<uint8_t> le(uint64_t v, size_t size) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < size; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return out;
}

struct Converted {
  bool ok = false;
  std::vector<uint8_t> bytes;
  std::string error;
};

Converted convert(const std::vector<std::string>& chunks, std::string_view datatype) {
  std::vector<std::string_view> views(chunks.begin(), chunks.end());
  Converted out;
  for (std::string_view chunk : views) CHECK(grpc::contents_well_formed(chunk));
  out.ok = grpc::contents_to_wire(views, datatype, "IN", "m", &out.bytes, &out.error);
  return out;
}

std::string mismatch(std::string_view carried, std::string_view expected) {
  return "unexpected explicit tensor data for input tensor 'IN' for model 'm' of type '" +
         std::string(carried) + "', expected datatype '" + std::string(expected) + "'";
}

}  // namespace

TEST(grpc_contents_convert_each_field_to_wire_bytes) {
  // int_contents: INT8/INT16 keep the low bytes of each 32-bit value, as Triton.
  Converted c = convert({packed_varints(2, {static_cast<uint64_t>(-1), 300, 5})}, "INT8");
  CHECK(c.ok && c.bytes == (std::vector<uint8_t>{0xff, 0x2c, 0x05}));
  c = convert({packed_varints(2, {static_cast<uint64_t>(-40000)})}, "INT16");
  CHECK(c.ok && c.bytes == le(static_cast<uint16_t>(-40000), 2));
  c = convert({packed_varints(2, {static_cast<uint64_t>(-2)})}, "INT32");
  CHECK(c.ok && c.bytes == le(0xfffffffe, 4));
  c = convert({packed_varints(3, {static_cast<uint64_t>(-2)})}, "INT64");
  CHECK(c.ok && c.bytes == le(static_cast<uint64_t>(-2), 8));
  c = convert({packed_varints(4, {70000, 263})}, "UINT8");
  CHECK(c.ok && c.bytes == (std::vector<uint8_t>{0x70, 0x07}));
  c = convert({packed_varints(4, {70000})}, "UINT16");
  CHECK(c.ok && c.bytes == le(70000 & 0xffff, 2));
  c = convert({packed_varints(5, {UINT64_MAX})}, "UINT64");
  CHECK(c.ok && c.bytes == le(UINT64_MAX, 8));
  c = convert({packed_varints(1, {0, 1, 7})}, "BOOL");  // any non-zero varint is true
  CHECK(c.ok && c.bytes == (std::vector<uint8_t>{0, 1, 1}));
  c = convert({fp32s({1.5f, -0.0f})}, "FP32");
  std::vector<uint8_t> want = le(f32(1.5f), 4), negative_zero = le(f32(-0.0f), 4);
  want.insert(want.end(), negative_zero.begin(), negative_zero.end());
  CHECK(c.ok && c.bytes == want);
  std::string fp64;
  key(&fp64, 7, 1);  // one unpacked double
  fixed(&fp64, 0x400199999999999aULL, 8);
  c = convert({fp64}, "FP64");
  CHECK(c.ok && c.bytes == le(0x400199999999999aULL, 8));
  std::string words;
  bytes(&words, 8, "alpha");
  bytes(&words, 8, "");
  c = convert({words}, "BYTES");
  std::vector<uint8_t> expected = {5, 0, 0, 0, 'a', 'l', 'p', 'h', 'a', 0, 0, 0, 0};
  CHECK(c.ok && c.bytes == expected);
}

TEST(grpc_contents_merge_packed_unpacked_and_repeated_fields) {
  // Unpacked elements, a packed run and a second `contents` field of the input all add
  // to one list, as protobuf merges them.
  std::string first;
  key(&first, 2, 0);
  varint(&first, 1);
  first += packed_varints(2, {2, 3});
  Converted c = convert({first, packed_varints(2, {4})}, "INT32");
  std::vector<uint8_t> want;
  for (uint64_t v : {1, 2, 3, 4}) {
    std::vector<uint8_t> one = le(v, 4);
    want.insert(want.end(), one.begin(), one.end());
  }
  CHECK(c.ok && c.bytes == want);
  // Unknown fields are skipped; contents without values give no bytes.
  std::string unknown;
  key(&unknown, 9, 0);
  varint(&unknown, 1);
  c = convert({unknown}, "FP32");
  CHECK(c.ok && c.bytes.empty());
  c = convert({std::string()}, "FP32");
  CHECK(c.ok && c.bytes.empty());
}

TEST(grpc_contents_refuse_with_tritons_messages) {
  Converted c = convert({packed_varints(2, {1})}, "INT64");
  CHECK(!c.ok && c.error == mismatch("INT32", "INT64"));
  c = convert({packed_varints(3, {1})}, "INT32");
  CHECK(!c.ok && c.error == mismatch("INT64", "INT32"));
  c = convert({packed_varints(4, {1})}, "INT8");
  CHECK(!c.ok && c.error == mismatch("UINT32", "INT8"));
  c = convert({packed_varints(2, {1})}, "UINT16");
  CHECK(!c.ok && c.error == mismatch("INT32", "UINT16"));
  c = convert({packed_varints(1, {1})}, "FP32");
  CHECK(!c.ok && c.error == mismatch("BOOL", "FP32"));
  // FP16 and BF16 have no field of their own; an unknown datatype is Triton's <invalid>.
  c = convert({fp32s({1.0f})}, "FP16");
  CHECK(!c.ok && c.error == mismatch("FP32", "FP16"));
  c = convert({fp32s({1.0f})}, "BF16");
  CHECK(!c.ok && c.error == mismatch("FP32", "BF16"));
  c = convert({fp32s({1.0f})}, "FOO");
  CHECK(!c.ok && c.error == mismatch("FP32", "<invalid>"));
  c = convert({fp32s({1.0f})}, "BYTES");
  CHECK(!c.ok && c.error == mismatch("FP32", "BYTES"));
  std::string word;
  bytes(&word, 8, "x");
  c = convert({word}, "FP32");
  CHECK(!c.ok && c.error == mismatch("BYTES", "FP32"));
  // Two fields with values: the second (by field number) finds the data supplied,
  // whatever its type; a mismatched first is named first.
  std::string fp64;
  key(&fp64, 7, 1);
  fixed(&fp64, 0, 8);
  c = convert({fp64 + fp32s({1.0f})}, "FP32");
  CHECK(!c.ok && c.error ==
                     "unexpected explicit tensor data for input tensor 'IN' for model 'm', "
                     "binary data was already supplied.");
  c = convert({fp32s({1.0f}) + packed_varints(1, {1})}, "FP32");
  CHECK(!c.ok && c.error == mismatch("BOOL", "FP32"));
}

TEST(grpc_contents_damaged_are_not_well_formed) {
  // A known field sent with another wire type is an unknown field to protobuf: skipped,
  // so the contents hold no values.
  std::string wrong_wire;
  key(&wrong_wire, 6, 0);  // fp32_contents as a varint
  varint(&wrong_wire, 1);
  CHECK(grpc::contents_well_formed(wrong_wire));
  auto c = convert({wrong_wire}, "FP32");
  CHECK(c.ok && c.bytes.empty());
  std::string word_as_varint;
  key(&word_as_varint, 8, 0);
  varint(&word_as_varint, 1);
  CHECK(grpc::contents_well_formed(word_as_varint));
  std::string ragged = fp32s({1.0f});
  ragged[1] = 3;  // a packed run of 3 bytes: no whole float
  ragged.resize(5);
  CHECK(!grpc::contents_well_formed(ragged));
  CHECK(!grpc::contents_well_formed(std::string("\x12\x05\x01", 3)));  // length past the end
  CHECK(!grpc::contents_well_formed(std::string("\x0b", 1)));          // a group never ended
  CHECK(grpc::contents_well_formed(std::string("\x0b\x0c", 2)));       // a whole group: skipped
  // The message reader refuses an input with damaged contents.
  std::string tensor, message;
  bytes(&tensor, 1, "IN");
  bytes(&tensor, 5, ragged);
  bytes(&message, 5, tensor);
  grpc::InferRequestView view;
  std::string error;
  CHECK(!grpc::read_infer_request(message, &view, &error) && !error.empty());
}

namespace {

using Fixture = LaneFixture;

std::string input(const std::string& name, int rows, const std::string& contents,
                  const std::string& parameters = "") {
  std::string t, shape;
  bytes(&t, 1, name);
  bytes(&t, 2, "FP32");
  varint(&shape, static_cast<uint64_t>(rows));
  varint(&shape, 16);
  bytes(&t, 3, shape);
  if (!parameters.empty()) bytes(&t, 4, parameters);
  if (!contents.empty()) bytes(&t, 5, contents);
  return t;
}

std::string request(const std::vector<std::string>& inputs, int raw = 0) {
  std::string m;
  bytes(&m, 1, "add_sub");
  for (const std::string& in : inputs) bytes(&m, 5, in);
  for (int i = 0; i < raw; ++i) bytes(&m, 7, std::string(64, '\0'));
  return m;
}

std::string shm_entry(const std::string& key_name, uint32_t field, const std::string& text,
                      uint64_t number) {
  std::string value, entry;
  if (field == 3) {
    bytes(&value, 3, text);
  } else {
    key(&value, field, 0);
    varint(&value, number);
  }
  bytes(&entry, 1, key_name);
  bytes(&entry, 2, value);
  return entry;
}

}  // namespace

TEST(grpc_lane_queues_typed_contents_converted) {
  Fixture f;
  const std::string sixteen = fp32s(std::vector<float>(16, 1.0f));
  GrpcLane::Taken taken;
  CHECK(f.grpc.submit(request({input("INPUT0", 1, sixteen), input("INPUT1", 1, sixteen)}), 0,
                      &taken));
  CHECK(taken.request_id != 0 && taken.error.empty() && taken.batch_size == 1);
  CHECK(f.http.codec().owns(taken.request_id));
  f.http.codec().forget(taken.request_id);
  // Two rows in one input's contents: a batch of 2.
  const std::string thirty_two = fp32s(std::vector<float>(32, 2.0f));
  CHECK(f.grpc.submit(request({input("INPUT0", 2, thirty_two), input("INPUT1", 2, thirty_two)}), 0,
                      &taken));
  CHECK(taken.request_id != 0 && taken.batch_size == 2);
  f.http.codec().forget(taken.request_id);
}

TEST(grpc_lane_refuses_typed_contents_as_triton) {
  Fixture f;
  const std::string sixteen = fp32s(std::vector<float>(16, 1.0f));
  GrpcLane::Taken taken;
  auto refused = [&](const std::string& message, const std::string& error) {
    taken = GrpcLane::Taken();
    CHECK(f.grpc.submit(message, 0, &taken));
    CHECK(taken.request_id == 0 && taken.model == f.lane_model);
    if (taken.error != error) std::printf("  got: %s\n", taken.error.c_str());
    CHECK(taken.error == error);
  };
  // A count short of the shape: the validator's byte size.
  refused(request({input("INPUT0", 1, sixteen),
                   input("INPUT1", 1, fp32s(std::vector<float>(15, 1.0f)))}),
          "[request id: <id_unknown>] input byte size mismatch for input 'INPUT1' for model "
          "'add_sub'. Expected 64, got 60");
  // The datatype's field only.
  refused(request({input("INPUT0", 1, packed_varints(2, std::vector<uint64_t>(16, 1))),
                   input("INPUT1", 1, sixteen)}),
          "unexpected explicit tensor data for input tensor 'INPUT0' for model 'add_sub' of type "
          "'INT32', expected datatype 'FP32'");
  // Typed and raw contents in one request.
  refused(request({input("INPUT0", 1, sixteen), input("INPUT1", 1, "")}, 1),
          "contents field must not be specified when using raw_input_contents for 'INPUT0' for "
          "model 'add_sub'");
  // An input with no data at all.
  refused(request({input("INPUT0", 1, sixteen), input("INPUT1", 1, "")}),
          "unable to find data for input tensor 'INPUT1' for model 'add_sub' in request.");
  // Contents beside a shm region.
  const std::string shm = shm_entry("shared_memory_region", 3, "r", 0);
  const std::string size = shm_entry("shared_memory_byte_size", 2, "", 64);
  std::string in0 = input("INPUT0", 1, sixteen);
  bytes(&in0, 4, shm);
  bytes(&in0, 4, size);
  refused(request({in0, input("INPUT1", 1, sixteen)}),
          "unexpected 'content' provided when using shared memory for input tensor 'INPUT0' "
          "for model 'add_sub'");
  CHECK(f.http.codec().in_flight() == 0);
}
