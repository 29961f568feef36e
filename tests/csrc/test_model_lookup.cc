// A request's model and version looked up as Triton 2.51 looks them up
// (codec/model_lookup.h): version strings read as std::stol, and each refusal's status
// and message byte for byte (checked against Triton in
// tests/grpc_clients/test_grpc_infer_forms_triton.py).
#include <cstdint>
#include <string>

#include "codec/model_lookup.h"
#include "testing.h"

using namespace naiad;

namespace {

// The version `text` names, or -2 with the error in `error`.
int64_t version_of(const std::string& text, std::string* error) {
  int64_t version = 0;
  error->clear();
  return parse_model_version(text, &version, error) ? version : -2;
}

struct Lookup {
  ModelLookup::Found found;
  uint32_t lane_model = kNoLaneModel;
  ErrorKind kind = ErrorKind::kNone;
  std::string message;
};

Lookup find(const ModelLookup& table, const std::string& name, const std::string& version) {
  Lookup out;
  out.found = table.find(name, version, &out.lane_model, &out.kind, &out.message);
  return out;
}

}  // namespace

TEST(model_version_strings_read_as_stol) {
  std::string error;
  CHECK(version_of("", &error) == -1);
  CHECK(version_of("1", &error) == 1);
  CHECK(version_of("007", &error) == 7);
  CHECK(version_of(" \t\n+3", &error) == 3);  // white space and a sign
  CHECK(version_of("2abc", &error) == 2);     // what follows the digits is ignored
  CHECK(version_of("0", &error) == 0);
  CHECK(version_of("-0", &error) == 0);
  CHECK(version_of("9223372036854775807", &error) == INT64_MAX);
  const std::string no_number = "' (details: stol), version should be an integral value > 0";
  for (const char* text : {"one", "+", "-", " ", "x1", "9223372036854775808",
                           "-9223372036854775809", "99999999999999999999999"}) {
    CHECK(version_of(text, &error) == -2);
    CHECK(error == "failed to get model version from specified version string '" +
                       std::string(text) + no_number);
  }
  // LONG_MIN is a long: refused only as negative.
  for (const char* text : {"-1", "-9223372036854775808", " -5x"}) {
    CHECK(version_of(text, &error) == -2);
    CHECK(error == "invalid model version specified '" + std::string(text) +
                       "' , version should be an integral value > 0");
  }
}

TEST(model_lookup_answers_as_triton) {
  ModelLookup table;
  // add_sub: 1 and 3 ready on lane models 10 and 30, 2 loading. failed: one version,
  // not ready.
  table.set_model("add_sub", {{1, true, 10}, {2, false, 20}, {3, true, 30}});
  table.set_model("failed", {{1, false, kNoLaneModel}});
  Lookup r = find(table, "add_sub", "");
  CHECK(r.found == ModelLookup::Found::kLane && r.lane_model == 30);  // the latest ready
  r = find(table, "add_sub", "1");
  CHECK(r.found == ModelLookup::Found::kLane && r.lane_model == 10);
  r = find(table, "add_sub", " 01x");  // version 1, as Triton reads it
  CHECK(r.found == ModelLookup::Found::kLane && r.lane_model == 10);
  r = find(table, "add_sub", "2");
  CHECK(r.found == ModelLookup::Found::kRefused && r.kind == ErrorKind::kUnavailable);
  CHECK(r.message == "Request for unknown model: 'add_sub' version 2 is not at ready state");
  r = find(table, "add_sub", "07");
  CHECK(r.found == ModelLookup::Found::kRefused && r.kind == ErrorKind::kNotFound);
  CHECK(r.message == "Request for unknown model: 'add_sub' version 7 is not found");
  r = find(table, "add_sub", "0");
  CHECK(r.kind == ErrorKind::kNotFound &&
        r.message == "Request for unknown model: 'add_sub' version 0 is not found");
  r = find(table, "nope", "");
  CHECK(r.found == ModelLookup::Found::kRefused && r.kind == ErrorKind::kNotFound);
  CHECK(r.message == "Request for unknown model: 'nope' is not found");
  r = find(table, "", "");
  CHECK(r.message == "Request for unknown model: '' is not found");
  r = find(table, "failed", "");
  CHECK(r.kind == ErrorKind::kNotFound &&
        r.message == "Request for unknown model: 'failed' has no available versions");
  r = find(table, "failed", "1");
  CHECK(r.kind == ErrorKind::kUnavailable &&
        r.message == "Request for unknown model: 'failed' version 1 is not at ready state");
  // The version string is read first, before the model is looked up.
  r = find(table, "nope", "one");
  CHECK(r.found == ModelLookup::Found::kRefused && r.kind == ErrorKind::kInvalidArgument);
  CHECK(r.message ==
        "failed to get model version from specified version string 'one' (details: stol), "
        "version should be an integral value > 0");
  r = find(table, "add_sub", "-1");
  CHECK(r.kind == ErrorKind::kInvalidArgument &&
        r.message ==
            "invalid model version specified '-1' , version should be an integral value > 0");
  // A removed lane model leaves its versions to the general path; a new table replaces
  // what was known, and no versions at all is an unknown name.
  table.remove_lane_model(30);
  CHECK(find(table, "add_sub", "").found == ModelLookup::Found::kGeneral);
  CHECK(find(table, "add_sub", "3").found == ModelLookup::Found::kGeneral);
  table.set_model("add_sub", {{1, true, 10}});
  CHECK(find(table, "add_sub", "").lane_model == 10);
  CHECK(find(table, "add_sub", "3").kind == ErrorKind::kNotFound);
  table.set_model("add_sub", {});
  CHECK(find(table, "add_sub", "").message == "Request for unknown model: 'add_sub' is not found");
  table.clear();
  CHECK(find(table, "failed", "").message == "Request for unknown model: 'failed' is not found");
}
