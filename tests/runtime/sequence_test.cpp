// Sequences and optionals in Sessions: the sequence ops end to end, values that stay right after
// the arena buffers they were made from are reused, sequence feeds and outputs (owned copies), a
// Loop carrying a sequence, SequenceMap with a captured value, the optional ops, saving and loading
// the types, and the errors: a sequence given to a tensor op, positions out of range, mismatched
// shapes, an empty optional read, a tensor fed where a sequence is declared, each op's bad inputs,
// unreadable sequence / optional files.
#include <gtest/gtest.h>

#include <fstream>

#include "kernels/kernel_test_util.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "runtime/graph_builders.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;
using kiln::test::graph;
using kiln::test::info;
using kiln::test::model;
using kiln::test::node;

const DType F = DType::Float32;

ValueInfo of_kind(ValueInfo v, ValueKind kind) {
  v.kind = kind;
  return v;
}

std::vector<std::vector<double>> contents(const Tensor& seq) {
  std::vector<std::vector<double>> out;
  for (const Tensor& e : seq.elements()) out.push_back(as_doubles(e));
  return out;
}

Tensor vec(std::vector<float> v) { return Tensor::from_vector<float>({static_cast<int64_t>(v.size())}, v); }

TEST(Sequences, ConstructInsertEraseAtLength) {
  // s = [a, b]; insert c at the front; erase position -1 (b); at(pos) and the length.
  Model m = model({node("SequenceConstruct", {"a", "b"}, {"s"}), node("SequenceInsert", {"s", "c", "front"}, {"s2"}),
                   node("SequenceErase", {"s2", "minus_one"}, {"s3"}), node("SequenceAt", {"s3", "pos"}, {"y"}),
                   node("SequenceLength", {"s3"}, {"n"})},
                  {info("a", F, {2}), info("b", F, {2}), info("c", F, {2}), info("pos", DType::Int64, {})},
                  {info("y", F, {2}), info("n", DType::Int64, {}), of_kind(info("s3", F, {2}), ValueKind::Sequence)});
  m.graph.initializers["front"] = Tensor::scalar<int64_t>(0);
  m.graph.initializers["minus_one"] = Tensor::scalar<int32_t>(-1);
  Session s(m);
  auto r = s.run({{"a", vec({1, 2})}, {"b", vec({3, 4})}, {"c", vec({5, 6})}, {"pos", Tensor::scalar<int64_t>(-1)}});
  EXPECT_EQ(as_doubles(r["y"]), (std::vector<double>{1, 2}));
  EXPECT_EQ(as_doubles(r["n"]), (std::vector<double>{2}));
  EXPECT_EQ(contents(r["s3"]), (std::vector<std::vector<double>>{{5, 6}, {1, 2}}));
  expect_error<InvalidArgument>(
      [&] {
        s.run({{"a", vec({1, 2})}, {"b", vec({3, 4})}, {"c", vec({5, 6})}, {"pos", Tensor::scalar<int64_t>(2)}});
      },
      {"SequenceAt", "position 2 is out of range [-2, 1]"});
}

TEST(Sequences, SplitAndConcatRoundTrip) {
  // x [2, 5] split along axis 1 into lengths [2, 3] and into chunks of 2 (2, 2, 1); each joined
  // back; rows split with keepdims 0 and stacked again along a new axis.
  Model m = model(
      {node("SplitToSequence", {"x", "lengths"}, {"parts"}, {{"axis", Attribute::of_int(1)}}),
       node("SplitToSequence", {"x", "two"}, {"chunks"}, {{"axis", Attribute::of_int(-1)}}),
       node("ConcatFromSequence", {"chunks"}, {"joined"}, {{"axis", Attribute::of_int(1)}}),
       node("SplitToSequence", {"x"}, {"rows"}, {{"keepdims", Attribute::of_int(0)}}),
       node("ConcatFromSequence", {"rows"}, {"stacked"},
            {{"axis", Attribute::of_int(0)}, {"new_axis", Attribute::of_int(1)}}),
       node("SequenceLength", {"chunks"}, {"n"})},
      {info("x", F, {2, 5})},
      {of_kind(info("parts", F, {}, false), ValueKind::Sequence), info("joined", F, {2, 5}), info("stacked", F, {2, 5}),
       of_kind(info("rows", F, {5}), ValueKind::Sequence), info("n", DType::Int64, {})});
  m.graph.initializers["lengths"] = Tensor::from_vector<int64_t>({2}, {2, 3});
  m.graph.initializers["two"] = Tensor::scalar<int64_t>(2);
  Session s(m);
  const Tensor x = Tensor::from_vector<float>({2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto r = s.run({{"x", x}});
  EXPECT_EQ(contents(r["parts"]), (std::vector<std::vector<double>>{{0, 1, 5, 6}, {2, 3, 4, 7, 8, 9}}));
  EXPECT_EQ(r["parts"].elements()[1].shape(), (Shape{2, 3}));
  EXPECT_EQ(as_doubles(r["n"]), (std::vector<double>{3}));
  EXPECT_EQ(as_doubles(r["joined"]), as_doubles(x));
  EXPECT_EQ(r["rows"].elements()[0].shape(), (Shape{5}));
  EXPECT_EQ(as_doubles(r["stacked"]), as_doubles(x));
  EXPECT_EQ(r["stacked"].shape(), (Shape{2, 5}));
}

TEST(Sequences, ElementsAreCopiesOfArenaValues) {
  // y = x * 2 lives in the arena; once the sequence holds it, z = x + 1 may take y's buffer. The
  // sequence must still hold x * 2.
  Model m = model({node("Mul", {"x", "two"}, {"y"}), node("SequenceConstruct", {"y"}, {"s"}),
                   node("Add", {"x", "one"}, {"z"}), node("Neg", {"z"}, {"w"})},
                  {info("x", F, {4})}, {of_kind(info("s", F, {4}), ValueKind::Sequence), info("w", F, {4})});
  m.graph.initializers["two"] = Tensor::scalar<float>(2);
  m.graph.initializers["one"] = Tensor::scalar<float>(1);
  Session s(m);
  auto r = s.run({{"x", vec({1, 2, 3, 4})}});
  EXPECT_EQ(contents(r["s"]), (std::vector<std::vector<double>>{{2, 4, 6, 8}}));
  EXPECT_EQ(as_doubles(r["w"]), (std::vector<double>{-2, -3, -4, -5}));
}

TEST(Sequences, FedAndReturnedSequencesAreOwnedCopies) {
  Model m = model({node("Identity", {"s"}, {"t"}), node("SequenceLength", {"s"}, {"n"})},
                  {of_kind(info("s", F, {-1}), ValueKind::Sequence)},
                  {of_kind(info("t", F, {-1}), ValueKind::Sequence), info("n", DType::Int64, {})});
  Session s(m);
  Tensor a = vec({1, 2}), b = vec({3});
  auto r = s.run({{"s", Tensor::sequence(F, {a, b})}});
  a.data<float>()[0] = 100;  // the caller's tensor changes after the run: the output does not
  EXPECT_EQ(contents(r["t"]), (std::vector<std::vector<double>>{{1, 2}, {3}}));
  EXPECT_EQ(as_doubles(r["n"]), (std::vector<double>{2}));
  // An empty sequence, and a tensor where the sequence is declared.
  r = s.run({{"s", Tensor::sequence(F, {})}});
  EXPECT_TRUE(r["t"].is_sequence());
  EXPECT_EQ(r["t"].elements().size(), 0u);
  expect_error<TypeError>(
      [&] {
        s.run({{"s", vec({1})}});
      },
      {"input 's' expects sequence(float[n])", "was given float[1]"});
  expect_error<TypeError>([] { Tensor::sequence(F, {Tensor::from_vector<int64_t>({1}, {1})}); },
                          {"sequence of float", "int64[1]"});
}

TEST(Sequences, PositionalRunsTakeAndReturnSequences) {
  // Session::run_with_binding (what loops calling one graph use): a sequence fed by position and a
  // sequence output left unbound comes back as its handle; run twice with different lengths.
  Model m = model({node("SequenceInsert", {"s", "x"}, {"t"}), node("SequenceLength", {"t"}, {"n"})},
                  {of_kind(info("s", F, {-1}), ValueKind::Sequence), info("x", F, {1})},
                  {of_kind(info("t", F, {-1}), ValueKind::Sequence), info("n", DType::Int64, {})});
  Session s(m);
  for (size_t length : {2u, 0u}) {
    std::vector<Tensor> elements(length, vec({1}));
    std::vector<Tensor> outputs(2);
    s.run_with_binding({Tensor::sequence(F, elements), vec({7})}, outputs);
    ASSERT_TRUE(outputs[0].is_sequence());
    EXPECT_EQ(outputs[0].elements().size(), length + 1);
    EXPECT_EQ(as_doubles(outputs[0].elements().back()), (std::vector<double>{7}));
    EXPECT_EQ(as_doubles(outputs[1]), (std::vector<double>{static_cast<double>(length + 1)}));
  }
}

TEST(Sequences, TensorOpsRefuseSequencesNamingTheNode) {
  Model m = model({node("Relu", {"s"}, {"y"})}, {of_kind(info("s", F, {2}), ValueKind::Sequence)}, {info("y", F, {2})});
  Session s(m);
  expect_error<TypeError>(
      [&] {
        s.run({{"s", Tensor::sequence(F, {vec({1, 2})})}});
      },
      {"'y_node' (Relu)", "input 0 ('s') is a sequence of float", "Relu takes tensors only"});
  // Found only at run time: a sequence an If returns, read by Neg.
  const Attribute branch =
      graph({node("SequenceConstruct", {"x"}, {"q"})}, {}, {of_kind(info("q", F), ValueKind::Sequence)});
  Model m2 =
      model({node("If", {"c"}, {"r"}, {{"then_branch", branch}, {"else_branch", branch}}), node("Neg", {"r"}, {"y"})},
            {info("c", DType::Bool, {}), info("x", F, {1})}, {info("y", F, {1})});
  Session s2(m2);
  expect_error<TypeError>(
      [&] {
        s2.run({{"c", Tensor::scalar<bool>(true)}, {"x", vec({1})}});
      },
      {"(Neg)", "Neg takes tensors only"});
}

TEST(Sequences, ConcatOfMismatchedShapesAndEmptySequencesFail) {
  Model m = model({node("ConcatFromSequence", {"s"}, {"y"}, {{"axis", Attribute::of_int(1)}})},
                  {of_kind(info("s", F, {}, false), ValueKind::Sequence)}, {info("y", F, {}, false)});
  Session s(m);
  const Tensor a = Tensor::zeros(F, {2, 3}), b = Tensor::zeros(F, {3, 1});
  expect_error<ShapeError>(
      [&] {
        s.run({{"s", Tensor::sequence(F, {a, b})}});
      },
      {"element 1 is float[3, 1], element 0 float[2, 3]: only axis 1 may differ"});
  expect_error<InvalidArgument>([&] { s.run({{"s", Tensor::sequence(F, {})}}); }, {"the sequence is empty"});
  const auto y = s.run({{"s", Tensor::sequence(F, {a, Tensor::zeros(F, {2, 4})})}})["y"];
  EXPECT_EQ(y.shape(), (Shape{2, 7}));
}

TEST(Sequences, BadInputsNameTheProblem) {
  const Tensor seq = Tensor::sequence(F, {vec({1, 2}), vec({3})});
  const auto run = [](const char* op, std::vector<Tensor> in, std::map<std::string, Attribute> attrs = {}) {
    std::vector<std::string> names;
    for (size_t i = 0; i < in.size(); ++i) names.push_back("in" + std::to_string(i));
    return run_node(node(op, names, {"y"}, std::move(attrs)), in, 17);
  };
  expect_error<TypeError>(
      [&] {
        run("SequenceInsert", {seq, Tensor::from_vector<int64_t>({1}, {1})});
      },
      {"SequenceInsert: cannot insert int64[1] into sequence(float) of 2"});
  expect_error<TypeError>(
      [&] {
        run("SequenceAt", {vec({1}), Tensor::scalar<int64_t>(0)});
      },
      {"SequenceAt: input 0 ('in0') must be a sequence, got float[1]"});
  expect_error<TypeError>(
      [&] {
        run("SequenceAt", {seq, Tensor::scalar<float>(0)});
      },
      {"position must be a scalar int32 or int64, got float[]"});
  expect_error<InvalidArgument>([&] { run("SequenceErase", {Tensor::sequence(F, {})}); }, {"the sequence is empty"});
  expect_error<TypeError>(
      [&] {
        run("SequenceConstruct", {vec({1}), Tensor::from_vector<int64_t>({1}, {1})});
      },
      {"input 1 is int64, input 0 float: a sequence holds one dtype"});
  expect_error<Unsupported>(
      [&] {
        run("SequenceEmpty", {}, {{"dtype", Attribute::of_int(14)}});
      },
      {"SequenceEmpty: dtype 14 has no Kiln tensor type"});
  const Tensor x = Tensor::zeros(F, {2, 5});
  expect_error<InvalidArgument>(
      [&] {
        run("SplitToSequence", {x, Tensor::from_vector<int64_t>({2}, {-1, 6})});
      },
      {"split [-1, 6] has a negative length"});
  expect_error<ShapeError>(
      [&] {
        run("SplitToSequence", {x, Tensor::from_vector<int64_t>({2}, {1, 2})});
      },
      {"split [1, 2] does not add up to the axis length 2"});
  expect_error<InvalidArgument>(
      [&] {
        run("SplitToSequence", {x, Tensor::scalar<int64_t>(0)});
      },
      {"split 0 must be positive"});
  expect_error<ShapeError>(
      [&] {
        run("SplitToSequence", {x, Tensor::zeros(DType::Int64, {1, 1})});
      },
      {"must be a scalar or 1-D"});
  expect_error<ShapeError>(
      [&] {
        run("ConcatFromSequence", {Tensor::sequence(F, {Tensor::scalar<float>(1)})}, {{"axis", Attribute::of_int(0)}});
      },
      {"cannot concatenate scalars without new_axis = 1"});
  expect_error<TypeError>([&] { run("Optional", {Tensor::none(F)}); }, {"Optional: input 'in0' is itself an optional"});
  expect_error<InvalidModel>([&] { run_node(node("Optional", {}, {"y"}), {}, 17); },
                             {"Optional without an input needs the attribute 'type'"});
  test::TempDir dir;
  const std::string junk = (dir / "junk.pb").string();
  { std::ofstream(junk) << "\xff\xff\xff"; }
  expect_error<InvalidModel>([&] { load_value_proto(junk, ValueKind::Sequence); },
                             {"junk.pb", "not a valid onnx.SequenceProto file"});
  expect_error<InvalidModel>([&] { load_value_proto(junk, ValueKind::OptionalTensor); },
                             {"not a valid onnx.OptionalProto file"});
}

TEST(Sequences, LoopCarriesASequence) {
  // Each trip appends [i] to the carried sequence.
  const Attribute body = graph(
      {node("Cast", {"i"}, {"fi"}, {{"to", Attribute::of_int(1)}}), node("Unsqueeze", {"fi", "zero"}, {"fi1"}),
       node("SequenceInsert", {"seq", "fi1"}, {"seq2"}), node("Identity", {"cond"}, {"go"})},
      {info("i", DType::Int64, {}), info("cond", DType::Bool, {}), of_kind(info("seq", F, {1}), ValueKind::Sequence)},
      {info("go", DType::Bool, {}), of_kind(info("seq2", F, {1}), ValueKind::Sequence)});
  Model m = model({node("SequenceEmpty", {}, {"empty"}), node("Loop", {"M", "", "empty"}, {"out"}, {{"body", body}})},
                  {info("M", DType::Int64, {})}, {of_kind(info("out", F, {1}), ValueKind::Sequence)});
  m.graph.initializers["zero"] = Tensor::from_vector<int64_t>({1}, {0});
  Session s(m);
  EXPECT_EQ(contents(s.run({{"M", Tensor::scalar<int64_t>(3)}})["out"]),
            (std::vector<std::vector<double>>{{0}, {1}, {2}}));
  EXPECT_EQ(s.run({{"M", Tensor::scalar<int64_t>(0)}})["out"].elements().size(), 0u);
}

TEST(Sequences, SequenceMapOverTwoSequencesAndATensor) {
  // y_k = a_k * b_k + t + bias, bias read from the outer graph.
  const Attribute body =
      graph({node("Mul", {"ea", "eb"}, {"p"}), node("Add", {"p", "et"}, {"q"}), node("Add", {"q", "bias"}, {"r"})},
            {info("ea", F, {}, false), info("eb", F, {}, false), info("et", F, {}, false)}, {info("r", F, {}, false)});
  Model m = model({node("SequenceMap", {"a", "b", "t"}, {"y"}, {{"body", body}})},
                  {of_kind(info("a", F, {}, false), ValueKind::Sequence),
                   of_kind(info("b", F, {}, false), ValueKind::Sequence), info("t", F, {1})},
                  {of_kind(info("y", F, {}, false), ValueKind::Sequence)});
  m.graph.initializers["bias"] = Tensor::scalar<float>(100);
  Session s(m);
  auto y = s.run({{"a", Tensor::sequence(F, {vec({1, 2}), vec({3})})},
                  {"b", Tensor::sequence(F, {vec({10, 20}), vec({30})})},
                  {"t", vec({0.5f})}})["y"];
  EXPECT_EQ(contents(y), (std::vector<std::vector<double>>{{110.5, 140.5}, {190.5}}));
  expect_error<ShapeError>(
      [&] {
        s.run({{"a", Tensor::sequence(F, {vec({1})})}, {"b", Tensor::sequence(F, {})}, {"t", vec({0})}});
      },
      {"input 1 ('b') holds 0 tensors, input_sequence 1"});
  // A body whose inputs do not match the node's, and a tensor as input_sequence.
  const Attribute two = graph({node("Mul", {"ea", "eb"}, {"p"})}, {info("ea", F, {}, false), info("eb", F, {}, false)},
                              {info("p", F, {}, false)});
  Model arity = model({node("SequenceMap", {"a", "b", "t"}, {"y"}, {{"body", two}})},
                      {of_kind(info("a", F, {}, false), ValueKind::Sequence),
                       of_kind(info("b", F, {}, false), ValueKind::Sequence), info("t", F, {1})},
                      {of_kind(info("y", F, {}, false), ValueKind::Sequence)});
  expect_error<InvalidModel>(
      [&] {
        Session(arity).run(
            {{"a", Tensor::sequence(F, {vec({1})})}, {"b", Tensor::sequence(F, {vec({1})})}, {"t", vec({0})}});
      },
      {"the body takes 2 inputs and gives 1 outputs, but the node has 3 inputs and 1 outputs"});
  Model tensor_in = model({node("SequenceMap", {"t", "b"}, {"y"}, {{"body", two}})},
                          {info("t", F, {1}), of_kind(info("b", F, {}, false), ValueKind::Sequence)},
                          {of_kind(info("y", F, {}, false), ValueKind::Sequence)});
  expect_error<TypeError>(
      [&] {
        Session(tensor_in).run({{"t", vec({0})}, {"b", Tensor::sequence(F, {vec({1})})}});
      },
      {"SequenceMap: input_sequence 't' is"});
}

TEST(Optionals, WrapTestAndUnwrap) {
  ValueInfo seq_type;
  seq_type.dtype = DType::Int64;
  seq_type.has_type = true;
  seq_type.kind = ValueKind::Sequence;
  Model m = model({node("Optional", {"x"}, {"ox"}), node("OptionalHasElement", {"ox"}, {"has_x"}),
                   node("OptionalGetElement", {"ox"}, {"x2"}),
                   node("Optional", {}, {"none"}, {{"type", Attribute::of_type(seq_type)}}),
                   node("OptionalHasElement", {"none"}, {"has_none"}), node("OptionalHasElement", {"opt"}, {"has_opt"}),
                   node("Identity", {"opt"}, {"opt_out"})},
                  {info("x", F, {2}), of_kind(info("opt", F, {2}), ValueKind::OptionalTensor)},
                  {info("has_x", DType::Bool, {}), info("x2", F, {2}), info("has_none", DType::Bool, {}),
                   info("has_opt", DType::Bool, {}), of_kind(info("opt_out", F, {2}), ValueKind::OptionalTensor),
                   of_kind(info("none", DType::Int64, {}, false), ValueKind::OptionalSequence)});
  Session s(m);
  auto r = s.run({{"x", vec({1, 2})}, {"opt", Tensor::none(F)}});
  EXPECT_EQ(as_doubles(r["has_x"]), (std::vector<double>{1}));
  EXPECT_EQ(as_doubles(r["x2"]), (std::vector<double>{1, 2}));
  EXPECT_EQ(as_doubles(r["has_none"]), (std::vector<double>{0}));
  EXPECT_EQ(as_doubles(r["has_opt"]), (std::vector<double>{0}));
  EXPECT_TRUE(r["opt_out"].is_none());
  EXPECT_EQ(r["none"].kind(), ValueKind::OptionalSequence);
  r = s.run({{"x", vec({1, 2})}, {"opt", vec({7, 8})}});
  EXPECT_EQ(as_doubles(r["has_opt"]), (std::vector<double>{1}));
  EXPECT_EQ(as_doubles(r["opt_out"]), (std::vector<double>{7, 8}));
  expect_error<TypeError>(
      [&] {
        s.run({{"x", vec({1, 2})}, {"opt", Tensor::sequence(F, {})}});
      },
      {"input 'opt' expects optional(float[2])"});

  Model get = model({node("OptionalGetElement", {"opt"}, {"y"})},
                    {of_kind(info("opt", F, {2}), ValueKind::OptionalTensor)}, {info("y", F, {2})});
  Session g(get);
  expect_error<InvalidArgument>([&] { g.run({{"opt", Tensor::none(F)}}); }, {"optional 'opt' is empty"});
}

TEST(Optionals, TypesSurviveSavingAndLoading) {
  ValueInfo tensor_type;
  tensor_type.dtype = F;
  tensor_type.has_type = true;
  Model m = model({node("Optional", {}, {"none"}, {{"type", Attribute::of_type(tensor_type)}}),
                   node("SequenceLength", {"s"}, {"n"})},
                  {of_kind(info("s", DType::Int32, {-1}), ValueKind::Sequence)},
                  {of_kind(info("none", F, {}, false), ValueKind::OptionalTensor), info("n", DType::Int64, {})});
  test::TempDir dir;
  save_model(m, (dir / "opt.onnx").string());
  const Model back = load_model((dir / "opt.onnx").string());  // the ONNX checker accepts it
  EXPECT_EQ(back.graph.inputs[0].kind, ValueKind::Sequence);
  EXPECT_EQ(back.graph.inputs[0].dtype, DType::Int32);
  EXPECT_EQ(back.graph.outputs[0].kind, ValueKind::OptionalTensor);
  EXPECT_EQ(back.graph.nodes[0].attrs.at("type").kind, Attribute::Kind::Type);
  Session s(back);
  auto r = s.run({{"s", Tensor::sequence(DType::Int32, {Tensor::from_vector<int32_t>({1}, {4})})}});
  EXPECT_TRUE(r["none"].is_none());
  EXPECT_EQ(as_doubles(r["n"]), (std::vector<double>{1}));
}

}  // namespace
}  // namespace kiln
