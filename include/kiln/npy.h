// NumPy .npy files: the array format of the `kiln` command line (inputs and outputs).
//
//   kiln::Tensor x = kiln::load_npy("input.npy");   // any Kiln dtype, versions 1.0, 2.0 and 3.0
//   kiln::save_npy(y, "out/logits.npy");            // atomic: temp file, fsync, rename
//
// Supported: little-endian (or byte-order-free) arrays in C order of every Kiln dtype. bfloat16,
// which NumPy lacks, is stored as '<V2' — what np.save writes for an ml_dtypes.bfloat16 array — and
// both '<V2' and '|V2' read back as bfloat16. Fortran order, big-endian data, structured and object
// arrays are Unsupported; a truncated or malformed file is an IOError/InvalidArgument naming it.
#pragma once

#include <string>

#include "kiln/tensor.h"

namespace kiln {

Tensor load_npy(const std::string& path);
// Writes version 1.0 (2.0 when the header needs more than 64 KiB), header padded to 64 bytes.
void save_npy(const Tensor& tensor, const std::string& path);

// In-memory forms; `label` names the bytes in error messages.
Tensor parse_npy(const std::string& bytes, const std::string& label = "<memory>");
std::string serialize_npy(const Tensor& tensor);

// The NumPy descr of a dtype ("<f4", "|b1", ...).
std::string npy_descr(DType dtype);

}  // namespace kiln
