// For binaries built with -fsanitize=thread: proves the sanitizer is live by
// running a plain data race in a death-test child and expecting the exit code
// the binary's __tsan_default_options give a report (66).
#pragma once

#include <cstdlib>
#include <thread>

#include <gtest/gtest.h>

namespace lg::testing {

inline void expectDeliberateRaceIsReported() {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        int counter = 0;
        std::thread a([&] {
          for (int i = 0; i < 100000; ++i) counter = counter + 1;
        });
        std::thread b([&] {
          for (int i = 0; i < 100000; ++i) counter = counter + 1;
        });
        a.join();
        b.join();
        std::exit(counter > 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(66), "data race");
}

}  // namespace lg::testing
