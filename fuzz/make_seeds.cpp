// kiln-fuzz-seeds DIR: seed inputs in the formats Kiln itself writes, made by Kiln's own writers
// from a tiny real run (fuzz/seeds.py writes the formats other tools make). One folder per harness.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "kiln/checkpoint.h"
#include "kiln/data.h"
#include "kiln/lr_schedulers.h"
#include "kiln/npy.h"
#include "kiln/safetensors.h"
#include "kiln/trainer.h"
#include "tiny_run.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

void put(const fs::path& root, const std::string& harness, const std::string& name, const std::string& bytes) {
  fs::create_directories(root / harness);
  std::ofstream(root / harness / name, std::ios::binary) << bytes;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Tensor filled(DType dtype, Shape shape) {
  Tensor t = Tensor::zeros(dtype, std::move(shape));
  auto* bytes = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(dtype == DType::Bool ? i % 2 : i * 37 % 251);
  return t;
}

// A tiny MLP trained for 4 steps with a save every 2, a log every step and an evaluation at the end.
fs::path tiny_run(const fs::path& out) {
  const auto ds = fuzz::tiny_dataset(16, 3);
  auto args = trainer::TrainingArguments::parse_args({"--output_dir",
                                                      out.string(),
                                                      "--max_steps",
                                                      "4",
                                                      "--save_steps",
                                                      "2",
                                                      "--per_device_train_batch_size",
                                                      "4",
                                                      "--logging_steps",
                                                      "1",
                                                      "--eval_strategy",
                                                      "steps",
                                                      "--eval_steps",
                                                      "2",
                                                      "--report_to",
                                                      "none",
                                                      "--disable_tqdm",
                                                      "true",
                                                      "--lr_scheduler_type",
                                                      "cosine",
                                                      "--warmup_steps",
                                                      "1"});
  trainer::Trainer t(fuzz::tiny_mlp(), args, ds, ds);
  t.train();
  training::CheckpointState::save_checkpoint(t.checkpoint_state(), (out / "kiln_checkpoint").string(), true);
  training::CheckpointState::save_checkpoint(t.checkpoint_state(), (out / "kiln_checkpoint_weights").string(), false);
  return out / "checkpoint-4";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: kiln-fuzz-seeds DIR\n";
    return 2;
  }
  const fs::path root(argv[1]);
  try {
    const fs::path run = root / ".run";
    fs::remove_all(run);
    const fs::path folder = tiny_run(run);

    const char* const files[] = {"model.safetensors", "optimizer.safetensors", "scheduler.json",
                                 "rng_state.json",    "trainer_state.json",    "training_args.json"};
    for (size_t i = 0; i < std::size(files); ++i)
      put(root, "trainer_checkpoint", files[i], std::string(1, static_cast<char>(i)) + slurp(folder / files[i]));
    put(root, "checkpoint", "with_optimizer", slurp(run / "kiln_checkpoint"));
    put(root, "checkpoint", "weights_only", slurp(run / "kiln_checkpoint_weights"));
    put(root, "safetensors", "model", slurp(folder / "model.safetensors"));
    put(root, "safetensors", "optimizer", slurp(folder / "optimizer.safetensors"));
    put(root, "safetensors", "dtypes",
        serialize_safetensors({{"f16", filled(DType::Float16, {2, 3})},
                               {"bf16", filled(DType::BFloat16, {3})},
                               {"i64", filled(DType::Int64, {2, 2})},
                               {"u8", filled(DType::Uint8, {5})},
                               {"b", filled(DType::Bool, {2})},
                               {"scalar", filled(DType::Float32, {})}},
                              {{"format", "pt"}}));
    put(root, "trainer_state", "trainer_state.json", slurp(folder / "trainer_state.json"));
    put(root, "training_args", "strict", std::string(1, '\0') + slurp(folder / "training_args.json"));
    put(root, "training_args", "extra_keys", "\x01{\"output_dir\": \"o\", \"fp16\": true, \"hub_token\": null}");
    put(root, "npy", "kiln.npy", serialize_npy(filled(DType::Float32, {3, 2})));

    const std::vector<std::string> types = trainer::LRScheduler::names();
    for (size_t i = 0; i < types.size(); ++i) {
      auto s = trainer::make_lr_scheduler(types[i], 1e-3, 10, 100);
      for (int k = 0; k < 3; ++k) s->step(s->steps_on_metric() ? std::optional<double>(1.0) : std::nullopt);
      put(root, "scheduler", types[i], std::string(1, static_cast<char>(i)) + s->state().dump());
    }
    fs::remove_all(run);
  } catch (const std::exception& e) {
    std::cerr << "kiln-fuzz-seeds: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
