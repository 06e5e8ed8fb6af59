// strided_copy: the byte copy behind Transpose, Slice, Expand, Tile, DepthToSpace and SpaceToDepth.
// The view is first simplified (dims of size 1 dropped, neighbours that walk memory as one dim
// merged), then copied one of two ways:
//   - rows: when the last dim is contiguous in the source (memcpy per row) or no dim is (a gather);
//   - tiles: when another dim is contiguous in the source, the copy is a batch of 2-D transposes
//     between that dim and the last one, done in square tiles (4x4 register transposes for 4-byte
//     elements, a small buffer otherwise), so that both the reads and the writes run along cache
//     lines. (Writing a tile's column straight to the
//     output touches one line per element, and with power-of-two strides every one of those lines
//     falls in the same cache set: bert's attention transposes ran at 1 GB/s that way.)
#include "kernels/cpu/strided_copy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/parallel.h"
#include "kernels/cpu/transform_common.h"
#include "kiln/error.h"

namespace kiln {
namespace {

using transform::grain_for;

struct Walk {
  Shape shape;
  Strides strides;  // source strides in elements; may be negative (Slice with negative steps)
};

Walk simplify(const Shape& shape, const Strides& strides) {
  Walk w;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!w.shape.empty() && w.strides.back() == strides[i] * shape[i]) {
      w.shape.back() *= shape[i];
      w.strides.back() = strides[i];
    } else {
      w.shape.push_back(shape[i]);
      w.strides.push_back(strides[i]);
    }
  }
  return w;
}

// Source element offset of outer index `row` (over all dims but the last `inner` ones).
int64_t outer_offset(const Walk& w, size_t inner, int64_t row) {
  int64_t off = 0;
  for (size_t d = w.shape.size() - inner; d-- > 0;) {
    off += (row % w.shape[d]) * w.strides[d];
    row /= w.shape[d];
  }
  return off;
}

// Rows of the last dim: memcpy when they are contiguous in the source, else an element gather.
template <class E>
void copy_rows(const E* src, E* dst, const Walk& w) {
  const int64_t cols = w.shape.back();
  const int64_t step = w.strides.back();
  const int64_t rows = numel(w.shape) / cols;
  const size_t outer_rank = w.shape.size() - 1;
  parallel_for(rows, grain_for(cols * static_cast<int64_t>(sizeof(E))), [&](int64_t b, int64_t e) {
    // Odometer over the outer dims, so each row costs O(1) index arithmetic.
    std::vector<int64_t> idx(outer_rank, 0);
    int64_t r = b;
    for (size_t d = outer_rank; d-- > 0;) {
      idx[d] = r % w.shape[d];
      r /= w.shape[d];
    }
    int64_t off = outer_offset(w, 1, b);
    for (int64_t row = b; row < e; ++row) {
      E* out = dst + row * cols;
      const E* in = src + off;
      if (step == 1) {
        std::memcpy(out, in, static_cast<size_t>(cols) * sizeof(E));
      } else {
        for (int64_t c = 0; c < cols; ++c) out[c] = in[c * step];
      }
      for (size_t d = outer_rank; d-- > 0;) {
        off += w.strides[d];
        if (++idx[d] < w.shape[d]) break;
        off -= w.strides[d] * w.shape[d];
        idx[d] = 0;
      }
    }
  });
}

// The dims of a tiled copy other than the two being transposed, with their source and output
// strides.
struct Batches {
  Shape shape;
  Strides src, dst;
};

// One tile: element (i, j) from s[j * ld + i] to o[i * ds + j], through a buffer so that the reads
// and the writes both run along rows.
template <class E, int64_t T>
void transpose_tile(const E* s, E* o, int64_t ni, int64_t nj, int64_t ld, int64_t ds) {
#if defined(__SSE2__)
  // A full tile of 4-byte elements: 4x4 blocks transposed in registers (baseline x86-64), no buffer.
  if constexpr (sizeof(E) == 4 && T % 4 == 0) {
    if (ni == T && nj == T) {
      for (int64_t i = 0; i < T; i += 4)
        for (int64_t j = 0; j < T; j += 4) {
          const auto row = [&](int64_t q) {
            return _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + (j + q) * ld + i));
          };
          const __m128i r0 = row(0), r1 = row(1), r2 = row(2), r3 = row(3);
          const __m128i t0 = _mm_unpacklo_epi32(r0, r1), t1 = _mm_unpacklo_epi32(r2, r3);
          const __m128i t2 = _mm_unpackhi_epi32(r0, r1), t3 = _mm_unpackhi_epi32(r2, r3);
          const auto put = [&](int64_t p, __m128i v) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(o + (i + p) * ds + j), v);
          };
          put(0, _mm_unpacklo_epi64(t0, t1));
          put(1, _mm_unpackhi_epi64(t0, t1));
          put(2, _mm_unpacklo_epi64(t2, t3));
          put(3, _mm_unpackhi_epi64(t2, t3));
        }
      return;
    }
  }
#endif
  E buf[T * T];
  for (int64_t j = 0; j < nj; ++j)
    for (int64_t i = 0; i < ni; ++i) buf[i * T + j] = s[j * ld + i];
  for (int64_t i = 0; i < ni; ++i)
    for (int64_t j = 0; j < nj; ++j) o[i * ds + j] = buf[i * T + j];
}

// Batched 2-D transposes between dim `k` (source stride 1: the tile's rows i) and the last dim
// (the tile's columns j; source stride ld). Output element (i, j) of a batch is at i * ds + j.
template <class E>
void transpose_tiles(const E* src, E* dst, const Walk& w, size_t k) {
  constexpr int64_t T = std::max<int64_t>(8, 64 / static_cast<int64_t>(sizeof(E)));  // a cache line of E
  const size_t r = w.shape.size();
  const Strides out = contiguous_strides(w.shape);
  const int64_t rows = w.shape[k], cols = w.shape[r - 1], ld = w.strides[r - 1], ds = out[k];
  Batches b;
  for (size_t d = 0; d + 1 < r; ++d) {
    if (d == k) continue;
    b.shape.push_back(w.shape[d]);
    b.src.push_back(w.strides[d]);
    b.dst.push_back(out[d]);
  }
  const int64_t row_tiles = (rows + T - 1) / T, col_tiles = (cols + T - 1) / T;
  const int64_t tiles = numel(b.shape) * row_tiles * col_tiles;
  parallel_for(tiles, grain_for(T * T * static_cast<int64_t>(sizeof(E))), [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      int64_t batch = t / (row_tiles * col_tiles);
      const int64_t tile = t % (row_tiles * col_tiles);
      const int64_t i0 = (tile / col_tiles) * T, j0 = (tile % col_tiles) * T;
      int64_t s_off = i0 + j0 * ld, d_off = i0 * ds + j0;
      for (size_t d = b.shape.size(); d-- > 0;) {
        const int64_t idx = batch % b.shape[d];
        batch /= b.shape[d];
        s_off += idx * b.src[d];
        d_off += idx * b.dst[d];
      }
      transpose_tile<E, T>(src + s_off, dst + d_off, std::min(T, rows - i0), std::min(T, cols - j0), ld, ds);
    }
  });
}

// The dim to transpose with the last one: the innermost other dim that is contiguous in the
// source, or -1 (then the copy gathers rows).
int tile_dim(const Walk& w) {
  const size_t r = w.shape.size();
  if (r < 2 || w.strides[r - 1] == 1 || w.strides[r - 1] == 0 || w.shape[r - 1] < 4) return -1;
  for (size_t d = r - 1; d-- > 0;)
    if (w.strides[d] == 1 && w.shape[d] >= 4) return static_cast<int>(d);
  return -1;
}

template <class E>
void strided_copy_typed(const void* src, void* dst, const Walk& w) {
  const E* s = static_cast<const E*>(src);
  E* d = static_cast<E*>(dst);
  if (const int k = tile_dim(w); k >= 0) transpose_tiles(s, d, w, static_cast<size_t>(k));
  else copy_rows(s, d, w);
}

}  // namespace

void strided_copy(const void* src, void* dst, const Shape& shape, const Strides& strides, size_t esize) {
  if (numel(shape) == 0) return;
  Walk w = simplify(shape, strides);
  if (w.shape.empty()) {  // a single element
    std::memcpy(dst, src, esize);
    return;
  }
  switch (esize) {
    case 1:
      return strided_copy_typed<uint8_t>(src, dst, w);
    case 2:
      return strided_copy_typed<uint16_t>(src, dst, w);
    case 4:
      return strided_copy_typed<uint32_t>(src, dst, w);
    case 8:
      return strided_copy_typed<uint64_t>(src, dst, w);
    default:
      throw Unsupported(fmt::format("no strided copy for {}-byte elements", esize));
  }
}

}  // namespace kiln
