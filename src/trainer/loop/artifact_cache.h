// The IPUConfig's executable_cache_dir on Kiln: the generated training, eval and optimizer models and
// initial checkpoint (Kiln's "executable": the gradient graph built op by op) kept under a key of
// everything they are made from -- the forward model's bytes, the artifact options, Kiln's version
// and the library build -- so that a later run copies them instead of building them again.
// The Sessions' plans (fused graphs, memory plans) go to the same folder through the plan cache
// (runtime/plan_cache.h, SessionOptions::plan_cache_dir), under <cache_dir>/plans/.
//
// An entry is a folder <cache_dir>/<key>/ holding the files and manifest.json (each file's size
// and CRC-32). It is written to a temporary folder and renamed into place, so a reader sees a whole
// entry or none; one whose manifest or files do not check out is ignored with a warning and
// written again.
#pragma once

#include <string>
#include <vector>

#include "kiln/artifacts.h"
#include "kiln/graph.h"

namespace kiln::trainer {

// The entry name for artifacts built from `forward` with `options` (hex digits).
std::string artifact_cache_key(const Model& forward, const training::ArtifactOptions& options);

// Links (or, across file systems, copies) a valid entry's files into `dir`; false when there is
// none (a warning on stderr when one existed but did not check out).
bool restore_cached_artifacts(const std::string& cache_dir, const std::string& key, const std::string& dir);

// Stores the files just generated (paths) as the entry `key`; a failure to write the cache is a
// warning, never an error of the run.
void store_cached_artifacts(const std::string& cache_dir, const std::string& key,
                            const std::vector<std::string>& files);

}  // namespace kiln::trainer
