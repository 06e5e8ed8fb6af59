// Kiln: train ONNX models natively. Include this for the whole public API.
#pragma once

#include "kiln/autodiff.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"
#include "kiln/version.h"
