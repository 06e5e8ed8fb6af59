// Checkpoint folders in the Hugging Face layout: output_dir/checkpoint-<global_step>/. A folder is
// written under a temporary name and renamed into place when complete, so after a crash it is
// complete or absent (a leftover temporary folder is ignored, and removed by the next save).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln::trainer {

inline const std::string kCheckpointPrefix = "checkpoint-";
inline const std::string kTrainerStateFile = "trainer_state.json";

// Creates a temporary folder beside the target, lets `write` fill it, fsyncs it and renames it to
// output_dir/checkpoint-<step> (replacing an existing one). Returns the folder's path.
std::string write_checkpoint_folder(const std::string& output_dir, int64_t step,
                                    const std::function<void(const std::string& folder)>& write);

// Complete checkpoint folders (with trainer_state.json) in output_dir, oldest (lowest step) first.
std::vector<std::string> sorted_checkpoints(const std::string& output_dir);
// The latest complete checkpoint, if any.
std::optional<std::string> last_checkpoint(const std::string& output_dir);

// Deletes the oldest checkpoints beyond `limit`, never the best one (HF's _rotate_checkpoints).
void rotate_checkpoints(const std::string& output_dir, int64_t limit, const std::optional<std::string>& best);

}  // namespace kiln::trainer
