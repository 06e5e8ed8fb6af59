#include "core/content_hash.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/stat.h>

namespace kiln {

uint64_t fnv1a(std::string_view bytes, uint64_t h) {
  for (const unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string library_build_id() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&library_build_id), &info) == 0 || info.dli_fname == nullptr)
    return "unknown";
  struct stat st {};
  if (stat(info.dli_fname, &st) != 0) return "unknown";
  return fmt::format("{}:{}:{}", st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

}  // namespace kiln
