// A program with one deliberate bug per argument, built (with every axonn target) only by
// AXONN_SANITIZE=ON builds: test_sanitizers runs it as a child process to show that a
// sanitizer finding in any process a test starts ends that process and fails the test.
//   sanitizer_canary clean | heap-overflow | undefined | leak
#include <cstddef>
#include <cstdio>
#include <cstring>

namespace {

int heap_overflow() {
  char* bytes = new char[8];
  volatile size_t count = 9;  // one past the end, unknown to the compiler
  std::memset(bytes, 1, count);
  const int first = bytes[0];
  delete[] bytes;
  return first;
}

int undefined() {
  volatile int large = 0x7fffffff;
  return large + 1;  // signed overflow
}

int* volatile g_only_pointer = nullptr;

int leak() {
  g_only_pointer = new int[16]();  // through a volatile, so the compiler keeps the allocation
  g_only_pointer = nullptr;        // the only pointer to it is gone: LeakSanitizer reports it at exit
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc == 2 ? argv[1] : "";
  if (std::strcmp(mode, "clean") == 0) return 0;
  if (std::strcmp(mode, "heap-overflow") == 0) return heap_overflow();
  if (std::strcmp(mode, "undefined") == 0) return undefined();
  if (std::strcmp(mode, "leak") == 0) return leak();
  std::fprintf(stderr, "usage: sanitizer_canary clean | heap-overflow | undefined | leak (got '%s')\n", mode);
  return 2;
}
