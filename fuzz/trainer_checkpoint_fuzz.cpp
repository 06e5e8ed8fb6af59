// A Trainer checkpoint folder (checkpoint-N) as `kiln train --resume_from_checkpoint` reads it. A
// tiny run saves one real folder at start-up; each input replaces one of its files (the first byte
// picks which) and the Trainer resumes from the result, checking the files against each other.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "fuzz_util.h"
#include "tiny_run.h"

namespace {

namespace fs = std::filesystem;
using kiln::trainer::Trainer;

const char* const kFiles[] = {"model.safetensors", "optimizer.safetensors", "scheduler.json",
                              "rng_state.json",    "trainer_state.json",    "training_args.json"};

struct Fixture {
  fs::path out = kiln::fuzz::scratch_dir() / "run";
  std::unique_ptr<Trainer> trainer;
  std::map<std::string, std::string> files;  // the saved checkpoint-2

  Fixture() {
    auto args = kiln::trainer::TrainingArguments::parse_args(
        {"--output_dir", out.string(), "--max_steps", "2", "--save_steps", "2", "--per_device_train_batch_size", "4",
         "--logging_strategy", "no", "--report_to", "none", "--disable_tqdm", "true"});
    trainer = std::make_unique<Trainer>(kiln::fuzz::tiny_mlp(), args, kiln::fuzz::tiny_dataset(8, 7));
    trainer->train();
    for (const char* name : kFiles) {
      std::ifstream in(out / "checkpoint-2" / name, std::ios::binary);
      std::ostringstream s;
      s << in.rdbuf();
      files[name] = s.str();
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static Fixture fixture;
  const fs::path folder = kiln::fuzz::scratch_dir() / "checkpoint-2";
  fs::create_directories(folder);
  const std::string replaced = kFiles[data[0] % std::size(kFiles)];
  for (const auto& [name, bytes] : fixture.files) {
    std::ofstream f(folder / name, std::ios::binary | std::ios::trunc);
    if (name == replaced) f.write(reinterpret_cast<const char*>(data) + 1, static_cast<std::streamsize>(size - 1));
    else f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  kiln::fuzz::expect_kiln_errors_only([&] { fixture.trainer->train(folder.string()); });
  return 0;
}
