// Shared oneDNN objects: one CPU engine and one stream for the process, and memory descriptors.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "kiln/tensor.h"

namespace kiln::dnnl_util {

dnnl::engine& engine();
dnnl::stream& stream();
// A plain (row-major) f32 memory descriptor for a shape; a scalar becomes {1}.
dnnl::memory::desc plain_desc(const Shape& shape, dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
// A memory object over a tensor's buffer (no copy).
dnnl::memory memory_of(const dnnl::memory::desc& desc, const Tensor& t);

}  // namespace kiln::dnnl_util
