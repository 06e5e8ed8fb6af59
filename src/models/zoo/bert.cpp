// The zoo's "bert": Hugging Face's BertForSequenceClassification (modeling_bert.py, eager
// attention) with its module tree, state_dict keys, BertConfig names and defaults, and _init_weights.
//
//   bert.embeddings.{word,position,token_type}_embeddings, bert.embeddings.LayerNorm
//   bert.encoder.layer.N.attention.self.{query,key,value}, .attention.output.{dense,LayerNorm}
//   bert.encoder.layer.N.intermediate.dense, .output.{dense,LayerNorm}
//   bert.pooler.dense, classifier
//
// Inputs input_ids, attention_mask (1 = token, 0 = padding) and token_type_ids, all int64 [B, S];
// output logits [B, num_labels]. HF's non-persistent position_ids / token_type_ids buffers are
// not state: positions are computed from S at run time.
#include <fmt/format.h>

#include <cmath>

#include "kiln/error.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/zoo.h"
#include "models/nn/attention_ops.h"
#include "models/zoo/transformer_util.h"

namespace kiln::nn::zoo {

namespace {

using namespace transformers;
const std::string kModel = "bert";

struct BertConfig {
  int64_t vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size;
  std::string hidden_act;
  double hidden_dropout_prob, attention_probs_dropout_prob, classifier_dropout;
  int64_t max_position_embeddings, type_vocab_size, pad_token_id, num_labels;
  double initializer_range, layer_norm_eps;

  static BertConfig from(const Config& c) {
    BertConfig b;
    b.vocab_size = config_int(c, kModel, "vocab_size");
    b.hidden_size = config_int(c, kModel, "hidden_size");
    b.num_hidden_layers = config_int(c, kModel, "num_hidden_layers", 0);
    b.num_attention_heads = config_int(c, kModel, "num_attention_heads");
    require_divisible(kModel, "hidden_size", b.hidden_size, "num_attention_heads", b.num_attention_heads);
    b.intermediate_size = config_int(c, kModel, "intermediate_size");
    b.hidden_act = config_string(c, kModel, "hidden_act");
    make_activation(kModel, "hidden_act", b.hidden_act);  // fails before any weight is drawn
    b.hidden_dropout_prob = config_prob(c, kModel, "hidden_dropout_prob");
    b.attention_probs_dropout_prob = config_prob(c, kModel, "attention_probs_dropout_prob");
    // HF: classifier_dropout if not None else hidden_dropout_prob
    b.classifier_dropout =
        c.at("classifier_dropout").is_null() ? b.hidden_dropout_prob : config_prob(c, kModel, "classifier_dropout");
    b.max_position_embeddings = config_int(c, kModel, "max_position_embeddings");
    b.type_vocab_size = config_int(c, kModel, "type_vocab_size");
    b.pad_token_id = config_int(c, kModel, "pad_token_id", 0);
    if (b.pad_token_id >= b.vocab_size)
      throw InvalidArgument(
          fmt::format("bert config: pad_token_id {} is not below vocab_size {}", b.pad_token_id, b.vocab_size));
    b.num_labels = config_int(c, kModel, "num_labels");
    b.initializer_range = config_double(c, kModel, "initializer_range");
    b.layer_norm_eps = config_double(c, kModel, "layer_norm_eps");
    const std::string position = config_string(c, kModel, "position_embedding_type");
    if (position != "absolute")
      throw Unsupported(
          fmt::format("bert config: position_embedding_type '{}' is not supported (only 'absolute')", position));
    return b;
  }
};

// Linears and embeddings drawn as HF's BertPreTrainedModel._init_weights (LayerNorm: torch's
// ones / zeros already).
std::shared_ptr<Linear> hf_linear(int64_t in, int64_t out, const BertConfig& c) {
  return transformers::hf_linear(in, out, c.initializer_range);
}

std::shared_ptr<Embedding> hf_embedding(int64_t n, int64_t dim, const BertConfig& c,
                                        std::optional<int64_t> padding_idx = {}) {
  return transformers::hf_embedding(n, dim, c.initializer_range, padding_idx);
}

// inputs {input_ids, token_type_ids}: LayerNorm(word + token_type + position), then dropout.
class BertEmbeddings : public Module {
 public:
  explicit BertEmbeddings(const BertConfig& c) {
    word_ = register_module("word_embeddings", hf_embedding(c.vocab_size, c.hidden_size, c, c.pad_token_id));
    position_ = register_module("position_embeddings", hf_embedding(c.max_position_embeddings, c.hidden_size, c));
    token_type_ = register_module("token_type_embeddings", hf_embedding(c.type_vocab_size, c.hidden_size, c));
    norm_ = register_module("LayerNorm",
                            std::make_shared<LayerNorm>(std::vector<int64_t>{c.hidden_size}, c.layer_norm_eps));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(c.hidden_dropout_prob));
    max_positions_ = c.max_position_embeddings;
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& ids = inputs.at(0);
    if (ids.dim(1) > max_positions_)
      throw ShapeError(
          fmt::format("bert: sequence length {} exceeds max_position_embeddings {}", ids.dim(1), max_positions_));
    Var x = attn::binary(t, "Add", word_->call(t, ids), token_type_->call(t, inputs.at(1)));
    x = attn::binary(t, "Add", x, position_->call(t, position_ids(t, ids)));
    return {dropout_->call(t, norm_->call(t, x))};
  }
  std::string type_name() const override { return "BertEmbeddings"; }

 private:
  ModulePtr word_, position_, token_type_, norm_, dropout_;
  int64_t max_positions_;
};

// inputs {hidden [B, S, D], additive mask [B, 1, 1, S]} -> context [B, S, D]
class BertSelfAttention : public Module {
 public:
  explicit BertSelfAttention(const BertConfig& c) : heads_(c.num_attention_heads) {
    head_size_ = c.hidden_size / c.num_attention_heads;
    query_ = register_module("query", hf_linear(c.hidden_size, c.hidden_size, c));
    key_ = register_module("key", hf_linear(c.hidden_size, c.hidden_size, c));
    value_ = register_module("value", hf_linear(c.hidden_size, c.hidden_size, c));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(c.attention_probs_dropout_prob));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& h = inputs.at(0);
    const Var q = split_heads(t, query_->call(t, h), heads_);
    const Var k = split_heads(t, key_->call(t, h), heads_);
    const Var v = split_heads(t, value_->call(t, h), heads_);
    EagerAttention a{.divisors = {std::sqrt(static_cast<double>(head_size_))},
                     .additive_mask = inputs.at(1),
                     .dropout = dropout_.get()};
    return {merge_heads(t, eager_attention(t, q, k, v, a))};
  }
  std::string type_name() const override { return "BertSelfAttention"; }

 private:
  int64_t heads_, head_size_;
  ModulePtr query_, key_, value_, dropout_;
};

// BertSelfOutput and BertOutput: inputs {hidden, residual} -> LayerNorm(dropout(dense(hidden)) + residual).
class BertResidualOutput : public Module {
 public:
  BertResidualOutput(std::string type, int64_t in, const BertConfig& c) : type_(std::move(type)) {
    dense_ = register_module("dense", hf_linear(in, c.hidden_size, c));
    norm_ = register_module("LayerNorm",
                            std::make_shared<LayerNorm>(std::vector<int64_t>{c.hidden_size}, c.layer_norm_eps));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(c.hidden_dropout_prob));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var h = dropout_->call(t, dense_->call(t, inputs.at(0)));
    return {norm_->call(t, attn::binary(t, "Add", h, inputs.at(1)))};
  }
  std::string type_name() const override { return type_; }

 private:
  std::string type_;
  ModulePtr dense_, norm_, dropout_;
};

class BertAttention : public Module {
 public:
  explicit BertAttention(const BertConfig& c) {
    self_ = register_module("self", std::make_shared<BertSelfAttention>(c));
    output_ = register_module("output", std::make_shared<BertResidualOutput>("BertSelfOutput", c.hidden_size, c));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var context = self_->call(t, inputs).at(0);
    return output_->call(t, {context, inputs.at(0)});
  }
  std::string type_name() const override { return "BertAttention"; }

 private:
  ModulePtr self_, output_;
};

class BertIntermediate : public Module {
 public:
  explicit BertIntermediate(const BertConfig& c) {
    dense_ = register_module("dense", hf_linear(c.hidden_size, c.intermediate_size, c));
    act_ = register_module("intermediate_act_fn", make_activation(kModel, "hidden_act", c.hidden_act));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    return {act_->call(t, dense_->call(t, inputs.at(0)))};
  }
  std::string type_name() const override { return "BertIntermediate"; }

 private:
  ModulePtr dense_, act_;
};

// inputs {hidden, additive mask}
class BertLayer : public Module {
 public:
  explicit BertLayer(const BertConfig& c) {
    attention_ = register_module("attention", std::make_shared<BertAttention>(c));
    intermediate_ = register_module("intermediate", std::make_shared<BertIntermediate>(c));
    output_ = register_module("output", std::make_shared<BertResidualOutput>("BertOutput", c.intermediate_size, c));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var a = attention_->call(t, inputs).at(0);
    return output_->call(t, {intermediate_->call(t, a), a});
  }
  std::string type_name() const override { return "BertLayer"; }

 private:
  ModulePtr attention_, intermediate_, output_;
};

class BertEncoder : public Module {
 public:
  explicit BertEncoder(const BertConfig& c) {
    layers_ = register_module("layer", std::make_shared<ModuleList>());
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers_->append(std::make_shared<BertLayer>(c));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    Var h = inputs.at(0);
    for (size_t i = 0; i < layers_->size(); ++i) h = (*layers_)[i]->call(t, {h, inputs.at(1)}).at(0);
    return {h};
  }
  std::string type_name() const override { return "BertEncoder"; }

 private:
  std::shared_ptr<ModuleList> layers_;
};

// tanh(dense(hidden[:, 0]))
class BertPooler : public Module {
 public:
  explicit BertPooler(const BertConfig& c) {
    dense_ = register_module("dense", hf_linear(c.hidden_size, c.hidden_size, c));
    activation_ = register_module("activation", std::make_shared<Tanh>());
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    return {activation_->call(t, dense_->call(t, select_token(t, inputs.at(0), 0)))};
  }
  std::string type_name() const override { return "BertPooler"; }

 private:
  ModulePtr dense_, activation_;
};

// inputs {input_ids, attention_mask, token_type_ids} -> {sequence_output, pooled_output}
class BertModel : public Module {
 public:
  explicit BertModel(const BertConfig& c) {
    embeddings_ = register_module("embeddings", std::make_shared<BertEmbeddings>(c));
    encoder_ = register_module("encoder", std::make_shared<BertEncoder>(c));
    pooler_ = register_module("pooler", std::make_shared<BertPooler>(c));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    if (inputs.size() != 3)
      throw InvalidArgument(fmt::format(
          "bert: forward takes input_ids, attention_mask and token_type_ids, got {} inputs", inputs.size()));
    for (const Var& v : inputs)
      if (v.rank() != 2 || (v.dtype != DType::Int64 && v.dtype != DType::Int32))
        throw TypeError(fmt::format("bert: input '{}' must be int64 [batch, sequence], got {} of rank {}", v.name,
                                    dtype_name(v.dtype), v.rank()));
    const Var extended = padding_mask(t, inputs[1]);  // HF's get_extended_attention_mask
    const Var embedded = embeddings_->call(t, {inputs[0], inputs[2]}).at(0);
    const Var sequence = encoder_->call(t, {embedded, extended}).at(0);
    return {sequence, pooler_->call(t, sequence)};
  }
  std::string type_name() const override { return "BertModel"; }

 private:
  ModulePtr embeddings_, encoder_, pooler_;
};

class BertForSequenceClassification : public Module {
 public:
  explicit BertForSequenceClassification(const BertConfig& c) {
    bert_ = register_module("bert", std::make_shared<BertModel>(c));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(c.classifier_dropout));
    classifier_ = register_module("classifier", hf_linear(c.hidden_size, c.num_labels, c));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var pooled = bert_->call(t, inputs).at(1);
    return {classifier_->call(t, dropout_->call(t, pooled))};
  }
  std::string type_name() const override { return "BertForSequenceClassification"; }

 private:
  ModulePtr bert_, dropout_, classifier_;
};

const std::vector<std::string> kInputs = {"input_ids", "attention_mask", "token_type_ids"};

int64_t example_length(const Config& c) {
  return std::min<int64_t>(16, config_int(c, kModel, "max_position_embeddings"));
}

struct Registrar {
  Registrar() {
    ZooEntry e;
    e.name = kModel;
    e.description = "BERT encoder for sequence classification (HF BertForSequenceClassification keys)";
    e.default_config = {{"vocab_size", 30522},
                        {"hidden_size", 768},
                        {"num_hidden_layers", 12},
                        {"num_attention_heads", 12},
                        {"intermediate_size", 3072},
                        {"hidden_act", "gelu"},
                        {"hidden_dropout_prob", 0.1},
                        {"attention_probs_dropout_prob", 0.1},
                        {"max_position_embeddings", 512},
                        {"type_vocab_size", 2},
                        {"initializer_range", 0.02},
                        {"layer_norm_eps", 1e-12},
                        {"pad_token_id", 0},
                        {"position_embedding_type", "absolute"},
                        {"classifier_dropout", nullptr},
                        {"num_labels", 2}};
    e.create = [](const Config& c) -> ModulePtr {
      return std::make_shared<BertForSequenceClassification>(BertConfig::from(c));
    };
    e.example_inputs = [](const Config& c) {
      InputShapes shapes;
      for (const auto& name : kInputs) shapes.emplace_back(name, std::vector<int64_t>{2, example_length(c)});
      return shapes;
    };
    e.dynamic_axes = [](const Config&) {
      DynamicAxes axes;
      for (const auto& name : kInputs) axes[name] = {{0, "batch"}, {1, "sequence"}};
      axes["logits"] = {{0, "batch"}};
      return axes;
    };
    e.input_dtypes = [](const Config&) { return std::vector<DType>(kInputs.size(), DType::Int64); };
    register_model(std::move(e));
  }
} registrar;

}  // namespace

}  // namespace kiln::nn::zoo
