// Inference headers that are no JSON document, refused with Triton 2.51's message
// (codec/json_syntax.h): each case's offset and words as a real tritonserver 2.51
// answered the same bytes, and documents its parser takes that stricter ones refuse
// (NaN, Infinity, bytes that are no UTF-8, a byte order mark, text after a NUL).
#include <cstdio>
#include <random>
#include <string>

#include "codec/json_syntax.h"
#include "testing.h"

using namespace naiad;

namespace {

// Triton's message for `text`, or "" when its parser takes it.
std::string refusal(const std::string& text) {
  JsonSyntaxError error;
  if (json_syntax_ok(text.data(), text.size(), &error)) return "";
  return json_syntax_message(error);
}

std::string at(const std::string& what, int offset) {
  return "failed to parse the request JSON buffer: " + what + " at " + std::to_string(offset);
}

#define CHECK_EQ(a, b) CHECK(same(a, b))

bool same(const std::string& got, const std::string& want) {
  if (got != want) std::fprintf(stderr, "got  %s\nwant %s\n", got.c_str(), want.c_str());
  return got == want;
}

}  // namespace

TEST(json_syntax_refusals_are_tritons) {
  const std::string invalid = "Invalid value.";
  const std::string surrogate = "The surrogate pair in string is invalid.";
  const std::string escape = "Invalid escape character in string.";
  const std::string too_big = "Number too big to be stored in double.";
  CHECK_EQ(refusal("{\"inputs\": ["), at(invalid, 12));
  CHECK_EQ(refusal("{} x"), at("The document root must not be followed by other values.", 3));
  CHECK_EQ(refusal("   "), at("The document is empty.", 3));
  CHECK_EQ(refusal(std::string(1, '\0')), at("The document is empty.", 0));
  CHECK_EQ(refusal("{\"inputs\": [1,]}"), at(invalid, 14));
  CHECK_EQ(refusal("{\"inputs\" [1]}"), at("Missing a colon after a name of object member.", 10));
  CHECK_EQ(refusal("{\"inputs\": [1] \"x\"}"),
           at("Missing a comma or '}' after an object member.", 15));
  CHECK_EQ(refusal("{1:2}"), at("Missing a name for object member.", 1));
  CHECK_EQ(refusal("{\"a\":\"\x01\"}"), at(escape, 6));
  CHECK_EQ(refusal("{\"a\":\"abc"), at("Missing a closing quotation mark in string.", 9));
  CHECK_EQ(refusal(std::string("{\"a\":\"x\0y\"}", 11)),
           at("Missing a closing quotation mark in string.", 7));
  CHECK_EQ(refusal("{\"a\":\"\\q\"}"), at(escape, 6));
  CHECK_EQ(refusal("{\"a\":\"\\"), at(escape, 6));
  CHECK_EQ(refusal("{\"a\":\"\\u12G4\"}"),
           at("Incorrect hex digit after \\u escape in string.", 6));
  CHECK_EQ(refusal("{\"a\":\"\\u00\"}"), at("Incorrect hex digit after \\u escape in string.", 6));
  CHECK_EQ(refusal("{\"a\":\"\\ud800x\"}"), at(surrogate, 6));
  CHECK_EQ(refusal("{\"a\":\"\\ud800\\u0041\"}"), at(surrogate, 6));
  CHECK_EQ(refusal("{\"a\":\"\\ud800\\udbff\"}"), at(surrogate, 6));
  CHECK_EQ(refusal("{\"a\":1.}"), at("Miss fraction part in number.", 7));
  CHECK_EQ(refusal("{\"a\":1e}"), at("Miss exponent in number.", 7));
  CHECK_EQ(refusal("{\"a\":1E+}"), at("Miss exponent in number.", 8));
  CHECK_EQ(refusal("{\"a\":-}"), at(invalid, 6));
  CHECK_EQ(refusal("{\"a\":01}"), at("Missing a comma or '}' after an object member.", 6));
  CHECK_EQ(refusal("{\"a\":1e309}"), at(too_big, 5));
  CHECK_EQ(refusal("{\"a\":0e400}"), at(too_big, 5));
  CHECK_EQ(refusal("{\"a\":[" + std::string(400, '1') + "]}"), at(too_big, 6));
  CHECK_EQ(refusal("{\"a\":nul}"), at(invalid, 8));
  CHECK_EQ(refusal("{\"a\":tru}"), at(invalid, 8));
  CHECK_EQ(refusal("{\"a\":fals}"), at(invalid, 9));
  CHECK_EQ(refusal("{\"a\":Infin}"), at(invalid, 10));
  CHECK_EQ(refusal("{\"a\":Nax}"), at(invalid, 7));
  CHECK_EQ(refusal("{\"a\":I}"), at(invalid, 6));
  CHECK_EQ(refusal(" \xef\xbb\xbf{\"a\":1}"), at(invalid, 1));
  CHECK_EQ(refusal(std::string("{\"a\"\0:1}", 8)),
           at("Missing a colon after a name of object member.", 4));
  CHECK_EQ(refusal("{\"a\":1} \xff"),
           at("The document root must not be followed by other values.", 8));
  CHECK_EQ(refusal("{\"a\":1}}"), at("The document root must not be followed by other values.", 7));
  CHECK_EQ(refusal("[1"), at("Missing a comma or ']' after an array element.", 2));
  CHECK_EQ(refusal("{\"a\":[1 2]}"), at("Missing a comma or ']' after an array element.", 8));
}

TEST(json_syntax_takes_what_triton_takes) {
  for (const std::string& text : {
           std::string("{\"inputs\": NaN}"),
           std::string("{\"a\":-NaN}"),
           std::string("{\"a\":Inf}"),
           std::string("{\"a\":-Infinity}"),
           std::string("{\"a\":[NaN, 1]}"),
           std::string("{\"a\":\"\xff\xfe\"}"),  // no UTF-8 check
           std::string("{\"a\":\"\\udc00\"}"),   // a lone low surrogate
           std::string("{\"a\":9e308}"),         // past a double, not checked there
           std::string("{\"a\":1.5e-99999999999}"),
           std::string("{\"a\":123456789012345678901234567890e290}"),
           std::string("{\"a\":1.0000000000000000000000000000001e308}"),
           std::string("\xef\xbb\xbf{\"a\":1}"),  // the byte order mark's bytes
           std::string("\xbb{\"a\":1}"),
           std::string("\xef\xbf{\"a\":1}"),
           std::string("{\"a\":1}\0garbage", 15),  // a NUL ends the text
           std::string("{\"a\":[[],{},\"\\u00e9\\ud83d\\ude00\",-0.5e-3,true,false,null]}"),
       }) {
    CHECK_EQ(refusal(text), "");
  }
}

TEST(json_syntax_survives_damaged_and_deep_documents) {
  // Deep nesting is walked without recursion.
  CHECK_EQ(refusal(std::string(200000, '[') + std::string(200000, ']')), "");
  std::mt19937 random(7);
  const std::string base = "{\"inputs\":[{\"name\":\"IN\",\"data\":[1.5e3,-2,\"\\u00e9\"]}]}";
  for (int round = 0; round < 20000; ++round) {
    std::string text = base.substr(0, random() % (base.size() + 1));
    for (int flips = random() % 4; flips > 0 && !text.empty(); --flips) {
      text[random() % text.size()] = static_cast<char>(random() % 256);
    }
    JsonSyntaxError error;
    if (!json_syntax_ok(text.data(), text.size(), &error)) CHECK(error.offset <= text.size());
  }
}
