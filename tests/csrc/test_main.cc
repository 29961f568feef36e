#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>

#include "testing.h"

namespace {

// A case that hangs (e.g. a failed CHECK left a worker thread that its destructor joins)
// is reported and ends the run instead of stalling it.
constexpr unsigned kCaseTimeoutSeconds = 120;
const char* current_case = "";

void on_timeout(int) {
  const char* prefix = "TIMEOUT ";
  (void)!write(STDOUT_FILENO, prefix, std::strlen(prefix));
  (void)!write(STDOUT_FILENO, current_case, std::strlen(current_case));
  (void)!write(STDOUT_FILENO, "\n", 1);
  _exit(1);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  signal(SIGALRM, on_timeout);
  int passed = 0;
  int failed = 0;
  for (const naiad_testing::TestCase& test : naiad_testing::registry()) {
    int before = naiad_testing::failures();
    current_case = test.name;
    alarm(kCaseTimeoutSeconds);
    try {
      test.body();
    } catch (const naiad_testing::CheckFailed&) {
      // Reported and counted by CHECK.
    } catch (const std::exception& error) {
      ++naiad_testing::failures();
      std::fprintf(stderr, "%s: unexpected exception: %s\n", test.name, error.what());
    }
    alarm(0);
    bool ok = naiad_testing::failures() == before;
    std::printf("%s %s\n", ok ? "PASS" : "FAIL", test.name);
    (ok ? passed : failed)++;
  }
  std::printf("%d checks\n%d passed, %d failed\n", naiad_testing::checks(), passed, failed);
  return failed == 0 ? 0 : 1;
}
