// A process-wide counter bumped by every change that invalidates a traced plan of Module::operator():
// the module tree (register_*, add_module), parameter values loaded by load_state_dict, train /
// eval, hooks added or removed. A cached plan remembers the count it was traced at; comparing one
// number is cheaper and safer than tracking which root a changed child belongs to.
#pragma once

#include <cstdint>

namespace kiln::nn::detail {

uint64_t generation();
void bump_generation();

}  // namespace kiln::nn::detail
