// Runtime width -> a kernel template argument: the one switch the launchers (and the emulated
// tests, which launch the same templates) would otherwise each write out.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace causalconv::detail {

template <int kMin, typename F, int... kOffsets>
bool with_width_in(int64_t width, F& f, std::integer_sequence<int, kOffsets...>) {
  return ((width == kMin + kOffsets && (f(std::integral_constant<int, kMin + kOffsets>{}), true)) || ...);
}

// Calls f(std::integral_constant<int, K>{}) for the K in [kMin, kMax] equal to width and returns
// true; returns false without calling f for any other width.
template <int kMin, int kMax, typename F>
bool with_width(int64_t width, F&& f) {
  static_assert(kMin <= kMax, "an empty range of widths");
  return with_width_in<kMin>(width, f, std::make_integer_sequence<int, kMax - kMin + 1>{});
}

}  // namespace causalconv::detail
