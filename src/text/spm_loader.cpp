// Loads libkiln_sentencepiece.so from beside libkiln.so, with RTLD_DEEPBIND (text/spm_backend.h).
#include <dlfcn.h>
#include <fmt/format.h>

#include <filesystem>
#include <mutex>

#include "kiln/error.h"
#include "text/spm_backend.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KILN_SPM_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KILN_SPM_SANITIZED 1
#endif

namespace kiln::text {

namespace {

std::string library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&sentencepiece_backend), &info) == 0 || info.dli_fname == nullptr)
    return "libkiln_sentencepiece.so";
  return (std::filesystem::path(info.dli_fname).parent_path() / "libkiln_sentencepiece.so").string();
}

const SpmBackend* load() {
#ifdef KILN_SPM_SANITIZED
  throw Unsupported(
      "SentencePiece tokenizers are not available in sanitizer builds: libsentencepiece's own protobuf "
      "must be loaded with RTLD_DEEPBIND, which the sanitizers refuse");
#else
  const std::string path = library_path();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (handle == nullptr)
    throw IOError(
        fmt::format("SentencePiece: cannot load '{}': {} (it is built with libkiln.so; Debian's "
                    "libsentencepiece0 must be installed)",
                    path, dlerror()));
  auto factory = reinterpret_cast<SpmBackendFactory>(dlsym(handle, kSpmBackendSymbol));
  if (factory == nullptr) throw IOError(fmt::format("SentencePiece: '{}' has no {}", path, kSpmBackendSymbol));
  return factory();  // the library stays loaded for the process's life
#endif
}

}  // namespace

const SpmBackend& sentencepiece_backend() {
  static std::mutex mutex;
  static const SpmBackend* backend = nullptr;
  const std::lock_guard lock(mutex);
  if (backend == nullptr) backend = load();
  return *backend;
}

}  // namespace kiln::text
