#include "kiln/tensor.h"

#include <fmt/format.h>

#include <cstdlib>
#include <deque>
#include <mutex>
#include <new>
#include <numeric>
#include <type_traits>

#include "core/large_blocks.h"

namespace kiln {

namespace {

size_t rounded_size(size_t bytes) { return (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

void* aligned_allocate(size_t bytes) {
  void* p = std::aligned_alloc(kAlignment, rounded_size(bytes));
  if (p == nullptr) throw Error(fmt::format("out of memory allocating {} bytes", bytes));
  return p;
}

void aligned_free(void* p) { std::free(p); }

namespace {

// Freed blocks of kLargeBlock bytes or more, kept for the next allocation of the same size (the
// outputs a Session returns on every run, a batch the loader stacks on every step) up to kCacheCap
// in all, the oldest freed first when more come. glibc maps such blocks afresh on every malloc and
// unmaps them on free, so each reuse would otherwise fault in every page again: on virtual machines
// that first touch costs more than writing the data (a 32 MB logits tensor: ~80 ms of faults).
constexpr size_t kLargeBlock = size_t{4} << 20;
constexpr size_t kCacheCap = size_t{256} << 20;

class LargeBlocks {
 public:
  void* take(size_t rounded) {
    const std::lock_guard lock(mutex_);
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
      if (it->second == rounded) {
        void* p = it->first;
        blocks_.erase(it);
        cached_ -= rounded;
        return p;
      }
    return nullptr;
  }
  void give(void* p, size_t rounded) {
    if (rounded > kCacheCap) return std::free(p);
    const std::lock_guard lock(mutex_);
    while (cached_ + rounded > kCacheCap) {
      std::free(blocks_.front().first);
      cached_ -= blocks_.front().second;
      blocks_.pop_front();
    }
    blocks_.emplace_back(p, rounded);
    cached_ += rounded;
  }
  size_t cached() {
    const std::lock_guard lock(mutex_);
    return cached_;
  }

 private:
  std::mutex mutex_;
  std::deque<std::pair<void*, size_t>> blocks_;
  size_t cached_ = 0;
};

LargeBlocks& large_blocks() {
  static LargeBlocks* blocks = new LargeBlocks;  // never destroyed: tensors may outlive static destruction
  return *blocks;
}

}  // namespace

size_t cached_large_block_bytes() { return large_blocks().cached(); }

std::shared_ptr<Storage> Storage::allocate(size_t bytes) {
  const size_t rounded = rounded_size(bytes);
  void* p = rounded >= kLargeBlock ? large_blocks().take(rounded) : nullptr;
  return std::shared_ptr<Storage>(new Storage(p != nullptr ? p : aligned_allocate(bytes), bytes, true));
}

std::shared_ptr<Storage> Storage::allocate_strings(size_t count) {
  std::shared_ptr<Storage> s = allocate(count * sizeof(std::string));
  auto* p = static_cast<std::string*>(s->data_);
  for (size_t i = 0; i < count; ++i) new (p + i) std::string();
  s->strings_ = count;
  return s;
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t bytes) {
  return std::shared_ptr<Storage>(new Storage(data, bytes, false));
}

Storage::~Storage() {
  if (!owned_) return;
  for (size_t i = 0; i < strings_; ++i) static_cast<std::string*>(data_)[i].~basic_string();
  const size_t rounded = rounded_size(bytes_);
  if (rounded >= kLargeBlock) large_blocks().give(data_, rounded);
  else aligned_free(data_);
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  const size_t bytes = checked_bytes(shape, dtype_size(dtype));  // throws on negative or absurd shapes
  Tensor t;
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.storage_ = dtype == DType::String ? Storage::allocate_strings(static_cast<size_t>(kiln::numel(t.shape_)))
                                      : Storage::allocate(bytes);
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  if (dtype != DType::String) std::memset(t.raw_data(), 0, t.nbytes());  // strings start empty
  return t;
}

Tensor Tensor::wrap(void* data, DType dtype, Shape shape, Strides strides) {
  Tensor t;
  t.dtype_ = dtype;
  t.strides_ = strides.empty() && !shape.empty() ? contiguous_strides(shape) : std::move(strides);
  if (t.strides_.size() != shape.size())
    throw ShapeError(fmt::format("Tensor::wrap: {} strides for shape {}", t.strides_.size(), to_string(shape)));
  const size_t bytes = checked_bytes(shape, dtype_size(dtype));
  t.shape_ = std::move(shape);
  t.storage_ = Storage::borrow(data, bytes);
  return t;
}

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, size_t byte_offset, DType dtype, Shape shape) {
  if (dtype == DType::String) throw Error("Tensor::view_of: string tensors own their elements; no view of raw bytes");
  Tensor t;
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(shape);
  const size_t bytes = checked_bytes(shape, dtype_size(dtype));
  t.shape_ = std::move(shape);
  if (bytes > storage->bytes() || byte_offset > storage->bytes() - bytes)
    throw Error(fmt::format("Tensor::view_of: {} bytes at offset {} exceed a storage of {} bytes", bytes, byte_offset,
                            storage->bytes()));
  t.storage_ = std::move(storage);
  t.offset_ = byte_offset;
  return t;
}

int64_t Tensor::dim(int64_t i) const {
  return shape_[static_cast<size_t>(normalize_axis(i, rank(), "dimension index"))];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void Tensor::check_dtype(DType requested) const {
  if (!defined()) throw Error("access to the data of an undefined tensor");
  if (!is_tensor()) throw TypeError(fmt::format("{} read as a tensor of {}", describe(), dtype_name(requested)));
  if (requested != dtype_) throw TypeError(fmt::format("tensor {} read as {}", describe(), dtype_name(requested)));
}

double Tensor::item_as_double(int64_t i) const {
  if (!is_contiguous()) return contiguous().item_as_double(i);
  if (i < 0 || i >= numel()) throw ShapeError(fmt::format("element {} is out of range for tensor {}", i, describe()));
  return visit_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    return to_double(static_cast<const T*>(raw_data())[i]);
  });
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  const Tensor c = contiguous();
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  visit_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(c.raw_data());
    for (size_t i = 0; i < out.size(); ++i) {
      if constexpr (std::is_integral_v<T>) out[i] = static_cast<int64_t>(p[i]);  // exact, INT64_MAX too
      else out[i] = static_cast<int64_t>(to_double(p[i]));
    }
  });
  return out;
}

Tensor Tensor::reshape(Shape shape) const {
  if (!is_tensor()) throw TypeError(fmt::format("cannot reshape {}: not a tensor", describe()));
  if (kiln::numel(shape) != numel())
    throw ShapeError(fmt::format("cannot reshape {} to {}", describe(), to_string(shape)));
  if (!is_contiguous()) return contiguous().reshape(std::move(shape));
  Tensor t = *this;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::permute(const std::vector<int64_t>& perm) const {
  if (!is_tensor()) throw TypeError(fmt::format("cannot permute {}: not a tensor", describe()));
  if (perm.size() != shape_.size())
    throw ShapeError(fmt::format("permutation of length {} for tensor {}", perm.size(), describe()));
  Tensor t = *this;
  std::vector<bool> seen(perm.size(), false);
  for (size_t i = 0; i < perm.size(); ++i) {
    const int64_t p = perm[i];
    if (p < 0 || p >= rank() || seen[static_cast<size_t>(p)])
      throw ShapeError(fmt::format("invalid permutation [{}] for tensor {}", fmt::join(perm, ", "), describe()));
    seen[static_cast<size_t>(p)] = true;
    t.shape_[i] = shape_[static_cast<size_t>(p)];
    t.strides_[i] = strides_[static_cast<size_t>(p)];
  }
  return t;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

void Tensor::copy_from(const Tensor& src) {
  if (!is_tensor() || !src.is_tensor())
    throw TypeError(fmt::format("copy from {} into {}: both must be tensors", src.describe(), describe()));
  if (src.dtype_ != dtype_ || src.shape_ != shape_)
    throw ShapeError(fmt::format("copy from {} into {}", src.describe(), describe()));
  if (dtype_ == DType::String) {
    copy_strings_from(src);
    return;
  }
  const size_t esize = dtype_size(dtype_);
  if (src.is_contiguous() && is_contiguous()) {
    if (nbytes() > 0) std::memmove(raw_data(), src.raw_data(), nbytes());
    return;
  }
  const int64_t n = numel();
  const size_t r = shape_.size();
  std::vector<int64_t> idx(r, 0);
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(raw_data());
  for (int64_t k = 0; k < n; ++k) {
    int64_t so = 0, dof = 0;
    for (size_t i = 0; i < r; ++i) {
      so += idx[i] * src.strides_[i];
      dof += idx[i] * strides_[i];
    }
    std::memcpy(d + dof * static_cast<int64_t>(esize), s + so * static_cast<int64_t>(esize), esize);
    for (size_t i = r; i-- > 0;) {
      if (++idx[i] < shape_[i]) break;
      idx[i] = 0;
    }
  }
}

// Strings are objects: copied one by one, in any strides.
void Tensor::copy_strings_from(const Tensor& src) {
  const int64_t n = numel();
  const size_t r = shape_.size();
  std::vector<int64_t> idx(r, 0);
  const auto* s = static_cast<const std::string*>(src.raw_data());
  auto* d = static_cast<std::string*>(raw_data());
  for (int64_t k = 0; k < n; ++k) {
    int64_t so = 0, dof = 0;
    for (size_t i = 0; i < r; ++i) {
      so += idx[i] * src.strides_[i];
      dof += idx[i] * strides_[i];
    }
    if (d + dof != s + so) d[dof] = s[so];
    for (size_t i = r; i-- > 0;) {
      if (++idx[i] < shape_[i]) break;
      idx[i] = 0;
    }
  }
}

Tensor Tensor::clone() const {
  if (is_none()) return *this;  // nothing to copy
  if (is_sequence()) {
    std::vector<Tensor> copies;
    copies.reserve(elements_->size());
    for (const Tensor& e : *elements_) copies.push_back(e.clone());
    return sequence(dtype_, std::move(copies));
  }
  Tensor t = empty(dtype_, shape_);
  t.copy_from(*this);
  return t;
}

std::string Tensor::describe() const {
  if (!defined()) return "<undefined>";
  if (is_sequence()) return fmt::format("sequence({}) of {}", dtype_name(dtype_), elements_->size());
  if (is_none()) return fmt::format("empty {}({})", value_kind_name(kind_), dtype_name(dtype_));
  return fmt::format("{}{}", dtype_name(dtype_), to_string(shape_));
}

}  // namespace kiln
