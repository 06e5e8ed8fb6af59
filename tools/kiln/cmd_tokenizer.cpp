// `kiln tokenizer train|encode|decode`: SentencePiece training into a tokenizer folder, and any
// tokenizer folder (kiln/tokenizers.h) applied to text or ids.
//
//   kiln tokenizer train --model-type unigram --vocab-size 8000 corpus.txt --output tok/
//   kiln tokenizer encode tok/ --text "Hello world"          # ids, one line (--tokens: the pieces)
//   kiln tokenizer decode tok/ --ids 8774,296,1 [--skip-special-tokens]
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "commands.h"
#include "kiln/error.h"
#include "kiln/tokenizers.h"
#include "options.h"

namespace kiln::cli {
namespace {

struct TrainArgs {
  std::string corpus, output;
  text::SentencePieceTrainOptions options;
  bool add_bos = false;
};

void train(const TrainArgs& a) {
  namespace fs = std::filesystem;
  fs::create_directories(a.output);
  const std::string model = (fs::path(a.output) / "kiln-trained.model").string();
  text::train_sentencepiece(a.corpus, model, a.options);
  auto tok = text::load_sentencepiece(model, a.add_bos, !a.add_bos);
  tok->save_pretrained(a.output);
  fs::remove(model);
  std::cout << fmt::format("kiln: trained a {} SentencePiece model of {} pieces on '{}' into '{}'\n",
                           a.options.model_type, tok->vocab_size(), a.corpus, a.output);
}

Action setup(CLI::App& app) {
  app.require_subcommand(1);
  auto args = std::make_shared<TrainArgs>();
  CLI::App* t = app.add_subcommand("train", "Train a SentencePiece model on a text file (one sentence a line)");
  t->add_option("corpus", args->corpus, "The text file")->required();
  t->add_option("-o,--output", args->output, "The tokenizer folder to write")->required();
  t->add_option("--model-type", args->options.model_type, "unigram, bpe, char or word")->capture_default_str();
  t->add_option("--vocab-size", args->options.vocab_size, "Pieces in the vocabulary")->capture_default_str();
  t->add_option("--character-coverage", args->options.character_coverage, "Share of characters covered")
      ->capture_default_str();
  t->add_option("--seed", args->options.seed, "SentencePiece's sampling seed")->capture_default_str();
  t->add_flag("--add-bos", args->add_bos, "Encode with <s> first (LLaMA) instead of </s> last (T5)");

  auto dir = std::make_shared<std::string>();
  auto input = std::make_shared<std::string>();
  auto flags = std::make_shared<std::pair<bool, bool>>(false, false);  // tokens / skip special tokens, no special
  CLI::App* e = app.add_subcommand("encode", "Print the ids of a text");
  e->add_option("tokenizer", *dir, "A tokenizer folder")->required();
  e->add_option("--text", *input, "The text")->required();
  e->add_flag("--tokens", flags->first, "Print the tokens instead of the ids");
  e->add_flag("--no-special-tokens", flags->second, "Leave out the special tokens the tokenizer adds");
  auto encode = [dir, input, flags] {
    const text::Encoding enc = text::load_tokenizer(*dir)->encode(*input, !flags->second);
    std::vector<std::string> out;
    for (size_t i = 0; i < enc.ids.size(); ++i)
      out.push_back(flags->first ? enc.tokens[i] : std::to_string(enc.ids[i]));
    std::cout << fmt::format("{}\n", fmt::join(out, flags->first ? " " : ","));
  };
  CLI::App* d = app.add_subcommand("decode", "Print the text of comma-separated ids");
  d->add_option("tokenizer", *dir, "A tokenizer folder")->required();
  d->add_option("--ids", *input, "The ids, comma-separated")->required();
  d->add_flag("--skip-special-tokens", flags->second, "Leave the special tokens out of the text");
  return [=] {
    if (t->parsed()) {
      if (args->add_bos) args->options.bos_id = 3;
      train(*args);
    } else if (e->parsed()) {
      encode();
    } else if (d->parsed()) {
      std::cout << text::load_tokenizer(*dir)->decode(parse_ids(*input, "--ids"), flags->second) << "\n";
    }
  };
}

const CommandRegistrar reg({"tokenizer",
                            "Train a SentencePiece tokenizer, or encode and decode with a tokenizer folder", setup});

}  // namespace
}  // namespace kiln::cli
