// The Kiln side of tests/python/test_lr_schedulers.py. With KILN_LR_DUMP=<dir>, LRSchedulerDump.Request
// reads <dir>/request.json, runs every schedule and clip it describes, and writes <dir>/response.json
// (and the clipped gradients as .npy); the Python test compares them with torch and HF's lambdas.
// Without the variable it runs a small built-in request and checks the answers by hand.
//
// request:  {"schedules": [{"type", "base_lr", "num_warmup_steps", "num_training_steps", "kwargs",
//                           "steps": N  (step-driven: rates for steps 0..N)
//                           | "metrics": [...]  (reduce_lr_on_plateau: the rate after each; may be "nan")}],
//            "clips": [{"grads": [in.npy...], "out": [out.npy...], "max_norm": x}]}
// response: {"schedules": [{"lr": [...], "stepped": [...]} | {"error": message}],
//            "clips": [{"total_norm": x}]}   non-finite numbers as "inf" / "-inf" / "nan"
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kiln/lr_schedulers.h"
#include "kiln/npy.h"
#include "test_util.h"

namespace kiln::trainer {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

Json number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

// A request number: JSON numbers, or "inf" / "-inf" / "nan" (JSON has no non-finite numbers).
double read_number(const Json& v) {
  if (v.is_string()) {
    const auto s = v.get<std::string>();
    if (s == "nan") return std::nan("");
    return s == "inf" ? HUGE_VAL : (s == "-inf" ? -HUGE_VAL : throw InvalidArgument("request: bad number " + s));
  }
  return v.get<double>();
}

Json run_schedule(const Json& spec) {
  try {
    auto s = make_lr_scheduler(spec.at("type").get<std::string>(), spec.at("base_lr").get<double>(),
                               spec.value("num_warmup_steps", int64_t{0}), spec.value("num_training_steps", int64_t{0}),
                               spec.value("kwargs", Json::object()));
    Json lr = Json::array(), stepped = Json::array();
    if (spec.contains("metrics")) {
      for (const Json& m : spec.at("metrics")) {
        s->step(read_number(m));
        stepped.push_back(number(s->current_lr()));
      }
      for (int64_t i = 0; i <= s->last_step(); ++i) lr.push_back(number(s->lr(i)));
    } else {
      const int64_t steps = spec.at("steps").get<int64_t>();
      for (int64_t i = 0; i <= steps; ++i) {
        lr.push_back(number(s->lr(i)));
        stepped.push_back(number(s->current_lr()));
        s->step();
      }
    }
    return {{"lr", lr}, {"stepped", stepped}};
  } catch (const Error& e) {
    return {{"error", e.what()}};
  }
}

Json run_clip(const Json& spec) {
  std::vector<Tensor> grads;
  for (const Json& path : spec.at("grads")) grads.push_back(load_npy(path.get<std::string>()));
  std::vector<Tensor*> ptrs;
  for (Tensor& g : grads) ptrs.push_back(&g);
  const double total = clip_grad_norm(ptrs, spec.at("max_norm").get<double>());
  const Json& out = spec.at("out");
  for (size_t i = 0; i < grads.size(); ++i) save_npy(grads[i], out.at(i).get<std::string>());
  return {{"total_norm", number(total)}};
}

Json run_request(const Json& request) {
  Json schedules = Json::array(), clips = Json::array();
  for (const Json& s : request.value("schedules", Json::array())) schedules.push_back(run_schedule(s));
  for (const Json& c : request.value("clips", Json::array())) clips.push_back(run_clip(c));
  return {{"schedules", schedules}, {"clips", clips}};
}

TEST(LRSchedulerDump, Request) {
  if (const char* dir = std::getenv("KILN_LR_DUMP")) {
    std::ifstream in(fs::path(dir) / "request.json");
    ASSERT_TRUE(in) << "KILN_LR_DUMP=" << dir << " has no request.json";
    const Json response = run_request(Json::parse(in));
    std::ofstream(fs::path(dir) / "response.json") << response.dump();
    EXPECT_EQ(response["schedules"].size(),
              Json::parse(std::ifstream(fs::path(dir) / "request.json"))["schedules"].size());
    return;
  }
  const kiln::test::TempDir tmp;
  const fs::path& dir = tmp.path();
  save_npy(Tensor::from_vector<float>({2}, {3.f, 4.f}), (dir / "g.npy").string());
  const Json request = {
      {"schedules",
       {{{"type", "linear"}, {"base_lr", 1.0}, {"num_warmup_steps", 2}, {"num_training_steps", 4}, {"steps", 5}},
        {{"type", "reduce_lr_on_plateau"}, {"base_lr", 1.0}, {"kwargs", {{"patience", 0}}}, {"metrics", {1.0, 2.0}}},
        {{"type", "linear"}, {"base_lr", 1.0}, {"kwargs", {{"nope", 1}}}, {"steps", 1}}}},
      {"clips", {{{"grads", {(dir / "g.npy").string()}}, {"out", {(dir / "o.npy").string()}}, {"max_norm", 1.0}}}}};
  const Json r = run_request(request);
  // linear, warmup 2 of 4: 0, 1/2, then (4 - s) / 2: 1, 1/2, 0, 0.
  EXPECT_EQ(r["schedules"][0]["lr"], Json({0.0, 0.5, 1.0, 0.5, 0.0, 0.0}));
  EXPECT_EQ(r["schedules"][0]["stepped"], r["schedules"][0]["lr"]);
  EXPECT_EQ(r["schedules"][1]["stepped"], Json({1.0, 0.1}));
  EXPECT_EQ(r["schedules"][1]["lr"], Json({1.0, 1.0, 0.1}));
  EXPECT_NE(r["schedules"][2]["error"].get<std::string>().find("'nope'"), std::string::npos);
  EXPECT_EQ(r["clips"][0]["total_norm"], 5.0);
  EXPECT_EQ(load_npy((dir / "o.npy").string()).data<float>()[1], 4.f * static_cast<float>(1.0 / (5.0 + 1e-6)));
}

}  // namespace
}  // namespace kiln::trainer
