// A minimal test harness for the core's C++ tests: TEST registers a case, CHECK
// reports a failed condition and stops the case (the code after a failed CHECK often
// relies on it: an index in range, a pointer set). test_main.cc runs them all.
#pragma once

#include <cstdio>
#include <functional>
#include <vector>

namespace naiad_testing {

struct TestCase {
  const char* name;
  std::function<void()> body;
};

inline std::vector<TestCase>& registry() {
  static std::vector<TestCase> tests;
  return tests;
}

inline int& failures() {
  static int count = 0;
  return count;
}

inline int& checks() {
  static int count = 0;
  return count;
}

// Thrown by a failed CHECK, after it was reported and counted; test_main catches it and
// goes on with the next case.
struct CheckFailed {};

struct Register {
  Register(const char* name, std::function<void()> body) {
    registry().push_back({name, std::move(body)});
  }
};

}  // namespace naiad_testing

#define CHECK(cond)                                                                 \
  do {                                                                              \
    ++naiad_testing::checks();                                                      \
    if (!(cond)) {                                                                  \
      ++naiad_testing::failures();                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      throw naiad_testing::CheckFailed{};                                           \
    }                                                                               \
  } while (0)

#define TEST(name)                                      \
  void name();                                          \
  naiad_testing::Register register_##name(#name, name); \
  void name()
