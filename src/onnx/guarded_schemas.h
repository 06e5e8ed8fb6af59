// ONNX's schema registry, with the shape inference of a few ops guarded against inputs that make
// the ONNX library read out of bounds. Debian's libonnx (1.12) takes a convolution's spatial rank
// from W when kernel_shape is absent and indexes X's dimensions with it: an X of rank 3 with a W
// of rank 4 (found by fuzz/onnx_model_fuzz.cpp) crashed the loader inside onnx's
// convPoolShapeInference. The guarded ops check that X and W have the same rank first and fail
// inference (which the loader treats as "no hints") when they do not. Likewise a stride of 0
// divided by zero in convPoolShapeInference (any op with strides or dilations now needs them
// positive first), and MaxUnpool read a dimension its indices input may not have.
#pragma once

#include <onnx/defs/schema.h>

namespace kiln::onnxio {

// OpSchemaRegistry's schemas, with the ops named above guarded.
const onnx::ISchemaRegistry* guarded_schema_registry();

}  // namespace kiln::onnxio
