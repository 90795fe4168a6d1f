// fp64 CPU reference of b2b_causal_conv1d (DESIGN.md §2.2): the executable spec.
// Both depthwise convolutions go through the causal_conv1d reference; this file
// only adds the channel split, the gating products and the skip term, on
// contiguous fp64 temporaries.
#include <cstdint>
#include <vector>

#include "b2b/validate.h"
#include "causalconv/reference.h"

namespace causalconv::reference {
namespace {

double& at(const TensorView& t, int64_t i) { return static_cast<double*>(t.data)[i * t.strides[0]]; }

double& at(const TensorView& t, int64_t i, int64_t j, int64_t k) {
  return static_cast<double*>(t.data)[i * t.strides[0] + j * t.strides[1] + k * t.strides[2]];
}

// A contiguous fp64 (B, C, L) temporary and its view.
struct Buffer {
  std::vector<double> storage;
  TensorView view;

  Buffer(int64_t batch, int64_t channels, int64_t length)
      : storage(static_cast<size_t>(batch * channels * length), 0.0) {
    view.data = storage.data();
    view.dtype = DType::f64;
    view.rank = 3;
    view.sizes[0] = batch;
    view.sizes[1] = channels;
    view.sizes[2] = length;
    view.strides[0] = channels * length;
    view.strides[1] = length;
    view.strides[2] = 1;
  }
  double& operator()(int64_t b, int64_t c, int64_t t) { return at(view, b, c, t); }
};

// Depthwise causal correlation y = x (*) w, w of shape (C, K).
void depthwise_forward(const TensorView& x, const TensorView& w, const TensorView& y) {
  CausalConv1dForwardArgs conv;
  conv.x = x;
  conv.weight = w;
  conv.y = y;
  conv.groups = x.size(1);
  causal_conv1d_forward(conv);
}

// Forward intermediates: p = proj(x) (B, 3D, L), z = x1 * v and h = mixer(z) + skip * z (B, D, L).
struct Intermediates {
  Buffer p, z, h;

  Intermediates(const detail::B2BGeometry& g, const TensorView& x, const TensorView& weight_proj,
                const TensorView& weight_mixer, const TensorView& skip_bias)
      : p(g.batch, 3 * g.dim, g.length), z(g.batch, g.dim, g.length), h(g.batch, g.dim, g.length) {
    depthwise_forward(x, weight_proj, p.view);
    for (int64_t b = 0; b < g.batch; ++b)
      for (int64_t c = 0; c < g.dim; ++c)
        for (int64_t t = 0; t < g.length; ++t) z(b, c, t) = p(b, 3 * c + 1, t) * p(b, 3 * c + 2, t);
    depthwise_forward(z.view, weight_mixer, h.view);
    for (int64_t b = 0; b < g.batch; ++b)
      for (int64_t c = 0; c < g.dim; ++c)
        for (int64_t t = 0; t < g.length; ++t) h(b, c, t) += at(skip_bias, c) * z(b, c, t);
  }
};

}  // namespace

void b2b_causal_conv1d_forward(const B2BCausalConv1dForwardArgs& args) {
  auto g = detail::validate(args, detail::Target::cpu_reference);
  if (g.dim == 0) return;  // nothing to write; a 0-channel depthwise conv has no valid groups
  Intermediates im(g, args.x, args.weight_proj, args.weight_mixer, args.skip_bias);
  // out = x2 * h, x2 being channel 3c of p.
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t c = 0; c < g.dim; ++c)
      for (int64_t t = 0; t < g.length; ++t) at(args.out, b, c, t) = im.p(b, 3 * c, t) * im.h(b, c, t);
}

void b2b_causal_conv1d_backward(const B2BCausalConv1dBackwardArgs& args) {
  auto g = detail::validate(args, detail::Target::cpu_reference);
  if (g.dim == 0) return;  // every output is empty
  Intermediates im(g, args.x, args.weight_proj, args.weight_mixer, args.skip_bias);

  // dh = dout * x2; dskip[c] = sum_{b,t} dh * z.
  Buffer dh(g.batch, g.dim, g.length);
  for (int64_t c = 0; c < g.dim; ++c) {
    double dskip = 0.0;
    for (int64_t b = 0; b < g.batch; ++b)
      for (int64_t t = 0; t < g.length; ++t) {
        dh(b, c, t) = at(args.dout, b, c, t) * im.p(b, 3 * c, t);
        dskip += dh(b, c, t) * im.z(b, c, t);
      }
    at(args.dskip_bias, c) = dskip;
  }

  // Through the mixer: dweight_mixer directly; dz = conv-transpose(dh, wm) + skip * dh,
  // the first term from the mixer's backward, the skip term added below.
  Buffer dz_mixer(g.batch, g.dim, g.length);
  CausalConv1dBackwardArgs mixer;
  mixer.x = im.z.view;
  mixer.weight = args.weight_mixer;
  mixer.dy = dh.view;
  mixer.dx = dz_mixer.view;
  mixer.dweight = args.dweight_mixer;
  mixer.groups = g.dim;
  causal_conv1d_backward(mixer);

  // dp = interleave(dx2 = dout * h, dx1 = dz * v, dv = dz * x1).
  Buffer dp(g.batch, 3 * g.dim, g.length);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t c = 0; c < g.dim; ++c)
      for (int64_t t = 0; t < g.length; ++t) {
        const double dz = dz_mixer(b, c, t) + at(args.skip_bias, c) * dh(b, c, t);
        dp(b, 3 * c, t) = at(args.dout, b, c, t) * im.h(b, c, t);
        dp(b, 3 * c + 1, t) = dz * im.p(b, 3 * c + 2, t);
        dp(b, 3 * c + 2, t) = dz * im.p(b, 3 * c + 1, t);
      }

  // Through the projection: dx and dweight_proj straight into the caller's views.
  CausalConv1dBackwardArgs proj;
  proj.x = args.x;
  proj.weight = args.weight_proj;
  proj.dy = dp.view;
  proj.dx = args.dx;
  proj.dweight = args.dweight_proj;
  proj.groups = 3 * g.dim;
  causal_conv1d_backward(proj);
}

}  // namespace causalconv::reference
