// Tokenizers and text metrics (kiln/tokenizers.h, kiln/text_metrics.h) for kiln.tokenizers and
// kiln.text_metrics: plain lists and dicts out, the GIL released around the work.
#include <pybind11/stl.h>

#include "bindings.h"
#include "kiln/error.h"
#include "kiln/text_metrics.h"
#include "kiln/tokenizers.h"

namespace kiln::python {

namespace {

using text::Tokenizer;

text::Padding padding_of(const std::string& p) {
  if (p == "do_not_pad") return text::Padding::None;
  if (p == "longest") return text::Padding::Longest;
  if (p == "max_length") return text::Padding::MaxLength;
  throw InvalidArgument("padding must be 'do_not_pad', 'longest' or 'max_length', not '" + p + "'");
}

py::dict encoding_dict(const text::Encoding& e) {
  py::dict d;
  d["ids"] = e.ids;
  d["tokens"] = e.tokens;
  d["offsets"] = e.offsets;
  return d;
}

void register_tokenizer(py::module_& m) {
  py::class_<Tokenizer, std::shared_ptr<Tokenizer>>(m, "Tokenizer")
      .def_property_readonly("kind", &Tokenizer::kind)
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& s, bool add_special_tokens) {
            text::Encoding e;
            {
              py::gil_scoped_release release;
              e = t.encode(s, add_special_tokens);
            }
            return encoding_dict(e);
          },
          py::arg("text"), py::arg("add_special_tokens") = true)
      .def(
          "decode", [](const Tokenizer& t, const std::vector<int64_t>& ids, bool skip) { return t.decode(ids, skip); },
          py::arg("ids"), py::arg("skip_special_tokens") = false)
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def("token_to_id", &Tokenizer::token_to_id)
      .def("id_to_token", &Tokenizer::id_to_token)
      .def("is_special", &Tokenizer::is_special)
      .def("save_pretrained", &Tokenizer::save_pretrained)
      .def("set_pad_token", &Tokenizer::set_pad_token)
      .def("special_tokens",
           [](const Tokenizer& t) {
             const text::SpecialTokens& s = t.special_tokens();
             py::dict d;
             d["bos"] = s.bos;
             d["eos"] = s.eos;
             d["unk"] = s.unk;
             d["pad"] = s.pad;
             return d;
           })
      .def(
          "encode_batch",
          [](const Tokenizer& t, const std::vector<std::string>& texts, bool add_special_tokens,
             const std::string& padding, bool truncation, std::optional<int64_t> max_length, int64_t pad_to_multiple_of,
             bool pad_left, bool truncate_left) {
            text::BatchOptions o;
            o.add_special_tokens = add_special_tokens;
            o.padding = padding_of(padding);
            o.truncation = truncation;
            o.max_length = max_length;
            o.pad_to_multiple_of = pad_to_multiple_of;
            o.pad_left = pad_left;
            o.truncate_left = truncate_left;
            text::BatchEncoding b;
            {
              py::gil_scoped_release release;
              b = t.encode_batch(texts, o);
            }
            return py::make_tuple(b.input_ids, b.attention_mask);
          },
          py::arg("texts"), py::arg("add_special_tokens") = true, py::arg("padding") = "do_not_pad",
          py::arg("truncation") = false, py::arg("max_length") = py::none(), py::arg("pad_to_multiple_of") = 0,
          py::arg("pad_left") = false, py::arg("truncate_left") = false);

  m.def("load_tokenizer", [](const std::string& dir) { return std::shared_ptr<Tokenizer>(text::load_tokenizer(dir)); });
  m.def("load_bpe_tokenizer_json",
        [](const std::string& path) { return std::shared_ptr<Tokenizer>(text::load_bpe_tokenizer_json(path)); });
  m.def(
      "load_bpe_tokenizer",
      [](const std::string& vocab, const std::string& merges, const std::string& bos, const std::string& eos,
         const std::string& unk, const std::string& pad) {
        return std::shared_ptr<Tokenizer>(text::load_bpe_tokenizer(vocab, merges, {bos, eos, unk, pad}));
      },
      py::arg("vocab"), py::arg("merges"), py::arg("bos") = "", py::arg("eos") = "", py::arg("unk") = "",
      py::arg("pad") = "");
  m.def(
      "load_sentencepiece",
      [](const std::string& path, bool add_bos, bool add_eos) {
        return std::shared_ptr<Tokenizer>(text::load_sentencepiece(path, add_bos, add_eos));
      },
      py::arg("path"), py::arg("add_bos") = false, py::arg("add_eos") = true);
  m.def(
      "train_sentencepiece",
      [](const std::string& corpus, const std::string& model, const std::string& model_type, int64_t vocab_size,
         double character_coverage, int64_t pad_id, int64_t eos_id, int64_t unk_id, int64_t bos_id, uint64_t seed) {
        text::SentencePieceTrainOptions o;
        o.model_type = model_type;
        o.vocab_size = vocab_size;
        o.character_coverage = character_coverage;
        o.pad_id = pad_id;
        o.eos_id = eos_id;
        o.unk_id = unk_id;
        o.bos_id = bos_id;
        o.seed = seed;
        py::gil_scoped_release release;
        text::train_sentencepiece(corpus, model, o);
      },
      py::arg("corpus"), py::arg("model"), py::arg("model_type") = "unigram", py::arg("vocab_size") = 8000,
      py::arg("character_coverage") = 1.0, py::arg("pad_id") = 0, py::arg("eos_id") = 1, py::arg("unk_id") = 2,
      py::arg("bos_id") = -1, py::arg("seed") = 0);
}

void register_metrics(py::module_& m) {
  m.def("tokenize_13a", &text::tokenize_13a);
  m.def("rouge_tokenize", &text::rouge_tokenize);
  m.def(
      "corpus_bleu",
      [](const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs,
         const std::string& tokenize, bool lowercase, const std::string& smooth_method,
         std::optional<double> smooth_value, int max_ngram_order, bool effective_order) {
        text::BleuOptions o{tokenize,        lowercase,      smooth_method, smooth_value.value_or(-1.0),
                            max_ngram_order, effective_order};
        const text::BleuScore s = text::corpus_bleu(hyps, refs, o);
        py::dict d;
        d["score"] = s.score;
        d["counts"] = s.counts;
        d["totals"] = s.totals;
        d["precisions"] = s.precisions;
        d["bp"] = s.bp;
        d["sys_len"] = s.sys_len;
        d["ref_len"] = s.ref_len;
        return d;
      },
      py::arg("hypotheses"), py::arg("references"), py::arg("tokenize") = "13a", py::arg("lowercase") = false,
      py::arg("smooth_method") = "none", py::arg("smooth_value") = py::none(), py::arg("max_ngram_order") = 4,
      py::arg("effective_order") = false);
  m.def(
      "corpus_chrf",
      [](const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs, int char_order,
         int word_order, double beta, bool lowercase, bool whitespace, bool eps_smoothing) {
        const text::ChrfScore s =
            text::corpus_chrf(hyps, refs, {char_order, word_order, beta, lowercase, whitespace, eps_smoothing});
        py::dict d;
        d["score"] = s.score;
        d["char_order"] = s.char_order;
        d["word_order"] = s.word_order;
        d["beta"] = s.beta;
        return d;
      },
      py::arg("hypotheses"), py::arg("references"), py::arg("char_order") = 6, py::arg("word_order") = 0,
      py::arg("beta") = 2.0, py::arg("lowercase") = false, py::arg("whitespace") = false,
      py::arg("eps_smoothing") = false);
  m.def(
      "rouge_scores",
      [](const std::string& prediction, const std::string& reference, const std::vector<std::string>& types,
         bool use_stemmer) {
        py::dict d;
        for (const auto& [type, s] : text::rouge_scores(prediction, reference, types, use_stemmer))
          d[py::str(type)] = py::make_tuple(s.precision, s.recall, s.fmeasure);
        return d;
      },
      py::arg("prediction"), py::arg("reference"), py::arg("rouge_types"), py::arg("use_stemmer") = false);
  m.def("corpus_rouge", &text::corpus_rouge, py::arg("predictions"), py::arg("references"), py::arg("rouge_types"),
        py::arg("use_stemmer") = false);
}

}  // namespace

void register_text(py::module_& m) {
  register_tokenizer(m);
  register_metrics(m);
}

}  // namespace kiln::python
