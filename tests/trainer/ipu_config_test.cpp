// IPUConfig (optimum-graphcore's ipu_config.json): its defaults and resolved values, JSON in and out,
// ipu_config_overrides strings, every check naming its field, layers per stage with wildcards, and
// how a run's TrainingArguments take it (apply_ipu_config).
#include "kiln/ipu_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kiln/error.h"
#include "test_util.h"

namespace kiln::trainer {
namespace {

using kiln::test::expect_error;
using Json = nlohmann::json;

TEST(IPUConfig, DefaultsAndResolvedValuesAreOptimums) {
  const IPUConfig c;
  const Json d = c.to_dict();
  EXPECT_EQ(d["layers_per_ipu"], Json::array({-1}));
  EXPECT_EQ(d["ipus_per_replica"], 1);
  EXPECT_EQ(d["inference_layers_per_ipu"], Json::array({-1}));
  EXPECT_EQ(d["inference_ipus_per_replica"], 1);
  EXPECT_EQ(d["replication_factor"], 1);
  EXPECT_EQ(d["device_iterations"], 1);
  EXPECT_EQ(d["output_mode"], "final");
  EXPECT_DOUBLE_EQ(d["matmul_proportion"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(d["inference_matmul_proportion"].get<double>(), 0.2);
  EXPECT_TRUE(d["seed"].is_null());
  EXPECT_EQ(d["executable_cache_dir"], "");
  EXPECT_EQ(c.stages(), 1);
  EXPECT_EQ(c.ranks(), 1);
}

TEST(IPUConfig, JsonRoundTripsThroughAFolderAFileAndText) {
  kiln::test::TempDir dir;
  IPUConfig c = IPUConfig::from_dict(Json::parse(
      R"({"layers_per_ipu": [2, 2], "matmul_proportion": [0.1, 0.2], "device_iterations": 4, "seed": 7,
          "replication_factor": 2, "optimum_version": "1.6.1", "embedding_serialization_factor": 2})"));
  EXPECT_EQ(c.stages(), 2);
  EXPECT_EQ(c.ranks(), 4);
  c.save_pretrained((dir.path() / "cfg").string());
  const IPUConfig back = IPUConfig::from_pretrained((dir.path() / "cfg").string());
  EXPECT_EQ(back.to_dict(), c.to_dict());
  EXPECT_EQ(IPUConfig::from_pretrained((dir.path() / "cfg" / "ipu_config.json").string()).to_dict(), c.to_dict());
  EXPECT_EQ(IPUConfig::from_pretrained(c.to_json_string()).to_dict(), c.to_dict());
  EXPECT_EQ(back.seed, 7);
  EXPECT_EQ(back.embedding_serialization_factor, 2);
}

TEST(IPUConfig, OverridesTakeEachFieldsType) {
  IPUConfig c;
  c.update_from_string(
      "device_iterations=4,gradient_accumulation_steps=64,layers_per_ipu=[1 3],ipus_per_replica=2,"
      "matmul_proportion=[0.1, 0.25],auto_loss_scaling=true,seed=None,executable_cache_dir=./exe_cache");
  EXPECT_EQ(c.device_iterations, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 64);
  EXPECT_EQ(c.layers_per_ipu, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(c.stages(), 2);
  EXPECT_EQ(c.matmul_proportion, Json::parse("[0.1, 0.25]"));
  EXPECT_TRUE(c.auto_loss_scaling);
  EXPECT_FALSE(c.seed);
  EXPECT_EQ(c.executable_cache_dir, "./exe_cache");
  expect_error<InvalidArgument>([&] { c.update_from_string("device_iteration=4"); },
                                "key device_iteration isn't in the original config dict");
  expect_error<InvalidArgument>([&] { c.update_from_string("device_iterations=four"); },
                                "`device_iterations=four`: expected an int");
  expect_error<InvalidArgument>([&] { c.update_from_string("auto_loss_scaling=maybe"); }, "expected a bool");
  expect_error<InvalidArgument>([&] { c.update_from_string("device_iterations"); }, "is not key=value");
  // A failed update changes nothing.
  expect_error<InvalidArgument>([&] { c.update_from_string("device_iterations=8,replication_factor=0"); },
                                "`replication_factor` must be >= 1");
  EXPECT_EQ(c.device_iterations, 4);
}

TEST(IPUConfig, ChecksNameTheField) {
  expect_error<InvalidArgument>([] { IPUConfig::from_dict(Json::parse(R"({"layers_per_ipus": [1]})")); },
                                "unknown arguments: layers_per_ipus");
  expect_error<InvalidArgument>([] { IPUConfig::from_dict(Json::parse(R"({"device_iterations": 0})")); },
                                "`device_iterations` must be >= 1");
  expect_error<InvalidArgument>([] { IPUConfig::from_dict(Json::parse(R"({"device_iterations": 1.5})")); },
                                "`device_iterations` must be an int");
  expect_error<InvalidArgument>([] { IPUConfig::from_dict(Json::parse(R"({"layers_per_ipu": [-2, 1]})")); },
                                "`layers_per_ipu` must have all elements >= -1");
  expect_error<InvalidArgument>([] { IPUConfig::from_dict(Json::parse(R"({"output_mode": "last"})")); },
                                "`output_mode` can only take values in");
  expect_error<InvalidArgument>(
      [] { IPUConfig::from_dict(Json::parse(R"({"layers_per_ipu": [1, 2], "ipus_per_replica": 3})")); },
      "layers_per_ipu=[1, 2] should use the same number of stages as ipus_per_replica=3");
  expect_error<InvalidArgument>(
      [] { IPUConfig::from_dict(Json::parse(R"({"layers_per_ipu": [1, 2], "matmul_proportion": [0.1]})")); },
      "matmul_proportion=[0.1] should use the same number of stages as ipus_per_replica=2");
  expect_error<InvalidArgument>(
      [] {
        IPUConfig::from_dict(Json::parse(
            R"({"layers_per_ipu": [1, 1], "embedding_serialization_factor": 2,
                "serialized_embedding_splits_per_ipu": [1, 1]})"));
      },
      "give only one of `embedding_serialization_factor` and `serialized_embedding_splits_per_ipu`");
  expect_error<InvalidArgument>(
      [] {
        IPUConfig::from_dict(
            Json::parse(R"({"layers_per_ipu": [1, 1, 1], "serialized_embedding_splits_per_ipu": [1, 0, 1]})"));
      },
      "consecutive stages");
  expect_error<InvalidArgument>([] { IPUConfig::from_dict(Json::parse(R"({"loss_scaling": -1})")); },
                                "`loss_scaling` must be a finite number > 0");
  kiln::test::TempDir dir;
  std::ofstream(dir.path() / "bad.json") << "{\"seed\": ";
  expect_error<InvalidArgument>([&] { IPUConfig::from_pretrained((dir.path() / "bad.json").string()); },
                                "is not valid JSON");
  expect_error<IOError>([&] { IPUConfig::from_pretrained((dir.path() / "none").string()); }, "does not exist");
}

TEST(IPUConfig, LayersPerStageFillWildcardsAndMustAddUp) {
  IPUConfig c = IPUConfig::from_dict(Json::parse(R"({"layers_per_ipu": [1, -1, -1]})"));
  EXPECT_EQ(c.layers_per_stage(5), (std::vector<int64_t>{1, 2, 2}));
  expect_error<InvalidArgument>([&] { c.layers_per_stage(4); }, "do not divide evenly");
  c = IPUConfig::from_dict(Json::parse(R"({"layers_per_ipu": [-1], "ipus_per_replica": 4})"));
  EXPECT_EQ(c.layers_per_stage(8), (std::vector<int64_t>{2, 2, 2, 2}));
  c = IPUConfig::from_dict(Json::parse(R"({"layers_per_ipu": [2, 3]})"));
  expect_error<InvalidArgument>([&] { c.layers_per_stage(4); }, "places 5 layers; the model has 4");
}

TEST(IPUConfig, ArgumentsTakeTheConfig) {
  TrainingArguments a = TrainingArguments::parse_args({"--output_dir", "ipu_out", "--fp32", "false"});
  EXPECT_TRUE(a.fp16);  // IPUTrainingArguments: 16 bits unless fp32
  IPUConfig c = IPUConfig::from_dict(Json::parse(
      R"({"gradient_accumulation_steps": 4, "seed": 11, "recompute_checkpoint_every_layer": true,
          "loss_scaling": 1024})"));
  TrainingArguments r = apply_ipu_config(a, c, 1);
  EXPECT_EQ(r.gradient_accumulation_steps, 4);
  EXPECT_EQ(r.seed, 11);
  EXPECT_TRUE(r.gradient_checkpointing);
  ASSERT_TRUE(r.deepspeed);
  EXPECT_EQ(Json::parse(*r.deepspeed)["fp16"]["loss_scale"], 1024);
  a.gradient_accumulation_steps = 2;
  expect_error<InvalidArgument>([&] { apply_ipu_config(a, c, 1); }, "give it in one place");
  a.gradient_accumulation_steps = 1;
  expect_error<InvalidArgument>([&] { apply_ipu_config(a, c, 2); },
                                "replication_factor=1 x 1 stage(s) = 1 ranks, but the run has 2");
  const TrainingArguments f32 = TrainingArguments::parse_args({"--output_dir", "ipu_out", "--fp32"});
  expect_error<InvalidArgument>([&] { apply_ipu_config(f32, c, 1); }, "loss_scaling scales the loss of float16");
  c = IPUConfig::from_dict(Json::parse(R"({"layers_per_ipu": [2, 2], "replication_factor": 2})"));
  EXPECT_NO_THROW(apply_ipu_config(f32, c, 4));  // 2 stages x 2 replicas
  expect_error<InvalidArgument>([&] { apply_ipu_config(f32, c, 2); }, "= 4 ranks, but the run has 2");
  c = IPUConfig::from_dict(
      Json::parse(R"({"embedding_serialization_factor": 4, "projection_serialization_factor": 2})"));
  EXPECT_NO_THROW(apply_ipu_config(f32, c, 1));  // the LM head in 4 blocks (tests/training/serialized_head_test.cpp)
  EXPECT_EQ(c.lm_head_chunks(), 4);
  c = IPUConfig::from_dict(Json::parse(R"({"serialized_embedding_splits_per_ipu": [1]})"));
  expect_error<Unsupported>([&] { apply_ipu_config(f32, c, 1); }, "serialized_*_splits_per_ipu");
  expect_error<InvalidArgument>(
      [] {
        TrainingArguments::parse_args({"--output_dir", "x", "--fp32", "--bf16"});
      },
      "fp32=True asks for float32");
  expect_error<InvalidArgument>(
      [] {
        TrainingArguments::parse_args({"--output_dir", "x", "--dataloader_mode", "fast"});
      },
      "dataloader_mode 'fast'");
  expect_error<InvalidArgument>(
      [] {
        TrainingArguments::parse_args({"--output_dir", "x", "--ipu_config_overrides", "device_iterations=0"});
      },
      "`device_iterations` must be >= 1");
}

}  // namespace
}  // namespace kiln::trainer
