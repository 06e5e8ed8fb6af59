// Generation (kiln/generation.h) for kiln.generation: the config from a dict of Hugging Face's
// names, prompts as lists of ids, the GIL released while generating.
#include "kiln/generation.h"

#include <pybind11/stl.h>

#include "bindings.h"
#include "kiln/error.h"

namespace kiln::python {

namespace {

using generation::CausalLM;
using generation::GenerationConfig;

GenerationConfig config_of(const py::dict& d) {
  const std::string json = py::module_::import("json").attr("dumps")(d).cast<std::string>();
  return GenerationConfig::from_json(json);
}

py::dict output_dict(const generation::GenerateOutput& out) {
  py::dict d;
  d["sequences"] = out.sequences;
  d["sequences_scores"] = out.sequences_scores;
  d["prompt_length"] = out.prompt_length;
  d["model_calls"] = out.model_calls;
  return d;
}

// generation::generate over either model kind, the GIL released while it runs.
template <class LM>
py::dict generate_with(LM& lm, const std::vector<std::vector<int64_t>>& prompts, const py::dict& config) {
  const GenerationConfig c = config_of(config);
  generation::GenerateOutput out;
  {
    py::gil_scoped_release release;
    out = generation::generate(lm, prompts, c);
  }
  return output_dict(out);
}

}  // namespace

void register_generation(py::module_& m) {
  py::class_<CausalLM, std::shared_ptr<CausalLM>>(m, "CausalLM")
      .def(py::init([](const py::object& model, int num_threads, int64_t cache_block) {
             return std::make_shared<CausalLM>(load_any(model, false), num_threads, cache_block);
           }),
           py::arg("model"), py::arg("num_threads") = 0, py::arg("cache_block") = 64)
      .def_property_readonly("has_cache_inputs", &CausalLM::has_cache_inputs)
      .def_property_readonly("num_layers", &CausalLM::num_layers);
  m.def("generate", &generate_with<CausalLM>, py::arg("model"), py::arg("prompts"), py::arg("config"));
  py::class_<generation::Seq2SeqLM, std::shared_ptr<generation::Seq2SeqLM>>(m, "Seq2SeqLM")
      .def(py::init(
               [](const py::object& encoder, const py::object& decoder, const py::object& with_past, int num_threads) {
                 if (decoder.is_none())
                   return std::make_shared<generation::Seq2SeqLM>(load_any(encoder, false), num_threads);
                 if (with_past.is_none())
                   return std::make_shared<generation::Seq2SeqLM>(load_any(encoder, false), load_any(decoder, false),
                                                                  num_threads);
                 return std::make_shared<generation::Seq2SeqLM>(load_any(encoder, false), load_any(decoder, false),
                                                                load_any(with_past, false), num_threads);
               }),
           py::arg("encoder"), py::arg("decoder") = py::none(), py::arg("decoder_with_past") = py::none(),
           py::arg("num_threads") = 0)
      .def_property_readonly("decoder_with_past_plans", &generation::Seq2SeqLM::decoder_with_past_plans);
  m.def("generate_seq2seq", &generate_with<generation::Seq2SeqLM>, py::arg("model"), py::arg("prompts"),
        py::arg("config"));
  m.def("validate_generation_config", [](const py::dict& config) { return config_of(config).to_json(); });
}

}  // namespace kiln::python
