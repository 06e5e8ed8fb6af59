// DeepSpeed configs as the HF Trainer reads them (transformers' trainer_config_process): "auto"
// filled from the TrainingArguments, set values checked against them with HF's message, every key
// checked (unknown: named; known but not run: Unsupported), and the values Kiln runs.
#include "kiln/deepspeed_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kiln/error.h"
#include "test_util.h"

namespace kiln::trainer {
namespace {

using kiln::test::expect_error;
using Json = nlohmann::json;

TrainingArguments with_config(const Json& config, std::vector<std::string> more = {}) {
  std::vector<std::string> argv{
      "--output_dir", "ds_out", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2"};
  argv.insert(argv.end(), more.begin(), more.end());
  TrainingArguments a = TrainingArguments::parse_args(argv);
  a.deepspeed = config.dump();
  return a;
}

// A config as HF's examples write them (ds_config_zero2.json).
Json zero2() {
  return Json::parse(R"({
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
             "hysteresis": 2, "min_loss_scale": 1},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true},
                          "allgather_partitions": true, "allgather_bucket_size": 2e8, "overlap_comm": true,
                          "reduce_scatter": true, "reduce_bucket_size": "auto", "contiguous_gradients": true},
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": false
  })");
}

TEST(DeepSpeedConfig, AutoValuesComeFromTheArguments) {
  const TrainingArguments a = with_config(zero2(), {"--max_grad_norm", "0.5", "--learning_rate", "3e-4"});
  const std::optional<DeepSpeedConfig> d = deepspeed_config(a, 4);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->zero_stage, 2);
  EXPECT_EQ(d->gradient_clipping, 0.5);
  EXPECT_TRUE(d->overlap_comm);
  EXPECT_TRUE(d->reduce_scatter);
  EXPECT_EQ(d->allgather_bucket_size, 200'000'000);
  EXPECT_EQ(d->reduce_bucket_size, 25 * 1024 * 1024 / 4);  // "auto": ddp_bucket_cap_mb's 25 MB of float32
  EXPECT_FALSE(d->fp16);
  EXPECT_FALSE(d->bf16);
  EXPECT_EQ(d->config["train_batch_size"], 4 * 8 * 2);
  EXPECT_EQ(d->config["train_micro_batch_size_per_gpu"], 8);
  EXPECT_EQ(d->config["optimizer"]["params"]["lr"], 3e-4);
  EXPECT_EQ(d->config["optimizer"]["params"]["betas"], Json::array({0.9, 0.999}));
  EXPECT_EQ(d->hysteresis, 2);
  EXPECT_EQ(d->loss_scale_window, 1000);
  EXPECT_FALSE(deepspeed_config(TrainingArguments::parse_args({"--output_dir", "x"}), 1));
  // Without gradient_clipping DeepSpeed clips nothing, whatever max_grad_norm says.
  Json c = zero2();
  c.erase("gradient_clipping");
  EXPECT_EQ(deepspeed_config(with_config(c), 1)->gradient_clipping, 0.0);
}

TEST(DeepSpeedConfig, SetValuesMustAgreeWithTheArguments) {
  Json c = zero2();
  c["train_micro_batch_size_per_gpu"] = 4;
  c["gradient_clipping"] = 2.0;
  c["bf16"]["enabled"] = true;
  // HF's message, listing every mismatch.
  expect_error<InvalidArgument>([&] { deepspeed_config(with_config(c), 1); },
                                "mismatch TrainingArguments values:\n- ds train_micro_batch_size_per_gpu=4 vs hf "
                                "per_device_train_batch_size=8\n- ds gradient_clipping=2.0 vs hf max_grad_norm=1.0");
  expect_error<InvalidArgument>([&] { deepspeed_config(with_config(c), 1); }, "ds bf16.enabled=true vs hf");
  c = zero2();
  c["train_batch_size"] = 16;  // 8 x 2 on one rank, not on two
  EXPECT_TRUE(deepspeed_config(with_config(c), 1));
  expect_error<InvalidArgument>([&] { deepspeed_config(with_config(c), 2); }, "ds train_batch_size=16 vs hf");
  // Agreeing values pass, and bf16 "auto" follows the arguments.
  c = zero2();
  c["gradient_clipping"] = 1.0;
  EXPECT_TRUE(deepspeed_config(with_config(c, {"--bf16"}), 1)->bf16);
  // The arguments' own validation reads the config too.
  expect_error<InvalidArgument>(
      [&] {
        TrainingArguments::parse_args({"--output_dir", "x", "--deepspeed", R"({"gradient_clipping": 3})"});
      },
      "ds gradient_clipping=3 vs hf max_grad_norm=1.0");
}

TEST(DeepSpeedConfig, KeysAreCheckedByName) {
  Json c = zero2();
  c["zero_optimization"]["stage_two_please"] = true;
  expect_error<InvalidArgument>([&] { deepspeed_config(with_config(c), 1); },
                                "unknown key 'zero_optimization.stage_two_please'");
  c = zero2();
  c["fp16"]["lossscale"] = 0;
  expect_error<InvalidArgument>([&] { deepspeed_config(with_config(c), 1); }, "unknown key 'fp16.lossscale'");
  c = zero2();
  c["zero_optimization"]["stage"] = 3;
  expect_error<Unsupported>([&] { deepspeed_config(with_config(c), 1); }, "ZeRO stage 3");
  c = zero2();
  c["scheduler"] = {{"type", "WarmupLR"}, {"params", {{"warmup_num_steps", "auto"}}}};
  expect_error<Unsupported>([&] { deepspeed_config(with_config(c), 1); }, "'scheduler' section");
  c = zero2();
  c["zero_optimization"]["offload_optimizer"]["device"] = "nvme";
  expect_error<Unsupported>([&] { deepspeed_config(with_config(c), 1); }, "offload_optimizer.device 'nvme'");
  c = zero2();
  c["optimizer"]["type"] = "Lamb";
  expect_error<Unsupported>([&] { deepspeed_config(with_config(c), 1); }, "optimizer.type 'Lamb'");
  c = zero2();
  c["zero_optimization"]["overlap_comm"] = "yes";
  expect_error<InvalidArgument>([&] { deepspeed_config(with_config(c), 1); },
                                "'zero_optimization.overlap_comm' must be true or false");
  c = zero2();
  c["zero_optimization"]["reduce_bucket_size"] = 1.5;
  expect_error<InvalidArgument>([&] { deepspeed_config(with_config(c), 1); }, "must be an integer");
}

TEST(DeepSpeedConfig, Fp16SectionAndFilesAndBadJson) {
  Json c = zero2();
  c["fp16"] = {{"enabled", true}, {"loss_scale", 128}, {"hysteresis", 1}, {"min_loss_scale", 4}};
  const auto d = deepspeed_config(with_config(c, {"--fp16"}), 1);
  EXPECT_TRUE(d->fp16);
  EXPECT_EQ(d->loss_scale, 128);
  EXPECT_EQ(d->hysteresis, 1);
  EXPECT_EQ(d->min_loss_scale, 4);

  const auto dir = std::filesystem::temp_directory_path() / "kiln_ds_config_test";
  std::filesystem::create_directories(dir);
  const auto path = (dir / "ds_config.json").string();
  std::ofstream(path) << zero2().dump(2);
  TrainingArguments a = with_config(Json::object());
  a.deepspeed = path;
  EXPECT_EQ(deepspeed_config(a, 1)->zero_stage, 2);
  a.deepspeed = (dir / "missing.json").string();
  expect_error<IOError>([&] { deepspeed_config(a, 1); }, "missing.json");
  std::ofstream(path) << "{\"zero_optimization\": ";
  a.deepspeed = path;
  expect_error<CorruptFile>([&] { deepspeed_config(a, 1); }, "ds_config.json");
  a.deepspeed = "[1, 2]";
  expect_error<IOError>([&] { deepspeed_config(a, 1); }, "[1, 2]");  // not an object: taken for a path
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::trainer
