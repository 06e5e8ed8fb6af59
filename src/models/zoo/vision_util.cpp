// Small helpers of the zoo's convolutional entries (see vision.h).
#include <fmt/format.h>

#include <cmath>

#include "kiln/error.h"
#include "models/zoo/vision.h"

namespace kiln::nn::zoo::vision {

namespace {
InvalidArgument bad_value(const Config& c, const std::string& model, const std::string& key, const std::string& what) {
  return InvalidArgument(fmt::format("{} config: '{}' must be {}, got {}", model, key, what,
                                     c.contains(key) ? c.at(key).dump() : "nothing"));
}
}  // namespace

int64_t config_int(const Config& c, const std::string& model, const std::string& key, int64_t min) {
  if (!c.contains(key) || !c.at(key).is_number_integer() || c.at(key).get<int64_t>() < min)
    throw bad_value(c, model, key, fmt::format("an integer >= {}", min));
  return c.at(key).get<int64_t>();
}

double config_double(const Config& c, const std::string& model, const std::string& key, double min, double max) {
  if (!c.contains(key) || !c.at(key).is_number() || !(c.at(key).get<double>() >= min && c.at(key).get<double>() <= max))
    throw bad_value(c, model, key, fmt::format("a number in [{}, {}]", min, max));
  return c.at(key).get<double>();
}

std::string config_string(const Config& c, const std::string& model, const std::string& key) {
  if (!c.contains(key) || !c.at(key).is_string()) throw bad_value(c, model, key, "a string");
  return c.at(key).get<std::string>();
}

std::vector<int64_t> config_ints(const Config& c, const std::string& model, const std::string& key, int64_t min) {
  const auto bad = [&] { return bad_value(c, model, key, fmt::format("a list of integers >= {}", min)); };
  if (!c.contains(key) || !c.at(key).is_array()) throw bad();
  std::vector<int64_t> values;
  for (const auto& v : c.at(key)) {
    if (!v.is_number_integer() || v.get<int64_t>() < min) throw bad();
    values.push_back(v.get<int64_t>());
  }
  return values;
}

void kaiming_normal_fan_out(Tensor& w) {
  const int64_t fan_out = fan_in_and_fan_out(w).second;
  normal_(w, 0.0, std::sqrt(2.0) / std::sqrt(static_cast<double>(fan_out)));
}

Var flatten_from_1(Tracer& t, const Var& x) {
  int64_t features = 1;
  for (int64_t i = 1; i < x.rank(); ++i) features = (features < 0 || x.dim(i) < 0) ? -1 : features * x.dim(i);
  return t.op("Flatten", {x}, {{"axis", Attribute::of_int(1)}}, x.dtype, {x.dim(0), features});
}

}  // namespace kiln::nn::zoo::vision
