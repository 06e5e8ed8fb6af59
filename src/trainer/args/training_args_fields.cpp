// One codec per field type (JSON in, JSON out, command-line text in) and the table of fields.
#include "trainer/args/training_args_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <type_traits>

#include "kiln/error.h"
#include "trainer/args/training_args_compat.h"

namespace kiln::trainer::detail {
namespace {

using Json = nlohmann::json;
using Texts = std::vector<std::string>;

[[noreturn]] void bad_json(const std::string& where, std::string_view expected, const Json& value) {
  throw InvalidArgument(fmt::format("{}: expected {}, got {}", where, expected, value.dump()));
}

// ---- Codecs: to_json(value), from_json(json, where), from_text(values, where), arity ---------

template <class T>
struct Codec;

template <>
struct Codec<bool> {
  static constexpr Arity arity = Arity::flag;
  static Json to_json(bool v) { return v; }
  static bool from_json(const Json& j, const std::string& where) {
    if (!j.is_boolean()) bad_json(where, "true or false", j);
    return j.get<bool>();
  }
  // argparse's nargs="?" with const=True: a bare flag is true.
  static bool from_text(const Texts& v, const std::string& where) { return v.empty() || parse_bool(v[0], where); }
};

template <>
struct Codec<int64_t> {
  static constexpr Arity arity = Arity::one;
  static Json to_json(int64_t v) { return v; }
  static int64_t from_json(const Json& j, const std::string& where) {
    if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX)) bad_json(where, "a 64-bit integer", j);
    if (!j.is_number_integer()) bad_json(where, "an integer", j);
    return j.get<int64_t>();
  }
  static int64_t from_text(const Texts& v, const std::string& where) {
    const std::string& s = v.at(0);
    const char* begin = s.data() + (!s.empty() && s[0] == '+');  // Python's int() takes "+5"
    int64_t out = 0;
    auto [end, ec] = std::from_chars(begin, s.data() + s.size(), out);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty())
      throw InvalidArgument(fmt::format("{}: invalid int value: '{}'", where, s));
    return out;
  }
};

template <>
struct Codec<double> {
  static constexpr Arity arity = Arity::one;
  static Json to_json(double v) { return v; }
  static double from_json(const Json& j, const std::string& where) {
    if (!j.is_number()) bad_json(where, "a number", j);
    return j.get<double>();
  }
  static double from_text(const Texts& v, const std::string& where) {
    const std::string& s = v.at(0);
    // strtod also reads hexadecimal floats, which Python's float() does not; refuse them.
    bool hex = s.find_first_of("xX") != std::string::npos;
    char* end = nullptr;
    errno = 0;
    double out = std::strtod(s.c_str(), &end);
    if (s.empty() || hex || end != s.c_str() + s.size() || std::isspace(static_cast<unsigned char>(s[0])))
      throw InvalidArgument(fmt::format("{}: invalid float value: '{}'", where, s));
    return out;
  }
};

// Counts of steps that HF types `float` but defaults with an int (500, 0): integral values are
// written as JSON integers, as HF's json.dumps writes them after __post_init__'s int() conversion.
struct StepsCodec : Codec<double> {
  static Json to_json(double v) {
    if (std::nearbyint(v) == v && std::fabs(v) < 9007199254740992.0) return static_cast<int64_t>(v);
    return v;
  }
};

template <>
struct Codec<std::string> {
  static constexpr Arity arity = Arity::one;
  static Json to_json(const std::string& v) { return v; }
  static std::string from_json(const Json& j, const std::string& where) {
    if (!j.is_string()) bad_json(where, "a string", j);
    return j.get<std::string>();
  }
  static std::string from_text(const Texts& v, const std::string&) { return v.at(0); }
};

template <>
struct Codec<std::vector<std::string>> {
  static constexpr Arity arity = Arity::list;
  static Json to_json(const std::vector<std::string>& v) { return v; }
  // A single string is a one-element list (HF types report_to as str | list[str]).
  static std::vector<std::string> from_json(const Json& j, const std::string& where) {
    if (j.is_string()) return {j.get<std::string>()};
    if (!j.is_array()) bad_json(where, "a list of strings", j);
    std::vector<std::string> out;
    for (const Json& item : j) {
      if (!item.is_string()) bad_json(where, "a list of strings", j);
      out.push_back(item.get<std::string>());
    }
    return out;
  }
  static std::vector<std::string> from_text(const Texts& v, const std::string&) { return v; }
};

template <class Enum>
struct EnumCodec {
  static constexpr Arity arity = Arity::one;
  static Json to_json(Enum v) { return std::string(to_string(v)); }
  static Enum from_json(const Json& j, const std::string& where) {
    if (!j.is_string()) bad_json(where, "a string", j);
    return enum_from_string<Enum>(j.get<std::string>(), where);
  }
  static Enum from_text(const Texts& v, const std::string& where) { return enum_from_string<Enum>(v.at(0), where); }
};
template <>
struct Codec<IntervalStrategy> : EnumCodec<IntervalStrategy> {};
template <>
struct Codec<SaveStrategy> : EnumCodec<SaveStrategy> {};
template <>
struct Codec<SchedulerType> : EnumCodec<SchedulerType> {};
template <>
struct Codec<OptimizerName> : EnumCodec<OptimizerName> {};

// std::optional<T> over T's codec: null is unset.
template <class Inner>
struct OptionalCodec {
  static constexpr bool takes_null = true;
  using T = decltype(Inner::from_json(Json(), std::string()));
  static constexpr Arity arity = Inner::arity;
  static Json to_json(const std::optional<T>& v) { return v ? Inner::to_json(*v) : Json(); }
  static std::optional<T> from_json(const Json& j, const std::string& where) {
    if (j.is_null()) return std::nullopt;
    return Inner::from_json(j, where);
  }
  static std::optional<T> from_text(const Texts& v, const std::string& where) { return Inner::from_text(v, where); }
};
template <class T>
struct Codec<std::optional<T>> : OptionalCodec<Codec<T>> {};

// HF's _convert_str_dict: in a dict given as a JSON string, "true"/"false" (any case) become
// booleans and digit strings numbers, recursively.
void convert_str_dict(Json& object) {
  for (auto& [key, value] : object.items()) {
    if (value.is_object()) {
      convert_str_dict(value);
    } else if (value.is_string()) {
      std::string s = value.get<std::string>();
      std::string lower = s;
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
      auto all_digits = [](const std::string& t) {
        return !t.empty() && std::all_of(t.begin(), t.end(), [](unsigned char c) { return std::isdigit(c); });
      };
      std::string without_dot = s;
      if (auto dot = without_dot.find('.'); dot != std::string::npos) without_dot.erase(dot, 1);
      if (lower == "true" || lower == "false") {
        value = lower == "true";
      } else if (all_digits(s)) {
        errno = 0;
        long long as_int = std::strtoll(s.c_str(), nullptr, 10);
        if (errno == ERANGE) value = std::strtod(s.c_str(), nullptr);  // beyond int64: Python's int would be exact
        else value = static_cast<int64_t>(as_int);
      } else if (all_digits(without_dot)) {
        value = std::strtod(s.c_str(), nullptr);
      }
    }
  }
}

// lr_scheduler_kwargs: a JSON object, or a string holding one (HF's _VALID_DICT_FIELDS); null is {}.
struct KwargsCodec {
  static constexpr bool takes_null = true;
  static constexpr Arity arity = Arity::one;
  static Json to_json(const Json& v) { return v; }
  static Json from_json(const Json& j, const std::string& where) {
    if (j.is_null()) return Json::object();
    if (j.is_object()) return j;
    if (j.is_string()) return from_text({j.get<std::string>()}, where);
    bad_json(where, "a JSON object", j);
  }
  static Json from_text(const Texts& v, const std::string& where) {
    Json parsed = Json::parse(v.at(0), nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object())
      throw InvalidArgument(
          fmt::format("{}: expected a JSON object such as '{{\"num_cycles\": 2}}', got '{}'", where, v.at(0)));
    convert_str_dict(parsed);
    return parsed;
  }
};

// output_dir: null is HF's None, i.e. the default folder.
struct OutputDirCodec : Codec<std::string> {
  static constexpr bool takes_null = true;
  static std::string from_json(const Json& j, const std::string& where) {
    return j.is_null() ? TrainingArguments().output_dir : Codec<std::string>::from_json(j, where);
  }
};

// include_num_input_tokens_seen: HF v5's str | bool; booleans map to "all" / "no", a bare flag to
// "all". The set of strings is checked by validate().
struct TokensSeenCodec {
  static constexpr Arity arity = Arity::flag;
  static Json to_json(const std::string& v) { return v; }
  static std::string from_json(const Json& j, const std::string& where) {
    if (j.is_boolean()) return j.get<bool>() ? "all" : "no";
    if (!j.is_string()) bad_json(where, "\"all\", \"non_padding\", \"no\" or a boolean", j);
    return j.get<std::string>();
  }
  static std::string from_text(const Texts& v, const std::string& where) {
    if (v.empty()) return "all";
    if (v[0] == "all" || v[0] == "non_padding" || v[0] == "no") return v[0];
    return parse_bool(v[0], where) ? "all" : "no";
  }
};

// deepspeed: a config file's path, or the config itself as a JSON object (HF takes a dict), kept
// as its JSON text; written back as the object it is, or the path.
struct DeepSpeedCodec {
  static constexpr bool takes_null = true;
  static constexpr Arity arity = Arity::one;
  static Json to_json(const std::optional<std::string>& v) {
    if (!v) return Json();
    if (!v->empty() && v->front() == '{') {
      Json parsed = Json::parse(*v, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) return parsed;
    }
    return *v;
  }
  static std::optional<std::string> from_json(const Json& j, const std::string& where) {
    if (j.is_null()) return std::nullopt;
    if (j.is_object()) return j.dump();
    if (!j.is_string()) bad_json(where, "a config file's path or a JSON object", j);
    return j.get<std::string>();
  }
  static std::optional<std::string> from_text(const Texts& v, const std::string&) { return v.at(0); }
};

// ---- The table ----------------------------------------------------------------------------------

template <class T, class C = Codec<T>>
FieldSpec field(std::string name, T TrainingArguments::*member) {
  FieldSpec spec;
  spec.name = std::move(name);
  spec.arity = C::arity;
  if constexpr (std::is_same_v<T, bool>) {
    spec.negatable = TrainingArguments().*member;
    spec.clear = [member](TrainingArguments& a) { a.*member = false; };
  }
  spec.get = [member](const TrainingArguments& a) { return C::to_json(a.*member); };
  spec.set_json = [member](TrainingArguments& a, const Json& j, const std::string& where) {
    // null leaves a field whose codec has no meaning for it at its default (HF would store None
    // and fail later).
    if constexpr (!requires { C::takes_null; }) {
      if (j.is_null()) return;
    }
    a.*member = C::from_json(j, where);
  };
  spec.set_text = [member](TrainingArguments& a, const Texts& v, const std::string& where) {
    a.*member = C::from_text(v, where);
  };
  return spec;
}

// Any JSON (HF's str | list | dict fields: fsdp, accelerator_config, debug, ...): on the command line
// a JSON object or list as text, one string, or several strings as a list.
struct AnyCodec {
  static constexpr bool takes_null = true;
  static constexpr Arity arity = Arity::list;
  static Json to_json(const Json& v) { return v; }
  static Json from_json(const Json& j, const std::string&) { return j; }
  static Json from_text(const Texts& v, const std::string& where) {
    if (v.size() == 1 && !v[0].empty() && (v[0][0] == '{' || v[0][0] == '[')) {
      try {
        return Json::parse(v[0]);
      } catch (const Json::exception& e) {
        throw InvalidArgument(fmt::format("{}: not valid JSON: {}", where, e.what()));
      }
    }
    if (v.size() == 1) return v[0];
    return Json(v);
  }
};

// A field kept by name in TrainingArguments::hf_compat (training_args_compat.h).
template <class C>
FieldSpec compat_field(const CompatField& c) {
  using A = TrainingArguments;
  FieldSpec spec;
  spec.name = c.name;
  spec.arity = C::arity;
  const std::string name = c.name;
  if constexpr (std::is_same_v<C, Codec<bool>>) {
    spec.negatable = c.default_value.get<bool>();
    spec.clear = [name](A& a) { a.hf_compat[name] = false; };  // --no_<name> of a field whose default is true
  }
  spec.get = [name](const A& a) { return a.compat(name); };
  // Only values away from the default are kept, so that equal arguments compare equal.
  auto store = [name, fallback = c.default_value](A& a, Json value) {
    if (value == fallback) a.hf_compat.erase(name);
    else a.hf_compat[name] = std::move(value);
  };
  spec.set_json = [store](A& a, const Json& j, const std::string& where) {
    if constexpr (!requires { C::takes_null; }) {
      if (j.is_null()) return;
    }
    store(a, C::to_json(C::from_json(j, where)));
  };
  spec.set_text = [store](A& a, const Texts& v, const std::string& where) {
    store(a, C::to_json(C::from_text(v, where)));
  };
  return spec;
}

void add_compat_fields(std::vector<FieldSpec>& f) {
  using K = CompatField::Kind;
  for (const CompatField& c : compat_fields()) {
    switch (c.kind) {
      case K::Bool:
        f.push_back(compat_field<Codec<bool>>(c));
        break;
      case K::Int:
        f.push_back(compat_field<Codec<int64_t>>(c));
        break;
      case K::OptInt:
        f.push_back(compat_field<Codec<std::optional<int64_t>>>(c));
        break;
      case K::OptFloat:
        f.push_back(compat_field<Codec<std::optional<double>>>(c));
        break;
      case K::Str:
        f.push_back(compat_field<Codec<std::string>>(c));
        break;
      case K::OptStr:
        f.push_back(compat_field<Codec<std::optional<std::string>>>(c));
        break;
      case K::OptBool:
        f.push_back(compat_field<Codec<std::optional<bool>>>(c));
        break;
      case K::Any:
        f.push_back(compat_field<AnyCodec>(c));
        break;
    }
  }
}

// evaluation_strategy: HF's name for eval_strategy until v4.46, accepted on input only.
FieldSpec evaluation_strategy_alias() {
  FieldSpec spec = field("evaluation_strategy", &TrainingArguments::eval_strategy);
  spec.serialized = false;
  spec.get = nullptr;
  spec.set_json = [](TrainingArguments& a, const Json& j, const std::string& where) {
    if (!j.is_null()) a.eval_strategy = Codec<IntervalStrategy>::from_json(j, where);  // v4 writes null
  };
  return spec;
}

void add_ipu_and_kiln_fields(std::vector<FieldSpec>& f);

std::vector<FieldSpec> make_fields() {
  using A = TrainingArguments;
  std::vector<FieldSpec> f;
  f.push_back(field<std::string, OutputDirCodec>("output_dir", &A::output_dir));
  f.push_back(field("overwrite_output_dir", &A::overwrite_output_dir));
  f.push_back(field("do_train", &A::do_train));
  f.push_back(field("do_eval", &A::do_eval));
  f.push_back(field("do_predict", &A::do_predict));
  f.push_back(field("resume_from_checkpoint", &A::resume_from_checkpoint));
  f.push_back(field("eval_strategy", &A::eval_strategy));
  f.push_back(evaluation_strategy_alias());
  f.push_back(field<std::optional<double>, OptionalCodec<StepsCodec>>("eval_steps", &A::eval_steps));
  f.push_back(field<double, StepsCodec>("eval_delay", &A::eval_delay));
  f.push_back(field("prediction_loss_only", &A::prediction_loss_only));
  f.push_back(field("per_device_eval_batch_size", &A::per_device_eval_batch_size));
  f.push_back(field("eval_accumulation_steps", &A::eval_accumulation_steps));
  f.push_back(field("per_device_train_batch_size", &A::per_device_train_batch_size));
  f.push_back(field("gradient_accumulation_steps", &A::gradient_accumulation_steps));
  f.push_back(field("num_train_epochs", &A::num_train_epochs));
  f.push_back(field("max_steps", &A::max_steps));
  f.push_back(field("optim", &A::optim));
  f.push_back(field("learning_rate", &A::learning_rate));
  f.push_back(field("weight_decay", &A::weight_decay));
  f.push_back(field("adam_beta1", &A::adam_beta1));
  f.push_back(field("adam_beta2", &A::adam_beta2));
  f.push_back(field("adam_epsilon", &A::adam_epsilon));
  f.push_back(field("max_grad_norm", &A::max_grad_norm));
  f.push_back(field("label_smoothing_factor", &A::label_smoothing_factor));
  f.push_back(field("lr_scheduler_type", &A::lr_scheduler_type));
  f.push_back(field<nlohmann::json, KwargsCodec>("lr_scheduler_kwargs", &A::lr_scheduler_kwargs));
  f.push_back(field<double, StepsCodec>("warmup_steps", &A::warmup_steps));
  f.push_back(field("warmup_ratio", &A::warmup_ratio));
  f.push_back(field("log_level", &A::log_level));
  f.push_back(field("logging_dir", &A::logging_dir));
  f.push_back(field("logging_strategy", &A::logging_strategy));
  f.push_back(field("logging_first_step", &A::logging_first_step));
  f.push_back(field<double, StepsCodec>("logging_steps", &A::logging_steps));
  f.push_back(field("logging_nan_inf_filter", &A::logging_nan_inf_filter));
  f.push_back(field("report_to", &A::report_to));
  f.push_back(field("run_name", &A::run_name));
  f.push_back(field("disable_tqdm", &A::disable_tqdm));
  f.push_back(field("include_tokens_per_second", &A::include_tokens_per_second));
  f.push_back(field<std::string, TokensSeenCodec>("include_num_input_tokens_seen", &A::include_num_input_tokens_seen));
  f.push_back(field("skip_memory_metrics", &A::skip_memory_metrics));
  f.push_back(field("save_strategy", &A::save_strategy));
  f.push_back(field<double, StepsCodec>("save_steps", &A::save_steps));
  f.push_back(field("save_total_limit", &A::save_total_limit));
  f.push_back(field("save_only_model", &A::save_only_model));
  f.push_back(field("load_best_model_at_end", &A::load_best_model_at_end));
  f.push_back(field("metric_for_best_model", &A::metric_for_best_model));
  f.push_back(field("greater_is_better", &A::greater_is_better));
  f.push_back(field("ignore_data_skip", &A::ignore_data_skip));
  f.push_back(field("restore_callback_states_from_checkpoint", &A::restore_callback_states_from_checkpoint));
  f.push_back(field("seed", &A::seed));
  f.push_back(field("data_seed", &A::data_seed));
  f.push_back(field("full_determinism", &A::full_determinism));
  f.push_back(field("dataloader_drop_last", &A::dataloader_drop_last));
  f.push_back(field("dataloader_num_workers", &A::dataloader_num_workers));
  f.push_back(field("dataloader_prefetch_factor", &A::dataloader_prefetch_factor));
  f.push_back(field("dataloader_persistent_workers", &A::dataloader_persistent_workers));
  f.push_back(field("label_names", &A::label_names));
  f.push_back(field("use_cpu", &A::use_cpu));
  f.push_back(field("gradient_checkpointing", &A::gradient_checkpointing));
  f.push_back(field<nlohmann::json, KwargsCodec>("gradient_checkpointing_kwargs", &A::gradient_checkpointing_kwargs));
  f.push_back(field("bf16", &A::bf16));
  f.push_back(field("fp16", &A::fp16));
  f.push_back(field("half_precision_backend", &A::half_precision_backend));
  f.push_back(field("bf16_full_eval", &A::bf16_full_eval));
  f.push_back(field("fp16_full_eval", &A::fp16_full_eval));
  f.push_back(field("local_rank", &A::local_rank));
  f.push_back(field("ddp_backend", &A::ddp_backend));
  f.push_back(field("ddp_bucket_cap_mb", &A::ddp_bucket_cap_mb));
  f.push_back(field("ddp_broadcast_buffers", &A::ddp_broadcast_buffers));
  f.push_back(field("ddp_find_unused_parameters", &A::ddp_find_unused_parameters));
  f.push_back(field("ddp_timeout", &A::ddp_timeout));
  f.push_back(field<std::optional<std::string>, DeepSpeedCodec>("deepspeed", &A::deepspeed));
  f.push_back(field("log_on_each_node", &A::log_on_each_node));
  f.push_back(field("save_on_each_node", &A::save_on_each_node));
  add_ipu_and_kiln_fields(f);
  return f;
}

// optimum-graphcore's IPUTrainingArguments, then Kiln's own.
void add_ipu_and_kiln_fields(std::vector<FieldSpec>& f) {
  using A = TrainingArguments;
  f.push_back(field("ipu_config_name", &A::ipu_config_name));
  f.push_back(field("ipu_config_overrides", &A::ipu_config_overrides));
  f.push_back(field("n_ipu", &A::n_ipu));
  f.push_back(field("fp32", &A::fp32));
  f.push_back(field("compile_only", &A::compile_only));
  f.push_back(field("pad_on_batch_axis", &A::pad_on_batch_axis));
  f.push_back(field("dataloader_mode", &A::dataloader_mode));
  f.push_back(field("lamb", &A::lamb));
  f.push_back(field("lamb_no_bias_correction", &A::lamb_no_bias_correction));
  // Kiln's own.
  f.push_back(field("nan_inf_patience", &A::nan_inf_patience));
  f.push_back(field("ddp_sync_batchnorm", &A::ddp_sync_batchnorm));
  add_compat_fields(f);
}

}  // namespace

const std::vector<FieldSpec>& fields() {
  static const std::vector<FieldSpec> table = make_fields();
  return table;
}

const FieldSpec* find_field(std::string_view name) {
  for (const FieldSpec& spec : fields())
    if (spec.name == name) return &spec;
  return nullptr;
}

bool parse_bool(const std::string& text, const std::string& where) {
  std::string v = text;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "yes" || v == "true" || v == "t" || v == "y" || v == "1") return true;
  if (v == "no" || v == "false" || v == "f" || v == "n" || v == "0") return false;
  throw InvalidArgument(fmt::format(
      "{}: Truthy value expected: got {} but expected one of yes/no, true/false, t/f, y/n, 1/0 (case insensitive).",
      where, text));
}

}  // namespace kiln::trainer::detail
