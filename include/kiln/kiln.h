// Kiln: train ONNX models natively. Include this for the whole public API.
#pragma once

#include "kiln/artifacts.h"
#include "kiln/autodiff.h"
#include "kiln/checkpoint.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"
#include "kiln/npy.h"
#include "kiln/onnx_io.h"
#include "kiln/safetensors.h"
#include "kiln/session.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"
#include "kiln/training.h"
#include "kiln/version.h"
