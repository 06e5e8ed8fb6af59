// TrainingArguments against Hugging Face's training_args.py: defaults, the HfArgumentParser command
// line, JSON in and out, and each __post_init__ rule with HF's message.
#include "kiln/training_args.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "kiln/error.h"
#include "test_util.h"

namespace kiln::trainer {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Argv = std::vector<std::string>;
using kiln::test::error_message;
using kiln::test::expect_error;

TrainingArguments validated(TrainingArguments a) {
  a.validate();
  return a;
}

// ---- Defaults ---------------------------------------------------------------------------------

// HF's value of each field before __post_init__, as to_dict would write it (transformers' current
// v5 line unless the comment says otherwise).
const std::vector<std::pair<std::string, Json>>& hf_defaults() {
  static const std::vector<std::pair<std::string, Json>> table = {
      {"output_dir", "trainer_output"},  // HF: None, replaced by "trainer_output" in __post_init__
      {"overwrite_output_dir", false},   // removed in v5; v4's default
      {"do_train", false},
      {"do_eval", false},
      {"do_predict", false},
      {"resume_from_checkpoint", nullptr},
      {"eval_strategy", "no"},
      {"eval_steps", nullptr},
      {"eval_delay", 0},
      {"prediction_loss_only", false},
      {"per_device_eval_batch_size", 8},
      {"eval_accumulation_steps", nullptr},
      {"per_device_train_batch_size", 8},
      {"gradient_accumulation_steps", 1},
      {"num_train_epochs", 3.0},
      {"max_steps", -1},
      {"optim", "adamw_torch"},  // v5: "adamw_torch_fused" only when torch >= 2.8 is installed
      {"learning_rate", 5e-5},
      {"weight_decay", 0.0},
      {"adam_beta1", 0.9},
      {"adam_beta2", 0.999},
      {"adam_epsilon", 1e-8},
      {"max_grad_norm", 1.0},
      {"label_smoothing_factor", 0.0},
      {"lr_scheduler_type", "linear"},
      {"lr_scheduler_kwargs", Json::object()},  // v5: None, v4: {} (the same: no extra kwargs)
      {"warmup_steps", 0},
      {"warmup_ratio", nullptr},  // v5: None (deprecated); v4: 0.0
      {"log_level", "passive"},
      {"logging_dir", nullptr},  // v5: None (deprecated); v4 derives it (checked after validate below)
      {"logging_strategy", "steps"},
      {"logging_first_step", false},
      {"logging_steps", 500},
      {"logging_nan_inf_filter", true},
      {"report_to", Json::array()},  // v5: "none", i.e. []; v4: None, i.e. "all"
      {"run_name", nullptr},         // v4 set it to output_dir in __post_init__
      {"disable_tqdm", nullptr},
      {"include_tokens_per_second", false},     // removed in v5; v4's default
      {"include_num_input_tokens_seen", "no"},  // v5: "no"; v4: False
      {"skip_memory_metrics", true},
      {"save_strategy", "steps"},
      {"save_steps", 500},
      {"save_total_limit", nullptr},
      {"save_only_model", false},
      {"load_best_model_at_end", false},
      {"metric_for_best_model", nullptr},
      {"greater_is_better", nullptr},
      {"ignore_data_skip", false},
      {"restore_callback_states_from_checkpoint", false},
      {"seed", 42},
      {"data_seed", nullptr},
      {"full_determinism", false},
      {"dataloader_drop_last", false},
      {"dataloader_num_workers", 0},
      {"dataloader_prefetch_factor", nullptr},
      {"dataloader_persistent_workers", false},
      {"label_names", nullptr},
      {"use_cpu", false},
      {"gradient_checkpointing", false},
      {"gradient_checkpointing_kwargs", Json::object()},  // v5: None; Kiln keeps {} as for lr_scheduler_kwargs
      {"bf16", false},
      {"fp16", false},
      {"half_precision_backend", "auto"},
      {"bf16_full_eval", false},
      {"fp16_full_eval", false},
      {"local_rank", -1},
      {"ddp_backend", nullptr},
      {"ddp_bucket_cap_mb", nullptr},
      {"ddp_broadcast_buffers", nullptr},
      {"ddp_find_unused_parameters", nullptr},
      {"ddp_timeout", 1800},
      {"deepspeed", nullptr},
      {"log_on_each_node", true},
      {"save_on_each_node", false},
      // optimum-graphcore's IPUTrainingArguments (fp32 unset: TrainingArguments' precision rules).
      {"ipu_config_name", nullptr},
      {"ipu_config_overrides", nullptr},
      {"n_ipu", nullptr},
      {"fp32", nullptr},
      {"compile_only", false},
      {"pad_on_batch_axis", false},
      {"dataloader_mode", "sequential"},
      {"lamb", false},
      {"lamb_no_bias_correction", false},
      {"nan_inf_patience", 5},
      {"ddp_sync_batchnorm", false},  // Kiln's own
      // HF's fields Kiln keeps by name (training_args_compat.cpp), current release then v4.
      {"optim_args", nullptr},
      {"optim_target_modules", nullptr},
      {"average_tokens_across_devices", true},
      {"tf32", nullptr},
      {"torch_compile", false},
      {"torch_compile_backend", nullptr},
      {"torch_compile_mode", nullptr},
      {"use_liger_kernel", false},
      {"liger_kernel_config", nullptr},
      {"use_cache", false},
      {"neftune_noise_alpha", nullptr},
      {"torch_empty_cache_steps", nullptr},
      {"auto_find_batch_size", false},
      {"log_level_replica", "warning"},
      {"project", "huggingface"},
      {"trackio_space_id", "trackio"},
      {"eval_on_start", false},
      {"eval_do_concat_batches", true},
      {"eval_use_gather_object", false},
      {"include_for_metrics", Json::array()},
      {"batch_eval_metrics", false},
      {"enable_jit_checkpoint", false},
      {"push_to_hub", false},
      {"hub_token", nullptr},
      {"hub_private_repo", nullptr},
      {"hub_model_id", nullptr},
      {"hub_strategy", "every_save"},
      {"hub_always_push", false},
      {"hub_revision", nullptr},
      {"accelerator_config", nullptr},
      {"parallelism_config", nullptr},
      {"dataloader_pin_memory", true},
      {"remove_unused_columns", true},
      {"train_sampling_strategy", "random"},
      {"length_column_name", "length"},
      {"fsdp", nullptr},
      {"fsdp_config", nullptr},
      {"debug", ""},
      {"per_gpu_train_batch_size", nullptr},
      {"per_gpu_eval_batch_size", nullptr},
      {"fp16_backend", "auto"},
      {"fp16_opt_level", "O1"},
      {"push_to_hub_model_id", nullptr},
      {"push_to_hub_organization", nullptr},
      {"push_to_hub_token", nullptr},
      {"no_cuda", false},
      {"use_mps_device", false},
      {"jit_mode_eval", false},
      {"use_ipex", false},
      {"tpu_num_cores", nullptr},
      {"tpu_metrics_debug", false},
      {"past_index", -1},
      {"group_by_length", false},
      {"include_inputs_for_metrics", false},
      {"use_legacy_prediction_loop", false},
      {"torchdynamo", nullptr},
      {"ray_scope", "last"},
      {"sharded_ddp", ""},
      {"fsdp_min_num_params", 0},
      {"fsdp_transformer_layer_cls_to_wrap", nullptr},
      {"mp_parameters", ""},
      {"adafactor", false},
      {"dispatch_batches", nullptr},
      {"split_batches", nullptr},
      {"save_safetensors", true},
  };
  return table;
}

TEST(TrainingArguments, DefaultsMatchHuggingFace) {
  Json json = TrainingArguments().to_json();
  std::set<std::string> table_keys;
  for (const auto& [name, value] : hf_defaults()) {
    table_keys.insert(name);
    ASSERT_TRUE(json.contains(name)) << name;
    EXPECT_EQ(json[name], value) << name << ": " << json[name].dump();
    // Same JSON type too: HF writes 500, not 500.0, and 3.0, not 3.
    EXPECT_EQ(json[name].is_number_integer(), value.is_number_integer()) << name;
  }
  std::set<std::string> json_keys;
  for (const auto& [name, value] : json.items()) json_keys.insert(name);
  EXPECT_EQ(json_keys, table_keys);  // every field is in the table, and nothing else is written
}

TEST(TrainingArguments, DerivedDefaultsAfterValidate) {
  TrainingArguments a = validated(TrainingArguments());
  EXPECT_EQ(a.disable_tqdm, false);       // logger level warning is not above warning
  EXPECT_FALSE(a.do_eval);                // eval_strategy "no"
  EXPECT_FALSE(a.metric_for_best_model);  // no load_best_model_at_end
  EXPECT_FALSE(a.greater_is_better);
  EXPECT_FALSE(a.eval_steps);
  char host[256] = {0};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  // HF v4 / SummaryWriter: output_dir/runs/<%b%d_%H-%M-%S>_<hostname>
  std::regex pattern("trainer_output/runs/[A-Z][a-z]{2}[0-9]{2}_[0-9]{2}-[0-9]{2}-[0-9]{2}_" +
                     std::regex_replace(std::string(host), std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)"));
  ASSERT_TRUE(a.logging_dir);
  EXPECT_TRUE(std::regex_match(*a.logging_dir, pattern)) << *a.logging_dir;
  TrainingArguments parsed = TrainingArguments::parse_args({});  // parse_args validates too
  parsed.logging_dir = a.logging_dir;                            // (the clock may have ticked)
  EXPECT_EQ(parsed, a);
}

TEST(TrainingArguments, ValidateIsIdempotent) {
  TrainingArguments a = TrainingArguments::parse_args(
      {"--eval_strategy", "steps", "--load_best_model_at_end", "--save_steps", "100", "--logging_steps", "50"});
  TrainingArguments b = a;
  b.validate();
  EXPECT_EQ(a, b);
}

TEST(TrainingArguments, EnumNamesRoundTrip) {
  for (auto s : {SchedulerType::linear, SchedulerType::cosine, SchedulerType::cosine_with_restarts,
                 SchedulerType::polynomial, SchedulerType::constant, SchedulerType::constant_with_warmup,
                 SchedulerType::inverse_sqrt, SchedulerType::reduce_lr_on_plateau})
    EXPECT_EQ(enum_from_string<SchedulerType>(to_string(s), "x"), s);
  EXPECT_EQ(to_string(SchedulerType::cosine_with_restarts), "cosine_with_restarts");
  EXPECT_EQ(to_string(SaveStrategy::best), "best");
  EXPECT_EQ(to_string(OptimizerName::adamw_hf), "adamw_hf");
  EXPECT_EQ(error_message<InvalidArgument>([] { enum_from_string<SaveStrategy>("always", "save_strategy"); }),
            "save_strategy: always is not a valid SaveStrategy, please select one of ['no', 'steps', 'epoch', 'best']");
}

// ---- Command line -------------------------------------------------------------------------------

TEST(TrainingArgumentsCli, ValueForms) {
  for (const Argv& argv : {Argv{"--learning_rate", "3e-4"}, Argv{"--learning_rate=3e-4"},
                           Argv{"--learning-rate", "3e-4"}, Argv{"--learning_rate", "1", "--learning_rate", "3e-4"}})
    EXPECT_EQ(TrainingArguments::parse_args(argv).learning_rate, 3e-4) << argv[0];
  auto a = TrainingArguments::parse_args({"--max_steps", "-7", "--num_train_epochs", "0.5", "--output_dir", "out",
                                          "--seed=+3", "--optim", "sgd", "--lr_scheduler_type", "cosine"});
  EXPECT_EQ(a.max_steps, -7);  // "-7" is a value, not an option (argparse's rule)
  EXPECT_EQ(a.num_train_epochs, 0.5);
  EXPECT_EQ(a.output_dir, "out");
  EXPECT_EQ(a.seed, 3);
  EXPECT_EQ(a.optim, OptimizerName::sgd);
  EXPECT_EQ(a.lr_scheduler_type, SchedulerType::cosine);
}

TEST(TrainingArgumentsCli, Booleans) {
  EXPECT_TRUE(TrainingArguments::parse_args({"--do_train"}).do_train);
  EXPECT_TRUE(TrainingArguments::parse_args({"--do_train", "--seed", "1"}).do_train);
  for (const char* yes : {"true", "True", "YES", "y", "t", "1"})
    EXPECT_TRUE(TrainingArguments::parse_args({"--do_train", yes}).do_train) << yes;
  for (const char* no : {"false", "No", "n", "F", "0"}) {
    EXPECT_FALSE(TrainingArguments::parse_args({"--logging_nan_inf_filter", no}).logging_nan_inf_filter) << no;
    EXPECT_FALSE(TrainingArguments::parse_args({std::string("--skip_memory_metrics=") + no}).skip_memory_metrics);
  }
  // --no_<flag> exists for the booleans whose default is true, and only for them.
  EXPECT_FALSE(TrainingArguments::parse_args({"--no_logging_nan_inf_filter"}).logging_nan_inf_filter);
  EXPECT_FALSE(TrainingArguments::parse_args({"--no-skip-memory-metrics"}).skip_memory_metrics);
  expect_error<InvalidArgument>([] { TrainingArguments::parse_args({"--no_do_train"}); },
                                "Some specified arguments are not used by the HfArgumentParser: ['--no_do_train']");
  // Optional booleans take the same forms.
  EXPECT_EQ(TrainingArguments::parse_args({"--disable_tqdm"}).disable_tqdm, true);
  EXPECT_EQ(TrainingArguments::parse_args({"--greater_is_better", "no"}).greater_is_better, false);
  EXPECT_EQ(
      error_message<InvalidArgument>([] {
        TrainingArguments::parse_args({"--do_train", "maybe"});
      }),
      "argument --do_train: Truthy value expected: got maybe but expected one of yes/no, true/false, t/f, y/n, 1/0 "
      "(case insensitive).");
}

TEST(TrainingArgumentsCli, ListsKwargsAndSpecialFields) {
  auto a = TrainingArguments::parse_args({"--report_to", "tensorboard", "mlflow", "--label_names", "labels", "aux",
                                          "--lr_scheduler_kwargs",
                                          R"({"num_cycles": "2", "flag": "True", "x": "0.5", "s": "abc",
                                              "n": {"k": "false"}})"});
  EXPECT_EQ(a.report_to, (std::vector<std::string>{"tensorboard", "mlflow"}));
  EXPECT_EQ(a.label_names, (std::vector<std::string>{"labels", "aux"}));
  // HF's _convert_str_dict: strings of digits become numbers and "true"/"false" booleans.
  EXPECT_EQ(a.lr_scheduler_kwargs, Json::parse(R"({"num_cycles": 2, "flag": true, "x": 0.5, "s": "abc",
                                                   "n": {"k": false}})"));
  EXPECT_TRUE(a.lr_scheduler_kwargs["num_cycles"].is_number_integer());
  EXPECT_TRUE(TrainingArguments::parse_args({"--report_to", "none"}).report_to.empty());
  EXPECT_EQ(TrainingArguments::parse_args({"--report_to", "all"}).report_to, std::vector<std::string>{"all"});
  EXPECT_EQ(TrainingArguments::parse_args({"--include_num_input_tokens_seen"}).include_num_input_tokens_seen, "all");
  EXPECT_EQ(
      TrainingArguments::parse_args({"--include_num_input_tokens_seen", "non_padding"}).include_num_input_tokens_seen,
      "non_padding");
  EXPECT_EQ(TrainingArguments::parse_args({"--include_num_input_tokens_seen", "false"}).include_num_input_tokens_seen,
            "no");
  auto e = TrainingArguments::parse_args({"--eval_steps", "0.1", "--eval_strategy", "steps", "--save_total_limit", "2",
                                          "--data_seed", "7", "--resume_from_checkpoint", "out/checkpoint-10"});
  EXPECT_EQ(e.eval_steps, 0.1);
  EXPECT_EQ(e.save_total_limit, 2);
  EXPECT_EQ(e.data_seed, 7);
  EXPECT_EQ(e.sampler_seed(), 7);
  EXPECT_EQ(e.resume_from_checkpoint, "out/checkpoint-10");
}

TEST(TrainingArgumentsCli, EvaluationStrategyAlias) {
  auto a = TrainingArguments::parse_args({"--evaluation_strategy", "epoch"});
  EXPECT_EQ(a.eval_strategy, IntervalStrategy::epoch);
  EXPECT_TRUE(a.do_eval);
  Json json = a.to_json();
  EXPECT_EQ(json["eval_strategy"], "epoch");
  EXPECT_FALSE(json.contains("evaluation_strategy"));  // stored and written as eval_strategy
}

TEST(TrainingArgumentsCli, BadValues) {
  EXPECT_EQ(error_message<InvalidArgument>([] {
              TrainingArguments::parse_args({"--max_steps", "abc"});
            }),
            "argument --max_steps: invalid int value: 'abc'");
  EXPECT_EQ(error_message<InvalidArgument>([] {
              TrainingArguments::parse_args({"--max_steps", "1.5"});
            }),
            "argument --max_steps: invalid int value: '1.5'");
  EXPECT_EQ(error_message<InvalidArgument>([] {
              TrainingArguments::parse_args({"--learning_rate", "fast"});
            }),
            "argument --learning_rate: invalid float value: 'fast'");
  EXPECT_EQ(error_message<InvalidArgument>([] { TrainingArguments::parse_args({"--learning_rate"}); }),
            "argument --learning_rate: expected one argument");
  EXPECT_EQ(error_message<InvalidArgument>([] {
              TrainingArguments::parse_args({"--learning_rate", "--seed", "3"});
            }),
            "argument --learning_rate: expected one argument");
  EXPECT_EQ(error_message<InvalidArgument>([] { TrainingArguments::parse_args({"--report_to"}); }),
            "argument --report_to: expected at least one argument");
  EXPECT_EQ(error_message<InvalidArgument>([] {
              TrainingArguments::parse_args({"--eval_strategy", "sometimes"});
            }),
            "argument --eval_strategy: sometimes is not a valid IntervalStrategy, please select one of ['no', 'steps', "
            "'epoch']");
  EXPECT_EQ(error_message<InvalidArgument>([] {
              TrainingArguments::parse_args({"--optim", "lion"});
            }),
            "argument --optim: lion is not a valid OptimizerNames, please select one of ['adamw_torch', "
            "'adamw_torch_fused', 'adamw_hf', 'sgd', 'adagrad', 'adafactor']");
  EXPECT_EQ(error_message<InvalidArgument>([] {
              TrainingArguments::parse_args({"--lr_scheduler_kwargs", "num_cycles=2"});
            }),
            "argument --lr_scheduler_kwargs: expected a JSON object such as '{\"num_cycles\": 2}', got 'num_cycles=2'");
}

TEST(TrainingArgumentsCli, UnknownOptionsSuggestTheClosest) {
  EXPECT_EQ(error_message<InvalidArgument>([] {
              TrainingArguments::parse_args({"--learnin_rate", "3e-4", "--seed", "1"});
            }),
            "Some specified arguments are not used by the HfArgumentParser: ['--learnin_rate', '3e-4']. Did you mean "
            "--learning_rate for --learnin_rate?");
  EXPECT_EQ(
      error_message<InvalidArgument>([] { TrainingArguments::parse_args({"--per-device-train-batchsize=4"}); }),
      "Some specified arguments are not used by the HfArgumentParser: ['--per-device-train-batchsize=4']. Did you "
      "mean --per_device_train_batch_size for --per-device-train-batchsize=4?");
  // Nothing near: no suggestion.
  EXPECT_EQ(error_message<InvalidArgument>([] { TrainingArguments::parse_args({"--zzzzzzzzzzzz"}); }),
            "Some specified arguments are not used by the HfArgumentParser: ['--zzzzzzzzzzzz']");
  EXPECT_EQ(error_message<InvalidArgument>([] { TrainingArguments::parse_args({"stray"}); }),
            "Some specified arguments are not used by the HfArgumentParser: ['stray']");
}

TEST(TrainingArgumentsCli, RemainingCollectsForeignOptions) {
  std::vector<std::string> rest;
  auto a = TrainingArguments::parse_args(
      {"--model", "m.onnx", "--learning_rate", "1e-3", "--train-data", "a.idx", "b.idx", "-v", "--do_train"}, &rest);
  EXPECT_EQ(a.learning_rate, 1e-3);
  EXPECT_TRUE(a.do_train);
  EXPECT_EQ(rest, (Argv{"--model", "m.onnx", "--train-data", "a.idx", "b.idx", "-v"}));
}

// ---- JSON ---------------------------------------------------------------------------------------

class TrainingArgumentsJson : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name)) << text; }
  kiln::test::TempDir dir_;
};

TEST_F(TrainingArgumentsJson, FileRoundTripIsExact) {
  auto a = TrainingArguments::parse_args({"--output_dir",
                                          path("run"),
                                          "--eval_strategy",
                                          "steps",
                                          "--eval_steps",
                                          "0.1",
                                          "--save_steps",
                                          "0.2",
                                          "--load_best_model_at_end",
                                          "--metric_for_best_model",
                                          "accuracy",
                                          "--learning_rate",
                                          "0.000123456789012345",
                                          "--num_train_epochs",
                                          "2.5",
                                          "--lr_scheduler_type",
                                          "cosine_with_restarts",
                                          "--lr_scheduler_kwargs",
                                          R"({"num_cycles": 3})",
                                          "--warmup_ratio",
                                          "0.06",
                                          "--report_to",
                                          "tensorboard",
                                          "--label_names",
                                          "labels",
                                          "--save_total_limit",
                                          "3",
                                          "--data_seed",
                                          "11",
                                          "--run_name",
                                          "r1",
                                          "--log_level",
                                          "info",
                                          "--include_num_input_tokens_seen",
                                          "--nan_inf_patience",
                                          "0",
                                          "--optim",
                                          "adamw_hf",
                                          "--adam_epsilon",
                                          "1e-7"});
  a.save(path("training_args.json"));
  auto b = TrainingArguments::from_json_file(path("training_args.json"));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.to_json(), b.to_json());
  // The file is what to_json says, and nothing else is left in the folder (atomic write).
  std::ifstream in(path("training_args.json"));
  EXPECT_EQ(Json::parse(in), a.to_json());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path()), fs::directory_iterator()), 1);
  // Defaults round-trip too.
  auto d = validated(TrainingArguments());
  EXPECT_EQ(TrainingArguments::from_json(d.to_json()), d);
}

TEST_F(TrainingArgumentsJson, IntegersStayIntegers) {
  auto a = TrainingArguments::parse_args({"--eval_strategy", "steps", "--eval_steps", "0.25", "--warmup_steps", "10"});
  Json j = a.to_json();
  EXPECT_TRUE(j["logging_steps"].is_number_integer());
  EXPECT_TRUE(j["warmup_steps"].is_number_integer());
  EXPECT_EQ(j["warmup_steps"], 10);
  EXPECT_TRUE(j["eval_steps"].is_number_float());
  EXPECT_EQ(j["eval_steps"], 0.25);
  EXPECT_TRUE(j["num_train_epochs"].is_number_float());
}

TEST_F(TrainingArgumentsJson, UnknownKeysAsHfArgumentParser) {
  Json j = {{"learning_rate", 1e-3}, {"push_to_hubb", true}, {"tf33", nullptr}};
  EXPECT_EQ(error_message<InvalidArgument>([&] { TrainingArguments::from_json(j); }),
            "Some keys are not used by the HfArgumentParser: ['push_to_hubb', 'tf33']");
  EXPECT_EQ(TrainingArguments::from_json(j, /*allow_extra_keys=*/true).learning_rate, 1e-3);
  write("extra.json", j.dump());
  EXPECT_EQ(error_message<InvalidArgument>([&] { TrainingArguments::from_json_file(path("extra.json")); }),
            path("extra.json") +
                ": Some keys are not used by the HfArgumentParser: "
                "['push_to_hubb', 'tf33']");
}

TEST_F(TrainingArgumentsJson, BadFilesAndValuesNameTheirSource) {
  EXPECT_EQ(error_message<IOError>([&] { TrainingArguments::from_json_file(path("missing.json")); }),
            path("missing.json") + ": cannot open the training arguments file");
  write("broken.json", R"({"seed": 1,)");
  EXPECT_EQ(error_message<InvalidArgument>([&] { TrainingArguments::from_json_file(path("broken.json")); }),
            path("broken.json") + ": not a valid JSON file");
  EXPECT_EQ(error_message<InvalidArgument>([] {
              TrainingArguments::from_json({{"seed", "x"}});
            }),
            "key 'seed': expected an integer, got \"x\"");
  EXPECT_EQ(error_message<InvalidArgument>([] {
              TrainingArguments::from_json({{"do_train", 1}});
            }),
            "key 'do_train': expected true or false, got 1");
  EXPECT_EQ(error_message<InvalidArgument>([] {
              TrainingArguments::from_json({{"report_to", {"a", 1}}});
            }),
            "key 'report_to': expected a list of strings, got [\"a\",1]");
  EXPECT_EQ(error_message<InvalidArgument>([] { TrainingArguments::from_json(Json::array()); }),
            "training arguments must be a JSON object, got []");
  write("bad_rule.json", R"({"logging_steps": 0})");
  EXPECT_EQ(error_message<InvalidArgument>([&] { TrainingArguments::from_json_file(path("bad_rule.json")); }),
            path("bad_rule.json") + ": logging strategy steps requires non-zero --logging_steps");
}

TEST_F(TrainingArgumentsJson, ReadsHuggingFaceV4Files) {
  // What transformers 4.x writes for these keys: the deprecated alias as null, a bool for
  // include_num_input_tokens_seen, warmup_ratio 0.0, an int warmup_steps, output_dir possibly null.
  Json v4 = {{"output_dir", nullptr},
             {"evaluation_strategy", nullptr},
             {"eval_strategy", "epoch"},
             {"save_strategy", "epoch"},
             {"include_num_input_tokens_seen", false},
             {"lr_scheduler_kwargs", Json::object()},
             {"warmup_ratio", 0.0},
             {"warmup_steps", 0},
             {"report_to", {"tensorboard"}},
             {"logging_dir", "runs/x"},
             {"eval_steps", nullptr},
             {"load_best_model_at_end", true}};
  auto a = TrainingArguments::from_json(v4);
  EXPECT_EQ(a.output_dir, "trainer_output");
  EXPECT_EQ(a.eval_strategy, IntervalStrategy::epoch);
  EXPECT_EQ(a.include_num_input_tokens_seen, "no");
  EXPECT_EQ(a.warmup_ratio, 0.0);
  EXPECT_EQ(a.logging_dir, "runs/x");
  EXPECT_EQ(a.metric_for_best_model, "loss");
  EXPECT_EQ(a.greater_is_better, false);
  // A non-null alias wins over eval_strategy, as in v4's __post_init__; kwargs may come as a string.
  auto b = TrainingArguments::from_json(
      {{"evaluation_strategy", "steps"}, {"eval_strategy", "no"}, {"lr_scheduler_kwargs", R"({"power": "2"})"}});
  EXPECT_EQ(b.eval_strategy, IntervalStrategy::steps);
  EXPECT_EQ(b.eval_steps, 500);  // from logging_steps
  EXPECT_EQ(b.lr_scheduler_kwargs, Json({{"power", 2}}));
}

TEST(TrainingArguments, RatioSteps) {
  // HF Trainer: x < 1 -> ceil(max_steps * x), else x; unset -> TrainerState's 500.
  EXPECT_EQ(TrainingArguments::resolved_steps(0.1, 1000), 100);
  EXPECT_EQ(TrainingArguments::resolved_steps(0.25, 10), 3);
  EXPECT_EQ(TrainingArguments::resolved_steps(0.3, 7), 3);  // ceil(2.1)
  EXPECT_EQ(TrainingArguments::resolved_steps(0.5, 1), 1);
  EXPECT_EQ(TrainingArguments::resolved_steps(1, 1000), 1);
  EXPECT_EQ(TrainingArguments::resolved_steps(250, 1000), 250);
  EXPECT_EQ(TrainingArguments::resolved_steps(std::nullopt, 1000), 500);
  auto a = TrainingArguments::parse_args(
      {"--logging_steps", "0.01", "--eval_strategy", "steps", "--eval_steps", "0.2", "--save_steps", "0.5"});
  EXPECT_EQ(a.logging_steps_for(250), 3);  // ceil(2.5)
  EXPECT_EQ(a.eval_steps_for(250), 50);
  EXPECT_EQ(a.save_steps_for(250), 125);
}

TEST(TrainingArguments, WarmupSteps) {
  TrainingArguments a;
  EXPECT_EQ(a.get_warmup_steps(1000), 0);
  a.warmup_steps = 100;
  EXPECT_EQ(a.get_warmup_steps(10), 100);  // an absolute count is not capped
  a.warmup_steps = 2.7;
  EXPECT_EQ(a.get_warmup_steps(1000), 2);  // Python's int() truncates
  a.warmup_steps = 0.1;
  EXPECT_EQ(a.get_warmup_steps(1000), 100);
  EXPECT_EQ(a.get_warmup_steps(7), 1);  // ceil(0.7)
  a.warmup_steps = 0;
  a.warmup_ratio = 0.05;
  EXPECT_EQ(a.get_warmup_steps(1000), 50);
  EXPECT_EQ(a.get_warmup_steps(30), 2);  // ceil(1.5)
  a.warmup_steps = 10;                   // v4: warmup_steps overrides warmup_ratio
  EXPECT_EQ(a.get_warmup_steps(1000), 10);
}

TEST(TrainingArguments, BatchSizesAndOptionNames) {
  auto a = TrainingArguments::parse_args({"--per_device_train_batch_size", "32", "--per_device_eval_batch_size", "64"});
  EXPECT_EQ(a.train_batch_size(), 32);
  EXPECT_EQ(a.eval_batch_size(), 64);
  std::vector<std::string> names = TrainingArguments::option_names();
  EXPECT_EQ(names.size(), hf_defaults().size() + 1);  // plus the evaluation_strategy alias
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const auto& [name, value] : hf_defaults())
    EXPECT_TRUE(std::binary_search(names.begin(), names.end(), name)) << name;
}

}  // namespace
}  // namespace kiln::trainer
