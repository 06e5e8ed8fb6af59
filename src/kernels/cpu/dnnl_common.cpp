#include "kernels/cpu/dnnl_common.h"

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include <limits>

#include "core/scratch.h"

namespace kiln::dnnl_util {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  // oneDNN's CPU stream with the OpenMP runtime is stateless; one per thread keeps it simple.
  thread_local dnnl::stream s(engine());
  return s;
}

dnnl::memory::desc tensor_desc(const Shape& nchw, dnnl::memory::data_type dt, bool channels_last) {
  return channels_last ? dnnl::memory::desc(to_dims(nchw), dt, dnnl::memory::format_tag::nhwc) : plain_desc(nchw, dt);
}

Shape nchw_of(const Shape& nhwc) { return {nhwc[0], nhwc[3], nhwc[1], nhwc[2]}; }
Shape nhwc_of(const Shape& nchw) { return {nchw[0], nchw[2], nchw[3], nchw[1]}; }

dnnl::memory::desc plain_desc(const Shape& shape, dnnl::memory::data_type dt) {
  return strided_desc(shape, contiguous_strides(shape), dt);
}

// oneDNN 2.6 computes some sizes in 32 bits: a dimension of 2^31 or more made its gemm divide by
// zero (SIGFPE, kiln inspect --dim batch=2^36). Refused here, before any primitive sees it.
namespace {
void check_dims_fit(const std::vector<int64_t>& dims) {
  for (int64_t d : dims)
    if (d > std::numeric_limits<int32_t>::max())
      throw Unsupported(fmt::format("shape {} has a dimension of 2^31 or more, which Kiln's oneDNN kernels do not take",
                                    to_string(dims)));
}
}  // namespace

dnnl::memory::desc strided_desc(const Shape& shape, const Strides& strides, dnnl::memory::data_type dt) {
  check_dims_fit(shape);
  dnnl::memory::dims dims(shape.begin(), shape.end());
  dnnl::memory::dims st(strides.begin(), strides.end());
  if (dims.empty()) {
    dims = {1};
    st = {1};
  }
  return checked(fmt::format("describe a tensor of shape {}", to_string(shape)),
                 [&] { return dnnl::memory::desc(dims, dt, st); });
}

dnnl::memory memory_of(const dnnl::memory::desc& desc, const Tensor& t) {
  return dnnl::memory(desc, engine(), const_cast<void*>(t.raw_data()));
}

dnnl::memory::data_type data_type_of(DType t, const std::string& what) {
  switch (t) {
    case DType::Float32:
      return dnnl::memory::data_type::f32;
    case DType::BFloat16:
      return dnnl::memory::data_type::bf16;
    case DType::Float16:
      return dnnl::memory::data_type::f16;
    case DType::Int32:
      return dnnl::memory::data_type::s32;
    case DType::Int8:
      return dnnl::memory::data_type::s8;
    case DType::Uint8:
      return dnnl::memory::data_type::u8;
    default:
      break;
  }
  throw Unsupported(fmt::format("{}: oneDNN has no {} data type", what, dtype_name(t)));
}

void throw_dnnl_error(const std::string& what, const dnnl::error& e) {
  throw Unsupported(fmt::format("oneDNN could not {}: {} (status {})", what, e.what(), dnnl_status2str(e.status)));
}

void execute(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args, const std::string& what) {
  try {
    p.execute(stream(), args);
    stream().wait();
  } catch (const dnnl::error& e) {
    throw_dnnl_error("run " + what, e);
  }
}

dnnl::memory::dims to_dims(const std::vector<int64_t>& v) {
  check_dims_fit(v);
  return dnnl::memory::dims(v.begin(), v.end());
}

Operand operand(const dnnl::memory::desc& plain, const dnnl::memory::desc& inner, bool is_output) {
  Operand o{plain, inner, {}, {}, {}};
  if (!o.reordered()) return o;
  dnnl::engine& eng = engine();
  if (is_output) o.to_plain = dnnl::reorder(dnnl::reorder::primitive_desc(eng, inner, eng, plain));
  else o.to_inner = dnnl::reorder(dnnl::reorder::primitive_desc(eng, plain, eng, inner));
  return o;
}

bool is_reference(const char* impl) {
  const std::string name(impl);
  return name.rfind("ref", 0) == 0 || name.rfind("simple", 0) == 0;
}

void bind(int arg, const Operand& o, const Tensor& t, std::unordered_map<int, dnnl::memory>& args) {
  if (!o.reordered()) {
    args[arg] = memory_of(o.plain, t);
    return;
  }
  o.buffer = dnnl::memory(o.inner, engine(), scratch_take(o.inner.get_size()));
  execute(o.to_inner, {{DNNL_ARG_FROM, memory_of(o.plain, t)}, {DNNL_ARG_TO, o.buffer}}, "reorder of an input");
  args[arg] = o.buffer;
}

void bind_output(int arg, const Operand& o, Tensor& t, std::unordered_map<int, dnnl::memory>& args) {
  if (!o.reordered()) {
    args[arg] = memory_of(o.plain, t);
    return;
  }
  o.buffer = dnnl::memory(o.inner, engine(), scratch_take(o.inner.get_size()));
  args[arg] = o.buffer;
}

void finish_output(const Operand& o, Tensor& t, const std::string& what) {
  if (o.reordered())
    execute(o.to_plain, {{DNNL_ARG_FROM, o.buffer}, {DNNL_ARG_TO, memory_of(o.plain, t)}}, "reorder of " + what);
}

namespace {

std::vector<int64_t> spatial_attr(const Node& node, const std::string& key, size_t n, int64_t fallback) {
  std::vector<int64_t> v = node.attr_ints(key, std::vector<int64_t>(n, fallback));
  if (v.size() != n)
    throw InvalidModel(fmt::format("attribute '{}' has {} values [{}] but the input has {} spatial dims", key, v.size(),
                                   fmt::join(v, ", "), n));
  for (int64_t x : v)
    if (x < (key == "pads" ? 0 : 1))
      throw InvalidModel(fmt::format("attribute '{}' = [{}] must be {}", key, fmt::join(v, ", "),
                                     key == "pads" ? "non-negative" : "positive"));
  return v;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Window make_window(const Node& node, const Shape& in, const std::vector<int64_t>& kernel, bool allow_ceil) {
  const size_t n = in.size();
  Window w;
  w.kernel = kernel;
  w.strides = spatial_attr(node, "strides", n, 1);
  w.dilations = spatial_attr(node, "dilations", n, 1);
  const std::vector<int64_t> pads = spatial_attr(node, "pads", 2 * n, 0);
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  const bool ceil_mode = allow_ceil && node.attr_int("ceil_mode", 0) != 0;
  w.pad_begin.assign(n, 0);
  w.pad_end.assign(n, 0);
  w.out.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t ext = (kernel[i] - 1) * w.dilations[i] + 1;  // dilated kernel extent
    const int64_t s = w.strides[i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      w.out[i] = ceil_div(in[i], s);
      const int64_t total = std::max<int64_t>(0, (w.out[i] - 1) * s + ext - in[i]);
      // SAME_UPPER puts the odd extra pad at the end, SAME_LOWER at the beginning.
      w.pad_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pad_end[i] = total - w.pad_begin[i];
    } else if (auto_pad == "VALID" || auto_pad == "NOTSET") {
      if (auto_pad == "NOTSET") {
        w.pad_begin[i] = pads[i];
        w.pad_end[i] = pads[i + n];
      }
      const int64_t span = in[i] + w.pad_begin[i] + w.pad_end[i] - ext;
      if (span < 0)
        throw ShapeError(
            fmt::format("spatial dim {}: the kernel (size {}, dilation {}, extent {}) does not fit the "
                        "input of size {} padded by {}+{} (input spatial {}, kernel_shape [{}])",
                        i, kernel[i], w.dilations[i], ext, in[i], w.pad_begin[i], w.pad_end[i], to_string(in),
                        fmt::join(kernel, ", ")));
      w.out[i] = (ceil_mode ? ceil_div(span, s) : span / s) + 1;
      // A window that would start in the right padding is dropped (ONNX, PyTorch, ONNX Runtime).
      if (ceil_mode && (w.out[i] - 1) * s >= in[i] + w.pad_begin[i]) --w.out[i];
    } else {
      throw InvalidModel(fmt::format("auto_pad '{}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", auto_pad));
    }
  }
  w.dnnl_pad_end = w.pad_end;
  for (size_t i = 0; i < n; ++i) {
    const int64_t needed =
        (w.out[i] - 1) * w.strides[i] + (kernel[i] - 1) * w.dilations[i] + 1 - in[i] - w.pad_begin[i];
    w.dnnl_pad_end[i] = std::max(w.pad_end[i], needed);
  }
  return w;
}

}  // namespace kiln::dnnl_util
