#include "core/scratch.h"

#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

namespace kiln {

namespace {

constexpr size_t kAlign = 64;

struct Chunk {
  void* data = nullptr;
  size_t size = 0;
  ~Chunk() { std::free(data); }
};

// A bump allocator over one chunk; a call that needs more gets further chunks, and at the end of
// the outermost scope they are merged into one chunk of the total size for the next calls.
struct ThreadScratch {
  std::vector<std::unique_ptr<Chunk>> chunks;
  size_t used = 0;   // in the last chunk
  size_t total = 0;  // taken in this scope, over all chunks
  int depth = 0;

  void* take(size_t bytes) {
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    if (bytes == 0) bytes = kAlign;
    if (chunks.empty() || used + bytes > chunks.back()->size) {
      auto c = std::make_unique<Chunk>();
      c->size = std::max(bytes, chunks.empty() ? size_t{1} << 20 : chunks.back()->size);
      c->data = std::aligned_alloc(kAlign, c->size);
      if (c->data == nullptr) throw std::bad_alloc();
      chunks.push_back(std::move(c));
      used = 0;
    }
    void* p = static_cast<char*>(chunks.back()->data) + used;
    used += bytes;
    total += bytes;
    return p;
  }

  void reset() {
    if (chunks.size() > 1) {  // keep one chunk large enough for everything this scope took
      size_t size = 0;
      for (const auto& c : chunks) size += c->size;
      chunks.clear();
      auto c = std::make_unique<Chunk>();
      c->size = std::max(size, total);
      c->data = std::aligned_alloc(kAlign, c->size);
      if (c->data == nullptr) throw std::bad_alloc();
      chunks.push_back(std::move(c));
    }
    used = 0;
    total = 0;
  }
};

ThreadScratch& scratch() {
  thread_local ThreadScratch s;
  return s;
}

}  // namespace

void* scratch_take(size_t bytes) { return scratch().take(bytes); }

ScratchScope::ScratchScope() { ++scratch().depth; }

ScratchScope::~ScratchScope() {
  ThreadScratch& s = scratch();
  if (--s.depth == 0) {
    try {
      s.reset();
    } catch (...) {  // out of memory while merging: drop the chunks, the next call allocates anew
      s.chunks.clear();
      s.used = s.total = 0;
    }
  }
}

}  // namespace kiln
