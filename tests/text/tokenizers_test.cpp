// Byte-level BPE on a small hand-made vocabulary (every merge traced in the comments) and
// SentencePiece models trained here; tests/python/test_tokenizers.py checks both against
// reference implementations on real text.
#include "kiln/tokenizers.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "kiln/error.h"
#include "test_util.h"
#include "text/spm_backend.h"

namespace kiln::text {
namespace {

void write(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }

// "hello world!" -> hello | Ġwor l d | !: h e, l l, he ll, hell o merge "hello"; Ġ w, o r, Ġw or
// merge "Ġwor", and no merge joins l or d.
void write_gpt2_files(const test::TempDir& dir) {
  write(dir / "vocab.json",
        R"({"h":0,"e":1,"l":2,"o":3,"\u0120":4,"w":5,"r":6,"d":7,"he":8,"ll":9,"hell":10,"hello":11,)"
        R"("\u0120w":12,"or":13,"\u0120wor":14,"<|endoftext|>":15,"!":16,"\u010a":17})");
  write(dir / "merges.txt", "#version: 0.2\nh e\nl l\nhe ll\nhell o\n\xc4\xa0 w\no r\n\xc4\xa0w or\n");
}

TEST(BpeTokenizer, MergesByRankWithOffsets) {
  test::TempDir dir;
  write_gpt2_files(dir);
  auto tok = load_bpe_tokenizer(dir / "vocab.json", dir / "merges.txt");
  const Encoding e = tok->encode("hello world!");
  EXPECT_EQ(e.ids, (std::vector<int64_t>{11, 14, 2, 7, 16}));
  EXPECT_EQ(e.tokens, (std::vector<std::string>{"hello", "\xc4\xa0wor", "l", "d", "!"}));
  EXPECT_EQ(e.offsets, (std::vector<std::pair<size_t, size_t>>{{0, 5}, {5, 9}, {9, 10}, {10, 11}, {11, 12}}));
  EXPECT_EQ(tok->decode(e.ids), "hello world!");
  EXPECT_EQ(tok->kind(), "bpe");
  EXPECT_EQ(tok->vocab_size(), 18);
  // GPT-2's <|endoftext|> is bos, eos and unk, and splits the text as one token.
  EXPECT_EQ(tok->eos_id(), 15);
  EXPECT_EQ(tok->encode("hello<|endoftext|>hello").ids, (std::vector<int64_t>{11, 15, 11}));
  EXPECT_EQ(tok->decode({11, 15, 11}, true), "hellohello");
  EXPECT_TRUE(tok->is_special(15));
  EXPECT_FALSE(tok->is_special(11));
  // A newline is its own pre-token (Ċ); "x" has no symbol in this vocabulary: the unk token.
  EXPECT_EQ(tok->encode("hello\nhello").ids, (std::vector<int64_t>{11, 17, 11}));
  EXPECT_EQ(tok->encode("x").ids, (std::vector<int64_t>{15}));
  EXPECT_THROW(tok->id_to_token(18), InvalidArgument);
  EXPECT_THROW(tok->decode({-1}), InvalidArgument);
}

TEST(BpeTokenizer, DecodeReplacesCutCharactersLikePython) {
  test::TempDir dir;
  // byte symbols of "é" (C3 A9) are Ã and ©; alone, C3 is an invalid sequence.
  write(dir / "vocab.json", R"({"\u00c3":0,"\u00a9":1,"a":2})");
  write(dir / "merges.txt", "");
  auto tok = load_bpe_tokenizer(dir / "vocab.json", dir / "merges.txt");
  EXPECT_EQ(tok->encode("\xc3\xa9").ids, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(tok->decode({0, 1}), "\xc3\xa9");
  EXPECT_EQ(tok->decode({0, 2}),
            "\xef\xbf\xbd"
            "a");
}

TEST(BpeTokenizer, SavesAndLoadsTokenizerJson) {
  test::TempDir dir;
  write_gpt2_files(dir);
  auto tok = load_bpe_tokenizer(dir / "vocab.json", dir / "merges.txt");
  tok->save_pretrained(dir / "saved");
  for (const char* f :
       {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"})
    EXPECT_TRUE(std::filesystem::exists(dir / "saved" / f)) << f;
  auto back = load_tokenizer(dir / "saved");
  for (const std::string text : {"hello world!", "hello<|endoftext|> world"})
    EXPECT_EQ(back->encode(text).ids, tok->encode(text).ids) << text;
  EXPECT_EQ(back->eos_id(), 15);
}

// RoBERTa's layout: a prefix space, <s> ... </s> around the text, offsets without spaces.
// " hello" -> Ġ h e l l o: h e, l l, he ll, hell o, then [Ġ, hello] -> Ġhello by the last merge.
std::string roberta_json() {
  return R"({"added_tokens":[{"id":17,"content":"<s>","special":true},{"id":18,"content":"</s>","special":true},)"
         R"({"id":19,"content":"<pad>","special":true}],"normalizer":null,)"
         R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":true,"use_regex":true},)"
         R"("post_processor":{"type":"RobertaProcessing","sep":["</s>",18],"cls":["<s>",17],"trim_offsets":true},)"
         R"("model":{"type":"BPE","vocab":{"h":0,"e":1,"l":2,"o":3,"\u0120":4,"w":5,"r":6,"d":7,"he":8,"ll":9,)"
         R"("hell":10,"hello":11,"\u0120w":12,"or":13,"\u0120wor":14,"\u0120hello":15,"!":16},)"
         R"("merges":["h e","l l","he ll","hell o","\u0120 w","o r","\u0120w or",["\u0120","hello"]]}})";
}

TEST(BpeTokenizer, ReadsTokenizerJsonWithPrefixSpaceAndTemplate) {
  test::TempDir dir;
  write(dir / "tokenizer.json", roberta_json());
  write(dir / "special_tokens_map.json", R"({"bos_token":"<s>","eos_token":"</s>","pad_token":{"content":"<pad>"}})");
  auto tok = load_tokenizer(dir.path());
  const Encoding e = tok->encode("hello world");
  EXPECT_EQ(e.ids, (std::vector<int64_t>{17, 15, 14, 2, 7, 18}));
  // The added prefix space is not the caller's; trim_offsets leaves Ġwor's space out.
  EXPECT_EQ(e.offsets, (std::vector<std::pair<size_t, size_t>>{{0, 0}, {0, 5}, {6, 9}, {9, 10}, {10, 11}, {0, 0}}));
  EXPECT_EQ(tok->decode(e.ids, true), " hello world");
  EXPECT_EQ(tok->decode(e.ids), "<s> hello world</s>");
  EXPECT_EQ(tok->pad_id(), 19);
  EXPECT_EQ(tok->bos_id(), 17);

  BatchOptions o;
  o.padding = Padding::Longest;
  o.truncation = true;
  o.max_length = 4;
  const BatchEncoding b = tok->encode_batch({"hello world", "hello"}, o);
  // The text is cut to fit; the template's tokens stay.
  EXPECT_EQ(b.input_ids, (std::vector<std::vector<int64_t>>{{17, 15, 14, 18}, {17, 15, 18, 19}}));
  EXPECT_EQ(b.attention_mask, (std::vector<std::vector<int64_t>>{{1, 1, 1, 1}, {1, 1, 1, 0}}));
  EXPECT_EQ(b.input_ids_tensor().shape(), (Shape{2, 4}));
  o.truncation = false;
  o.pad_left = true;
  o.pad_to_multiple_of = 4;
  // " !" is the pre-token Ġ! with no merge: Ġ and ! apart.
  const BatchEncoding left = tok->encode_batch({"hello world", "!"}, o);
  EXPECT_EQ(left.input_ids[1], (std::vector<int64_t>{19, 19, 19, 19, 17, 4, 16, 18}));
  EXPECT_EQ(left.attention_mask[1], (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1}));
}

TEST(BpeTokenizer, ClearErrors) {
  test::TempDir dir;
  EXPECT_THROW(load_tokenizer((dir / "missing").string()), IOError);
  EXPECT_THROW(load_tokenizer(dir.path()), IOError);  // an empty folder
  write(dir / "tokenizer.json", "{\"model\": ");
  EXPECT_THROW(load_tokenizer(dir.path()), CorruptFile);
  write(dir / "tokenizer.json", R"({"model":{"type":"WordPiece","vocab":{}},"pre_tokenizer":null})");
  EXPECT_THROW(load_tokenizer(dir.path()), Unsupported);
  write(
      dir / "tokenizer.json",
      R"({"normalizer":{"type":"NFC"},"model":{"type":"BPE","vocab":{},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"}})");
  EXPECT_THROW(load_tokenizer(dir.path()), Unsupported);
  write(dir / "vocab.json", R"({"a":0})");
  write(dir / "merges.txt", "a b c\n");
  EXPECT_THROW(load_bpe_tokenizer(dir / "vocab.json", dir / "merges.txt"), CorruptFile);
  write(dir / "merges.txt", "");
  auto tok = load_bpe_tokenizer(dir / "vocab.json", dir / "merges.txt");
  EXPECT_THROW(tok->encode("b"), InvalidArgument);  // not in the vocabulary, no unk token
  BatchOptions o;
  o.padding = Padding::Longest;
  EXPECT_THROW(tok->encode_batch({"a", "aa"}, o), InvalidArgument);  // no pad token
  EXPECT_THROW(tok->set_pad_token("<pad>"), InvalidArgument);
  EXPECT_THROW(tok->encode_batch({"a", "aa"}).input_ids_tensor(), InvalidArgument);  // ragged
}

// A corpus of sentences drawn from a small word list (seeded).
std::string write_corpus(const test::TempDir& dir) {
  const std::vector<std::string> words = {"the", "quick", "brown", "fox",   "jumps", "over", "lazy",
                                          "dog", "and",   "runs",  "away",  "from",  "a",    "big",
                                          "red", "barn",  "into",  "green", "fields"};
  std::mt19937 rng(7);
  std::string text;
  for (int line = 0; line < 400; ++line) {
    const int n = 3 + static_cast<int>(rng() % 8);
    for (int w = 0; w < n; ++w) text += (w ? " " : "") + words[rng() % words.size()];
    text += "\n";
  }
  const auto path = dir / "corpus.txt";
  write(path, text);
  return path.string();
}

// Sanitizer builds cannot load libsentencepiece (text/spm_backend.h): they say so, Unsupported.
bool sentencepiece_available() {
  try {
    text::sentencepiece_backend();
    return true;
  } catch (const Unsupported&) {
    return false;
  }
}

TEST(SentencePiece, TrainsEncodesDecodesAndSaves) {
  if (!sentencepiece_available()) GTEST_SKIP() << "no SentencePiece in sanitizer builds";
  test::TempDir dir;
  const std::string corpus = write_corpus(dir);
  for (const std::string type : {"unigram", "bpe"}) {
    SentencePieceTrainOptions o;
    o.model_type = type;
    o.vocab_size = 40;
    const std::string model = (dir / (type + ".model")).string();
    train_sentencepiece(corpus, model, o);
    EXPECT_FALSE(std::filesystem::exists(model + ".training.model")) << "only the model file is written";
    auto tok = load_sentencepiece(model);
    EXPECT_EQ(tok->vocab_size(), 40);
    EXPECT_EQ(tok->pad_id(), 0);
    EXPECT_EQ(tok->eos_id(), 1);
    EXPECT_EQ(tok->unk_id(), 2);
    EXPECT_FALSE(tok->bos_id());
    const std::string text = "the quick brown fox jumps over the lazy dog";
    const Encoding e = tok->encode(text);
    EXPECT_EQ(e.ids.back(), 1);  // </s> added, as T5's tokenizer
    EXPECT_EQ(tok->decode(e.ids, true), text) << type;
    EXPECT_EQ(tok->decode(e.ids), text + "</s>") << type;
    EXPECT_EQ(e.offsets.front().first, 0u);
    EXPECT_EQ(e.offsets[e.offsets.size() - 2].second, text.size());
    tok->save_pretrained(dir / (type + "-folder"));
    auto back = load_tokenizer(dir / (type + "-folder"));
    EXPECT_EQ(back->encode(text).ids, e.ids);
    EXPECT_EQ(back->kind(), "sentencepiece");
  }
}

TEST(SentencePiece, ClearErrors) {
  if (!sentencepiece_available()) GTEST_SKIP() << "no SentencePiece in sanitizer builds";
  test::TempDir dir;
  const std::string corpus = write_corpus(dir);
  SentencePieceTrainOptions o;
  o.vocab_size = 100000;  // more pieces than the corpus has
  EXPECT_THROW(train_sentencepiece(corpus, (dir / "m.model").string(), o), InvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir / "m.model"));
  o.vocab_size = 60;
  o.model_type = "wordpiece";
  EXPECT_THROW(train_sentencepiece(corpus, (dir / "m.model").string(), o), InvalidArgument);
  EXPECT_THROW(train_sentencepiece((dir / "none.txt").string(), (dir / "m.model").string(), {}), IOError);
  write(dir / "bad.model", "not a model");
  EXPECT_THROW(load_sentencepiece((dir / "bad.model").string()), CorruptFile);
  EXPECT_THROW(load_sentencepiece((dir / "none.model").string()), IOError);
}

}  // namespace
}  // namespace kiln::text
