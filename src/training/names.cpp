// The names of loss and optimizer types, as ONNX Runtime's LossType / OptimType spell them.
#include <fmt/format.h>

#include <utility>
#include <vector>

#include "kiln/artifacts.h"
#include "kiln/error.h"

namespace kiln::training {

namespace {

template <class E>
using NameTable = std::vector<std::pair<std::string, E>>;

const NameTable<LossType>& loss_names() {
  static const NameTable<LossType> t = {{"CrossEntropyLoss", LossType::CrossEntropyLoss},
                                        {"MSELoss", LossType::MSELoss},
                                        {"BCEWithLogitsLoss", LossType::BCEWithLogitsLoss},
                                        {"L1Loss", LossType::L1Loss},
                                        {"none", LossType::None}};
  return t;
}

const NameTable<OptimType>& optim_names() {
  static const NameTable<OptimType> t = {{"AdamW", OptimType::AdamW},
                                         {"SGD", OptimType::SGD},
                                         {"Lamb", OptimType::Lamb},
                                         {"Adagrad", OptimType::Adagrad},
                                         {"Adafactor", OptimType::Adafactor}};
  return t;
}

template <class E>
E parse(const NameTable<E>& table, const std::string& name, const char* what) {
  std::string known;
  for (const auto& [n, v] : table) {
    if (n == name) return v;
    known += (known.empty() ? "" : ", ") + n;
  }
  throw InvalidArgument(fmt::format("unknown {} '{}'; expected one of: {}", what, name, known));
}

template <class E>
std::string name_of(const NameTable<E>& table, E value) {
  for (const auto& [n, v] : table)
    if (v == value) return n;
  return "?";
}

}  // namespace

LossType loss_type_from_string(const std::string& name) { return parse(loss_names(), name, "loss"); }
OptimType optim_type_from_string(const std::string& name) { return parse(optim_names(), name, "optimizer"); }
std::string to_string(LossType loss) { return name_of(loss_names(), loss); }
std::string to_string(OptimType optim) { return name_of(optim_names(), optim); }

}  // namespace kiln::training
