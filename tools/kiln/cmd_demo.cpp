// `kiln demo`: the forward demo until the Trainer lands. Kiln builds a small CNN classifier as an
// ONNX file, loads it back, and runs it over the 10,000 Fashion-MNIST test images from Debian's
// dataset-fashion-mnist package, printing images/s. The weights are untrained (torch's default
// initialisation, seeded), so accuracy is at chance level.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "data/idx.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "models/graph_builder.h"

namespace kiln::cli {
namespace {

struct DemoOptions {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string out_dir = "build/demo";
  int64_t batch = 100;
  int threads = 0;
  uint64_t seed = 42;
};

// Fashion-MNIST's training-set pixel mean and standard deviation, as torchvision examples use.
constexpr float kMean = 0.2860f;
constexpr float kStd = 0.3530f;

void run_demo(const DemoOptions& o) {
  if (o.batch <= 0) throw InvalidArgument(fmt::format("--batch must be positive, got {}", o.batch));
  set_num_threads(o.threads);
  std::filesystem::create_directories(o.out_dir);
  const std::string model_path = (std::filesystem::path(o.out_dir) / "classifier.onnx").string();
  save_model(make_small_cnn(o.seed), model_path);
  Model model = load_model(model_path);
  fmt::print("built {} ({} parameter tensors, opset {}) and loaded it back\n", model_path,
             model.graph.initializers.size(), model.opset(""));

  const Tensor images = read_idx((std::filesystem::path(o.data_dir) / "t10k-images-idx3-ubyte.gz").string());
  const Tensor labels = read_idx((std::filesystem::path(o.data_dir) / "t10k-labels-idx1-ubyte.gz").string());
  if (images.rank() != 3 || images.dim(1) != 28 || images.dim(2) != 28 || labels.rank() != 1 ||
      labels.dim(0) != images.dim(0))
    throw InvalidArgument(fmt::format("unexpected Fashion-MNIST files: images {} and labels {}", images.describe(),
                                      labels.describe()));
  const int64_t n = images.dim(0);
  Tensor x = Tensor::empty(DType::Float32, {n, 1, 28, 28});
  const uint8_t* px = images.data<uint8_t>();
  float* dst = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = (px[i] / 255.f - kMean) / kStd;

  Session session(std::move(model));
  const int64_t image_bytes = 28 * 28 * static_cast<int64_t>(sizeof(float));
  auto batch_at = [&](int64_t start, int64_t count) {
    return Tensor::wrap(dst + start * 28 * 28, DType::Float32, {count, 1, 28, 28});
  };
  session.run({{"images", batch_at(0, std::min(o.batch, n))}});  // plan and warm up
  int64_t correct = 0;
  const uint8_t* y = labels.data<uint8_t>();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t start = 0; start < n; start += o.batch) {
    const int64_t count = std::min(o.batch, n - start);
    auto out = session.run({{"images", batch_at(start, count)}});
    const float* logits = out.at("logits").data<float>();
    for (int64_t i = 0; i < count; ++i) {
      const float* row = logits + i * 10;
      correct += (std::max_element(row, row + 10) - row) == y[start + i];
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("ran {} Fashion-MNIST test images in batches of {} on {} threads: {:.3f} s, {:.0f} images/s\n", n,
             o.batch, get_num_threads(), seconds, n / seconds);
  fmt::print("planned activation memory per batch: {:.2f} MiB (input {} KiB per image)\n",
             session.last_plan_stats().peak_bytes / 1048576.0, image_bytes / 1024);
  fmt::print("accuracy with untrained weights: {:.2f}% (chance is 10%; training comes with the Trainer)\n",
             100.0 * correct / n);
}

Action setup_demo(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  app.add_option("--data-dir", o->data_dir, "Folder with Fashion-MNIST's IDX files")->capture_default_str();
  app.add_option("--out", o->out_dir, "Folder for the generated model")->capture_default_str();
  app.add_option("--batch", o->batch, "Images per run")->capture_default_str();
  app.add_option("--threads", o->threads, "Threads (0: all cores)")->capture_default_str();
  app.add_option("--seed", o->seed, "Seed of the weight initialisation")->capture_default_str();
  return [o] { run_demo(*o); };
}

const CommandRegistrar reg({"demo", "Build a small CNN as ONNX and run it over Fashion-MNIST's test images",
                            setup_demo});

}  // namespace
}  // namespace kiln::cli
