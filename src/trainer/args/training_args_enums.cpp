// The string values of TrainingArguments' enums: one table per enum, with HF's class name for the
// error message, and one generic lookup in each direction.
#include <fmt/format.h>

#include <array>
#include <utility>

#include "kiln/error.h"
#include "kiln/training_args.h"

namespace kiln::trainer {
namespace {

template <class Enum>
struct EnumTable;

template <>
struct EnumTable<IntervalStrategy> {
  static constexpr std::string_view type = "IntervalStrategy";
  static constexpr std::array<std::pair<IntervalStrategy, std::string_view>, 3> entries{{
      {IntervalStrategy::no, "no"},
      {IntervalStrategy::steps, "steps"},
      {IntervalStrategy::epoch, "epoch"},
  }};
};

template <>
struct EnumTable<SaveStrategy> {
  static constexpr std::string_view type = "SaveStrategy";
  static constexpr std::array<std::pair<SaveStrategy, std::string_view>, 4> entries{{
      {SaveStrategy::no, "no"},
      {SaveStrategy::steps, "steps"},
      {SaveStrategy::epoch, "epoch"},
      {SaveStrategy::best, "best"},
  }};
};

template <>
struct EnumTable<SchedulerType> {
  static constexpr std::string_view type = "SchedulerType";
  static constexpr std::array<std::pair<SchedulerType, std::string_view>, 8> entries{{
      {SchedulerType::linear, "linear"},
      {SchedulerType::cosine, "cosine"},
      {SchedulerType::cosine_with_restarts, "cosine_with_restarts"},
      {SchedulerType::polynomial, "polynomial"},
      {SchedulerType::constant, "constant"},
      {SchedulerType::constant_with_warmup, "constant_with_warmup"},
      {SchedulerType::inverse_sqrt, "inverse_sqrt"},
      {SchedulerType::reduce_lr_on_plateau, "reduce_lr_on_plateau"},
  }};
};

template <>
struct EnumTable<OptimizerName> {
  static constexpr std::string_view type = "OptimizerNames";
  static constexpr std::array<std::pair<OptimizerName, std::string_view>, 6> entries{{
      {OptimizerName::adamw_torch, "adamw_torch"},
      {OptimizerName::adamw_torch_fused, "adamw_torch_fused"},
      {OptimizerName::adamw_hf, "adamw_hf"},
      {OptimizerName::sgd, "sgd"},
      {OptimizerName::adagrad, "adagrad"},
      {OptimizerName::adafactor, "adafactor"},
  }};
};

template <class Enum>
std::string_view name_of(Enum value) {
  for (const auto& [e, name] : EnumTable<Enum>::entries)
    if (e == value) return name;
  throw InvalidArgument(fmt::format("{} value {} is out of range", EnumTable<Enum>::type, static_cast<int>(value)));
}

}  // namespace

std::string_view to_string(IntervalStrategy value) { return name_of(value); }
std::string_view to_string(SaveStrategy value) { return name_of(value); }
std::string_view to_string(SchedulerType value) { return name_of(value); }
std::string_view to_string(OptimizerName value) { return name_of(value); }

template <class Enum>
Enum enum_from_string(std::string_view text, std::string_view option) {
  for (const auto& [e, name] : EnumTable<Enum>::entries)
    if (name == text) return e;
  // HF's ExplicitEnum._missing_ message, Python's list repr included.
  std::string choices;
  for (const auto& [e, name] : EnumTable<Enum>::entries)
    choices += fmt::format("{}'{}'", choices.empty() ? "" : ", ", name);
  throw InvalidArgument(
      fmt::format("{}: {} is not a valid {}, please select one of [{}]", option, text, EnumTable<Enum>::type, choices));
}

template IntervalStrategy enum_from_string<IntervalStrategy>(std::string_view, std::string_view);
template SaveStrategy enum_from_string<SaveStrategy>(std::string_view, std::string_view);
template SchedulerType enum_from_string<SchedulerType>(std::string_view, std::string_view);
template OptimizerName enum_from_string<OptimizerName>(std::string_view, std::string_view);

}  // namespace kiln::trainer
