// Where and why Triton 2.51 refuses an inference header that is no JSON document: its
// parser (rapidjson 1.1, with NaN and Infinity allowed, over a buffer of known length)
// followed step by step, so that a request the lane cannot read gets Triton's answer
// (500, "failed to parse the request JSON buffer: <rapidjson's words> at <offset>")
// from C++. Only the syntax: a document that parses is for the readers (kserve_json.h).
// What that parser does and this follows: a leading UTF-8 byte order mark skipped (each
// of its three bytes on its own), a NUL byte read as the end of the text, strings not
// checked for UTF-8, numbers past a double refused only where rapidjson checks them.
//
// A pure function over caller-owned bytes: any thread may call it.
#pragma once

#include <cstddef>
#include <string>

namespace naiad {

struct JsonSyntaxError {
  const char* what = nullptr;  // rapidjson's English message (GetParseError_En)
  size_t offset = 0;           // rapidjson's error offset, from the start of the buffer
};

// False: `text` is no JSON document to Triton, and `error` says why and where.
bool json_syntax_ok(const char* text, size_t size, JsonSyntaxError* error);

// Triton's message for a header that is no JSON document.
std::string json_syntax_message(const JsonSyntaxError& error);

}  // namespace naiad
