/* Trains a forward ONNX model (LeNet) on Fashion-MNIST through Kiln's C API: training artifacts
 * generated from the model (CrossEntropyLoss, AdamW), then `steps` training steps over the first
 * batches of the training set in order, a linear learning-rate decay, and the loss of each step
 * printed one per line ("step N loss X"); finally the parameters are saved to out_dir/checkpoint
 * and an inference model to out_dir/inference.onnx.
 *
 *   train_mnist MODEL.onnx OUT_DIR IMAGES.gz LABELS.gz [STEPS] [BATCH] [OUTPUT]
 *
 * OUTPUT (default "logits") names the model output the inference model computes.
 *
 * The images are the IDX files Debian's dataset-fashion-mnist installs (gzipped), scaled to
 * [0, 1] as the C++ and Python loaders do. Every Kiln call is checked: an error prints its message
 * and the program exits with status 1. C99. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "kiln/c_api.h"

static int check(KilnStatus* status, const char* what) {
  if (status == NULL) return 0;
  fprintf(stderr, "train_mnist: %s: %s (code %d)\n", what, KilnGetErrorMessage(status), (int)KilnGetErrorCode(status));
  KilnReleaseStatus(status);
  exit(1);
}

static uint32_t big_endian(const unsigned char* b) {
  return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | (uint32_t)b[3];
}

/* The whole (gunzipped) file, or exit with a message. */
static unsigned char* read_gz(const char* path, size_t* size) {
  gzFile f = gzopen(path, "rb");
  size_t cap = 1 << 20, n = 0;
  unsigned char* data = malloc(cap);
  if (f == NULL || data == NULL) {
    fprintf(stderr, "train_mnist: cannot read %s\n", path);
    exit(1);
  }
  for (;;) {
    if (n == cap) {
      unsigned char* grown = realloc(data, cap *= 2);
      if (grown == NULL) exit(1);
      data = grown;
    }
    const int got = gzread(f, data + n, (unsigned)(cap - n));
    if (got < 0) {
      fprintf(stderr, "train_mnist: %s is not a readable gzip file\n", path);
      exit(1);
    }
    if (got == 0) break;
    n += (size_t)got;
  }
  gzclose(f);
  *size = n;
  return data;
}

/* dir/name, allocated (the caller frees it). */
static char* path_in(const char* dir, const char* name) {
  const size_t a = strlen(dir), b = strlen(name);
  char* out = malloc(a + b + 2);
  if (out == NULL) exit(1);
  memcpy(out, dir, a);
  out[a] = '/';
  memcpy(out + a + 1, name, b + 1);
  return out;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: train_mnist MODEL.onnx OUT_DIR IMAGES.gz LABELS.gz [STEPS] [BATCH] [OUTPUT]\n");
    return 2;
  }
  const char *model = argv[1], *out_dir = argv[2];
  const int steps = argc > 5 ? atoi(argv[5]) : 20;
  const int batch = argc > 6 ? atoi(argv[6]) : 32;
  size_t image_bytes = 0, label_bytes = 0;
  unsigned char* images = read_gz(argv[3], &image_bytes);
  unsigned char* labels = read_gz(argv[4], &label_bytes);
  if (image_bytes < 16 || big_endian(images) != 2051 || label_bytes < 8 || big_endian(labels) != 2049) {
    fprintf(stderr, "train_mnist: %s / %s are not IDX image and label files\n", argv[3], argv[4]);
    return 1;
  }
  const size_t count = big_endian(images + 4), rows = big_endian(images + 8), cols = big_endian(images + 12);
  if ((size_t)steps * (size_t)batch > count || image_bytes < 16 + count * rows * cols || label_bytes < 8 + count) {
    fprintf(stderr, "train_mnist: the files hold %zu images; %d steps of %d need more\n", count, steps, batch);
    return 1;
  }

  char* art = path_in(out_dir, "artifacts");
  check(KilnGenerateArtifacts(model, NULL, 0, "CrossEntropyLoss", "AdamW", art), "generating artifacts");
  KilnCheckpointState* state = NULL;
  char* path = path_in(art, "checkpoint");
  check(KilnLoadCheckpoint(path, &state), "loading the checkpoint");
  free(path);
  char* train_path = path_in(art, "training_model.onnx");
  char* eval_path = path_in(art, "eval_model.onnx");
  char* optim_path = path_in(art, "optimizer_model.onnx");
  KilnTrainingSession* session = NULL;
  check(KilnCreateTrainingSession(NULL, state, train_path, eval_path, optim_path, &session), "creating the session");
  free(train_path);
  free(eval_path);
  free(optim_path);
  free(art);
  check(KilnRegisterLinearLRScheduler(session, 0, steps, 1e-3f), "registering the scheduler");

  size_t outputs = 0;
  check(KilnTrainingSessionGetTrainingModelOutputCount(session, &outputs), "counting outputs");
  const size_t pixels = rows * cols;
  float* x = malloc(sizeof(float) * (size_t)batch * pixels);
  int64_t* y = malloc(sizeof(int64_t) * (size_t)batch);
  KilnValue** results = calloc(outputs, sizeof(KilnValue*));
  if (x == NULL || y == NULL || results == NULL) return 1;
  const int64_t x_shape[4] = {batch, 1, (int64_t)rows, (int64_t)cols};
  const int64_t y_shape[1] = {batch};
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < (size_t)batch * pixels; ++i)
      x[i] = (float)images[16 + (size_t)s * (size_t)batch * pixels + i] / 255.0f;
    for (int i = 0; i < batch; ++i) y[i] = labels[8 + (size_t)s * (size_t)batch + (size_t)i];
    KilnValue *xv = NULL, *yv = NULL;
    check(KilnCreateTensorWithDataAsValue(x, sizeof(float) * (size_t)batch * pixels, x_shape, 4, KILN_FLOAT, &xv),
          "wrapping the images");
    check(KilnCreateTensorWithDataAsValue(y, sizeof(int64_t) * (size_t)batch, y_shape, 1, KILN_INT64, &yv),
          "wrapping the labels");
    const KilnValue* inputs[2] = {xv, yv};
    check(KilnTrainStep(session, 2, inputs, outputs, results), "the training step");
    float* loss = NULL;
    check(KilnGetTensorMutableData(results[0], (void**)&loss), "reading the loss");
    printf("step %d loss %.9g\n", s + 1, (double)*loss);
    check(KilnOptimizerStep(session), "the optimizer step");
    check(KilnSchedulerStep(session), "the scheduler step");
    check(KilnLazyResetGrad(session), "resetting the gradients");
    for (size_t k = 0; k < outputs; ++k) KilnReleaseValue(results[k]);
    KilnReleaseValue(xv);
    KilnReleaseValue(yv);
  }
  path = path_in(out_dir, "checkpoint");
  check(KilnSaveCheckpoint(state, path, true), "saving the checkpoint");
  free(path);
  char* loss_name = NULL;
  check(KilnTrainingSessionGetEvalModelOutputName(session, 0, &loss_name), "naming the eval model's loss");
  printf("eval model output 0: %s\n", loss_name);
  KilnFree(loss_name);
  path = path_in(out_dir, "inference.onnx");
  const char* names[1] = {argc > 7 ? argv[7] : "logits"};
  check(KilnExportModelForInferencing(session, path, 1, names), "exporting the inference model");
  free(path);
  KilnReleaseTrainingSession(session);
  KilnReleaseCheckpointState(state);
  free(results);
  free(x);
  free(y);
  free(images);
  free(labels);
  return 0;
}
