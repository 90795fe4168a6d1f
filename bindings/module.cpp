// The nanobind module causalconv._C: converts Python ints into core calls and
// core errors into Python exceptions. No logic lives here.
//
// A tensor crosses as a tuple (data_ptr, dtype_code, device_kind, device_index,
// sizes, strides); the Python side builds it (causalconv/_views.py).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "causalconv/causalconv.h"

namespace nb = nanobind;
using namespace causalconv;
using namespace nb::literals;

namespace {

using ViewTuple = std::tuple<uintptr_t, int, int, int, std::vector<int64_t>, std::vector<int64_t>>;
using OptViewTuple = std::optional<ViewTuple>;

TensorView to_view(const ViewTuple& t) {
  const auto& [ptr, dtype, kind, index, sizes, strides] = t;
  if (sizes.size() != strides.size() || sizes.size() > static_cast<size_t>(kMaxRank))
    throw Error(ErrorKind::invalid_argument, "tensor rank must be at most " + std::to_string(kMaxRank) +
                                                 ", got " + std::to_string(sizes.size()) + " dimensions");
  if (dtype < 0 || dtype > static_cast<int>(DType::f64))
    throw Error(ErrorKind::invalid_argument, "unsupported dtype code " + std::to_string(dtype));
  TensorView v;
  v.data = reinterpret_cast<void*>(ptr);
  v.dtype = static_cast<DType>(dtype);
  v.device = Device{kind == 1 ? DeviceKind::cuda : DeviceKind::cpu, index};
  v.rank = static_cast<int>(sizes.size());
  for (int d = 0; d < v.rank; ++d) {
    v.sizes[d] = sizes[d];
    v.strides[d] = strides[d];
  }
  return v;
}

std::optional<TensorView> to_view(const OptViewTuple& t) {
  if (!t) return std::nullopt;
  return to_view(*t);
}

Stream to_stream(uintptr_t handle) { return Stream{reinterpret_cast<void*>(handle)}; }

Workspace to_workspace(const OptViewTuple& t) {
  if (!t) return Workspace{};
  TensorView v = to_view(*t);
  return Workspace{v.data, static_cast<size_t>(v.numel()) * dtype_size(v.dtype)};
}

CausalConv1dForwardArgs conv_forward_args(const ViewTuple& x, const ViewTuple& weight, const OptViewTuple& bias,
                                          const ViewTuple& y, int64_t dilation, int64_t groups, int activation,
                                          const OptViewTuple& saved_x = std::nullopt) {
  CausalConv1dForwardArgs a;
  a.saved_x = to_workspace(saved_x);
  a.x = to_view(x);
  a.weight = to_view(weight);
  a.bias = to_view(bias);
  a.y = to_view(y);
  a.dilation = dilation;
  a.groups = groups;
  a.activation = static_cast<Activation>(activation);
  return a;
}

CausalConv1dBackwardArgs conv_backward_args(const ViewTuple& x, const ViewTuple& weight, const OptViewTuple& bias,
                                            const ViewTuple& dy, const OptViewTuple& dx, const OptViewTuple& dweight,
                                            const OptViewTuple& dbias, int64_t dilation, int64_t groups,
                                            int activation, const OptViewTuple& saved_x = std::nullopt) {
  CausalConv1dBackwardArgs a;
  a.saved_x = to_workspace(saved_x);
  a.x = to_view(x);
  a.weight = to_view(weight);
  a.bias = to_view(bias);
  a.dy = to_view(dy);
  a.dx = to_view(dx);
  a.dweight = to_view(dweight);
  a.dbias = to_view(dbias);
  a.dilation = dilation;
  a.groups = groups;
  a.activation = static_cast<Activation>(activation);
  return a;
}

B2BCausalConv1dForwardArgs b2b_forward_args(const ViewTuple& x, const ViewTuple& wp, const ViewTuple& wm,
                                             const ViewTuple& skip, const ViewTuple& out) {
  return B2BCausalConv1dForwardArgs{to_view(x), to_view(wp), to_view(wm), to_view(skip), to_view(out)};
}

B2BCausalConv1dBackwardArgs b2b_backward_args(const ViewTuple& x, const ViewTuple& wp, const ViewTuple& wm,
                                              const ViewTuple& skip, const ViewTuple& dout, const ViewTuple& dx,
                                              const ViewTuple& dwp, const ViewTuple& dwm, const ViewTuple& dskip) {
  return B2BCausalConv1dBackwardArgs{to_view(x),  to_view(wp),  to_view(wm),  to_view(skip), to_view(dout),
                                     to_view(dx), to_view(dwp), to_view(dwm), to_view(dskip)};
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "causalconv core bindings (internal; use the causalconv package)";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      switch (e.kind()) {
        case ErrorKind::invalid_argument: PyErr_SetString(PyExc_ValueError, e.what()); break;
        case ErrorKind::not_implemented: PyErr_SetString(PyExc_NotImplementedError, e.what()); break;
        case ErrorKind::runtime: PyErr_SetString(PyExc_RuntimeError, e.what()); break;
      }
    }
  });

  m.def("version", &version);
  m.attr("MAX_CHANNEL_LAST_BACKWARD_REACH") = kMaxChannelLastBackwardReach;

  // ---- CUDA ops: (tensors..., options..., [workspace, stream]) ----
  // saved_x (optional, last): the copy of x a forward keeps for its backward (saved_x_bytes).
  m.def(
      "causal_conv1d_forward_workspace_bytes",
      [](const ViewTuple& x, const ViewTuple& w, const OptViewTuple& bias, const ViewTuple& y, int64_t dilation,
         int64_t groups, int activation, const OptViewTuple& saved_x) {
        return causal_conv1d_forward_workspace_bytes(
            conv_forward_args(x, w, bias, y, dilation, groups, activation, saved_x));
      },
      "x"_a, "weight"_a, "bias"_a.none(), "y"_a, "dilation"_a, "groups"_a, "activation"_a,
      "saved_x"_a.none() = nb::none());
  m.def("causal_conv1d_saved_x_bytes",
        [](const ViewTuple& x, const ViewTuple& w, const OptViewTuple& bias, const ViewTuple& y, int64_t dilation,
           int64_t groups, int activation) {
          return causal_conv1d_saved_x_bytes(conv_forward_args(x, w, bias, y, dilation, groups, activation));
        });
  m.def(
      "causal_conv1d_forward",
      [](const ViewTuple& x, const ViewTuple& w, const OptViewTuple& bias, const ViewTuple& y, int64_t dilation,
         int64_t groups, int activation, const OptViewTuple& workspace, uintptr_t stream,
         const OptViewTuple& saved_x) {
        causal_conv1d_forward(conv_forward_args(x, w, bias, y, dilation, groups, activation, saved_x),
                              to_workspace(workspace), to_stream(stream));
      },
      "x"_a, "weight"_a, "bias"_a.none(), "y"_a, "dilation"_a, "groups"_a, "activation"_a, "workspace"_a.none(),
      "stream"_a, "saved_x"_a.none() = nb::none());
  m.def(
      "causal_conv1d_backward_workspace_bytes",
      [](const ViewTuple& x, const ViewTuple& w, const OptViewTuple& bias, const ViewTuple& dy, const OptViewTuple& dx,
         const OptViewTuple& dw, const OptViewTuple& dbias, int64_t dilation, int64_t groups, int activation,
         const OptViewTuple& saved_x) {
        return causal_conv1d_backward_workspace_bytes(
            conv_backward_args(x, w, bias, dy, dx, dw, dbias, dilation, groups, activation, saved_x));
      },
      "x"_a, "weight"_a, "bias"_a.none(), "dy"_a, "dx"_a.none(), "dweight"_a.none(), "dbias"_a.none(), "dilation"_a,
      "groups"_a, "activation"_a, "saved_x"_a.none() = nb::none());
  m.def(
      "causal_conv1d_backward",
      [](const ViewTuple& x, const ViewTuple& w, const OptViewTuple& bias, const ViewTuple& dy, const OptViewTuple& dx,
         const OptViewTuple& dw, const OptViewTuple& dbias, int64_t dilation, int64_t groups, int activation,
         const OptViewTuple& workspace, uintptr_t stream, const OptViewTuple& saved_x) {
        causal_conv1d_backward(conv_backward_args(x, w, bias, dy, dx, dw, dbias, dilation, groups, activation, saved_x),
                               to_workspace(workspace), to_stream(stream));
      },
      "x"_a, "weight"_a, "bias"_a.none(), "dy"_a, "dx"_a.none(), "dweight"_a.none(), "dbias"_a.none(), "dilation"_a,
      "groups"_a, "activation"_a, "workspace"_a.none(), "stream"_a, "saved_x"_a.none() = nb::none());

  m.def("b2b_causal_conv1d_forward_workspace_bytes",
        [](const ViewTuple& x, const ViewTuple& wp, const ViewTuple& wm, const ViewTuple& skip, const ViewTuple& out) {
          return b2b_causal_conv1d_forward_workspace_bytes(b2b_forward_args(x, wp, wm, skip, out));
        });
  m.def("b2b_causal_conv1d_forward",
        [](const ViewTuple& x, const ViewTuple& wp, const ViewTuple& wm, const ViewTuple& skip, const ViewTuple& out,
           const OptViewTuple& workspace, uintptr_t stream) {
          b2b_causal_conv1d_forward(b2b_forward_args(x, wp, wm, skip, out), to_workspace(workspace),
                                    to_stream(stream));
        });
  m.def("b2b_causal_conv1d_backward_workspace_bytes",
        [](const ViewTuple& x, const ViewTuple& wp, const ViewTuple& wm, const ViewTuple& skip, const ViewTuple& dout,
           const ViewTuple& dx, const ViewTuple& dwp, const ViewTuple& dwm, const ViewTuple& dskip) {
          return b2b_causal_conv1d_backward_workspace_bytes(
              b2b_backward_args(x, wp, wm, skip, dout, dx, dwp, dwm, dskip));
        });
  m.def("b2b_causal_conv1d_backward",
        [](const ViewTuple& x, const ViewTuple& wp, const ViewTuple& wm, const ViewTuple& skip, const ViewTuple& dout,
           const ViewTuple& dx, const ViewTuple& dwp, const ViewTuple& dwm, const ViewTuple& dskip,
           const OptViewTuple& workspace, uintptr_t stream) {
          b2b_causal_conv1d_backward(b2b_backward_args(x, wp, wm, skip, dout, dx, dwp, dwm, dskip),
                                     to_workspace(workspace), to_stream(stream));
        });

  // ---- CPU fp64 reference (releases the GIL: these loops can take a while) ----
  m.def("reference_causal_conv1d_forward",
        [](const ViewTuple& x, const ViewTuple& w, const OptViewTuple& bias, const ViewTuple& y, int64_t dilation,
           int64_t groups, int activation) {
          auto args = conv_forward_args(x, w, bias, y, dilation, groups, activation);
          nb::gil_scoped_release release;
          reference::causal_conv1d_forward(args);
        });
  m.def("reference_causal_conv1d_backward",
        [](const ViewTuple& x, const ViewTuple& w, const OptViewTuple& bias, const ViewTuple& dy,
           const OptViewTuple& dx, const OptViewTuple& dw, const OptViewTuple& dbias, int64_t dilation,
           int64_t groups, int activation) {
          auto args = conv_backward_args(x, w, bias, dy, dx, dw, dbias, dilation, groups, activation);
          nb::gil_scoped_release release;
          reference::causal_conv1d_backward(args);
        });
  m.def("reference_b2b_causal_conv1d_forward",
        [](const ViewTuple& x, const ViewTuple& wp, const ViewTuple& wm, const ViewTuple& skip, const ViewTuple& out) {
          auto a = b2b_forward_args(x, wp, wm, skip, out);
          nb::gil_scoped_release release;
          reference::b2b_causal_conv1d_forward(a);
        });
  m.def("reference_b2b_causal_conv1d_backward",
        [](const ViewTuple& x, const ViewTuple& wp, const ViewTuple& wm, const ViewTuple& skip, const ViewTuple& dout,
           const ViewTuple& dx, const ViewTuple& dwp, const ViewTuple& dwm, const ViewTuple& dskip) {
          auto a = b2b_backward_args(x, wp, wm, skip, dout, dx, dwp, dwm, dskip);
          nb::gil_scoped_release release;
          reference::b2b_causal_conv1d_backward(a);
        });
}
