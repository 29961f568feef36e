#include <cstdio>

#include "testing.h"

int main() {
  int passed = 0;
  int failed = 0;
  for (const naiad_testing::TestCase& test : naiad_testing::registry()) {
    int before = naiad_testing::failures();
    test.body();
    bool ok = naiad_testing::failures() == before;
    std::printf("%s %s\n", ok ? "PASS" : "FAIL", test.name);
    (ok ? passed : failed)++;
  }
  std::printf("%d checks\n%d passed, %d failed\n", naiad_testing::checks(), passed, failed);
  return failed == 0 ? 0 : 1;
}
