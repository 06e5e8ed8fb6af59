#include "kernels/cpu/packed_product.h"

#include <cstring>
#include <optional>
#include <unordered_map>

#include "kernels/cpu/dnnl_common.h"

namespace kiln {

using dnnl::memory;

struct PackedProduct::Impl {
  dnnl::matmul prim;
  memory src, weights, dst;
};

PackedProduct::PackedProduct(int64_t m, int64_t n, int64_t k, const float* b, bool trans_b, int64_t lda, int64_t ldb,
                             int64_t ldc)
    : shape_{false, trans_b, m, n, k, lda, ldb, ldc}, b_(b) {
  if (m == 0 || n == 0 || k == 0) return;
  dnnl::engine& eng = dnnl_util::engine();
  const memory::desc a_desc({m, k}, memory::data_type::f32, memory::dims{lda, 1});
  const memory::desc c_desc({m, n}, memory::data_type::f32, memory::dims{ldc, 1});
  // op(B) as a [k, n] matrix over B's own bytes.
  const memory::desc b_plain({k, n}, memory::data_type::f32, trans_b ? memory::dims{1, ldb} : memory::dims{ldb, 1});
  const memory::desc b_any({k, n}, memory::data_type::f32, memory::format_tag::any);
  std::optional<dnnl::matmul::primitive_desc> pd;
  try {
    pd.emplace(dnnl::matmul::desc(a_desc, b_any, c_desc), eng);
  } catch (const dnnl::error&) {
    return;  // no matmul for these shapes: sgemm
  }
  // Only the brgemm kernels read a packed B; the others pack it again at every call themselves.
  if (std::strncmp(pd->impl_info_str(), "brg", 3) != 0) return;
  auto impl = std::make_unique<Impl>();
  impl->prim = dnnl_util::checked("the recurrent product", [&] { return dnnl::matmul(*pd); });
  impl->weights = memory(pd->weights_desc(), eng);
  memory plain(b_plain, eng, const_cast<float*>(b));
  dnnl_util::execute(dnnl::reorder(plain, impl->weights), {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, impl->weights}},
                     "packing the recurrent weights");
  impl->src = memory(a_desc, eng, DNNL_MEMORY_NONE);
  impl->dst = memory(c_desc, eng, DNNL_MEMORY_NONE);
  impl_ = std::move(impl);
}

PackedProduct::~PackedProduct() = default;

void PackedProduct::run(const float* a, float* c) {
  if (!impl_) return blas::sgemm(shape_, 1.f, a, b_, 0.f, c);
  impl_->src.set_data_handle(const_cast<float*>(a));
  impl_->dst.set_data_handle(c);
  dnnl_util::execute(impl_->prim,
                     {{DNNL_ARG_SRC, impl_->src}, {DNNL_ARG_WEIGHTS, impl_->weights}, {DNNL_ARG_DST, impl_->dst}},
                     "the recurrent product");
}

}  // namespace kiln
