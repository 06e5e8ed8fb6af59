// Kiln's C API (include/kiln/c_api.h) over the C++ training API: opaque handles that own the C++
// objects, and every entry point wrapped so that an exception becomes a KilnStatus. Built as its own
// library (libkiln_c.so) with hidden visibility: only the KILN_API functions are exported.
#include "kiln/c_api.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/artifacts.h"
#include "kiln/checkpoint.h"
#include "kiln/error.h"
#include "kiln/onnx_io.h"
#include "kiln/random.h"
#include "kiln/session.h"
#include "kiln/training.h"

struct KilnStatus {
  KilnErrorCode code;
  std::string message;
};

struct KilnValue {
  kiln::Tensor tensor;
};

struct KilnCheckpointState {
  kiln::training::CheckpointState state;
};

struct KilnSession {
  kiln::Session session;
};

struct KilnTrainingSession {
  std::unique_ptr<kiln::training::Module> module;
  std::unique_ptr<kiln::training::Optimizer> optimizer;
  std::unique_ptr<kiln::training::LinearLRScheduler> scheduler;
  bool has_eval = false;
};

namespace {

KilnStatus* make_status(KilnErrorCode code, std::string message) {
  return new (std::nothrow) KilnStatus{code, std::move(message)};
}

// Runs f; an exception becomes a status naming it (and never leaves the function).
template <class F>
KilnStatus* guarded(F&& f) noexcept {
  try {
    f();
    return nullptr;
  } catch (const kiln::CorruptFile& e) {
    return make_status(KILN_INVALID_MODEL, e.what());
  } catch (const kiln::IOError& e) {
    return make_status(KILN_NO_SUCHFILE, e.what());
  } catch (const kiln::InvalidModel& e) {
    return make_status(KILN_INVALID_MODEL, e.what());
  } catch (const kiln::Unsupported& e) {
    return make_status(KILN_NOT_IMPLEMENTED, e.what());
  } catch (const kiln::InvalidArgument& e) {
    return make_status(KILN_INVALID_ARGUMENT, e.what());
  } catch (const kiln::ShapeError& e) {
    return make_status(KILN_INVALID_ARGUMENT, e.what());
  } catch (const kiln::TypeError& e) {
    return make_status(KILN_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return make_status(KILN_FAIL, "out of memory");
  } catch (const std::exception& e) {
    return make_status(KILN_FAIL, e.what());
  } catch (...) {
    return make_status(KILN_FAIL, "an unknown error");
  }
}

template <class T>
T& need(T* p, const char* what) {
  if (p == nullptr) throw kiln::InvalidArgument(fmt::format("{} is NULL", what));
  return *p;
}

const char* need_string(const char* s, const char* what) {
  if (s == nullptr) throw kiln::InvalidArgument(fmt::format("{} is NULL", what));
  return s;
}

kiln::DType dtype_of(KilnElementType type) {
  const auto d = kiln::dtype_from_onnx(static_cast<int64_t>(type));
  if (!d) throw kiln::InvalidArgument(fmt::format("element type {} is not one Kiln has", static_cast<int>(type)));
  if (*d == kiln::DType::String)  // a KilnValue is a buffer of numbers; strings are objects
    throw kiln::Unsupported("string tensors are not in the C API: its values are buffers of numbers");
  return *d;
}

kiln::Shape shape_of(const int64_t* shape, size_t shape_len) {
  if (shape == nullptr && shape_len > 0) throw kiln::InvalidArgument("shape is NULL");
  kiln::Shape s(shape, shape + shape_len);
  for (int64_t d : s)
    if (d < 0) throw kiln::InvalidArgument(fmt::format("shape {} has a negative dimension", kiln::to_string(s)));
  return s;
}

char* copy_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

std::vector<kiln::Tensor> tensors_of(size_t len, const KilnValue* const* values, const char* what) {
  if (values == nullptr && len > 0) throw kiln::InvalidArgument(fmt::format("{} is NULL", what));
  std::vector<kiln::Tensor> out;
  for (size_t i = 0; i < len; ++i) out.push_back(need(values[i], what).tensor);
  return out;
}

void give_outputs(const std::vector<kiln::Tensor>& results, size_t outputs_len, KilnValue** outputs) {
  if (outputs_len != results.size())
    throw kiln::InvalidArgument(
        fmt::format("the model has {} outputs; outputs_len is {}", results.size(), outputs_len));
  if (outputs == nullptr && outputs_len > 0) throw kiln::InvalidArgument("outputs is NULL");
  std::vector<std::unique_ptr<KilnValue>> made;
  made.reserve(results.size());
  for (const auto& r : results) made.push_back(std::make_unique<KilnValue>(KilnValue{r.contiguous()}));
  for (size_t i = 0; i < outputs_len; ++i) outputs[i] = made[i].release();
}

kiln::training::Optimizer& optimizer_of(KilnTrainingSession& s) {
  if (!s.optimizer) throw kiln::InvalidArgument("the training session was created without an optimizer model");
  return *s.optimizer;
}

std::vector<std::string> names(const KilnTrainingSession& s, bool training, bool inputs) {
  if (!training && !s.has_eval) throw kiln::InvalidArgument("the training session was created without an eval model");
  return inputs ? s.module->input_names(training) : s.module->output_names(training);
}

KilnStatus* count(const KilnTrainingSession* session, size_t* out, bool training, bool inputs) {
  return guarded([&] { need(out, "out") = names(need(session, "session"), training, inputs).size(); });
}

KilnStatus* name_at(const KilnTrainingSession* session, size_t index, char** out, bool training, bool inputs) {
  return guarded([&] {
    const auto all = names(need(session, "session"), training, inputs);
    if (index >= all.size())
      throw kiln::InvalidArgument(
          fmt::format("index {} is past the model's {} {}", index, all.size(), inputs ? "inputs" : "outputs"));
    need(out, "out") = copy_string(all[index]);
  });
}

KilnStatus* step(KilnTrainingSession* session, size_t inputs_len, const KilnValue* const* inputs, size_t outputs_len,
                 KilnValue** outputs, bool training) {
  return guarded([&] {
    KilnTrainingSession& s = need(session, "session");
    if (!training && !s.has_eval) throw kiln::InvalidArgument("the training session was created without an eval model");
    s.module->train(training);
    give_outputs((*s.module)(tensors_of(inputs_len, inputs, "inputs")), outputs_len, outputs);
  });
}

kiln::Tensor& float_buffer(KilnValue* buffer, size_t expected) {
  kiln::Tensor& t = need(buffer, "parameters_buffer").tensor;
  if (t.dtype() != kiln::DType::Float32 || static_cast<size_t>(t.numel()) != expected)
    throw kiln::InvalidArgument(
        fmt::format("the parameters buffer is {}; it must be float32 with {} elements", t.describe(), expected));
  return t;
}

}  // namespace

extern "C" {

KilnErrorCode KilnGetErrorCode(const KilnStatus* status) { return status ? status->code : KILN_OK; }
const char* KilnGetErrorMessage(const KilnStatus* status) { return status ? status->message.c_str() : ""; }
void KilnReleaseStatus(KilnStatus* status) { delete status; }
void KilnFree(void* pointer) { std::free(pointer); }

KilnStatus* KilnCreateTensorWithDataAsValue(void* data, size_t data_len, const int64_t* shape, size_t shape_len,
                                            KilnElementType type, KilnValue** out) {
  return guarded([&] {
    const kiln::DType d = dtype_of(type);
    const kiln::Shape s = shape_of(shape, shape_len);
    const size_t bytes = static_cast<size_t>(kiln::numel(s)) * kiln::dtype_size(d);
    if (bytes != data_len)
      throw kiln::InvalidArgument(fmt::format("a {} tensor of shape {} holds {} bytes; data_len is {}",
                                              kiln::dtype_name(d), kiln::to_string(s), bytes, data_len));
    if (data == nullptr && bytes > 0) throw kiln::InvalidArgument("data is NULL");
    need(out, "out") = new KilnValue{kiln::Tensor::wrap(data, d, s)};
  });
}

KilnStatus* KilnCreateTensor(const int64_t* shape, size_t shape_len, KilnElementType type, KilnValue** out) {
  return guarded(
      [&] { need(out, "out") = new KilnValue{kiln::Tensor::zeros(dtype_of(type), shape_of(shape, shape_len))}; });
}

KilnStatus* KilnGetTensorMutableData(KilnValue* value, void** out) {
  return guarded([&] { need(out, "out") = need(value, "value").tensor.raw_data(); });
}

KilnStatus* KilnGetTensorElementType(const KilnValue* value, KilnElementType* out) {
  return guarded([&] {
    need(out, "out") = static_cast<KilnElementType>(kiln::dtype_to_onnx(need(value, "value").tensor.dtype()));
  });
}

KilnStatus* KilnGetDimensionsCount(const KilnValue* value, size_t* out) {
  return guarded([&] { need(out, "out") = need(value, "value").tensor.shape().size(); });
}

KilnStatus* KilnGetDimensions(const KilnValue* value, int64_t* dims, size_t dims_len) {
  return guarded([&] {
    const kiln::Shape& s = need(value, "value").tensor.shape();
    if (dims_len < s.size() || (dims == nullptr && !s.empty()))
      throw kiln::InvalidArgument(fmt::format("the tensor has {} dimensions; dims_len is {}", s.size(), dims_len));
    for (size_t i = 0; i < s.size(); ++i) dims[i] = s[i];
  });
}

KilnStatus* KilnGetTensorShapeElementCount(const KilnValue* value, size_t* out) {
  return guarded([&] { need(out, "out") = static_cast<size_t>(need(value, "value").tensor.numel()); });
}

void KilnReleaseValue(KilnValue* value) { delete value; }

KilnStatus* KilnLoadCheckpoint(const char* checkpoint_path, KilnCheckpointState** out) {
  return guarded([&] {
    auto state = std::make_unique<KilnCheckpointState>(KilnCheckpointState{
        kiln::training::CheckpointState::load_checkpoint(need_string(checkpoint_path, "checkpoint_path"))});
    need(out, "out") = state.release();
  });
}

KilnStatus* KilnSaveCheckpoint(KilnCheckpointState* state, const char* checkpoint_path, bool include_optimizer_state) {
  return guarded([&] {
    kiln::training::CheckpointState::save_checkpoint(
        need(state, "state").state, need_string(checkpoint_path, "checkpoint_path"), include_optimizer_state);
  });
}

void KilnReleaseCheckpointState(KilnCheckpointState* state) { delete state; }

KilnStatus* KilnLoadCheckpointFromBuffer(const void* checkpoint_buffer, size_t num_bytes, KilnCheckpointState** out) {
  return guarded([&] {
    if (checkpoint_buffer == nullptr && num_bytes > 0) throw kiln::InvalidArgument("checkpoint_buffer is NULL");
    auto state = std::make_unique<KilnCheckpointState>(
        KilnCheckpointState{kiln::training::CheckpointState::load_checkpoint_from_buffer(
            std::string_view(static_cast<const char*>(checkpoint_buffer), num_bytes))});
    need(out, "out") = state.release();
  });
}

KilnStatus* KilnAddProperty(KilnCheckpointState* state, const char* property_name, KilnPropertyType type,
                            const void* property_value) {
  return guarded([&] {
    auto& bag = need(state, "state").state.properties();
    const std::string name = need_string(property_name, "property_name");
    if (property_value == nullptr) throw kiln::InvalidArgument("property_value is NULL");
    if (type == KILN_INT_PROPERTY) bag.set(name, *static_cast<const int64_t*>(property_value));
    else if (type == KILN_FLOAT_PROPERTY) bag.set(name, *static_cast<const float*>(property_value));
    else if (type == KILN_STRING_PROPERTY) bag.set(name, std::string(static_cast<const char*>(property_value)));
    else
      throw kiln::InvalidArgument(fmt::format("property type {} is not int, float or string", static_cast<int>(type)));
  });
}

KilnStatus* KilnGetProperty(const KilnCheckpointState* state, const char* property_name, KilnPropertyType* type,
                            void** property_value) {
  return guarded([&] {
    const kiln::training::PropertyValue& v =
        need(state, "state").state.properties().get(need_string(property_name, "property_name"));
    KilnPropertyType& t = need(type, "type");
    void*& out = need(property_value, "property_value");
    if (const auto* i = std::get_if<int64_t>(&v)) {
      auto* p = static_cast<int64_t*>(std::malloc(sizeof(int64_t)));
      if (p == nullptr) throw std::bad_alloc();
      *p = *i;
      t = KILN_INT_PROPERTY;
      out = p;
    } else if (const auto* f = std::get_if<float>(&v)) {
      auto* p = static_cast<float*>(std::malloc(sizeof(float)));
      if (p == nullptr) throw std::bad_alloc();
      *p = *f;
      t = KILN_FLOAT_PROPERTY;
      out = p;
    } else if (const auto* str = std::get_if<std::string>(&v)) {  // get_if: no std::bad_variant_access exported
      t = KILN_STRING_PROPERTY;
      out = copy_string(*str);
    }
  });
}

KilnStatus* KilnGetParameterTypeAndShape(const KilnCheckpointState* state, const char* parameter_name,
                                         KilnElementType* type, size_t* rank, int64_t* dims, size_t dims_len) {
  return guarded([&] {
    const auto& p = need(state, "state").state.parameter(need_string(parameter_name, "parameter_name"));
    need(type, "type") = static_cast<KilnElementType>(kiln::dtype_to_onnx(p.dtype()));
    need(rank, "rank") = p.shape().size();
    if (dims != nullptr && dims_len >= p.shape().size())
      for (size_t i = 0; i < p.shape().size(); ++i) dims[i] = p.shape()[i];
  });
}

KilnStatus* KilnUpdateParameter(KilnCheckpointState* state, const char* parameter_name, const KilnValue* value) {
  return guarded([&] {
    need(state, "state")
        .state.parameter(need_string(parameter_name, "parameter_name"))
        .set_data(need(value, "value").tensor);
  });
}

KilnStatus* KilnGetParameter(const KilnCheckpointState* state, const char* parameter_name, KilnValue** out) {
  return guarded([&] {
    const auto& p = need(state, "state").state.parameter(need_string(parameter_name, "parameter_name"));
    need(out, "out") = new KilnValue{p.data().clone()};
  });
}

KilnStatus* KilnCreateSession(const char* model_path, const KilnSessionOptions* options, KilnSession** out) {
  return guarded([&] {
    if (options != nullptr) throw kiln::InvalidArgument("session options are reserved: pass NULL");
    need(out, "out") = new KilnSession{kiln::Session(kiln::load_model(need_string(model_path, "model_path")))};
  });
}

KilnStatus* KilnSessionGetInputCount(const KilnSession* session, size_t* out) {
  return guarded([&] { need(out, "out") = need(session, "session").session.inputs().size(); });
}

KilnStatus* KilnSessionGetOutputCount(const KilnSession* session, size_t* out) {
  return guarded([&] { need(out, "out") = need(session, "session").session.outputs().size(); });
}

KilnStatus* KilnSessionGetInputName(const KilnSession* session, size_t index, char** out) {
  return guarded([&] {
    const auto& v = need(session, "session").session.inputs();
    if (index >= v.size())
      throw kiln::InvalidArgument(fmt::format("index {} is past the model's {} inputs", index, v.size()));
    need(out, "out") = copy_string(v[index].name);
  });
}

KilnStatus* KilnSessionGetOutputName(const KilnSession* session, size_t index, char** out) {
  return guarded([&] {
    const auto& v = need(session, "session").session.outputs();
    if (index >= v.size())
      throw kiln::InvalidArgument(fmt::format("index {} is past the model's {} outputs", index, v.size()));
    need(out, "out") = copy_string(v[index].name);
  });
}

KilnStatus* KilnRun(KilnSession* session, const char* const* input_names, const KilnValue* const* inputs,
                    size_t input_len, const char* const* output_names, size_t output_names_len, KilnValue** outputs) {
  return guarded([&] {
    KilnSession& s = need(session, "session");
    if ((input_names == nullptr || inputs == nullptr) && input_len > 0)
      throw kiln::InvalidArgument("input_names or inputs is NULL");
    if ((output_names == nullptr || outputs == nullptr) && output_names_len > 0)
      throw kiln::InvalidArgument("output_names or outputs is NULL");
    std::map<std::string, kiln::Tensor> feeds;
    for (size_t i = 0; i < input_len; ++i)
      feeds[need_string(input_names[i], "an input name")] = need(inputs[i], "an input").tensor;
    std::vector<std::string> wanted;
    for (size_t i = 0; i < output_names_len; ++i) wanted.emplace_back(need_string(output_names[i], "an output name"));
    const auto results = s.session.run(feeds, wanted);
    std::vector<kiln::Tensor> ordered;
    ordered.reserve(wanted.size());
    for (const auto& name : wanted) {
      const kiln::Tensor& t = results.at(name);
      if (!t.is_tensor() || t.dtype() == kiln::DType::String)  // KilnValue: numbers only (docs/c_api.md)
        throw kiln::Unsupported(
            fmt::format("output '{}' is {}; the C API returns tensors of numbers only", name, t.describe()));
      ordered.push_back(t);
    }
    give_outputs(ordered, output_names_len, outputs);
  });
}

void KilnReleaseSession(KilnSession* session) { delete session; }

KilnStatus* KilnCreateTrainingSession(const KilnSessionOptions* options, KilnCheckpointState* state,
                                      const char* train_model_path, const char* eval_model_path,
                                      const char* optimizer_model_path, KilnTrainingSession** out) {
  return guarded([&] {
    if (options != nullptr) throw kiln::InvalidArgument("session options are reserved: pass NULL");
    auto s = std::make_unique<KilnTrainingSession>();
    std::optional<std::string> eval;
    if (eval_model_path != nullptr) eval = eval_model_path;
    s->module = std::make_unique<kiln::training::Module>(need_string(train_model_path, "train_model_path"),
                                                         need(state, "state").state, eval);
    s->has_eval = eval.has_value();
    if (optimizer_model_path != nullptr)
      s->optimizer = std::make_unique<kiln::training::Optimizer>(optimizer_model_path, *s->module);
    need(out, "out") = s.release();
  });
}

void KilnReleaseTrainingSession(KilnTrainingSession* session) { delete session; }

KilnStatus* KilnTrainingSessionGetTrainingModelInputCount(const KilnTrainingSession* session, size_t* out) {
  return count(session, out, true, true);
}
KilnStatus* KilnTrainingSessionGetEvalModelInputCount(const KilnTrainingSession* session, size_t* out) {
  return count(session, out, false, true);
}
KilnStatus* KilnTrainingSessionGetTrainingModelInputName(const KilnTrainingSession* session, size_t index, char** out) {
  return name_at(session, index, out, true, true);
}
KilnStatus* KilnTrainingSessionGetEvalModelInputName(const KilnTrainingSession* session, size_t index, char** out) {
  return name_at(session, index, out, false, true);
}
KilnStatus* KilnTrainingSessionGetTrainingModelOutputCount(const KilnTrainingSession* session, size_t* out) {
  return count(session, out, true, false);
}
KilnStatus* KilnTrainingSessionGetEvalModelOutputCount(const KilnTrainingSession* session, size_t* out) {
  return count(session, out, false, false);
}
KilnStatus* KilnTrainingSessionGetTrainingModelOutputName(const KilnTrainingSession* session, size_t index,
                                                          char** out) {
  return name_at(session, index, out, true, false);
}
KilnStatus* KilnTrainingSessionGetEvalModelOutputName(const KilnTrainingSession* session, size_t index, char** out) {
  return name_at(session, index, out, false, false);
}

KilnStatus* KilnTrainStep(KilnTrainingSession* session, size_t inputs_len, const KilnValue* const* inputs,
                          size_t outputs_len, KilnValue** outputs) {
  return step(session, inputs_len, inputs, outputs_len, outputs, true);
}

KilnStatus* KilnEvalStep(KilnTrainingSession* session, size_t inputs_len, const KilnValue* const* inputs,
                         size_t outputs_len, KilnValue** outputs) {
  return step(session, inputs_len, inputs, outputs_len, outputs, false);
}

KilnStatus* KilnLazyResetGrad(KilnTrainingSession* session) {
  return guarded([&] { need(session, "session").module->lazy_reset_grad(); });
}

KilnStatus* KilnOptimizerStep(KilnTrainingSession* session) {
  return guarded([&] { optimizer_of(need(session, "session")).step(); });
}

KilnStatus* KilnSetLearningRate(KilnTrainingSession* session, float learning_rate) {
  return guarded([&] { optimizer_of(need(session, "session")).set_learning_rate(learning_rate); });
}

KilnStatus* KilnGetLearningRate(KilnTrainingSession* session, float* out) {
  return guarded([&] { need(out, "out") = optimizer_of(need(session, "session")).get_learning_rate(); });
}

KilnStatus* KilnRegisterLinearLRScheduler(KilnTrainingSession* session, int64_t warmup_step_count,
                                          int64_t total_step_count, float initial_lr) {
  return guarded([&] {
    KilnTrainingSession& s = need(session, "session");
    s.scheduler = std::make_unique<kiln::training::LinearLRScheduler>(optimizer_of(s), warmup_step_count,
                                                                      total_step_count, initial_lr);
  });
}

KilnStatus* KilnSchedulerStep(KilnTrainingSession* session) {
  return guarded([&] {
    KilnTrainingSession& s = need(session, "session");
    if (!s.scheduler) throw kiln::InvalidArgument("no learning-rate scheduler is registered");
    s.scheduler->step();
  });
}

KilnStatus* KilnGetParametersSize(KilnTrainingSession* session, size_t* out, bool trainable_only) {
  return guarded([&] {
    need(out, "out") = static_cast<size_t>(need(session, "session").module->get_parameters_size(trainable_only));
  });
}

KilnStatus* KilnCopyParametersToBuffer(KilnTrainingSession* session, KilnValue* parameters_buffer,
                                       bool trainable_only) {
  return guarded([&] {
    auto& m = *need(session, "session").module;
    kiln::Tensor& buffer = float_buffer(parameters_buffer, static_cast<size_t>(m.get_parameters_size(trainable_only)));
    const kiln::Tensor values = m.get_contiguous_parameters(trainable_only);
    std::memcpy(buffer.raw_data(), values.raw_data(), values.nbytes());
  });
}

KilnStatus* KilnCopyBufferToParameters(KilnTrainingSession* session, KilnValue* parameters_buffer,
                                       bool trainable_only) {
  return guarded([&] {
    auto& m = *need(session, "session").module;
    m.copy_buffer_to_parameters(
        float_buffer(parameters_buffer, static_cast<size_t>(m.get_parameters_size(trainable_only))), trainable_only);
  });
}

KilnStatus* KilnExportModelForInferencing(KilnTrainingSession* session, const char* inference_model_path,
                                          size_t graph_outputs_len, const char* const* graph_output_names) {
  return guarded([&] {
    if (graph_output_names == nullptr && graph_outputs_len > 0)
      throw kiln::InvalidArgument("graph_output_names is NULL");
    std::vector<std::string> outputs;
    for (size_t i = 0; i < graph_outputs_len; ++i)
      outputs.emplace_back(need_string(graph_output_names[i], "an output name"));
    need(session, "session")
        .module->export_model_for_inferencing(need_string(inference_model_path, "inference_model_path"), outputs);
  });
}

KilnStatus* KilnSetSeed(int64_t seed) {
  return guarded([&] { kiln::set_random_seed(static_cast<uint64_t>(seed)); });
}

KilnStatus* KilnGenerateArtifacts(const char* model_path, const char* const* requires_grad, size_t requires_grad_len,
                                  const char* loss, const char* optimizer, const char* out_dir) {
  return guarded([&] {
    kiln::training::ArtifactOptions o;
    if (requires_grad == nullptr && requires_grad_len > 0) throw kiln::InvalidArgument("requires_grad is NULL");
    for (size_t i = 0; i < requires_grad_len; ++i)
      o.requires_grad.emplace_back(need_string(requires_grad[i], "a requires_grad name"));
    o.loss = kiln::training::loss_type_from_string(need_string(loss, "loss"));
    if (optimizer != nullptr) o.optimizer = kiln::training::optim_type_from_string(optimizer);
    kiln::training::generate_artifacts(kiln::load_model(need_string(model_path, "model_path")), o,
                                       need_string(out_dir, "out_dir"));
  });
}

}  // extern "C"
