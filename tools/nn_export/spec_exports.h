// The subcommands of kiln-nn-export that export from a JSON spec file of cases or write a fixed
// set of files, each the Kiln side of one Python parity test (tests/python/test_nn_core.py,
// test_nn_transformer.py, test_zoo_transformers.py).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace kiln::nn_export {

// Calls `export_case` for every entry of the spec file's "cases"; an error names the case (its
// position and "onnx" path).
void for_each_case(const std::string& spec_path, const std::function<void(const nlohmann::json&)>& export_case);

// `core-files DIR`: the nn core files for test_nn_core.py (see core_files.cpp).
void write_core_files(const std::string& out_dir);

// `transformer-layers SPEC`: one MultiheadAttention / Transformer{Encoder,Decoder}Layer case.
void export_transformer_layer(const nlohmann::json& spec_case);

// `zoo-transformers SPEC`: one zoo model (or ViT backbone) case, with its report file.
void export_zoo_transformer(const nlohmann::json& spec_case);

}  // namespace kiln::nn_export
