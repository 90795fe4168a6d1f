// Checks of the b2b wgmma kernels' L2 prefetches for the blocks a wave later
// (b2b_wgmma_prefetch_block_ahead), from what the blocks of an emulated launch did
// (cuda_emulation.h's memory_log): the prefetches of block t - ahead must cover what block t reads
// first. Include after cuda_emulation.h.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace causalconv::test {

// A copy of an activation's elements with element `at_line_start` at the start of a 128-byte line.
// (malloc aligns to 16 bytes, which leaves to chance whether a realigned row's last raw unit, past
// its staged steps at lead 0, starts a line of its own; for a row that starts a line it does.)
template <typename T>
struct LineAlignedCopy {
  std::vector<T> storage;
  T* data;
  LineAlignedCopy(const std::vector<T>& values, size_t at_line_start)
      : storage(values.size() + 2 * 128 / sizeof(T)) {
    const uintptr_t start = reinterpret_cast<uintptr_t>(storage.data()), line = (start + 127) & ~uintptr_t(127);
    const size_t before = (at_line_start * sizeof(T)) % 128;  // bytes of the copy before that line
    data = storage.data() + (line + (before > 0 ? 128 - before : 0) - start) / sizeof(T);
    std::copy(values.begin(), values.end(), data);
  }
};

// A byte range of global memory: start and length.
using ByteRange = std::pair<const void*, size_t>;

// The 128-byte lines (address / 128) a range touches.
inline void add_lines(std::set<uintptr_t>& lines, ByteRange r) {
  if (r.second == 0) return;
  const uintptr_t first = reinterpret_cast<uintptr_t>(r.first);
  for (uintptr_t line = first >> 7; line <= (first + r.second - 1) >> 7; ++line) lines.insert(line);
}

// What a block of channel c reads besides its first stage: its three projection rows' Kp taps and
// its mixer row's Km taps (weight_proj rows 3c + j, weight_mixer row c) and its skip weight.
template <typename Weights, typename Skip>
std::vector<ByteRange> filter_reads(Weights& wp, Weights& wm, Skip& skip, int64_t c, int64_t kp, int64_t km) {
  std::vector<ByteRange> r;
  for (int64_t j = 0; j < 3; ++j)
    for (int64_t k = 0; k < kp; ++k) r.push_back({&wp.at(3 * c + j, k), sizeof(wp.at(0, 0))});
  for (int64_t k = 0; k < km; ++k) r.push_back({&wm.at(c, k), sizeof(wm.at(0, 0))});
  r.push_back({&skip.at(c, 0), sizeof(skip.at(0, 0))});
  return r;
}

// The bytes of a vector's elements.
template <typename V>
ByteRange bytes_of(const V& v) {
  return {v.data(), v.size() * sizeof(v[0])};
}

// `log` cleared, then on while `launch` runs.
template <typename Launch>
void record_memory_log(emulation::MemoryLog& log, Launch launch) {
  log.clear();
  log.on = true;
  launch();
  log.on = false;
}

// Checks `log`, recorded over a launch of `blocks` blocks with prefetch_ahead = ahead:
//   - for each block t >= ahead, every line of its first commit group's cp.async reads (bytes > 0)
//     and of also_read(t) (what else the test knows it reads first: its filter taps, skip weight)
//     is among the lines block t - ahead prefetched (every block's first group reads something);
//   - a block whose t + ahead is past the grid prefetches nothing;
//   - every prefetch lies in one of `tensors` (no address outside the operands).
inline void expect_prefetches_ahead(const emulation::MemoryLog& log, uint64_t blocks, uint64_t ahead,
                                    const std::function<std::vector<ByteRange>(uint64_t)>& also_read,
                                    const std::vector<ByteRange>& tensors) {
  std::map<uint64_t, std::set<uintptr_t>> prefetched, first_reads;
  for (const emulation::PrefetchRecord& r : log.prefetches) {
    prefetched[r.block].insert(reinterpret_cast<uintptr_t>(r.address) >> 7);
    bool inside = false;
    for (const ByteRange& t : tensors) {
      const uintptr_t a = reinterpret_cast<uintptr_t>(r.address), base = reinterpret_cast<uintptr_t>(t.first);
      inside = inside || (a >= base && a < base + t.second);
    }
    EXPECT_TRUE(inside) << "block " << r.block << " prefetched an address outside the operands";
  }
  for (const emulation::AsyncCopyRecord& c : log.copies)
    if (c.group == 0 && c.bytes > 0) add_lines(first_reads[c.block], {c.src, size_t(c.bytes)});
  int64_t missing = 0;
  for (uint64_t t = 0; t < blocks; ++t) {
    SCOPED_TRACE(::testing::Message() << "ahead " << ahead << ", block " << t);
    if (t + ahead >= blocks) EXPECT_EQ(prefetched.count(t), 0u) << "a block with none ahead of it prefetched";
    EXPECT_FALSE(first_reads[t].empty()) << "the block's first commit group copied nothing";
    if (t < ahead) continue;
    std::set<uintptr_t> wanted = first_reads[t];
    for (const ByteRange& r : also_read(t)) add_lines(wanted, r);
    const std::set<uintptr_t>& got = prefetched[t - ahead];
    for (uintptr_t line : wanted)
      if (!got.count(line)) {
        if (missing < 5) ADD_FAILURE() << "line " << line << " not prefetched by block " << t - ahead;
        ++missing;
      }
  }
  EXPECT_EQ(missing, 0) << "lines read first and not prefetched a wave earlier";
}

}  // namespace causalconv::test
