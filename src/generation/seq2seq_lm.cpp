// Seq2SeqLM (kiln/generation.h): an encoder-decoder model in optimum's two files or as one model.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <regex>

#include "generation/model_io.h"
#include "kiln/error.h"
#include "kiln/generation.h"
#include "kiln/session.h"

namespace kiln::generation {

namespace {

// Which graph input plays which part, by name; anything else is refused.
struct Roles {
  std::string ids, mask, hidden, decoder_ids, decoder_mask;
};

Roles roles_of(const Session& s, bool whole, const char* what) {
  Roles r;
  // name -> the part it plays, for a whole model and for optimum's decoder
  const std::vector<std::pair<const char*, std::string Roles::*>> parts =
      whole
          ? std::vector<std::pair<const char*, std::string Roles::*>>{{"input_ids", &Roles::ids},
                                                                      {"attention_mask", &Roles::mask},
                                                                      {"decoder_input_ids", &Roles::decoder_ids},
                                                                      {"decoder_attention_mask", &Roles::decoder_mask}}
          : std::vector<std::pair<const char*, std::string Roles::*>>{{"input_ids", &Roles::decoder_ids},
                                                                      {"decoder_input_ids", &Roles::decoder_ids},
                                                                      {"encoder_hidden_states", &Roles::hidden},
                                                                      {"encoder_attention_mask", &Roles::mask},
                                                                      {"attention_mask", &Roles::mask}};
  for (const ValueInfo& v : s.inputs()) {
    auto it = std::find_if(parts.begin(), parts.end(), [&](const auto& p) { return v.name == p.first; });
    if (it == parts.end())
      throw InvalidArgument(fmt::format("Seq2SeqLM: {} input '{}' is not one generation feeds ({})", what, v.name,
                                        whole ? "input_ids, attention_mask, decoder_input_ids, decoder_attention_mask"
                                              : "input_ids, encoder_hidden_states, encoder_attention_mask"));
    r.*(it->second) = v.name;
  }
  if (r.decoder_ids.empty() || (whole ? r.ids.empty() : r.hidden.empty()))
    throw InvalidArgument(
        fmt::format("Seq2SeqLM: the {} needs {}", what,
                    whole ? "input_ids and decoder_input_ids" : "input_ids and encoder_hidden_states"));
  return r;
}

std::string logits_name(const Session& s) {
  for (const ValueInfo& v : s.outputs())
    if (v.name == "logits") return v.name;
  return s.outputs().at(0).name;
}

// Rows [N, ...] of `t` picked by `source` (rows may repeat).
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& source) {
  Shape shape = t.shape();
  shape[0] = static_cast<int64_t>(source.size());
  Tensor out = Tensor::empty(t.dtype(), shape);
  const Tensor in = t.contiguous();
  const size_t row = t.shape()[0] ? in.nbytes() / static_cast<size_t>(t.shape()[0]) : 0;
  for (size_t r = 0; r < source.size(); ++r)
    std::memcpy(static_cast<char*>(out.raw_data()) + r * row,
                static_cast<const char*>(in.raw_data()) + static_cast<size_t>(source[r]) * row, row);
  return out;
}

}  // namespace

// optimum's decoder_with_past_model: each layer's cached self-attention keys and values (which grow
// by a token a step) and cross-attention keys and values (fixed), as inputs past_key_values.N.
// {decoder,encoder}.{key,value}, from the first decoder run's present.N.* outputs.
struct PastNames {
  std::vector<std::string> inputs;  // with_past's inputs: per layer decoder key, value, encoder key, value
  std::vector<std::string> first;   // the decoder's outputs that fill them
  std::vector<std::string> grown;   // with_past's outputs that replace the decoder part
  std::string ids, mask, hidden;    // with_past's other inputs (hidden: unused by optimum, fed if present)
  // Kiln's additions (the zoo's bart and t5): with both, the self-attention cache is kept in blocks.
  std::string decoder_mask, positions;
};

PastNames past_names(const Session& decoder, const Session& with_past) {
  PastNames p;
  size_t layers = 0;
  const std::regex name(R"(past_key_values\.(\d+)\.(decoder|encoder)\.(key|value))");
  for (const ValueInfo& v : with_past.inputs()) {
    std::smatch m;
    if (std::regex_match(v.name, m, name)) layers = std::max(layers, static_cast<size_t>(std::stoul(m[1].str())) + 1);
    else if (v.name == "input_ids" || v.name == "decoder_input_ids") p.ids = v.name;
    else if (v.name == "encoder_attention_mask" || v.name == "attention_mask") p.mask = v.name;
    else if (v.name == "encoder_hidden_states") p.hidden = v.name;
    else if (v.name == "decoder_attention_mask") p.decoder_mask = v.name;
    else if (v.name == "decoder_position_ids") p.positions = v.name;
    else
      throw InvalidArgument(
          fmt::format("Seq2SeqLM: decoder-with-past input '{}' is not one generation feeds (input_ids, "
                      "encoder_attention_mask, past_key_values.N.decoder/encoder.key/value, "
                      "decoder_attention_mask with decoder_position_ids)",
                      v.name));
  }
  if (p.ids.empty() || layers == 0)
    throw InvalidArgument("Seq2SeqLM: the decoder with past needs input_ids and past_key_values.N.* inputs");
  if (p.decoder_mask.empty() != p.positions.empty())
    throw InvalidArgument(
        "Seq2SeqLM: the decoder with past takes decoder_attention_mask and decoder_position_ids together, or neither");
  auto has = [](const std::vector<ValueInfo>& list, const std::string& n) {
    return std::any_of(list.begin(), list.end(), [&](const ValueInfo& v) { return v.name == n; });
  };
  for (size_t l = 0; l < layers; ++l)
    for (const char* part : {"decoder", "encoder"})
      for (const char* kind : {"key", "value"}) {
        const std::string in = fmt::format("past_key_values.{}.{}.{}", l, part, kind);
        const std::string out = fmt::format("present.{}.{}.{}", l, part, kind);
        if (!has(with_past.inputs(), in) || !has(decoder.outputs(), out))
          throw InvalidArgument(
              fmt::format("Seq2SeqLM: the decoder with past takes '{}', which the decoder must "
                          "return as '{}' (optimum's decoder_model with past outputs)",
                          in, out));
        p.inputs.push_back(in);
        p.first.push_back(out);
        if (std::string(part) == "decoder") {
          if (!has(with_past.outputs(), out))
            throw InvalidArgument(fmt::format("Seq2SeqLM: the decoder with past must return '{}'", out));
          p.grown.push_back(out);
        }
      }
  return p;
}

namespace {

constexpr int64_t kCacheBlock = 64;  // self-attention cache slots added at a time (one plan per block)

// x[:, :, from : from + count] of [B, H, L, d] into y[:, :, to : to + count] (float32, contiguous).
void copy_slots(const Tensor& x, int64_t from, Tensor& y, int64_t to, int64_t count) {
  const Shape& xs = x.shape();
  const Shape& ys = y.shape();
  const int64_t rows = xs[0] * xs[1], d = xs[3];
  const float* src = x.data<float>();
  float* dst = y.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + (r * ys[2] + to) * d, src + (r * xs[2] + from) * d,
                static_cast<size_t>(count * d) * sizeof(float));
}

// `filled` slots of x [B, H, *, d] in a zeroed block cache of `capacity` slots.
Tensor with_capacity(const Tensor& x, int64_t filled, int64_t capacity) {
  const Tensor in = x.contiguous();
  if (in.dtype() != DType::Float32)
    throw Unsupported(
        fmt::format("Seq2SeqLM: a block cache holds float32 keys and values, got {}", dtype_name(in.dtype())));
  Tensor out = Tensor::zeros(DType::Float32, {in.shape()[0], in.shape()[1], capacity, in.shape()[3]});
  copy_slots(in, 0, out, 0, filled);
  return out;
}

}  // namespace

struct Seq2SeqLM::State {
  std::optional<Session> encoder;
  Session decoder;
  std::optional<Session> with_past;
  PastNames past;
  std::vector<Tensor> cache;  // as past.inputs
  bool cached = false;
  int64_t filled = 0;  // block cache: the decoder positions held (slots 0 .. filled - 1)
  Roles roles;
  std::string encoder_ids, encoder_mask, logits;
  std::vector<std::vector<int64_t>> source_ids, source_mask, ids;
  Tensor hidden;  // the encoder's output, one row per decoder row
  int64_t calls = 0;

  explicit State(Session dec) : decoder(std::move(dec)) {}

  bool blocked() const { return !past.decoder_mask.empty(); }

  // Before a step: room in the block cache for the new token's keys and values.
  void reserve() {
    for (size_t k = 0; k < cache.size(); ++k)
      if (past.inputs[k].find(".decoder.") != std::string::npos && cache[k].shape()[2] <= filled)
        cache[k] = with_capacity(cache[k], filled, cache[k].shape()[2] + kCacheBlock);
  }

  // The decoder with past on each row's last token; the decoder part of the cache grows by it (in
  // blocks: the token's keys and values go into the next free slot, and the shapes fed stay the
  // same for a block of steps).
  Tensor run_cached() {
    const size_t n = ids.size();
    std::map<std::string, Tensor> feeds;
    std::vector<std::vector<int64_t>> last;
    for (const auto& r : ids) last.push_back({r.back()});
    feeds[past.ids] = detail::rows_tensor(last, 0, 1);
    if (!past.mask.empty()) feeds[past.mask] = detail::rows_tensor(source_mask, 0, source_mask[0].size());
    if (!past.hidden.empty()) feeds[past.hidden] = hidden;
    if (blocked()) {
      reserve();
      const int64_t capacity = cache[0].shape()[2];
      std::vector<int64_t> row(static_cast<size_t>(capacity + 1), 0);
      std::fill(row.begin(), row.begin() + filled, 1);
      row.back() = 1;
      feeds[past.decoder_mask] = detail::rows_tensor(std::vector<std::vector<int64_t>>(n, row), 0, row.size());
      feeds[past.positions] = detail::rows_tensor(std::vector<std::vector<int64_t>>(n, {filled}), 0, 1);
    }
    for (size_t k = 0; k < cache.size(); ++k) feeds[past.inputs[k]] = cache[k];
    std::vector<std::string> wanted = past.grown;
    wanted.push_back(logits);
    auto out = with_past->run(feeds, wanted);
    ++calls;
    for (size_t k = 0, g = 0; k < cache.size(); ++k) {
      if (past.inputs[k].find(".decoder.") == std::string::npos) continue;
      Tensor present = std::move(out.at(past.grown[g++]));
      if (!blocked()) {
        cache[k] = std::move(present);
        continue;
      }
      const Tensor grown = present.contiguous();
      copy_slots(grown, grown.shape()[2] - 1, cache[k], filled, 1);  // the new token: after the block
    }
    if (blocked()) ++filled;
    return detail::last_position(out.at(logits), static_cast<int64_t>(n), "Seq2SeqLM");
  }

  Tensor run() {
    if (cached && !cache.empty()) return run_cached();
    const size_t n = ids.size(), length = ids[0].size();
    std::map<std::string, Tensor> feeds;
    feeds[roles.decoder_ids] = detail::rows_tensor(ids, 0, length);
    if (!roles.mask.empty()) feeds[roles.mask] = detail::rows_tensor(source_mask, 0, source_mask[0].size());
    if (!roles.decoder_mask.empty())
      feeds[roles.decoder_mask] =
          detail::rows_tensor(std::vector<std::vector<int64_t>>(n, std::vector<int64_t>(length, 1)), 0, length);
    if (encoder) feeds[roles.hidden] = hidden;
    else feeds[roles.ids] = detail::rows_tensor(source_ids, 0, source_ids[0].size());
    std::vector<std::string> wanted{logits};
    if (cached) wanted.insert(wanted.end(), past.first.begin(), past.first.end());
    auto out = decoder.run(feeds, wanted);
    ++calls;
    if (cached) {  // the first run fills the cache; the next ones go through the decoder with past
      cache.clear();
      filled = static_cast<int64_t>(length);
      for (size_t k = 0; k < past.first.size(); ++k) {
        Tensor present = std::move(out.at(past.first[k]));
        if (blocked() && past.inputs[k].find(".decoder.") != std::string::npos)
          present = with_capacity(present, filled, (filled / kCacheBlock + 1) * kCacheBlock);
        cache.push_back(std::move(present));
      }
    }
    return detail::last_position(out.at(logits), static_cast<int64_t>(n), "Seq2SeqLM");
  }
};

Seq2SeqLM::Seq2SeqLM(Model encoder, Model decoder, int num_threads) {
  state_ = std::make_unique<State>(Session(std::move(decoder), SessionOptions{num_threads}));
  state_->encoder.emplace(std::move(encoder), SessionOptions{num_threads});
  state_->roles = roles_of(state_->decoder, false, "decoder");
  for (const ValueInfo& v : state_->encoder->inputs()) {
    if (v.name == "input_ids") state_->encoder_ids = v.name;
    else if (v.name == "attention_mask") state_->encoder_mask = v.name;
    else throw InvalidArgument(fmt::format("Seq2SeqLM: encoder input '{}' is not input_ids or attention_mask", v.name));
  }
  if (state_->encoder_ids.empty()) throw InvalidArgument("Seq2SeqLM: the encoder has no input 'input_ids'");
  state_->logits = logits_name(state_->decoder);
}

Seq2SeqLM::Seq2SeqLM(Model encoder, Model decoder, Model decoder_with_past, int num_threads)
    : Seq2SeqLM(std::move(encoder), std::move(decoder), num_threads) {
  state_->with_past.emplace(std::move(decoder_with_past), SessionOptions{num_threads});
  state_->past = past_names(state_->decoder, *state_->with_past);
}

Seq2SeqLM::Seq2SeqLM(Model whole, int num_threads) {
  state_ = std::make_unique<State>(Session(std::move(whole), SessionOptions{num_threads}));
  state_->roles = roles_of(state_->decoder, true, "model");
  state_->logits = logits_name(state_->decoder);
}

Seq2SeqLM::~Seq2SeqLM() = default;
Seq2SeqLM::Seq2SeqLM(Seq2SeqLM&&) noexcept = default;
Seq2SeqLM& Seq2SeqLM::operator=(Seq2SeqLM&&) noexcept = default;
int64_t Seq2SeqLM::calls() const { return state_->calls; }
size_t Seq2SeqLM::decoder_with_past_plans() const { return state_->with_past ? state_->with_past->num_plans() : 0; }

void Seq2SeqLM::encode(const std::vector<std::vector<int64_t>>& prompts, int64_t pad, int64_t copies) {
  State& s = *state_;
  size_t width = 0;
  for (const auto& p : prompts) width = std::max(width, p.size());
  std::vector<std::vector<int64_t>> ids, mask;
  std::vector<int64_t> source;
  for (size_t r = 0; r < prompts.size(); ++r) {
    if (prompts[r].empty()) throw InvalidArgument(fmt::format("generate: source {} is empty", r));
    std::vector<int64_t> row = prompts[r], m(prompts[r].size(), 1);
    row.resize(width, pad);
    m.resize(width, 0);
    ids.push_back(std::move(row));
    mask.push_back(std::move(m));
    for (int64_t c = 0; c < copies; ++c) source.push_back(static_cast<int64_t>(r));
  }
  if (s.encoder) {
    std::map<std::string, Tensor> feeds{{s.encoder_ids, detail::rows_tensor(ids, 0, width)}};
    if (!s.encoder_mask.empty()) feeds[s.encoder_mask] = detail::rows_tensor(mask, 0, width);
    const auto out = s.encoder->run(feeds, {s.encoder->outputs().at(0).name});
    ++s.calls;
    s.hidden = gather_rows(out.begin()->second, source);
  }
  s.source_ids.clear();
  s.source_mask.clear();
  for (int64_t r : source) {
    s.source_ids.push_back(ids[static_cast<size_t>(r)]);
    s.source_mask.push_back(mask[static_cast<size_t>(r)]);
  }
}

Tensor Seq2SeqLM::start(const std::vector<std::vector<int64_t>>& ids, const std::vector<std::vector<int64_t>>&,
                        bool use_cache) {
  State& s = *state_;
  s.cached = use_cache && s.with_past.has_value();
  s.cache.clear();
  if (ids.size() != s.source_ids.size())
    throw InvalidArgument(
        fmt::format("Seq2SeqLM: {} decoder rows for {} encoded rows (encode first)", ids.size(), s.source_ids.size()));
  s.ids = ids;
  return s.run();
}

Tensor Seq2SeqLM::step(const std::vector<int64_t>& tokens) {
  State& s = *state_;
  for (size_t r = 0; r < tokens.size(); ++r) s.ids.at(r).push_back(tokens[r]);
  return s.run();
}

void Seq2SeqLM::reorder(const std::vector<int64_t>& source) {
  State& s = *state_;
  std::vector<std::vector<int64_t>> ids, src, mask;
  for (int64_t r : source) {
    ids.push_back(s.ids.at(static_cast<size_t>(r)));
    src.push_back(s.source_ids.at(static_cast<size_t>(r)));
    mask.push_back(s.source_mask.at(static_cast<size_t>(r)));
  }
  s.ids = std::move(ids);
  s.source_ids = std::move(src);
  s.source_mask = std::move(mask);
  if (s.hidden.defined()) s.hidden = gather_rows(s.hidden, source);
  for (Tensor& c : s.cache) c = gather_rows(c, source);
}

}  // namespace kiln::generation
