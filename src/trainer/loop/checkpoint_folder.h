// Checkpoint folders in the Hugging Face layout: output_dir/checkpoint-<global_step>/. Every change
// is a rename, so that after a kill at any moment each checkpoint-N is complete or absent:
//   - a folder is written as .checkpoint-N.tmp-XXXXXX, fsynced, then renamed into place;
//   - replacing checkpoint-N moves the old one to .checkpoint-N.tmp-XXXXXX.old first;
//   - rotation renames a doomed folder to .checkpoint-N.deleting, then deletes it.
// recover_checkpoint_folders() finishes or undoes what a killed run left (the trainer calls it at
// the start of train(), holding the output_dir lock).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln::trainer {

inline const std::string kCheckpointPrefix = "checkpoint-";
inline const std::string kTrainerStateFile = "trainer_state.json";
inline const std::string kTmpMark = ".tmp-";           // .checkpoint-N.tmp-XXXXXX: being written
inline const std::string kOldMark = ".old";            // .checkpoint-N.tmp-XXXXXX.old: being replaced
inline const std::string kDeletingMark = ".deleting";  // .checkpoint-N.deleting: being deleted

// Creates a temporary folder beside the target, lets `write` fill it, fsyncs it and renames it to
// output_dir/checkpoint-<step> (replacing an existing one). Returns the folder's path.
std::string write_checkpoint_folder(const std::string& output_dir, int64_t step,
                                    const std::function<void(const std::string& folder)>& write);

// Removes unfinished writes and deletions, and completes or undoes an interrupted replace.
void recover_checkpoint_folders(const std::string& output_dir);

// Complete checkpoint folders (with trainer_state.json) in output_dir, oldest (lowest step) first.
std::vector<std::string> sorted_checkpoints(const std::string& output_dir);
// The latest complete checkpoint, if any.
std::optional<std::string> last_checkpoint(const std::string& output_dir);

// Deletes the oldest checkpoints beyond `limit`, never the best one (HF's _rotate_checkpoints).
void rotate_checkpoints(const std::string& output_dir, int64_t limit, const std::optional<std::string>& best);

}  // namespace kiln::trainer
