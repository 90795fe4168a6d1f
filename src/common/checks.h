// Argument checks shared by every op's validation. Each failure throws a
// ValueError-kind Error of the form "<op>: <arg>: expected <what>, got <what>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "causalconv/error.h"
#include "causalconv/tensor.h"

namespace causalconv::detail {

// Who will execute the op: the fp64 CPU reference or the CUDA kernels.
enum class Target { cpu_reference, cuda };

[[noreturn]] void fail_argument(const char* op, const std::string& arg, const std::string& expected,
                                const std::string& got);

// Rank, device kind, dtype family of the target and a valid pointer.
void check_tensor(const char* op, const char* arg, const TensorView& t, int rank, Target target);

// Same dtype and device as `like` (the op's first input).
void check_matches(const char* op, const char* arg, const TensorView& t, const char* like_name,
                   const TensorView& like);

// Exact sizes; `layout` names the dims for the message, e.g. "(B, C_out, L)".
void check_sizes(const char* op, const char* arg, const TensorView& t, std::initializer_list<int64_t> sizes,
                 const char* layout);

void check_range(const char* op, const char* arg, int64_t value, int64_t lo, int64_t hi);

// Unit stride along the last dim of a rank-3 (B, C, L) view, for kernels that read
// rows; an empty view or one with L <= 1 has no stride to speak of and passes.
void check_unit_time_stride(const char* op, const char* arg, const TensorView& t);

// The caller's workspace holds at least `needed` bytes (and has a pointer when it must).
void check_workspace(const char* op, size_t needed, const void* data, size_t bytes);
// A caller-owned buffer `name` of at least `needed` bytes (a workspace, a kept copy).
void check_buffer(const char* op, const char* name, size_t needed, const void* data, size_t bytes);

}  // namespace causalconv::detail
