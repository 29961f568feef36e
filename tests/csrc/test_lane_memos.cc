// The lane's memos: of the last inference header (header_memo.h), from which a repeated
// header is read exactly as parsing would read it, with the data of the new body; and
// of the last HTTP head (http_scan.h ScanMemo), recognised again by its bytes. Any
// other header or head, or one they cannot keep, is parsed or scanned.
#include <cstring>
#include <string>
#include <vector>

#include "codec/kserve_json.h"
#include "http1/header_memo.h"
#include "http1/http_scan.h"
#include "lane_support.h"
#include "testing.h"

using namespace naiad;

namespace {

const std::string kHeader =
    "{\"id\":\"r1\",\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],"
    "\"parameters\":{\"binary_data_size\":64}},{\"name\":\"INPUT1\",\"datatype\":\"FP32\","
    "\"shape\":[1,16],\"parameters\":{\"binary_data_size\":64}}],\"outputs\":[{\"name\":"
    "\"OUTPUT0\",\"parameters\":{\"binary_data\":true}},{\"name\":\"OUTPUT1\"}],"
    "\"parameters\":{\"priority\":2,\"timeout\":500,\"binary_data_output\":true}}";

// `header` followed by `binary` bytes, each `fill`.
std::string body_of(const std::string& header, size_t binary, char fill) {
  return header + std::string(binary, fill);
}

const uint8_t* bytes(const std::string& text) {
  return reinterpret_cast<const uint8_t*>(text.data());
}

bool memo_read(HeaderMemo& memo, const std::string& body, size_t header_size, ParsedRequest* out) {
  Refusal refusal;
  return memo.read(bytes(body), body.size(), header_size, out, &refusal);
}

// The two readings are the same request: every field the reader sets, views by value,
// data by address.
bool same_reading(const ParsedRequest& a, const ParsedRequest& b) {
  if (a.id != b.id || a.parameters != b.parameters || a.priority != b.priority ||
      a.timeout_us != b.timeout_us || a.output_names != b.output_names ||
      a.output_json != b.output_json || a.json_unlisted != b.json_unlisted ||
      a.converted != b.converted || a.trace_state != b.trace_state ||
      a.sequence_id != b.sequence_id || a.sequence_key != b.sequence_key ||
      a.sequence_flags != b.sequence_flags || a.inputs.size() != b.inputs.size() ||
      a.output_shm.size() != b.output_shm.size()) {
    return false;
  }
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const RequestInput& x = a.inputs[i];
    const RequestInput& y = b.inputs[i];
    if (x.name != y.name || x.datatype != y.datatype || x.shape != y.shape || x.data != y.data ||
        x.size != y.size || x.in_shm != y.in_shm || x.on_device != y.on_device) {
      return false;
    }
  }
  return true;
}

}  // namespace

TEST(header_memo_reads_a_repeated_header_as_parsing_would) {
  HeaderMemo memo;
  std::string first = body_of(kHeader, 128, '\x01');
  ParsedRequest out;
  CHECK(memo_read(memo, first, kHeader.size(), &out));
  CHECK(memo.hits() == 0);
  ParsedRequest parsed;
  CHECK(read_infer_header(bytes(first), first.size(), kHeader.size(), &parsed));
  CHECK(same_reading(out, parsed));

  // The same header before other data, in another buffer: from the memo, with the data
  // of this body.
  std::string second = body_of(kHeader, 128, '\x02');
  CHECK(memo_read(memo, second, kHeader.size(), &out));
  CHECK(memo.hits() == 1);
  parsed = ParsedRequest();
  CHECK(read_infer_header(bytes(second), second.size(), kHeader.size(), &parsed));
  CHECK(same_reading(out, parsed));
  CHECK(out.inputs[0].data == bytes(second) + kHeader.size());
  CHECK(out.inputs[1].data == bytes(second) + kHeader.size() + 64);
  CHECK(out.inputs[1].data[0] == 2);
  CHECK(out.id == "r1" && out.priority == 2 && out.timeout_us == 500);

  // Its views of the header are the memo's own copy: the body may go.
  first.assign(first.size(), 'x');
  second.assign(second.size(), 'x');
  CHECK(out.inputs[0].name == "INPUT0" && out.output_names[1] == "OUTPUT1");

  // What validation set on the last request is not carried into the next one.
  out.outputs = {7};
  out.batch_size = 9;
  out.inputs[0].spec = 3;
  std::string third = body_of(kHeader, 128, '\x03');
  CHECK(memo_read(memo, third, kHeader.size(), &out));
  CHECK(memo.hits() == 2);
  CHECK(out.outputs.empty() && out.batch_size == 1 && out.inputs[0].spec == 0);
}

TEST(header_memo_parses_any_other_header) {
  HeaderMemo memo;
  ParsedRequest out;
  std::string body = body_of(kHeader, 128, '\x01');
  CHECK(memo_read(memo, body, kHeader.size(), &out));

  // Another id, same size: parsed, and kept in its place.
  std::string other = kHeader;
  other.replace(other.find("r1"), 2, "r2");
  std::string renamed = body_of(other, 128, '\x01');
  CHECK(memo_read(memo, renamed, other.size(), &out));
  CHECK(memo.hits() == 0 && out.id == "r2");
  CHECK(memo_read(memo, renamed, other.size(), &out));
  CHECK(memo.hits() == 1 && out.id == "r2");

  // The same header with a binary part of another size: parsed, and refused as the
  // reader refuses it (the sizes do not add up).
  std::string longer = body_of(other, 129, '\x01');
  CHECK(!memo_read(memo, longer, other.size(), &out));
  CHECK(memo.hits() == 1);

  // A damaged header is refused, and the next request is parsed again.
  std::string damaged = other;
  damaged[damaged.size() - 2] = ',';
  std::string broken = body_of(damaged, 128, '\x01');
  CHECK(!memo_read(memo, broken, damaged.size(), &out));
  CHECK(memo_read(memo, renamed, other.size(), &out));
  CHECK(memo.hits() == 1 && out.id == "r2" && out.inputs.size() == 2);
  CHECK(!memo_read(memo, renamed, 0, &out));
  CHECK(!memo_read(memo, renamed, renamed.size() + 1, &out));
}

TEST(header_memo_never_keeps_json_data_or_shm) {
  // JSON `data` for one input, binary data for the other: read right every time, from
  // the parser.
  const std::string mixed =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"INT32\",\"shape\":[2],"
      "\"data\":[5,6]},{\"name\":\"INPUT1\",\"datatype\":\"FP32\",\"shape\":[1,16],"
      "\"parameters\":{\"binary_data_size\":64}}]}";
  HeaderMemo memo;
  for (int round = 0; round < 2; ++round) {
    std::string body = body_of(mixed, 64, static_cast<char>(round));
    ParsedRequest out;
    CHECK(memo_read(memo, body, mixed.size(), &out));
    CHECK(out.inputs.size() == 2 && out.inputs[0].size == 8);
    int32_t values[2];
    std::memcpy(values, out.inputs[0].data, sizeof values);
    CHECK(values[0] == 5 && values[1] == 6);
    CHECK(out.inputs[1].data == bytes(body) + mixed.size());
  }
  CHECK(memo.hits() == 0);

  // A plain JSON body (no binary part) and an input in a client shm region.
  const std::string json =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"INT32\",\"shape\":[1],\"data\":[1]}]}";
  const std::string shm =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],"
      "\"parameters\":{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":64}},"
      "{\"name\":\"INPUT1\",\"datatype\":\"FP32\",\"shape\":[1,16],"
      "\"parameters\":{\"binary_data_size\":64}}]}";
  for (int round = 0; round < 2; ++round) {
    ParsedRequest out;
    CHECK(memo_read(memo, json, json.size(), &out));
    CHECK(out.inputs.size() == 1 && out.inputs[0].size == 4);
    std::string body = body_of(shm, 64, '\x01');
    CHECK(memo_read(memo, body, shm.size(), &out));
    CHECK(out.inputs[0].in_shm && out.inputs[0].shm_region == "r");
  }
  CHECK(memo.hits() == 0);
}

TEST(header_memo_serves_the_lane) {
  // One client's requests, each with its own data: one parse, then the memo, and every
  // request queued with its own bytes (the batch tensor rows are checked in
  // test_kserve_codec's lane_requests_reach_the_batch_tensor_with_one_copy).
  LaneFixture f;
  f.lane.add_route("/v2/models/add_sub/infer", f.lane_model);
  HttpLane::Taken taken;
  for (int i = 0; i < 3; ++i) {
    std::string body = body_of(kHeader, 128, static_cast<char>(i));
    CHECK(f.lane.submit_to("/v2/models/add_sub/infer", bytes(body), body.size(), kHeader.size(), 7,
                           &taken));
    CHECK(taken.request_id != 0 && taken.reply.empty());
  }
  CHECK(f.lane.header_memo_hits() == 2);
  CHECK(f.lane.scan_memo_hits() == 0);  // submit_to: the front end's parser read the head
  CHECK(f.lane.codec().client_id(taken.request_id) == "r1");
}

namespace {

bool same_scan(const ScannedRequest& a, const ScannedRequest& b) {
  return a.target == b.target && a.target.data() == b.target.data() &&
         a.body_offset == b.body_offset && a.body_size == b.body_size &&
         a.has_header_length == b.has_header_length && a.header_length == b.header_length &&
         a.total == b.total && a.encoding == b.encoding;
}

// A request with `headers` (each ending in CRLF) and a body of `body` bytes.
std::string http_request(const std::string& headers, size_t body) {
  return "POST /v2/models/add_sub/infer HTTP/1.1\r\n" + headers +
         "Content-Length: " + std::to_string(body) + "\r\n\r\n" + std::string(body, 'b');
}

}  // namespace

TEST(scan_memo_recognises_a_repeated_head_as_scanning_would) {
  ScanMemo memo;
  const std::string headers =
      "Host: x\r\nInference-Header-Content-Length: 4\r\n"
      "Accept-Encoding: gzip\r\n";
  std::string first = http_request(headers, 10);
  ScannedRequest out, scanned;
  CHECK(memo.scan(first.data(), first.size(), 1 << 20, &out) == ScanResult::kRequest);
  CHECK(memo.hits() == 0);
  // The same head in another buffer, the body all there, then only part of it.
  std::string second = http_request(headers, 10) + "POST";
  CHECK(memo.scan(second.data(), second.size(), 1 << 20, &out) == ScanResult::kRequest);
  CHECK(memo.hits() == 1);
  CHECK(scan_request(second.data(), second.size(), 1 << 20, &scanned) == ScanResult::kRequest);
  CHECK(same_scan(out, scanned));
  CHECK(out.target == "/v2/models/add_sub/infer" && out.header_length == 4 &&
        out.encoding == ResponseEncoding::kGzip && out.total == first.size());
  const size_t partial = first.size() - 3;
  CHECK(memo.scan(second.data(), partial, 1 << 20, &out) == ScanResult::kIncomplete);
  CHECK(scan_request(second.data(), partial, 1 << 20, &scanned) == ScanResult::kIncomplete);
  CHECK(same_scan(out, scanned) && memo.hits() == 2);
  // A limit the kept body is over: refused, as scanning refuses it.
  CHECK(memo.scan(second.data(), second.size(), 9, &out) == ScanResult::kOther);
  CHECK(memo.hits() == 2);
}

TEST(scan_memo_scans_any_other_head) {
  ScanMemo memo;
  ScannedRequest out;
  std::string kept = http_request("Host: x\r\n", 10);
  CHECK(memo.scan(kept.data(), kept.size(), 1 << 20, &out) == ScanResult::kRequest);
  // Another Content-Length: scanned, and kept in its place.
  std::string longer = http_request("Host: x\r\n", 12);
  CHECK(memo.scan(longer.data(), longer.size(), 1 << 20, &out) == ScanResult::kRequest);
  CHECK(out.body_size == 12 && memo.hits() == 0);
  CHECK(memo.scan(longer.data(), longer.size(), 1 << 20, &out) == ScanResult::kRequest);
  CHECK(out.body_size == 12 && memo.hits() == 1);
  // The kept head and more headers after it: where the kept head ends, this one goes on.
  std::string more = http_request("Host: x\r\n", 12);
  more.insert(more.find("\r\n\r\n") + 2, "Transfer-Encoding: chunked\r\n");
  CHECK(memo.scan(more.data(), more.size(), 1 << 20, &out) == ScanResult::kOther);
  // What is not a plain request is never kept: the kept head still answers.
  std::string get = "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n";
  CHECK(memo.scan(get.data(), get.size(), 1 << 20, &out) == ScanResult::kOther);
  CHECK(memo.scan(longer.data(), longer.size(), 1 << 20, &out) == ScanResult::kRequest);
  CHECK(memo.hits() == 2);
  // Fewer bytes than the kept head: scanned (a head still arriving).
  CHECK(memo.scan(longer.data(), 20, 1 << 20, &out) == ScanResult::kIncomplete);
  CHECK(memo.hits() == 2);
}
