// The MPI implementation of kiln::dist::Communicator (internal to src/dist).
#pragma once

#include <memory>

#include "kiln/distributed.h"

namespace kiln::dist {

// Initializes MPI (on the communication thread, which then makes every MPI call) and returns the
// world communicator. Only when built_with_mpi().
std::shared_ptr<Communicator> make_mpi_communicator();
// Whether an MPI launcher's environment is present (even for one rank).
bool launched_by_mpi();

}  // namespace kiln::dist
