// Kiln's one exception family. Every failure inside the library is a kiln::Error (or a subclass)
// whose message names what is wrong: the file, node, op, tensor and shapes involved, and what to do.
//
//   try { session.run(feeds); }
//   catch (const kiln::ShapeError& e) { std::cerr << e.what() << "\n"; }
#pragma once

#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::exception {
 public:
  explicit Error(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  const std::string& message() const { return message_; }
  // Prefixes context ("node 'conv1' (Conv): ") while the error travels up; keeps the dynamic type.
  void add_context(const std::string& context) { message_ = context + message_; }

 private:
  std::string message_;
};

// The model file or graph is malformed: truncated protobuf, dangling value, cycle, bad attribute.
class InvalidModel : public Error {
  using Error::Error;
};
// A tensor has a shape that does not fit (wrong input shape, incompatible broadcast).
class ShapeError : public Error {
  using Error::Error;
};
// A tensor has a dtype that does not fit.
class TypeError : public Error {
  using Error::Error;
};
// The model or call asks for something Kiln does not implement (unknown op, attribute value).
class Unsupported : public Error {
  using Error::Error;
};
// A file could not be read or written.
class IOError : public Error {
  using Error::Error;
};
// A caller passed a bad argument (unknown input name, missing input, bad option).
class InvalidArgument : public Error {
  using Error::Error;
};
// A name looked up in a mapping is not there (a parameter or property of a checkpoint).
class KeyError : public InvalidArgument {
  using InvalidArgument::InvalidArgument;
};
// A checkpoint or data file is truncated, corrupted, or of another model.
class CorruptFile : public IOError {
  using IOError::IOError;
};

}  // namespace kiln
