// TrainingArguments' properties of the distributed run (HF's world_size, process_index,
// local_process_index, should_log, should_save), from kiln::dist::world().
#include "kiln/distributed.h"
#include "kiln/training_args.h"

namespace kiln::trainer {

int TrainingArguments::world_size() const { return dist::world()->size(); }
int TrainingArguments::process_index() const { return dist::world()->rank(); }
int TrainingArguments::local_process_index() const { return dist::world()->local_rank(); }
bool TrainingArguments::should_log() const {
  return log_on_each_node ? local_process_index() == 0 : process_index() == 0;
}
bool TrainingArguments::should_save() const {
  return save_on_each_node ? local_process_index() == 0 : process_index() == 0;
}

}  // namespace kiln::trainer
