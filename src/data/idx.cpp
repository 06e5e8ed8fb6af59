// IDX reading (http://yann.lecun.com/exdb/mnist/): magic 00 00 <type> <rank>, then `rank` big-endian
// uint32 dimensions, then the data, big-endian. And load_idx: an images file and a labels file as a
// TensorDataset.
#include "data/idx.h"

#include <fmt/format.h>

#include <array>
#include <cstring>

#include "core/compression.h"
#include "core/file_io.h"
#include "kiln/data.h"

namespace kiln {
namespace {

struct IdxType {
  unsigned char code;
  DType dtype;
};
constexpr std::array<IdxType, 6> kTypes = {{{0x08, DType::Uint8},
                                            {0x09, DType::Int8},
                                            {0x0B, DType::Int16},
                                            {0x0C, DType::Int32},
                                            {0x0D, DType::Float32},
                                            {0x0E, DType::Float64}}};

uint32_t big_endian32(const unsigned char* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

}  // namespace

Tensor parse_idx(const std::string& bytes, const std::string& path, bool gzipped) {
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const char* where = gzipped ? " of the decompressed data" : "";
  if (bytes.size() < 4 || data[0] != 0 || data[1] != 0)
    throw CorruptFile(
        fmt::format("'{}' is not an IDX file (bad magic number at byte offset 0{}: expected 00 00 <type> "
                    "<rank>)",
                    path, where));
  const IdxType* type = nullptr;
  for (const IdxType& t : kTypes)
    if (t.code == data[2]) type = &t;
  if (type == nullptr)
    throw CorruptFile(fmt::format("'{}': unknown IDX element type 0x{:02x} at byte offset 2{}", path, data[2], where));
  const size_t rank = data[3];
  const size_t offset = 4 + 4 * rank;
  if (bytes.size() < offset)
    throw CorruptFile(
        fmt::format("'{}' is truncated (IDX header): {} dimensions need {} header bytes, the file ends at "
                    "byte offset {}{}",
                    path, rank, offset, bytes.size(), where));
  Shape shape(rank);
  for (size_t i = 0; i < rank; ++i) shape[i] = big_endian32(data + 4 + 4 * i);
  // The header's size is checked against the file before anything is allocated: a few bytes of
  // header must not reserve memory for data the file does not hold.
  const size_t nbytes = checked_bytes(shape, dtype_size(type->dtype));
  if (bytes.size() - offset != nbytes)
    throw CorruptFile(
        fmt::format("'{}' is truncated or corrupt: header says {} bytes of data for shape {}, file has {} "
                    "(data from byte offset {} {} at byte offset {}{})",
                    path, nbytes, to_string(shape), bytes.size() - offset, offset,
                    bytes.size() - offset < nbytes ? "ends" : "should end",
                    bytes.size() - offset < nbytes ? bytes.size() : offset + nbytes, where));
  Tensor t = Tensor::empty(type->dtype, shape);
  // Multi-byte values are big-endian on disk.
  const size_t es = dtype_size(type->dtype);
  auto* dst = static_cast<unsigned char*>(t.raw_data());
  if (es == 1) {
    if (t.nbytes()) std::memcpy(dst, data + offset, t.nbytes());
  } else {
    for (size_t i = 0; i < t.nbytes(); i += es)
      for (size_t b = 0; b < es; ++b) dst[i + b] = data[offset + i + es - 1 - b];
  }
  return t;
}

Tensor read_idx(const std::string& path) {
  const std::string raw = read_file_bytes(path, "IDX file");
  if (is_gzip(raw)) return parse_idx(gunzip(raw, path), path, true);
  return parse_idx(raw, path, false);
}

namespace data {

std::shared_ptr<TensorDataset> load_idx(const std::string& images_path, const std::string& labels_path,
                                        const IdxOptions& options) {
  if (options.image_column.empty() || options.label_column.empty() || options.image_column == options.label_column)
    throw InvalidArgument(
        fmt::format("load_idx: the image and label column names must be distinct and non-empty, got "
                    "'{}' and '{}'",
                    options.image_column, options.label_column));
  if (options.normalize && !(options.normalize->std > 0.0f))
    throw InvalidArgument(fmt::format("load_idx: normalize.std must be positive, got {}", options.normalize->std));
  const Tensor images = read_idx(images_path);
  const Tensor labels = read_idx(labels_path);
  if (images.dtype() != DType::Uint8)
    throw Unsupported(fmt::format("load_idx: '{}' holds {} pixels; MNIST-style images are uint8", images_path,
                                  dtype_name(images.dtype())));
  if (images.rank() != 3 && images.rank() != 4)
    throw CorruptFile(
        fmt::format("load_idx: '{}' has {} dimensions (rank at byte offset 3); images are [N, H, W] or "
                    "[N, C, H, W]",
                    images_path, images.rank()));
  if (labels.rank() != 1 || !is_integer(labels.dtype()))
    throw CorruptFile(fmt::format("load_idx: '{}' holds {} (header at byte offset 2); labels are one integer per item",
                                  labels_path, labels.describe()));
  if (labels.dim(0) != images.dim(0))
    throw CorruptFile(
        fmt::format("load_idx: image file '{}' holds {} images but label file '{}' holds {} labels (item "
                    "counts at byte offset 4 of each)",
                    images_path, images.dim(0), labels_path, labels.dim(0)));

  Shape shape = images.shape();
  if (shape.size() == 3) shape.insert(shape.begin() + 1, 1);  // one channel
  Tensor x = Tensor::empty(DType::Float32, shape);
  const uint8_t* px = images.data<uint8_t>();
  float* dst = x.data<float>();
  const float mean = options.normalize ? options.normalize->mean : 0.0f;
  const float std = options.normalize ? options.normalize->std : 1.0f;
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = (px[i] / 255.f - mean) / std;

  Tensor y = Tensor::empty(DType::Int64, labels.shape());
  int64_t* out = y.data<int64_t>();
  visit_dtype(labels.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) {
      const T* in = labels.data<T>();
      for (int64_t i = 0; i < y.numel(); ++i) out[i] = static_cast<int64_t>(in[i]);
    }
  });
  return std::make_shared<TensorDataset>(
      std::map<std::string, Tensor>{{options.image_column, std::move(x)}, {options.label_column, std::move(y)}});
}

}  // namespace data
}  // namespace kiln
