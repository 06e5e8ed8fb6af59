// kiln::nn's layers for Python, constructed with torch.nn's positional and keyword arguments and
// defaults (nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)). Arguments torch
// accepts but Kiln does not implement are NotImplementedError (kiln.Unsupported) naming them.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <optional>

#include "kiln/error.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/transformer.h"
#include "nn_bindings.h"

namespace kiln::python {

namespace {

using namespace kiln::nn;

// torch's "int or tuple of D ints".
template <size_t D>
ExpandingArray<D> expanding(const py::handle& v, const char* what) {
  if (py::isinstance<py::int_>(v)) return ExpandingArray<D>(v.cast<int64_t>());
  if (py::isinstance<py::tuple>(v) || py::isinstance<py::list>(v))
    return ExpandingArray<D>(v.cast<std::vector<int64_t>>());
  throw TypeError(fmt::format("{} must be an int or a tuple of {} ints, not {}", what, D, std::string(py::repr(v))));
}

void unsupported_if(bool given, const std::string& what) {
  if (given) throw Unsupported(what + " is not supported by kiln.nn");
}

template <size_t D, class Cls>
void bind_conv(py::module_& nn, const char* name) {
  py::class_<Cls, Module, std::shared_ptr<Cls>>(nn, name).def(
      py::init([](int64_t in, int64_t out, const py::object& kernel_size, const py::object& stride,
                  const py::object& padding, const py::object& dilation, int64_t groups, bool bias,
                  const std::string& padding_mode) {
        ConvOptions<D> o(in, out, expanding<D>(kernel_size, "kernel_size"));
        o.stride(expanding<D>(stride, "stride")).dilation(expanding<D>(dilation, "dilation")).groups(groups).bias(bias);
        if (py::isinstance<py::str>(padding)) {
          const std::string p = padding.cast<std::string>();
          if (p != "same" && p != "valid")
            throw InvalidArgument(fmt::format("Invalid padding string '{}', should be one of {{'valid', 'same'}}", p));
          o.padding(p == "same" ? kSame : kValid);
        } else {
          o.padding(expanding<D>(padding, "padding"));
        }
        o.padding_mode(padding_mode);
        return std::make_shared<Cls>(o);
      }),
      py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1, py::arg("bias") = true,
      py::arg("padding_mode") = "zeros");
}

void bind_linear_conv(py::module_& nn) {
  py::class_<Linear, Module, std::shared_ptr<Linear>>(nn, "Linear")
      .def(py::init<int64_t, int64_t, bool>(), py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true)
      .def_property_readonly("in_features", &Linear::in_features)
      .def_property_readonly("out_features", &Linear::out_features);
  py::class_<Embedding, Module, std::shared_ptr<Embedding>>(nn, "Embedding")
      .def(py::init([](int64_t num, int64_t dim, std::optional<int64_t> padding_idx, const py::object& max_norm,
                       double norm_type, bool scale_grad, bool sparse) {
             unsupported_if(!max_norm.is_none(), "Embedding(max_norm=...)");
             unsupported_if(norm_type != 2.0, "Embedding(norm_type=...)");
             unsupported_if(scale_grad, "Embedding(scale_grad_by_freq=True)");
             unsupported_if(sparse, "Embedding(sparse=True)");
             return std::make_shared<Embedding>(num, dim, padding_idx);
           }),
           py::arg("num_embeddings"), py::arg("embedding_dim"), py::arg("padding_idx") = py::none(),
           py::arg("max_norm") = py::none(), py::arg("norm_type") = 2.0, py::arg("scale_grad_by_freq") = false,
           py::arg("sparse") = false)
      .def_property_readonly("num_embeddings", &Embedding::num_embeddings)
      .def_property_readonly("embedding_dim", &Embedding::embedding_dim);
  bind_conv<1, Conv1d>(nn, "Conv1d");
  bind_conv<2, Conv2d>(nn, "Conv2d");
  py::class_<ConvTranspose2d, Module, std::shared_ptr<ConvTranspose2d>>(nn, "ConvTranspose2d")
      .def(py::init([](int64_t in, int64_t out, const py::object& kernel_size, const py::object& stride,
                       const py::object& padding, const py::object& output_padding, int64_t groups, bool bias,
                       const py::object& dilation, const std::string& padding_mode) {
             ConvTranspose2dOptions o(in, out, expanding<2>(kernel_size, "kernel_size"));
             o.stride(expanding<2>(stride, "stride"))
                 .padding(expanding<2>(padding, "padding"))
                 .output_padding(expanding<2>(output_padding, "output_padding"))
                 .groups(groups)
                 .bias(bias)
                 .dilation(expanding<2>(dilation, "dilation"))
                 .padding_mode(padding_mode);
             return std::make_shared<ConvTranspose2d>(o);
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
           py::arg("padding") = 0, py::arg("output_padding") = 0, py::arg("groups") = 1, py::arg("bias") = true,
           py::arg("dilation") = 1, py::arg("padding_mode") = "zeros");
}

template <class Cls>
void bind_batch_norm(py::module_& nn, const char* name) {
  py::class_<Cls, BatchNorm, std::shared_ptr<Cls>>(nn, name).def(
      py::init([](int64_t num_features, double eps, const py::object& momentum, bool affine, bool track) {
        unsupported_if(momentum.is_none(), "BatchNorm(momentum=None) (a cumulative moving average)");
        return std::make_shared<Cls>(num_features, eps, momentum.cast<double>(), affine, track);
      }),
      py::arg("num_features"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.1, py::arg("affine") = true,
      py::arg("track_running_stats") = true);
}

void bind_norms(py::module_& nn) {
  py::class_<BatchNorm, Module, std::shared_ptr<BatchNorm>>(nn, "_BatchNorm")
      .def_property_readonly("num_features", &BatchNorm::num_features)
      .def_property_readonly("eps", &BatchNorm::eps)
      .def_property_readonly("momentum", &BatchNorm::momentum);
  bind_batch_norm<BatchNorm1d>(nn, "BatchNorm1d");
  bind_batch_norm<BatchNorm2d>(nn, "BatchNorm2d");
  py::class_<LayerNorm, Module, std::shared_ptr<LayerNorm>>(nn, "LayerNorm")
      .def(py::init([](const py::object& shape, double eps, bool affine, bool bias) {
             std::vector<int64_t> dims = py::isinstance<py::int_>(shape) ? std::vector<int64_t>{shape.cast<int64_t>()}
                                                                         : shape.cast<std::vector<int64_t>>();
             return std::make_shared<LayerNorm>(dims, eps, affine, bias);
           }),
           py::arg("normalized_shape"), py::arg("eps") = 1e-5, py::arg("elementwise_affine") = true,
           py::arg("bias") = true)
      .def_property_readonly("normalized_shape", &LayerNorm::normalized_shape)
      .def_property_readonly("eps", &LayerNorm::eps);
  py::class_<GroupNorm, Module, std::shared_ptr<GroupNorm>>(nn, "GroupNorm")
      .def(py::init<int64_t, int64_t, double, bool>(), py::arg("num_groups"), py::arg("num_channels"),
           py::arg("eps") = 1e-5, py::arg("affine") = true);
}

void bind_activations(py::module_& nn) {
  py::class_<ReLU, Module, std::shared_ptr<ReLU>>(nn, "ReLU").def(py::init<bool>(), py::arg("inplace") = false);
  py::class_<GELU, Module, std::shared_ptr<GELU>>(nn, "GELU")
      .def(py::init<std::string>(), py::arg("approximate") = "none");
  py::class_<SiLU, Module, std::shared_ptr<SiLU>>(nn, "SiLU").def(py::init<bool>(), py::arg("inplace") = false);
  py::class_<Tanh, Module, std::shared_ptr<Tanh>>(nn, "Tanh").def(py::init<>());
  py::class_<Sigmoid, Module, std::shared_ptr<Sigmoid>>(nn, "Sigmoid").def(py::init<>());
  py::class_<Dropout, Module, std::shared_ptr<Dropout>>(nn, "Dropout")
      .def(py::init<double, bool>(), py::arg("p") = 0.5, py::arg("inplace") = false)
      .def_property_readonly("p", &Dropout::p);
  // torch's Identity takes and ignores any arguments.
  py::class_<Identity, Module, std::shared_ptr<Identity>>(nn, "Identity")
      .def(py::init([](const py::args&, const py::kwargs&) { return std::make_shared<Identity>(); }));
  py::class_<Flatten, Module, std::shared_ptr<Flatten>>(nn, "Flatten")
      .def(py::init<int64_t, int64_t>(), py::arg("start_dim") = 1, py::arg("end_dim") = -1);
}

void bind_pools(py::module_& nn) {
  py::class_<MaxPool2d, Module, std::shared_ptr<MaxPool2d>>(nn, "MaxPool2d")
      .def(py::init([](const py::object& kernel_size, const py::object& stride, const py::object& padding,
                       const py::object& dilation, bool return_indices, bool ceil_mode) {
             unsupported_if(return_indices, "MaxPool2d(return_indices=True)");
             MaxPool2dOptions o(expanding<2>(kernel_size, "kernel_size"));
             if (!stride.is_none()) o.stride(expanding<2>(stride, "stride"));
             o.padding(expanding<2>(padding, "padding"))
                 .dilation(expanding<2>(dilation, "dilation"))
                 .ceil_mode(ceil_mode);
             return std::make_shared<MaxPool2d>(o);
           }),
           py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0, py::arg("dilation") = 1,
           py::arg("return_indices") = false, py::arg("ceil_mode") = false);
  py::class_<AvgPool2d, Module, std::shared_ptr<AvgPool2d>>(nn, "AvgPool2d")
      .def(py::init([](const py::object& kernel_size, const py::object& stride, const py::object& padding,
                       bool ceil_mode, bool count_include_pad, const py::object& divisor_override) {
             unsupported_if(!divisor_override.is_none(), "AvgPool2d(divisor_override=...)");
             AvgPool2dOptions o(expanding<2>(kernel_size, "kernel_size"));
             if (!stride.is_none()) o.stride(expanding<2>(stride, "stride"));
             o.padding(expanding<2>(padding, "padding")).ceil_mode(ceil_mode).count_include_pad(count_include_pad);
             return std::make_shared<AvgPool2d>(o);
           }),
           py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0, py::arg("ceil_mode") = false,
           py::arg("count_include_pad") = true, py::arg("divisor_override") = py::none());
  py::class_<AdaptiveAvgPool2d, Module, std::shared_ptr<AdaptiveAvgPool2d>>(nn, "AdaptiveAvgPool2d")
      .def(py::init([](const py::object& output_size) {
             if (py::isinstance<py::int_>(output_size))
               return std::make_shared<AdaptiveAvgPool2d>(output_size.cast<int64_t>());
             return std::make_shared<AdaptiveAvgPool2d>(output_size.cast<std::vector<int64_t>>());
           }),
           py::arg("output_size"));
}

TransformerLayerOptions layer_options(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout,
                                      const std::string& activation, double eps, bool batch_first, bool norm_first,
                                      bool bias) {
  return {d_model, nhead, dim_feedforward, dropout, activation, eps, batch_first, norm_first, bias};
}

template <class Cls>
void bind_transformer_layer(py::module_& nn, const char* name) {
  py::class_<Cls, Module, std::shared_ptr<Cls>>(nn, name).def(
      py::init([](int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout, const py::object& activation,
                  double eps, bool batch_first, bool norm_first, bool bias) {
        if (!py::isinstance<py::str>(activation))
          throw Unsupported("TransformerLayer(activation=<callable>): pass 'relu' or 'gelu'");
        return std::make_shared<Cls>(layer_options(d_model, nhead, dim_feedforward, dropout,
                                                   activation.cast<std::string>(), eps, batch_first, norm_first, bias));
      }),
      py::arg("d_model"), py::arg("nhead"), py::arg("dim_feedforward") = 2048, py::arg("dropout") = 0.1,
      py::arg("activation") = "relu", py::arg("layer_norm_eps") = 1e-5, py::arg("batch_first") = false,
      py::arg("norm_first") = false, py::arg("bias") = true);
}

std::optional<Var> optional_var(const py::object& v) {
  if (v.is_none()) return std::nullopt;
  return v.cast<Var>();
}

void bind_attention(py::module_& nn) {
  py::class_<MultiheadAttention, Module, std::shared_ptr<MultiheadAttention>>(nn, "MultiheadAttention")
      .def(py::init<int64_t, int64_t, double, bool, bool, bool, std::optional<int64_t>, std::optional<int64_t>, bool>(),
           py::arg("embed_dim"), py::arg("num_heads"), py::arg("dropout") = 0.0, py::arg("bias") = true,
           py::arg("add_bias_kv") = false, py::arg("add_zero_attn") = false, py::arg("kdim") = py::none(),
           py::arg("vdim") = py::none(), py::arg("batch_first") = false)
      .def_property_readonly("batch_first", [](const MultiheadAttention& m) { return m.options().batch_first; })
      // A traced call with torch's keywords (inside a Python forward).
      .def("_attend",
           [](MultiheadAttention& m, const Var& q, const Var& k, const Var& v, const py::object& key_padding_mask,
              bool need_weights, const py::object& attn_mask, bool average, bool is_causal) {
             MultiheadAttentionCall c{optional_var(key_padding_mask), optional_var(attn_mask), need_weights, average,
                                      is_causal};
             return m.attend(active_tracer("MultiheadAttention"), q, k, v, c);
           });
  bind_transformer_layer<TransformerEncoderLayer>(nn, "TransformerEncoderLayer");
  bind_transformer_layer<TransformerDecoderLayer>(nn, "TransformerDecoderLayer");
}

}  // namespace

void register_nn_layers(py::module_& nn) {
  bind_linear_conv(nn);
  bind_norms(nn);
  bind_activations(nn);
  bind_pools(nn);
  bind_attention(nn);
}

}  // namespace kiln::python
