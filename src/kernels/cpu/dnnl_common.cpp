#include "kernels/cpu/dnnl_common.h"

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

dnnl::memory::desc plain_desc(const Shape& shape, dnnl::memory::data_type dt) {
  dnnl::memory::dims dims(shape.begin(), shape.end());
  if (dims.empty()) dims = {1};
  dnnl::memory::dims strides(dims.size());
  int64_t acc = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = acc;
    acc *= dims[i];
  }
  return dnnl::memory::desc(dims, dt, strides);
}

dnnl::memory memory_of(const dnnl::memory::desc& desc, const Tensor& t) {
  return dnnl::memory(desc, engine(), const_cast<void*>(t.raw_data()));
}

}  // namespace kiln::dnnl_util
