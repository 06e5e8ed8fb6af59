// load_jsonl (JSON Lines files: one item per line, sequences of any length) and padding_collator
// (dynamic padding as Hugging Face's collators pad).
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "kiln/data.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using kiln::test::expect_error;
using testing::write_file;

std::vector<int64_t> ints(const Tensor& t) { return t.contiguous().to_int64_vector(); }

TEST(Jsonl, ItemsOfDifferentLengthsAndColumnTypes) {
  const kiln::test::TempDir dir;
  const std::string path = write_file(dir / "a.jsonl",
                                      "{\"input_ids\": [5, 6, 7], \"label\": 1, \"w\": [[1, 2], [3, 4.5]]}\r\n"
                                      "\n"
                                      "{\"input_ids\": [8], \"label\": 0, \"w\": [[0, 0], [1, true]]}\n");
  auto ds = load_jsonl(path);
  ASSERT_EQ(ds->size(), 2u);
  const Example a = ds->get(0), b = ds->get(1);
  EXPECT_EQ(ints(a.at("input_ids")), (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(ints(b.at("input_ids")), (std::vector<int64_t>{8}));
  EXPECT_EQ(a.at("labels").dtype(), DType::Int64);  // "label" is read as "labels"
  EXPECT_EQ(a.at("labels").rank(), 0);
  EXPECT_EQ(b.at("labels").item_as_double(), 0.0);
  // One non-integral number makes the whole column float32, in every item.
  ASSERT_EQ(b.at("w").dtype(), DType::Float32);
  EXPECT_EQ(a.at("w").shape(), (Shape{2, 2}));
  EXPECT_EQ(a.at("w").data<float>()[3], 4.5f);
  EXPECT_EQ(b.at("w").data<float>()[3], 1.0f);
  EXPECT_EQ(ds->item_length(0, "length", "input_ids"), 3);
  EXPECT_EQ(ds->item_length(1, "length", "input_ids"), 1);
}

TEST(Jsonl, ColumnsOptionSkipsTextColumns) {
  const kiln::test::TempDir dir;
  const std::string path = write_file(dir / "t.jsonl",
                                      "{\"text\": \"a b\", \"input_ids\": [1, 2], \"labels\": [1, 2]}\n"
                                      "{\"text\": \"c\", \"input_ids\": [3], \"labels\": [3]}\n");
  expect_error<CorruptFile>([&] { load_jsonl(path); }, {"t.jsonl' line 1", "column 'text' holds a string"});
  JsonlOptions o;
  o.columns = {"input_ids", "labels"};
  auto ds = load_jsonl(path, o);
  EXPECT_EQ(ds->columns(), (std::vector<std::string>{"input_ids", "labels"}));
}

TEST(Jsonl, MalformedFilesNameTheLine) {
  const kiln::test::TempDir dir;
  const auto load = [&](const std::string& name, const std::string& text) {
    return [&dir, name, text] { load_jsonl(write_file(dir / name, text)); };
  };
  expect_error<CorruptFile>(load("a", "{\"x\": [1]}\n{\"x\": [1, 2\n"), "line 2");  // truncated
  expect_error<CorruptFile>(load("b", "[1, 2]\n"), {"line 1", "not a JSON object"});
  expect_error<CorruptFile>(load("c", "{\"x\": [[1, 2], [3]]}\n"), {"line 1", "ragged"});
  expect_error<CorruptFile>(load("d", "{\"x\": 1}\n{\"y\": 1}\n"), {"line 2", "differ from line 1"});
  expect_error<CorruptFile>(load("e", "{\"x\": null}\n"), {"column 'x'", "null"});
  expect_error<CorruptFile>(load("f", "\n \n"), "no items");
  expect_error<CorruptFile>(load("g", "{\"x\": 1e300}\n"), "'x'");
  expect_error<CorruptFile>(load("h", "{\"label\": 1, \"labels\": 2}\n"), "both read as column 'labels'");
  expect_error<IOError>([&] { load_jsonl((dir / "missing.jsonl").string()); }, "missing.jsonl");
}

Example item(std::vector<int64_t> ids, std::vector<int64_t> labels) {
  const auto n = static_cast<int64_t>(ids.size()), m = static_cast<int64_t>(labels.size());
  return {{"input_ids", Tensor::from_vector<int64_t>({n}, ids)},
          {"labels", Tensor::from_vector<int64_t>({m}, labels)},
          {"idx", Tensor::scalar<int64_t>(n)}};
}

TEST(PaddingCollator, PadsToTheLongestWithEachColumnsValue) {
  PaddingOptions o;
  o.pad_token_id = 9;
  const Example batch = padding_collator(o)({item({1, 2, 3}, {1, 2}), item({4}, {4, 5, 6})});
  EXPECT_EQ(batch.at("input_ids").shape(), (Shape{2, 3}));
  EXPECT_EQ(ints(batch.at("input_ids")), (std::vector<int64_t>{1, 2, 3, 4, 9, 9}));
  EXPECT_EQ(ints(batch.at("labels")), (std::vector<int64_t>{1, 2, -100, 4, 5, 6}));
  EXPECT_EQ(ints(batch.at("attention_mask")), (std::vector<int64_t>{1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(ints(batch.at("idx")), (std::vector<int64_t>{3, 1}));  // scalars are stacked
}

TEST(PaddingCollator, LeftSideAndMultiples) {
  PaddingOptions o;
  o.padding_side = "left";
  o.pad_to_multiple_of = 4;
  o.pad_values["input_ids"] = 7;
  const Example batch = padding_collator(o)({item({1, 2, 3}, {1}), item({4}, {2})});
  EXPECT_EQ(ints(batch.at("input_ids")), (std::vector<int64_t>{7, 1, 2, 3, 7, 7, 7, 4}));
  EXPECT_EQ(ints(batch.at("attention_mask")), (std::vector<int64_t>{0, 1, 1, 1, 0, 0, 0, 1}));
  EXPECT_EQ(ints(batch.at("labels")), (std::vector<int64_t>{-100, -100, -100, 1, -100, -100, -100, 2}));
}

TEST(PaddingCollator, DisagreeingItemsAreErrors) {
  const Collator pad = padding_collator();
  Example bad = item({1}, {1});
  bad["input_ids"] = Tensor::from_vector<float>({1}, {1.0f});
  expect_error<TypeError>([&] { pad({item({1, 2}, {1}), bad}); }, {"'input_ids'", "item 1"});
  Example wide = item({1}, {1});
  wide["input_ids"] = Tensor::from_vector<int64_t>({1, 2}, {1, 2});
  expect_error<ShapeError>([&] { pad({item({1, 2}, {1}), wide}); }, "only the first dimension may differ");
  Example fewer = item({1}, {1});
  fewer.erase("idx");
  expect_error<ShapeError>([&] { pad({item({1, 2}, {1}), fewer}); }, "item 1");
  PaddingOptions o;
  o.padding_side = "middle";
  expect_error<InvalidArgument>([&] { padding_collator(o); }, "padding_side");
}

TEST(CollatedDataset, BatchesThroughItsCollator) {
  std::vector<Example> items{item({1, 2}, {1}), item({3}, {2}), item({4, 5, 6}, {3})};
  auto ds = std::make_shared<CollatedDataset>(std::make_shared<ExampleListDataset>(items), padding_collator());
  DataLoader loader(ds, 2);
  EXPECT_EQ(loader.batch(0, 0).at("input_ids").shape(), (Shape{2, 2}));
  EXPECT_EQ(loader.batch(0, 1).at("input_ids").shape(), (Shape{1, 3}));
  EXPECT_EQ(ds->columns(), (std::vector<std::string>{"attention_mask", "idx", "input_ids", "labels"}));
  // Without it, items of different lengths cannot be stacked.
  DataLoader plain(std::make_shared<ExampleListDataset>(items), 2);
  expect_error<ShapeError>([&] { plain.batch(0, 0); }, "'input_ids'");
}

}  // namespace
}  // namespace kiln::data
