#include "trainer/callbacks/callback_handler.h"

#include <fmt/format.h>

#include <cstdio>
#include <map>

#include "kiln/error.h"

namespace kiln::trainer {

void CallbackHandler::add(std::shared_ptr<TrainerCallback> callback) {
  if (!callback) throw InvalidArgument("add_callback: the callback is null");
  const std::string name = callback->name();
  for (const auto& c : callbacks_)
    if (c->name() == name) {
      std::string list;
      for (const auto& d : callbacks_) list += "\n" + d->name();
      std::fprintf(stderr,
                   "You are adding a %s to the callbacks of this Trainer, but there is already one. The current "
                   "list of callbacks is:%s\n",
                   name.c_str(), list.c_str());
      break;
    }
  callbacks_.push_back(std::move(callback));
}

std::shared_ptr<TrainerCallback> CallbackHandler::pop(const std::string& name) {
  for (auto it = callbacks_.begin(); it != callbacks_.end(); ++it)
    if ((*it)->name() == name) {
      auto c = *it;
      callbacks_.erase(it);
      return c;
    }
  return nullptr;
}

std::shared_ptr<TrainerCallback> CallbackHandler::pop(const std::shared_ptr<TrainerCallback>& callback) {
  for (auto it = callbacks_.begin(); it != callbacks_.end(); ++it)
    if (*it == callback) {
      auto c = *it;
      callbacks_.erase(it);
      return c;
    }
  return nullptr;
}

void CallbackHandler::call(Event event, const TrainingArguments& args, const TrainerState& state,
                           const CallbackContext& extra) {
  // HF's handler resets the flags an event starts afresh.
  if (event == &TrainerCallback::on_train_begin) control.should_training_stop = false;
  else if (event == &TrainerCallback::on_epoch_begin) control.should_epoch_stop = false;
  else if (event == &TrainerCallback::on_step_begin)
    control.should_log = control.should_evaluate = control.should_save = false;
  else if (event == &TrainerCallback::on_log) control.should_log = false;
  else if (event == &TrainerCallback::on_evaluate) control.should_evaluate = false;
  else if (event == &TrainerCallback::on_save) control.should_save = false;
  CallbackContext ctx = context;
  if (extra.metrics) ctx.metrics = extra.metrics;
  if (extra.logs) ctx.logs = extra.logs;
  if (extra.loss) ctx.loss = extra.loss;
  if (extra.eval_dataloader) ctx.eval_dataloader = extra.eval_dataloader;
  // A copy: a callback may add or remove callbacks from inside an event.
  const auto callbacks = callbacks_;
  for (const auto& c : callbacks) ((*c).*event)(args, state, control, ctx);
}

nlohmann::json CallbackHandler::export_states() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& c : callbacks_) {
    const auto s = c->state();
    if (!s) continue;
    const std::string name = c->name();
    if (!out.contains(name)) out[name] = *s;
    else if (out[name].is_array()) out[name].push_back(*s);
    else out[name] = nlohmann::json::array({out[name], *s});
  }
  out["TrainerControl"] = control.state();
  return out;
}

void CallbackHandler::restore_states(const nlohmann::json& saved) {
  if (!saved.is_object()) return;
  std::map<std::string, size_t> seen;  // callbacks of one name take the saved list in order
  for (const auto& c : callbacks_) {
    if (!c->state()) continue;
    const std::string name = c->name();
    auto it = saved.find(name);
    if (it == saved.end()) continue;
    const size_t i = seen[name]++;
    if (it->is_array()) {
      if (i < it->size()) c->load_state((*it)[i]);
    } else if (i == 0) {
      c->load_state(*it);
    }
  }
  if (auto it = saved.find("TrainerControl"); it != saved.end()) control.load_state(*it);
}

}  // namespace kiln::trainer
