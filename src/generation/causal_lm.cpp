// CausalLM (kiln/generation.h): a decoder-only ONNX model fed as Hugging Face feeds it, with a KV
// cache in blocks when the model takes past keys and values.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <regex>

#include "generation/model_io.h"
#include "kiln/error.h"
#include "kiln/generation.h"
#include "kiln/session.h"

namespace kiln::generation {

namespace {

using detail::rows_tensor;

// The feeds a causal LM's inputs are, found by name.
struct Inputs {
  int ids = -1, mask = -1, positions = -1;
  std::vector<int> past;          // per layer: key, value (positions among the session's inputs)
  std::vector<int> present;       // the matching outputs
  std::vector<Shape> past_shape;  // [-1, H, -1, d]
  std::vector<DType> past_dtype;
  int logits = 0;
};

Inputs find_inputs(const Session& s) {
  Inputs f;
  const std::regex past_name(R"(past_key_values\.(\d+)\.(key|value))");
  std::vector<std::pair<std::string, int>> past;  // "N.kind" -> input
  const auto& in = s.inputs();
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string& n = in[i].name;
    std::smatch m;
    if (n == "input_ids") f.ids = static_cast<int>(i);
    else if (n == "attention_mask") f.mask = static_cast<int>(i);
    else if (n == "position_ids") f.positions = static_cast<int>(i);
    else if (std::regex_match(n, m, past_name)) past.emplace_back(n, static_cast<int>(i));
    else
      throw InvalidArgument(
          fmt::format("CausalLM: input '{}' is not one generation feeds (input_ids, attention_mask, "
                      "position_ids, past_key_values.N.key / .value)",
                      n));
  }
  if (f.ids < 0) throw InvalidArgument("CausalLM: the model has no input 'input_ids'");
  const auto& out = s.outputs();
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].name == "logits") f.logits = static_cast<int>(i);
  for (size_t layer = 0; layer < past.size() / 2; ++layer)
    for (const char* kind : {"key", "value"}) {
      const std::string name = fmt::format("past_key_values.{}.{}", layer, kind);
      const std::string present = fmt::format("present.{}.{}", layer, kind);
      auto it = std::find_if(past.begin(), past.end(), [&](const auto& p) { return p.first == name; });
      auto ot = std::find_if(out.begin(), out.end(), [&](const ValueInfo& v) { return v.name == present; });
      if (it == past.end() || ot == out.end())
        throw InvalidArgument(
            fmt::format("CausalLM: past inputs must come in pairs with outputs: '{}' and '{}' for "
                        "layers 0..{}",
                        name, present, past.size() / 2 - 1));
      const ValueInfo& v = in[static_cast<size_t>(it->second)];
      if (!v.has_shape || v.dims.size() != 4 || v.dims[1].value <= 0 || v.dims[3].value <= 0)
        throw InvalidArgument(
            fmt::format("CausalLM: '{}' must be declared [batch, heads, past, head_dim] with fixed "
                        "heads and head_dim, got {}",
                        name, v.describe()));
      f.past.push_back(it->second);
      f.present.push_back(static_cast<int>(ot - out.begin()));
      f.past_shape.push_back({-1, v.dims[1].value, -1, v.dims[3].value});
      f.past_dtype.push_back(v.has_type ? v.dtype : DType::Float32);
    }
  if (past.size() % 2 != 0 || f.past.size() != past.size())
    throw InvalidArgument("CausalLM: every layer needs both past_key_values.N.key and .value");
  if (!f.past.empty() && (f.mask < 0 || f.positions < 0))
    throw InvalidArgument("CausalLM: a model with past inputs needs attention_mask and position_ids inputs");
  return f;
}

// Hugging Face's position ids for a left-padded batch: the count of real tokens before each one
// (cumsum(mask) - 1), 1 on the padding.
std::vector<std::vector<int64_t>> positions_of(const std::vector<std::vector<int64_t>>& mask) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& row : mask) {
    std::vector<int64_t> p(row.size());
    int64_t seen = 0;
    for (size_t i = 0; i < row.size(); ++i) {
      seen += row[i];
      p[i] = row[i] ? seen - 1 : 1;
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

struct CausalLM::State {
  Session session;
  Inputs f;
  int64_t block;
  bool cached = false;
  std::vector<std::vector<int64_t>> ids, mask;
  std::vector<Tensor> cache;  // per past input: [N, H, capacity, d]
  int64_t filled = 0, capacity = 0, calls = 0;

  State(Model model, int threads, int64_t cache_block)
      : session(std::move(model), SessionOptions{threads}), f(find_inputs(session)), block(cache_block) {}

  int64_t rows() const { return static_cast<int64_t>(ids.size()); }

  // Grows the cache to hold `needed` positions, in whole blocks (the new part zero, masked).
  void reserve(int64_t needed) {
    if (needed <= capacity) return;
    const int64_t grown = (needed + block - 1) / block * block;
    for (size_t k = 0; k < cache.size(); ++k) {
      Shape s = f.past_shape[k];
      s[0] = rows();
      s[2] = grown;
      Tensor next = Tensor::zeros(f.past_dtype[k], s);
      if (capacity > 0) copy_positions(cache[k], 0, next, 0, filled);
      cache[k] = std::move(next);
    }
    capacity = grown;
  }

  // dst[:, :, to : to + count] = src[:, :, from : from + count] for [N, H, L, d] tensors.
  static void copy_positions(const Tensor& src, int64_t from, Tensor& dst, int64_t to, int64_t count) {
    const int64_t n = src.shape()[0] * src.shape()[1], d = src.shape()[3];
    const size_t es = dtype_size(src.dtype()), row = static_cast<size_t>(count * d) * es;
    const auto* s = static_cast<const char*>(src.raw_data());
    auto* o = static_cast<char*>(dst.raw_data());
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(o + static_cast<size_t>((i * dst.shape()[2] + to) * d) * es,
                  s + static_cast<size_t>((i * src.shape()[2] + from) * d) * es, row);
  }

  // Runs the last `fresh` positions of every row (all of them without the cache); returns the last
  // position's logits [N, V] and, with the cache, appends the new keys and values.
  Tensor run(int64_t fresh) {
    const int64_t length = static_cast<int64_t>(ids[0].size());
    const int64_t start = cached ? length - fresh : 0;
    if (cached) reserve(filled + fresh);
    std::vector<Tensor> in(session.inputs().size());
    in[static_cast<size_t>(f.ids)] = rows_tensor(ids, static_cast<size_t>(start), static_cast<size_t>(length - start));
    if (f.positions >= 0)
      in[static_cast<size_t>(f.positions)] =
          rows_tensor(positions_of(mask), static_cast<size_t>(start), static_cast<size_t>(length - start));
    if (f.mask >= 0) {
      if (cached) {  // [the cache: filled positions as the rows' masks, the rest 0 | the fresh ones]
        std::vector<std::vector<int64_t>> m(ids.size(), std::vector<int64_t>(static_cast<size_t>(capacity + fresh), 0));
        for (size_t r = 0; r < m.size(); ++r) {
          std::copy(mask[r].begin(), mask[r].begin() + filled, m[r].begin());
          std::copy(mask[r].begin() + start, mask[r].end(), m[r].begin() + capacity);
        }
        in[static_cast<size_t>(f.mask)] = rows_tensor(m, 0, static_cast<size_t>(capacity + fresh));
      } else {
        in[static_cast<size_t>(f.mask)] = rows_tensor(mask, 0, static_cast<size_t>(length));
      }
    }
    for (size_t k = 0; k < f.past.size(); ++k) {
      if (!cached) reserve_empty_past(k);
      in[static_cast<size_t>(f.past[k])] = cache[k];
    }
    std::vector<Tensor> out(session.outputs().size());
    session.run_with_binding(in, out);
    ++calls;
    if (cached) {
      for (size_t k = 0; k < f.past.size(); ++k)
        copy_positions(out[static_cast<size_t>(f.present[k])], capacity, cache[k], filled, fresh);
      filled += fresh;
    }
    return last_logits(out[static_cast<size_t>(f.logits)]);
  }

  // A model with past inputs run without the cache still needs them: one masked position.
  void reserve_empty_past(size_t k) {
    if (cache.size() != f.past.size()) cache.resize(f.past.size());
    if (cache[k].defined() && cache[k].shape()[0] == rows()) return;
    Shape s = f.past_shape[k];
    s[0] = rows();
    s[2] = 0;
    cache[k] = Tensor::zeros(f.past_dtype[k], s);
  }

  Tensor last_logits(const Tensor& logits) const { return detail::last_position(logits, rows(), "CausalLM"); }
};

CausalLM::CausalLM(Model model, int num_threads, int64_t cache_block) {
  if (cache_block < 1) throw InvalidArgument(fmt::format("CausalLM: cache_block {} < 1", cache_block));
  state_ = std::make_unique<State>(std::move(model), num_threads, cache_block);
}
CausalLM::~CausalLM() = default;
CausalLM::CausalLM(CausalLM&&) noexcept = default;
CausalLM& CausalLM::operator=(CausalLM&&) noexcept = default;

bool CausalLM::has_cache_inputs() const { return !state_->f.past.empty(); }
int64_t CausalLM::num_layers() const { return static_cast<int64_t>(state_->f.past.size() / 2); }
int64_t CausalLM::calls() const { return state_->calls; }

Tensor CausalLM::start(const std::vector<std::vector<int64_t>>& ids, const std::vector<std::vector<int64_t>>& mask,
                       bool use_cache) {
  State& s = *state_;
  if (ids.empty() || ids[0].empty()) throw InvalidArgument("CausalLM: no prompt tokens to start from");
  for (size_t r = 0; r < ids.size(); ++r)
    if (ids[r].size() != ids[0].size() || mask[r].size() != ids[0].size())
      throw InvalidArgument(fmt::format("CausalLM: row {} has {} ids and {} mask values; row 0 has {}", r,
                                        ids[r].size(), mask[r].size(), ids[0].size()));
  s.ids = ids;
  s.mask = mask;
  s.cached = use_cache && has_cache_inputs();
  s.cache.assign(s.cached ? s.f.past.size() : 0, Tensor());
  s.filled = s.capacity = 0;
  return s.run(static_cast<int64_t>(ids[0].size()));
}

Tensor CausalLM::step(const std::vector<int64_t>& tokens) {
  State& s = *state_;
  if (tokens.size() != s.ids.size())
    throw InvalidArgument(fmt::format("CausalLM: {} tokens for {} rows", tokens.size(), s.ids.size()));
  for (size_t r = 0; r < tokens.size(); ++r) {
    s.ids[r].push_back(tokens[r]);
    s.mask[r].push_back(1);
  }
  return s.run(1);
}

void CausalLM::reorder(const std::vector<int64_t>& source) {
  State& s = *state_;
  std::vector<std::vector<int64_t>> ids, mask;
  for (int64_t r : source) {
    ids.push_back(s.ids.at(static_cast<size_t>(r)));
    mask.push_back(s.mask.at(static_cast<size_t>(r)));
  }
  s.ids = std::move(ids);
  s.mask = std::move(mask);
  for (Tensor& c : s.cache) {
    if (!c.defined() || c.shape()[2] == 0) continue;
    Tensor next = Tensor::empty(c.dtype(), c.shape());
    const size_t row = c.nbytes() / static_cast<size_t>(c.shape()[0]);
    for (size_t r = 0; r < source.size(); ++r)
      std::memcpy(static_cast<char*>(next.raw_data()) + r * row,
                  static_cast<const char*>(c.raw_data()) + static_cast<size_t>(source[r]) * row, row);
    c = std::move(next);
  }
}

}  // namespace kiln::generation
