/* Kiln's C API (libkiln_c.so): on-device training from C and from any language with a C FFI,
 * mirroring ONNX Runtime's OrtTrainingApi function for function (docs/c_api.md maps them):
 *
 *   KilnCheckpointState* state;  KilnTrainingSession* session;
 *   KilnStatus* s = KilnLoadCheckpoint("art/checkpoint", &state);
 *   if (!s) s = KilnCreateTrainingSession(NULL, state, "art/training_model.onnx", "art/eval_model.onnx",
 *                                         "art/optimizer_model.onnx", &session);
 *   ... KilnTrainStep(session, 2, inputs, 1, outputs); KilnOptimizerStep(session); KilnLazyResetGrad(session);
 *   if (s) { fprintf(stderr, "%s\n", KilnGetErrorMessage(s)); KilnReleaseStatus(s); }
 *
 * Every function returns NULL on success or a status (an error code and message) that the caller
 * releases; no C++ exception crosses this boundary and nothing aborts. Every object has a release
 * function; releasing NULL does nothing. Thread safety: a training session's functions may be
 * called from several threads (calls are serialised by the session); a value or checkpoint state
 * must not be used by one thread while another releases it. Strings returned through `char**` are
 * allocated with malloc and freed by the caller with KilnFree. C99; compiles as C++ too. */
#ifndef KILN_C_API_H
#define KILN_C_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define KILN_API __declspec(dllexport)
#else
#define KILN_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Errors --------------------------------------------------------------------------------- */
typedef enum KilnErrorCode {
  KILN_OK = 0,
  KILN_FAIL = 1,             /* anything else */
  KILN_INVALID_ARGUMENT = 2, /* a bad argument, shape or dtype (a NULL pointer included) */
  KILN_NO_SUCHFILE = 3,      /* a file that is missing or cannot be read or written */
  KILN_INVALID_MODEL = 4,    /* a malformed or truncated model or checkpoint */
  KILN_NOT_IMPLEMENTED = 5   /* something Kiln does not do (an op, a dtype, an option) */
} KilnErrorCode;

typedef struct KilnStatus KilnStatus;
KILN_API KilnErrorCode KilnGetErrorCode(const KilnStatus* status);
KILN_API const char* KilnGetErrorMessage(const KilnStatus* status); /* valid until the status is released */
KILN_API void KilnReleaseStatus(KilnStatus* status);
KILN_API void KilnFree(void* pointer); /* what a Get...Name function allocated */

/* ---- Tensors -------------------------------------------------------------------------------- */
typedef enum KilnElementType {
  KILN_FLOAT = 1,
  KILN_UINT8 = 2,
  KILN_INT8 = 3,
  KILN_INT32 = 6,
  KILN_INT64 = 7,
  KILN_BOOL = 9,
  KILN_FLOAT16 = 10,
  KILN_DOUBLE = 11,
  KILN_BFLOAT16 = 16
} KilnElementType; /* ONNX's TensorProto numbers, as ONNXTensorElementDataType */

typedef struct KilnValue KilnValue;
/* A tensor over the caller's buffer (not copied; it must outlive the value): data_len bytes,
 * which must be the shape's element count times the element size. */
KILN_API KilnStatus* KilnCreateTensorWithDataAsValue(void* data, size_t data_len, const int64_t* shape,
                                                     size_t shape_len, KilnElementType type, KilnValue** out);
/* A tensor that owns zero-filled memory. */
KILN_API KilnStatus* KilnCreateTensor(const int64_t* shape, size_t shape_len, KilnElementType type, KilnValue** out);
KILN_API KilnStatus* KilnGetTensorMutableData(KilnValue* value, void** out);
KILN_API KilnStatus* KilnGetTensorElementType(const KilnValue* value, KilnElementType* out);
KILN_API KilnStatus* KilnGetDimensionsCount(const KilnValue* value, size_t* out);
KILN_API KilnStatus* KilnGetDimensions(const KilnValue* value, int64_t* dims, size_t dims_len);
KILN_API KilnStatus* KilnGetTensorShapeElementCount(const KilnValue* value, size_t* out);
KILN_API void KilnReleaseValue(KilnValue* value);

/* ---- Checkpoints ---------------------------------------------------------------------------- */
typedef struct KilnCheckpointState KilnCheckpointState;
KILN_API KilnStatus* KilnLoadCheckpoint(const char* checkpoint_path, KilnCheckpointState** out);
KILN_API KilnStatus* KilnSaveCheckpoint(KilnCheckpointState* state, const char* checkpoint_path,
                                        bool include_optimizer_state);
KILN_API void KilnReleaseCheckpointState(KilnCheckpointState* state);
/* A checkpoint from its file's bytes (copied). */
KILN_API KilnStatus* KilnLoadCheckpointFromBuffer(const void* checkpoint_buffer, size_t num_bytes,
                                                  KilnCheckpointState** out);

/* Properties kept with the checkpoint: an int64, a float or a string. */
typedef enum KilnPropertyType {
  KILN_INT_PROPERTY = 0,
  KILN_FLOAT_PROPERTY = 1,
  KILN_STRING_PROPERTY = 2
} KilnPropertyType;
/* property_value: an int64_t*, a float*, or the NUL-terminated string itself. */
KILN_API KilnStatus* KilnAddProperty(KilnCheckpointState* state, const char* property_name, KilnPropertyType type,
                                     const void* property_value);
/* *property_value: a malloc'ed int64_t, float or NUL-terminated string (free it with KilnFree). */
KILN_API KilnStatus* KilnGetProperty(const KilnCheckpointState* state, const char* property_name,
                                     KilnPropertyType* type, void** property_value);

/* A parameter's element type and shape: rank in *rank, and its dims when dims_len >= rank. */
KILN_API KilnStatus* KilnGetParameterTypeAndShape(const KilnCheckpointState* state, const char* parameter_name,
                                                  KilnElementType* type, size_t* rank, int64_t* dims, size_t dims_len);
/* Copies the value into the parameter (its dtype and shape must match). */
KILN_API KilnStatus* KilnUpdateParameter(KilnCheckpointState* state, const char* parameter_name,
                                         const KilnValue* value);
/* A copy of the parameter. */
KILN_API KilnStatus* KilnGetParameter(const KilnCheckpointState* state, const char* parameter_name, KilnValue** out);

/* ---- Training sessions ---------------------------------------------------------------------- */
typedef struct KilnSessionOptions KilnSessionOptions; /* reserved: pass NULL */
typedef struct KilnTrainingSession KilnTrainingSession;
/* eval_model_path and optimizer_model_path may be NULL. The state must outlive the session. */
KILN_API KilnStatus* KilnCreateTrainingSession(const KilnSessionOptions* options, KilnCheckpointState* state,
                                               const char* train_model_path, const char* eval_model_path,
                                               const char* optimizer_model_path, KilnTrainingSession** out);
KILN_API void KilnReleaseTrainingSession(KilnTrainingSession* session);

KILN_API KilnStatus* KilnTrainingSessionGetTrainingModelInputCount(const KilnTrainingSession* session, size_t* out);
KILN_API KilnStatus* KilnTrainingSessionGetEvalModelInputCount(const KilnTrainingSession* session, size_t* out);
KILN_API KilnStatus* KilnTrainingSessionGetTrainingModelInputName(const KilnTrainingSession* session, size_t index,
                                                                  char** out);
KILN_API KilnStatus* KilnTrainingSessionGetEvalModelInputName(const KilnTrainingSession* session, size_t index,
                                                              char** out);
KILN_API KilnStatus* KilnTrainingSessionGetTrainingModelOutputCount(const KilnTrainingSession* session, size_t* out);
KILN_API KilnStatus* KilnTrainingSessionGetEvalModelOutputCount(const KilnTrainingSession* session, size_t* out);
KILN_API KilnStatus* KilnTrainingSessionGetTrainingModelOutputName(const KilnTrainingSession* session, size_t index,
                                                                   char** out);
KILN_API KilnStatus* KilnTrainingSessionGetEvalModelOutputName(const KilnTrainingSession* session, size_t index,
                                                               char** out);

/* One training step (forward, loss, gradients added to the parameters' own) or evaluation step.
 * inputs: the model's user inputs in order; outputs: outputs_len slots that receive new values
 * (the caller releases them), in the model's output order. */
KILN_API KilnStatus* KilnTrainStep(KilnTrainingSession* session, size_t inputs_len, const KilnValue* const* inputs,
                                   size_t outputs_len, KilnValue** outputs);
KILN_API KilnStatus* KilnEvalStep(KilnTrainingSession* session, size_t inputs_len, const KilnValue* const* inputs,
                                  size_t outputs_len, KilnValue** outputs);
KILN_API KilnStatus* KilnLazyResetGrad(KilnTrainingSession* session);
KILN_API KilnStatus* KilnOptimizerStep(KilnTrainingSession* session);
KILN_API KilnStatus* KilnSetLearningRate(KilnTrainingSession* session, float learning_rate);
KILN_API KilnStatus* KilnGetLearningRate(KilnTrainingSession* session, float* out);
KILN_API KilnStatus* KilnRegisterLinearLRScheduler(KilnTrainingSession* session, int64_t warmup_step_count,
                                                   int64_t total_step_count, float initial_lr);
KILN_API KilnStatus* KilnSchedulerStep(KilnTrainingSession* session);

/* Parameters as one float32 buffer, in the training model's order (trainable ones, or all). */
KILN_API KilnStatus* KilnGetParametersSize(KilnTrainingSession* session, size_t* out, bool trainable_only);
KILN_API KilnStatus* KilnCopyParametersToBuffer(KilnTrainingSession* session, KilnValue* parameters_buffer,
                                                bool trainable_only);
KILN_API KilnStatus* KilnCopyBufferToParameters(KilnTrainingSession* session, KilnValue* parameters_buffer,
                                                bool trainable_only);

/* An inference model computing these outputs of the eval model, with the current parameters. */
KILN_API KilnStatus* KilnExportModelForInferencing(KilnTrainingSession* session, const char* inference_model_path,
                                                   size_t graph_outputs_len, const char* const* graph_output_names);
/* Seeds Kiln's random draws (Dropout masks of sessions created afterwards). */
KILN_API KilnStatus* KilnSetSeed(int64_t seed);

/* ---- Inference ------------------------------------------------------------------------------ */
typedef struct KilnSession KilnSession;
/* options: reserved, pass NULL. Calls to one session are serialised. */
KILN_API KilnStatus* KilnCreateSession(const char* model_path, const KilnSessionOptions* options, KilnSession** out);
KILN_API KilnStatus* KilnSessionGetInputCount(const KilnSession* session, size_t* out);
KILN_API KilnStatus* KilnSessionGetOutputCount(const KilnSession* session, size_t* out);
KILN_API KilnStatus* KilnSessionGetInputName(const KilnSession* session, size_t index, char** out);
KILN_API KilnStatus* KilnSessionGetOutputName(const KilnSession* session, size_t index, char** out);
/* Runs the model on inputs fed by name; outputs (new values the caller releases) in the order of
 * output_names. */
KILN_API KilnStatus* KilnRun(KilnSession* session, const char* const* input_names, const KilnValue* const* inputs,
                             size_t input_len, const char* const* output_names, size_t output_names_len,
                             KilnValue** outputs);
KILN_API void KilnReleaseSession(KilnSession* session);

/* ---- Artifacts ------------------------------------------------------------------------------ */
/* ONNX Runtime's generate_artifacts: training, eval and optimizer models and the checkpoint in
 * out_dir from a forward ONNX model. loss: "CrossEntropyLoss", "MSELoss", "BCEWithLogitsLoss",
 * "L1Loss" or "none"; optimizer: "AdamW", "SGD", "Lamb", "Adagrad", "Adafactor" or NULL.
 * requires_grad: the trainable parameters (NULL / 0: every float initializer). */
KILN_API KilnStatus* KilnGenerateArtifacts(const char* model_path, const char* const* requires_grad,
                                           size_t requires_grad_len, const char* loss, const char* optimizer,
                                           const char* out_dir);

#ifdef __cplusplus
}
#endif

#endif /* KILN_C_API_H */
