// Per-thread scratch memory for kernels: buffers a kernel needs only during one compute() call
// (oneDNN's blocked-layout copies of its operands). The executor opens a ScratchScope around each
// kernel call; everything taken inside it is given back when the scope closes, so the memory held
// is that of the largest single call, not the sum over every kernel of the plan.
//
//   kiln::ScratchScope scope;                      // the executor's, around compute()
//   void* p = kiln::scratch_take(bytes);           // a kernel's: 64-byte aligned, valid until then
#pragma once

#include <cstddef>

namespace kiln {

void* scratch_take(size_t bytes);

class ScratchScope {
 public:
  ScratchScope();
  ~ScratchScope();
  ScratchScope(const ScratchScope&) = delete;
  ScratchScope& operator=(const ScratchScope&) = delete;
};

}  // namespace kiln
