// Compressed gRPC messages (csrc/http2/grpc_inflate.h): what Triton 2.51's gRPC core
// takes and refuses, with its statuses and messages (as read from a real tritonserver
// 2.51), and the stepwise inflater (codec/http_compress.h Inflater) it runs on.
#include <string>

#include "codec/http_compress.h"
#include "http2/grpc_inflate.h"
#include "http2/grpc_wire.h"
#include "inflate_support.h"
#include "testing.h"

using namespace naiad;

namespace {

// A whole inflation: (status, the message or the error).
std::pair<int, std::string> inflate_all(const std::string& compressed, const char* encoding,
                                        uint64_t max = 0x7fffffff) {
  grpc::Inflation inflation(compressed, encoding, max);
  CHECK(inflation.step(SIZE_MAX));
  CHECK(inflation.done());
  if (inflation.status() != grpc::kOk) return {inflation.status(), inflation.error()};
  return {grpc::kOk, std::string(inflation.message())};
}

const char kDamagedGzip[] = "Unexpected error decompressing data for algorithm gzip";
const char kDamagedDeflate[] = "Unexpected error decompressing data for algorithm deflate";

}  // namespace

TEST(grpc_inflate_takes_gzip_and_the_zlib_format) {
  const std::string message = patterned(300000);
  CHECK(inflate_all(deflated(StreamFormat::kGzip, message), "gzip") ==
        std::make_pair(int(grpc::kOk), message));
  CHECK(inflate_all(deflated(StreamFormat::kZlib, message), "deflate") ==
        std::make_pair(int(grpc::kOk), message));
  // An empty compressed message is an empty message (gRPC core inflates nothing).
  CHECK(inflate_all("", "gzip") == std::make_pair(int(grpc::kOk), std::string()));
  CHECK(inflate_all(deflated(StreamFormat::kGzip, ""), "gzip") ==
        std::make_pair(int(grpc::kOk), std::string()));
}

TEST(grpc_inflate_refuses_damaged_streams_with_tritons_words) {
  const std::string message = patterned(5000);
  const std::string gzip = deflated(StreamFormat::kGzip, message);
  const std::pair<int, std::string> damaged_gzip{grpc::kInternal, kDamagedGzip};
  const std::pair<int, std::string> damaged_deflate{grpc::kInternal, kDamagedDeflate};
  CHECK(inflate_all("notgzip" + message, "gzip") == damaged_gzip);
  CHECK(inflate_all(gzip.substr(0, gzip.size() - 10), "gzip") == damaged_gzip);  // truncated
  std::string bad_crc = gzip;
  bad_crc[bad_crc.size() - 8] ^= 1;
  CHECK(inflate_all(bad_crc, "gzip") == damaged_gzip);
  CHECK(inflate_all(gzip + "junk", "gzip") == damaged_gzip);  // bytes after its end
  CHECK(inflate_all(gzip + gzip, "gzip") == damaged_gzip);    // a second member too
  // deflate is the zlib format only: raw deflate is damaged.
  CHECK(inflate_all(deflated(StreamFormat::kRawDeflate, message), "deflate") == damaged_deflate);
  CHECK(inflate_all(gzip, "deflate") == damaged_deflate);
  CHECK(inflate_all(deflated(StreamFormat::kZlib, message), "gzip") == damaged_gzip);
}

TEST(grpc_inflate_names_the_whole_size_of_a_message_past_the_maximum) {
  const std::string zeros(10000, '\0');
  CHECK(inflate_all(deflated(StreamFormat::kGzip, zeros), "gzip", 10000).second == zeros);
  CHECK(inflate_all(deflated(StreamFormat::kGzip, zeros + "x"), "gzip", 10000) ==
        std::make_pair(int(grpc::kResourceExhausted),
                       std::string("Received message larger than max (10001 vs. 10000)")));
  CHECK(inflate_all(deflated(StreamFormat::kZlib, std::string(15000, 'a')), "deflate", 10000) ==
        std::make_pair(int(grpc::kResourceExhausted),
                       std::string("Received message larger than max (15000 vs. 10000)")));
  // Damage past the maximum is still found: gRPC core inflates to the end first.
  std::string bad_crc = deflated(StreamFormat::kGzip, std::string(15000, 'a'));
  bad_crc[bad_crc.size() - 8] ^= 1;
  CHECK(inflate_all(bad_crc, "gzip", 10000) ==
        std::make_pair(int(grpc::kInternal), std::string(kDamagedGzip)));
  // Measured up to kMeasureFactor times the maximum, then given up.
  CHECK(inflate_all(deflated(StreamFormat::kGzip, std::string(20000, 'a')), "gzip", 10000).second ==
        "Received message larger than max (20000 vs. 10000)");
  CHECK(
      inflate_all(deflated(StreamFormat::kGzip, std::string(20001, 'a')), "gzip", 10000) ==
      std::make_pair(int(grpc::kResourceExhausted),
                     std::string("Received message larger than max (more than 20000 vs. 10000)")));
}

TEST(grpc_inflate_goes_in_steps_of_its_budget) {
  const std::string message = patterned(1000000);
  grpc::Inflation inflation(deflated(StreamFormat::kGzip, message), "gzip", 0x7fffffff);
  int steps = 1;
  while (!inflation.step(100000)) ++steps;
  CHECK(steps == 10);  // 1,000,000 bytes, 100,000 a step: the tenth ends the stream
  CHECK(inflation.status() == grpc::kOk);
  CHECK(inflation.message() == message);
  CHECK(inflation.step(100000));  // done stays done
  // Past the maximum, the bytes measured count against the budget too, and none is held.
  grpc::Inflation bomb(deflated(StreamFormat::kGzip, std::string(3000000, '\0')), "gzip", 1500000);
  steps = 1;
  while (!bomb.step(500000)) ++steps;
  CHECK(steps >= 6 && steps <= 7);  // the 7th, if any, reads the stream's trailer
  CHECK(bomb.status() == grpc::kResourceExhausted);
  CHECK(bomb.error() == "Received message larger than max (3000000 vs. 1500000)");
  CHECK(bomb.message().empty());
}

TEST(grpc_inflate_hands_back_the_compressed_message_before_it_is_done) {
  const std::string gzip = deflated(StreamFormat::kGzip, patterned(300000));
  grpc::Inflation inflation(gzip, "gzip", 0x7fffffff);
  CHECK(!inflation.step(1000));
  CHECK(inflation.take_compressed() == gzip);
}

TEST(inflater_steps_read_a_stream_as_inflate_stream_does) {
  const std::string data = patterned(200000);
  const std::string zlib = deflated(StreamFormat::kZlib, data);
  const std::string trailing = zlib + "after";  // ignored (HTTP's rules)
  for (size_t budget : {size_t(1), size_t(4096), size_t(65536), size_t(200000), SIZE_MAX}) {
    Inflater inflater(StreamFormat::kZlib, trailing, SIZE_MAX);
    InflatedBytes out;
    std::string error;
    Inflated outcome;
    while ((outcome = inflater.step(budget, &out, &error)) == Inflated::kMore) {
    }
    CHECK(outcome == Inflated::kDone);
    CHECK(out.view() == data);
    CHECK(inflater.total() == data.size());
  }
  // HTTP's limit: given up at the limit, whatever the budget.
  Inflater limited(StreamFormat::kZlib, zlib, 1000);
  InflatedBytes out;
  std::string error;
  CHECK(limited.step(500, &out, &error) == Inflated::kMore);
  CHECK(limited.step(SIZE_MAX, &out, &error) == Inflated::kTooLarge);
  CHECK(out.size() <= 1001);
}
