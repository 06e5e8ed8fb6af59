#include "data/idx.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace kiln {

namespace {

std::vector<unsigned char> read_all(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files unchanged
  if (f == nullptr) throw IOError(fmt::format("cannot open IDX file '{}': {}", path, std::strerror(errno)));
  std::vector<unsigned char> data;
  unsigned char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int code = 0;
      const std::string msg = gzerror(f, &code);
      gzclose(f);
      throw IOError(fmt::format("cannot read IDX file '{}': {}", path, msg));
    }
    if (n == 0) break;
    data.insert(data.end(), buf, buf + n);
  }
  gzclose(f);
  return data;
}

}  // namespace

Tensor read_idx(const std::string& path) {
  const std::vector<unsigned char> data = read_all(path);
  if (data.size() < 4 || data[0] != 0 || data[1] != 0)
    throw InvalidArgument(fmt::format("'{}' is not an IDX file (bad magic number)", path));
  DType dtype;
  switch (data[2]) {
    case 0x08: dtype = DType::Uint8; break;
    case 0x09: dtype = DType::Int8; break;
    case 0x0B: dtype = DType::Int16; break;
    case 0x0C: dtype = DType::Int32; break;
    case 0x0D: dtype = DType::Float32; break;
    case 0x0E: dtype = DType::Float64; break;
    default: throw InvalidArgument(fmt::format("'{}': unknown IDX element type 0x{:02x}", path, data[2]));
  }
  const size_t rank = data[3];
  if (data.size() < 4 + 4 * rank) throw InvalidArgument(fmt::format("'{}' is truncated (IDX header)", path));
  Shape shape(rank);
  for (size_t i = 0; i < rank; ++i) {
    const unsigned char* p = &data[4 + 4 * i];
    shape[i] = (int64_t(p[0]) << 24) | (int64_t(p[1]) << 16) | (int64_t(p[2]) << 8) | int64_t(p[3]);
  }
  Tensor t = Tensor::empty(dtype, shape);
  const size_t offset = 4 + 4 * rank;
  if (data.size() - offset != t.nbytes())
    throw InvalidArgument(fmt::format("'{}' is truncated or corrupt: header says {} bytes of data for shape {}, file has {}",
                                      path, t.nbytes(), to_string(shape), data.size() - offset));
  // IDX stores multi-byte values big-endian.
  const size_t es = dtype_size(dtype);
  unsigned char* dst = static_cast<unsigned char*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); i += es)
    for (size_t b = 0; b < es; ++b) dst[i + b] = data[offset + i + es - 1 - b];
  return t;
}

}  // namespace kiln
