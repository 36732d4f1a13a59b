// KeyedMemo (csrc/core/platform.h): the memo behind launch decisions that depend on a launch
// argument, e.g. the occupancy at a given shared-memory size. A stale or foreign entry would only
// misplace CTAs (never change bits), which no output test can see, so the memo is tested here.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/platform.h"

namespace {

// The value a query for (device, key) would give, distinct for every pair used below.
int truth(int device, uint64_t key) { return static_cast<int>((device * 7919 + key * 31) % 60000); }

TEST(KeyedMemo, ComputesOncePerDeviceAndKey) {
  static mxf::KeyedMemo<16> memo;
  int calls = 0;
  auto ask = [&](int d, uint64_t k) {
    return memo.get(d, k, [&] {
      ++calls;
      return truth(d, k);
    });
  };
  EXPECT_EQ(ask(0, 51200), truth(0, 51200));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(ask(0, 51200), truth(0, 51200));
  EXPECT_EQ(calls, 1);  // kept
  // Another key on the same device, and the same key on another device, are asked afresh: the
  // bug this memo replaced kept the first answer of a kernel for every shared-memory size.
  EXPECT_EQ(ask(0, 67584), truth(0, 67584));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(ask(1, 51200), truth(1, 51200));
  EXPECT_EQ(calls, 3);
}

TEST(KeyedMemo, NeverReturnsAnotherKeysValue) {
  // Far more keys than entries: collisions evict, but every answer is the asked key's own.
  static mxf::KeyedMemo<4> memo;
  for (int round = 0; round < 3; ++round) {
    for (int d = 0; d < 3; ++d) {
      for (uint64_t k = 0; k < 200; ++k) {
        const uint64_t key = k * 1024 + 16;
        EXPECT_EQ(memo.get(d, key, [&] { return truth(d, key); }), truth(d, key)) << d << " " << key;
      }
    }
  }
}

TEST(KeyedMemo, ZeroIsAValueAndErrorsAreNotKept) {
  static mxf::KeyedMemo<8> memo;
  int calls = 0;
  EXPECT_EQ(memo.get(2, 5, [&] { return ++calls, -3; }), -3);
  EXPECT_EQ(memo.get(2, 5, [&] { return ++calls, -3; }), -3);
  EXPECT_EQ(calls, 2);  // an error is asked again
  EXPECT_EQ(memo.get(2, 5, [&] { return ++calls, 0; }), 0);
  EXPECT_EQ(memo.get(2, 5, [&] { return ++calls, 9; }), 0);
  EXPECT_EQ(calls, 3);  // 0 (no CTA fits) is an answer and is kept
}

TEST(KeyedMemo, OutOfRangeDevicesKeysAndValuesAreAskedEveryTime) {
  static mxf::KeyedMemo<8> memo;
  int calls = 0;
  auto count = [&](int v) {
    return [&calls, v] {
      ++calls;
      return v;
    };
  };
  EXPECT_EQ(memo.get(-1, 7, count(4)), 4);    // device unknown
  EXPECT_EQ(memo.get(-1, 7, count(4)), 4);
  EXPECT_EQ(memo.get(4096, 7, count(5)), 5);  // device index too large to tag
  EXPECT_EQ(memo.get(4096, 7, count(5)), 5);
  const uint64_t big = uint64_t{1} << 36;
  EXPECT_EQ(memo.get(0, big, count(6)), 6);   // key too large to tag
  EXPECT_EQ(memo.get(0, big, count(6)), 6);
  EXPECT_EQ(memo.get(0, 3, count(70000)), 70000);  // value too large to pack
  EXPECT_EQ(memo.get(0, 3, count(70000)), 70000);
  EXPECT_EQ(calls, 8);
  // The largest taggable device, key and value are kept.
  EXPECT_EQ(memo.get(4095, big - 1, count(0xFFFF)), 0xFFFF);
  EXPECT_EQ(memo.get(4095, big - 1, count(1)), 0xFFFF);
  EXPECT_EQ(calls, 9);
}

TEST(KeyedMemo, ConcurrentReadersSeeOnlyTheirKeysValues) {
  static mxf::KeyedMemo<2> memo;  // two entries: threads evict each other constantly
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        const int d = (i + t) % 3;
        const uint64_t key = static_cast<uint64_t>((i * 13 + t) % 97) * 128;
        if (memo.get(d, key, [&] { return truth(d, key); }) != truth(d, key)) wrong.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
