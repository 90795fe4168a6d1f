// fp64 CPU reference of causal_conv1d (DESIGN.md §2.1): the executable spec.
// Plain loop nests over (batch, out channel, time, in channel of the group, tap),
// every access through the views' strides so any layout is accepted.
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "causal_conv1d/validate.h"
#include "causalconv/reference.h"

namespace causalconv::reference {
namespace {

double* data_of(const TensorView& t) { return static_cast<double*>(t.data); }

double& at(const TensorView& t, int64_t i) { return data_of(t)[i * t.strides[0]]; }

double& at(const TensorView& t, int64_t i, int64_t j, int64_t k) {
  return data_of(t)[i * t.strides[0] + j * t.strides[1] + k * t.strides[2]];
}

// w[o, i_local, k] for both weight layouts: (C_out, C_in/groups, K), or (C, K) for
// depthwise where i_local is always 0. One grouped code path serves both.
double& weight_at(const TensorView& w, int64_t o, int64_t i_local, int64_t k) {
  if (w.rank == 2) return data_of(w)[o * w.strides[0] + k * w.strides[1]];
  return at(w, o, i_local, k);
}

double sigmoid(double u) { return 1.0 / (1.0 + std::exp(-u)); }

double silu(double u) { return u * sigmoid(u); }

// d silu / du = s + u s (1 - s) = s (1 + u (1 - s)).
double silu_derivative(double u) {
  const double s = sigmoid(u);
  return s * (1.0 + u * (1.0 - s));
}

// Index arithmetic of one convolution, shared by forward and backward.
struct Conv {
  const detail::ConvGeometry& g;
  const TensorView& x;
  const TensorView& weight;
  const std::optional<TensorView>& bias;

  int64_t in_per_group() const { return g.c_in / g.groups; }
  int64_t out_per_group() const { return g.c_out / g.groups; }
  // First input channel of the group that output channel o reads.
  int64_t first_input(int64_t o) const { return (o / out_per_group()) * in_per_group(); }
  // Tap k looks this many steps into the past.
  int64_t lag(int64_t k) const { return (g.width - 1 - k) * g.dilation; }

  // bias[o] + sum_{i in group(o)} sum_k w[o,i,k] x[b,i,t-lag(k)], before the activation.
  double pre_activation(int64_t b, int64_t o, int64_t t) const {
    double acc = bias ? at(*bias, o) : 0.0;
    const int64_t i0 = first_input(o);
    for (int64_t il = 0; il < in_per_group(); ++il)
      for (int64_t k = 0; k < g.width; ++k) {
        const int64_t ts = t - lag(k);
        if (ts >= 0) acc += weight_at(weight, o, il, k) * at(x, b, i0 + il, ts);
      }
    return acc;
  }
};

}  // namespace

void causal_conv1d_forward(const CausalConv1dForwardArgs& args) {
  auto g = detail::validate(args, detail::Target::cpu_reference);
  const Conv conv{g, args.x, args.weight, args.bias};
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t o = 0; o < g.c_out; ++o)
      for (int64_t t = 0; t < g.length; ++t) {
        const double u = conv.pre_activation(b, o, t);
        at(args.y, b, o, t) = g.activation == Activation::silu ? silu(u) : u;
      }
}

void causal_conv1d_backward(const CausalConv1dBackwardArgs& args) {
  auto g = detail::validate(args, detail::Target::cpu_reference);
  const Conv conv{g, args.x, args.weight, args.bias};
  const int64_t B = g.batch, L = g.length;

  // dy' = dy through the activation (contiguous (B, C_out, L)); silu needs the
  // pre-activation, recomputed here rather than saved by the forward.
  std::vector<double> dyp(static_cast<size_t>(B * g.c_out * L));
  auto dyp_at = [&](int64_t b, int64_t o, int64_t t) -> double& {
    return dyp[static_cast<size_t>((b * g.c_out + o) * L + t)];
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t o = 0; o < g.c_out; ++o)
      for (int64_t t = 0; t < L; ++t) {
        double d = at(args.dy, b, o, t);
        if (g.activation == Activation::silu) d *= silu_derivative(conv.pre_activation(b, o, t));
        dyp_at(b, o, t) = d;
      }

  // dx[b,i,t] = sum_{o reading i} sum_k w[o,i,k] dy'[b,o,t+lag(k)]  (t+lag(k) < L).
  if (args.dx) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < g.c_in; ++i) {
        const int64_t group = i / conv.in_per_group();
        const int64_t il = i - group * conv.in_per_group();
        const int64_t o0 = group * conv.out_per_group();
        for (int64_t t = 0; t < L; ++t) {
          double acc = 0.0;
          for (int64_t o = o0; o < o0 + conv.out_per_group(); ++o)
            for (int64_t k = 0; k < g.width; ++k) {
              const int64_t ts = t + conv.lag(k);
              if (ts < L) acc += weight_at(args.weight, o, il, k) * dyp_at(b, o, ts);
            }
          at(*args.dx, b, i, t) = acc;
        }
      }
  }

  // dw[o,i,k] = sum_{b,t} dy'[b,o,t] x[b,i,t-lag(k)]  (t-lag(k) >= 0).
  if (args.dweight) {
    for (int64_t o = 0; o < g.c_out; ++o) {
      const int64_t i0 = conv.first_input(o);
      for (int64_t il = 0; il < conv.in_per_group(); ++il)
        for (int64_t k = 0; k < g.width; ++k) {
          double acc = 0.0;
          for (int64_t b = 0; b < B; ++b)
            for (int64_t t = conv.lag(k); t < L; ++t)
              acc += dyp_at(b, o, t) * at(args.x, b, i0 + il, t - conv.lag(k));
          weight_at(*args.dweight, o, il, k) = acc;
        }
    }
  }

  // dbias[o] = sum_{b,t} dy'[b,o,t].
  if (args.dbias) {
    for (int64_t o = 0; o < g.c_out; ++o) {
      double acc = 0.0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < L; ++t) acc += dyp_at(b, o, t);
      at(*args.dbias, o) = acc;
    }
  }
}

}  // namespace causalconv::reference
