// Shared oneDNN objects: one CPU engine and one stream for the process, memory descriptors, error
// translation, and the sliding-window geometry that Conv and the pooling ops share.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/tensor.h"

namespace kiln::dnnl_util {

dnnl::engine& engine();
dnnl::stream& stream();
// A plain (row-major) f32 memory descriptor for a shape; a scalar becomes {1}.
dnnl::memory::desc plain_desc(const Shape& shape, dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
// The tensor of a 2-D map given as [N, C, H, W]: row-major channels first (plain_desc), or channels
// last ([N, H, W, C] in memory: the layout pass's ai.kiln.*ChannelsLast ops, ir/fusion.h).
dnnl::memory::desc tensor_desc(const Shape& nchw, dnnl::memory::data_type dt, bool channels_last);
// [N, H, W, C] -> [N, C, H, W] and back.
Shape nchw_of(const Shape& nhwc);
Shape nhwc_of(const Shape& nchw);
// A memory descriptor with explicit element strides (transposed operands, broadcast views).
dnnl::memory::desc strided_desc(const Shape& shape, const Strides& strides,
                                dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
// A memory object over a tensor's buffer (no copy).
dnnl::memory memory_of(const dnnl::memory::desc& desc, const Tensor& t);
// The oneDNN data type of a Kiln dtype; throws Unsupported naming `what` for types oneDNN lacks.
dnnl::memory::data_type data_type_of(DType t, const std::string& what);

[[noreturn]] void throw_dnnl_error(const std::string& what, const dnnl::error& e);

// oneDNN reports failures as dnnl::error; Kiln promises kiln::Error. Runs f (a descriptor or
// primitive creation) and translates, naming what was being built ("a convolution for ...").
template <class F>
auto checked(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    throw_dnnl_error(what, e);
  }
}

// Executes a primitive on the shared stream and waits for it.
void execute(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args, const std::string& what);

// Geometry of a sliding window (Conv, MaxPool, AveragePool) over the spatial dims, in ONNX's terms
// (auto_pad, pads, strides, dilations, ceil_mode) and in oneDNN's (padding_l, padding_r).
struct Window {
  std::vector<int64_t> kernel, strides, dilations;
  std::vector<int64_t> pad_begin, pad_end;  // the padding ONNX asks for (after auto_pad)
  std::vector<int64_t> out;                 // output spatial sizes
  // pad_end as oneDNN must see it: oneDNN computes out = (in + l + r - ext) / stride + 1 with floor,
  // so ceil_mode's extra partial window needs r extended (as ONNX Runtime does).
  std::vector<int64_t> dnnl_pad_end;
  bool extended() const { return dnnl_pad_end != pad_end; }
};

// Reads strides, dilations, pads, auto_pad (and ceil_mode when `allow_ceil`) from the node and
// computes the window over `in` (spatial dims only) for `kernel`. Throws InvalidModel for bad
// attributes and ShapeError when the dilated kernel does not fit the padded input.
Window make_window(const Node& node, const Shape& in, const std::vector<int64_t>& kernel, bool allow_ceil);

dnnl::memory::dims to_dims(const std::vector<int64_t>& v);

// An operand of a primitive that picked its own (blocked) layout: the plain layout Kiln's tensors
// have, the layout the primitive wants, and the reorder between them with its buffer.
// The inner-layout buffer lives in per-call scratch memory (core/scratch.h), taken when the
// operand is bound, so that a plan's kernels share one buffer instead of holding one each.
struct Operand {
  dnnl::memory::desc plain, inner;
  dnnl::reorder to_inner, to_plain;
  mutable dnnl::memory buffer;  // the inner-layout buffer of the current call, when reordered
  bool reordered() const { return plain != inner; }
};
Operand operand(const dnnl::memory::desc& plain, const dnnl::memory::desc& inner, bool is_output);

// Whether oneDNN picked one of its reference implementations ("ref:any", "simple_nchw:any"): plain
// loops, many times slower than its vector code (primitive_desc::impl_info_str()).
bool is_reference(const char* impl);
// Binds input tensor t as argument `arg`, reordering it into the primitive's layout when needed.
void bind(int arg, const Operand& o, const Tensor& t, std::unordered_map<int, dnnl::memory>& args);
// Binds output tensor t as `arg`: directly, or through the operand's buffer (see finish_output).
void bind_output(int arg, const Operand& o, Tensor& t, std::unordered_map<int, dnnl::memory>& args);
// After the primitive ran: reorders the operand's buffer into t when the layouts differ.
void finish_output(const Operand& o, Tensor& t, const std::string& what);

}  // namespace kiln::dnnl_util
