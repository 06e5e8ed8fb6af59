// `kiln generate MODEL`: text generation from a causal LM's ONNX model (kiln/generation.h), with
// a tokenizer folder for text in and out, or token ids.
//
//   kiln generate gpt2_with_past.onnx --tokenizer tok/ --prompt "Once upon a time" --max-new-tokens 40
//   kiln generate model.onnx --input-ids 464,3290 --num-beams 4 --num-return-sequences 2
//   kiln generate model.onnx --tokenizer tok/ --input-file prompts.txt --do-sample --top-p 0.9 --seed 1
//   kiln generate decoder_model.onnx --encoder encoder_model.onnx --tokenizer tok/ --prompt "..."
//                 --decoder-start-token-id 0 --num-beams 4   (an encoder-decoder: one command line)
//
// Every prompt line prints its sequences, one per line: the new text (or ids) only.
#include <fmt/format.h>

#include <fstream>
#include <functional>
#include <iostream>

#include "commands.h"
#include "kiln/error.h"
#include "kiln/generation.h"
#include "kiln/onnx_io.h"
#include "kiln/tokenizers.h"
#include "options.h"

namespace kiln::cli {
namespace {

struct Args {
  std::string model, encoder, with_past, tokenizer, input_file, config_file;
  bool seq2seq = false;
  std::vector<std::string> prompts;
  std::vector<std::string> input_ids;
  generation::GenerationConfig g;
  std::optional<int64_t> max_new_tokens, pad;
  std::vector<int64_t> eos;
  std::string early_stopping = "false";
  bool no_cache = false, skip_special_tokens = true;
  int threads = 0;
};

// The config file's fields, then each flag given on the command line over them.
generation::GenerationConfig config_of(Args& a, const CLI::App& app, const text::Tokenizer* tok) {
  generation::GenerationConfig g = a.g;
  if (!a.config_file.empty()) {
    std::ifstream in(a.config_file);
    if (!in) throw IOError(fmt::format("--generation-config '{}' cannot be read", a.config_file));
    g = generation::GenerationConfig::from_json(std::string(std::istreambuf_iterator<char>(in), {}));
    using G = generation::GenerationConfig;
    const std::vector<std::pair<const char*, std::function<void(G&)>>> flags = {
        {"--max-length", [&](G& c) { c.max_length = a.g.max_length; }},
        {"--min-new-tokens", [&](G& c) { c.min_new_tokens = a.g.min_new_tokens; }},
        {"--do-sample", [&](G& c) { c.do_sample = a.g.do_sample; }},
        {"--num-beams", [&](G& c) { c.num_beams = a.g.num_beams; }},
        {"--num-return-sequences", [&](G& c) { c.num_return_sequences = a.g.num_return_sequences; }},
        {"--length-penalty", [&](G& c) { c.length_penalty = a.g.length_penalty; }},
        {"--temperature", [&](G& c) { c.temperature = a.g.temperature; }},
        {"--top-k", [&](G& c) { c.top_k = a.g.top_k; }},
        {"--top-p", [&](G& c) { c.top_p = a.g.top_p; }},
        {"--repetition-penalty", [&](G& c) { c.repetition_penalty = a.g.repetition_penalty; }},
        {"--no-repeat-ngram-size", [&](G& c) { c.no_repeat_ngram_size = a.g.no_repeat_ngram_size; }},
        {"--seed", [&](G& c) { c.seed = a.g.seed; }},
        {"--decoder-start-token-id", [&](G& c) { c.decoder_start_token_id = a.g.decoder_start_token_id; }}};
    for (const auto& [flag, copy] : flags)
      if (app.count(flag) > 0) copy(g);
  }
  if (a.max_new_tokens) g.max_new_tokens = a.max_new_tokens;
  if (!a.eos.empty()) g.eos_token_id = a.eos;
  if (a.pad) g.pad_token_id = a.pad;
  if (a.no_cache) g.use_cache = false;
  if (a.early_stopping == "true") g.early_stopping = generation::EarlyStopping::True;
  else if (a.early_stopping == "never") g.early_stopping = generation::EarlyStopping::Never;
  else if (a.early_stopping == "false")
    g.early_stopping = app.count("--early-stopping") ? generation::EarlyStopping::False : g.early_stopping;
  else throw InvalidArgument("--early-stopping must be true, false or never");
  if (tok != nullptr) {  // the tokenizer's eos and pad, unless given
    if (g.eos_token_id.empty() && tok->eos_id()) g.eos_token_id = {*tok->eos_id()};
    if (!g.pad_token_id && tok->pad_id()) g.pad_token_id = tok->pad_id();
  }
  return g;
}

void run(Args& a, const CLI::App& app) {
  std::unique_ptr<text::Tokenizer> tok;
  if (!a.tokenizer.empty()) tok = text::load_tokenizer(a.tokenizer);
  std::vector<std::vector<int64_t>> prompts;
  std::vector<std::string> texts = a.prompts;
  if (!a.input_file.empty()) {
    std::ifstream in(a.input_file);
    if (!in) throw IOError(fmt::format("--input-file '{}' cannot be read", a.input_file));
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(line);
  }
  if (!texts.empty() && !tok) throw InvalidArgument("--prompt and --input-file need --tokenizer (or give --input-ids)");
  for (const std::string& t : texts) prompts.push_back(tok->encode(t, false).ids);
  for (const std::string& ids : a.input_ids) prompts.push_back(parse_ids(ids, "--input-ids"));
  if (prompts.empty()) throw InvalidArgument("nothing to generate from: give --prompt, --input-file or --input-ids");
  if (!a.with_past.empty() && a.encoder.empty()) throw InvalidArgument("--decoder-with-past needs --encoder");
  const generation::GenerationConfig g = config_of(a, app, tok.get());
  generation::GenerateOutput out;
  if (!a.encoder.empty() && !a.with_past.empty()) {
    generation::Seq2SeqLM lm(load_model(a.encoder), load_model(a.model), load_model(a.with_past), a.threads);
    out = generation::generate(lm, prompts, g);
  } else if (!a.encoder.empty()) {
    generation::Seq2SeqLM lm(load_model(a.encoder), load_model(a.model), a.threads);
    out = generation::generate(lm, prompts, g);
  } else if (a.seq2seq) {
    generation::Seq2SeqLM lm(load_model(a.model), a.threads);
    out = generation::generate(lm, prompts, g);
  } else {
    generation::CausalLM lm(load_model(a.model), a.threads);
    out = generation::generate(lm, prompts, g);
  }
  for (const auto& seq : out.sequences) {
    const std::vector<int64_t> fresh(seq.begin() + out.prompt_length,
                                     seq.end());  // an encoder-decoder's start token too
    if (tok) {
      std::cout << tok->decode(fresh, a.skip_special_tokens) << "\n";
    } else {
      std::vector<std::string> s;
      for (int64_t id : fresh) s.push_back(std::to_string(id));
      std::cout << fmt::format("{}\n", fmt::join(s, ","));
    }
  }
}

Action setup(CLI::App& app) {
  auto a = std::make_shared<Args>();
  generation::GenerationConfig& g = a->g;
  app.add_option("model", a->model, "A causal LM's ONNX model (with past_key_values inputs for the KV cache)")
      ->required();
  app.add_option("--encoder", a->encoder,
                 "An encoder-decoder model's encoder (optimum's encoder_model.onnx); MODEL "
                 "is then its decoder");
  app.add_option("--decoder-with-past", a->with_past,
                 "With --encoder: optimum's decoder_with_past_model.onnx, for the KV cache");
  app.add_flag("--seq2seq", a->seq2seq,
               "MODEL is a whole encoder-decoder model (input_ids, attention_mask, "
               "decoder_input_ids -> logits)");
  app.add_option("--decoder-start-token-id", g.decoder_start_token_id, "Where an encoder-decoder's decoder starts");
  app.add_option("--tokenizer", a->tokenizer, "A tokenizer folder (text in and out)");
  app.add_option("--prompt", a->prompts, "A prompt (repeat for a batch)");
  app.add_option("--input-file", a->input_file, "Prompts, one a line");
  app.add_option("--input-ids", a->input_ids, "A prompt as comma-separated ids (repeat for a batch)");
  app.add_option("--generation-config", a->config_file, "A generation_config.json (flags given override it)");
  app.add_option("--max-new-tokens", a->max_new_tokens, "New tokens at most");
  app.add_option("--max-length", g.max_length, "Tokens at most, prompt included (HF's default 20)")
      ->capture_default_str();
  app.add_option("--min-new-tokens", g.min_new_tokens, "New tokens at least");
  app.add_flag("--do-sample", g.do_sample, "Sample instead of searching");
  app.add_option("--num-beams", g.num_beams, "Beam search with this many beams")->capture_default_str();
  app.add_option("--num-return-sequences", g.num_return_sequences, "Sequences per prompt")->capture_default_str();
  app.add_option("--early-stopping", a->early_stopping, "Beam search: true, false or never")->capture_default_str();
  app.add_option("--length-penalty", g.length_penalty, "Beam search's length exponent")->capture_default_str();
  app.add_option("--temperature", g.temperature, "Sampling temperature")->capture_default_str();
  app.add_option("--top-k", g.top_k, "Sampling: the k best tokens (0: all)")->capture_default_str();
  app.add_option("--top-p", g.top_p, "Sampling: the nucleus of this mass")->capture_default_str();
  app.add_option("--repetition-penalty", g.repetition_penalty, "Penalty on tokens already present")
      ->capture_default_str();
  app.add_option("--no-repeat-ngram-size", g.no_repeat_ngram_size, "No n-gram of this size twice")
      ->capture_default_str();
  app.add_option("--eos-token-id", a->eos, "End-of-sequence ids (default: the tokenizer's)");
  app.add_option("--pad-token-id", a->pad, "Padding id (default: the tokenizer's, else the eos)");
  app.add_option("--seed", g.seed, "Sampling seed")->capture_default_str();
  app.add_flag("--no-cache", a->no_cache, "Rerun the whole sequence for every token (no KV cache)");
  app.add_option("-t,--threads", a->threads, "Threads (0: all cores)");
  return [a, &app] { run(*a, app); };
}

const CommandRegistrar reg({"generate", "Generate text from a causal LM (greedy, sampling, beam search)", setup});

}  // namespace
}  // namespace kiln::cli
