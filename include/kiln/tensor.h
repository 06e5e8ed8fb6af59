// Tensor: a dtype, a shape, strides and a shared buffer. Owning tensors allocate 64-byte-aligned
// memory; views share another tensor's buffer or wrap memory the caller owns.
//
//   kiln::Tensor x = kiln::Tensor::empty(kiln::DType::Float32, {2, 3});
//   float* p = x.data<float>();
//   kiln::Tensor y = x.reshape({3, 2});            // view: same buffer
//   kiln::Tensor z = kiln::Tensor::from_vector<int64_t>({2}, {4, 5});
#pragma once

#include <memory>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/shape.h"

namespace kiln {

inline constexpr size_t kAlignment = 64;

// What a value holds. Kiln's values are tensors, but ONNX graphs may also pass sequences of tensors
// and optionals; those ride in a Tensor handle (Tensor::kind()) so that feeds, the runtime's value
// tables and kernel contexts carry them unchanged. At run time a present optional is simply its
// value (a tensor or a sequence); OptionalTensor / OptionalSequence there mean an empty optional of
// that type. In declared types (ValueInfo, TensorMeta) they mean an optional that may be either.
enum class ValueKind : uint8_t { Tensor, Sequence, OptionalTensor, OptionalSequence };
const char* value_kind_name(ValueKind k);  // "tensor", "sequence", "optional tensor", "optional sequence"
// Whether a value of kind `actual` may stand where `declared` is expected (a tensor where an
// optional tensor is, a sequence where an optional sequence is).
bool value_kind_fits(ValueKind declared, ValueKind actual);

// A block of bytes: owned (64-byte aligned, freed on destruction) or borrowed from the caller.
class Storage {
 public:
  static std::shared_ptr<Storage> allocate(size_t bytes);  // uninitialised
  // `count` empty std::strings (the elements of a string tensor), destroyed with the storage.
  static std::shared_ptr<Storage> allocate_strings(size_t count);
  static std::shared_ptr<Storage> borrow(void* data, size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool owned() const { return owned_; }

 private:
  Storage(void* data, size_t bytes, bool owned) : data_(data), bytes_(bytes), owned_(owned) {}
  void* data_;
  size_t bytes_;
  bool owned_;
  size_t strings_ = 0;  // std::strings constructed in data_
};

// Aligned allocation used by every owning tensor; throws Error when memory is exhausted.
void* aligned_allocate(size_t bytes);
void aligned_free(void* p);

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false
  static Tensor empty(DType dtype, Shape shape);
  static Tensor zeros(DType dtype, Shape shape);
  // A view over memory the caller owns and keeps alive; strides default to contiguous.
  static Tensor wrap(void* data, DType dtype, Shape shape, Strides strides = {});
  // A view over a storage at a byte offset (used by the memory planner).
  static Tensor view_of(std::shared_ptr<Storage> storage, size_t byte_offset, DType dtype, Shape shape);
  template <class T>
  static Tensor from_vector(const Shape& shape, const std::vector<T>& values);
  template <class T>
  static Tensor scalar(T value) {
    return from_vector<T>({}, {value});
  }
  // A sequence of tensors of dtype `dtype` (ONNX's sequence type). The handle shares the list, which
  // never changes: a sequence op makes a new list. Elements are kept as given (contiguous or not).
  static Tensor sequence(DType dtype, std::vector<Tensor> elements);
  // An empty optional (ONNX's optional type without a value) of `kind` OptionalTensor or
  // OptionalSequence, whose elements would be of dtype `dtype`.
  static Tensor none(DType dtype, ValueKind kind = ValueKind::OptionalTensor);
  ValueKind kind() const { return kind_; }
  bool is_tensor() const { return kind_ == ValueKind::Tensor; }
  bool is_sequence() const { return kind_ == ValueKind::Sequence; }
  bool is_none() const { return kind_ == ValueKind::OptionalTensor || kind_ == ValueKind::OptionalSequence; }
  // The tensors of a sequence; TypeError for any other value.
  const std::vector<Tensor>& elements() const;

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const;  // negative i counts from the end
  int64_t numel() const { return kiln::numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t byte_offset() const { return offset_; }

  void* raw_data() { return static_cast<char*>(storage_->data()) + offset_; }
  const void* raw_data() const { return static_cast<const char*>(storage_->data()) + offset_; }
  template <class T>
  T* data() {
    check_dtype(dtype_of<T>);
    return static_cast<T*>(raw_data());
  }
  template <class T>
  const T* data() const {
    check_dtype(dtype_of<T>);
    return static_cast<const T*>(raw_data());
  }
  // Element i of a contiguous tensor as double (any dtype); for tests, printing and small reads.
  double item_as_double(int64_t i = 0) const;
  // All elements of a contiguous integer or float tensor as int64 (shape inputs, axes).
  std::vector<int64_t> to_int64_vector() const;

  Tensor reshape(Shape shape) const;                       // view; needs contiguous and equal numel
  Tensor permute(const std::vector<int64_t>& perm) const;  // strided view
  Tensor contiguous() const;                               // this if contiguous, else a packed copy
  Tensor clone() const;                                    // packed owning copy
  void copy_from(const Tensor& src);                       // same dtype and shape, any strides
  std::string describe() const;                            // "float[2, 3]", "sequence(float) of 3"

 private:
  void check_dtype(DType requested) const;
  void copy_strings_from(const Tensor& src);
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  DType dtype_ = DType::Float32;
  Shape shape_;
  Strides strides_;
  // Sequences and empty optionals: shape [0] over an empty storage (no element to read by mistake)
  // and, for sequences, the shared list.
  ValueKind kind_ = ValueKind::Tensor;
  std::shared_ptr<const std::vector<Tensor>> elements_;
};

template <class T>
Tensor Tensor::from_vector(const Shape& shape, const std::vector<T>& values) {
  Tensor t = empty(dtype_of<T>, shape);
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw ShapeError("Tensor::from_vector: " + std::to_string(values.size()) + " values for shape " +
                     to_string(t.shape()));
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

}  // namespace kiln
