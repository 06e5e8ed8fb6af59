// The GradientBuilder's working state, shared by the builder and the GradContext it hands to rules.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "autodiff/registry.h"
#include "ir/graph_editor.h"

namespace kiln {

class GradientBuilderState {
 public:
  explicit GradientBuilderState(const Model& forward, DType mixed_precision = DType::Float32);

  Model model;
  std::unordered_map<std::string, std::string> origin;  // value -> a trainable parameter it depends on
  std::string current;                                  // forward node being differentiated (names)
  std::string shape_inference_error;  // why inferring the forward graph with Kiln's kernels stopped, if it did
  bool used_kiln_ops = false;

  bool is_value(const std::string& name) const;
  std::optional<DType> dtype_of(const std::string& name) const;
  std::optional<int64_t> rank_of(const std::string& name) const;
  // Fully known static shape (no symbolic dims), if any.
  std::optional<Shape> static_shape(const std::string& name) const;
  // Declared dims (numbers or symbols) if the rank is known.
  std::optional<std::vector<Dim>> dims_of(const std::string& name) const;
  ValueInfo value_info_of(const std::string& name) const;

  void add_contribution(const std::string& value, const std::string& grad);
  bool has_contributions(const std::string& value) const;
  // The sum of all contributions (emitting Sum once), or "" if none.
  std::string summed_gradient(const std::string& value);

  // Names through the model's GraphEditor: unique in the model, one scheme for all of Kiln.
  std::string fresh_name(const std::string& base) { return editor_.fresh(base); }
  void reserve_name(const std::string& name) { editor_.reserve(name); }
  void record(const std::string& name, DType dtype, std::optional<std::vector<Dim>> dims);

 private:
  void fill_ranks_from_kernels();

  GraphEditor editor_;  // over `model`

  std::unordered_map<std::string, ValueInfo> info_;
  std::unordered_map<std::string, std::vector<std::string>> contributions_;
  std::unordered_map<std::string, std::string> summed_;
};

}  // namespace kiln
