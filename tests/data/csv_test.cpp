#include <gtest/gtest.h>

#include "data_test_util.h"
#include "kiln/data.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using kiln::test::expect_error;

using testing::write_file;

TEST(Csv, HeaderQuotesCrlfAndIntegerLabels) {
  const kiln::test::TempDir dir;
  const std::string path = write_file(dir / "a.csv",
                                      "\xEF\xBB\xBF"
                                      "a,\"label\",b\r\n"
                                      "1.5,2,-3\r\n"
                                      "\r\n"
                                      "\"4e-1\", 0 ,\"+6\"\r\n");
  auto ds = load_csv(path);
  ASSERT_EQ(ds->size(), 2u);
  const Tensor& x = ds->column("input");
  ASSERT_EQ(x.shape(), (Shape{2, 2}));
  EXPECT_EQ(x.dtype(), DType::Float32);
  const std::vector<float> want{1.5f, -3.0f, 0.4f, 6.0f};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(x.data<float>()[i], want[i]) << i;
  const Tensor& y = ds->column("labels");
  ASSERT_EQ(y.dtype(), DType::Int64);
  EXPECT_EQ(y.data<int64_t>()[0], 2);
  EXPECT_EQ(y.data<int64_t>()[1], 0);
}

TEST(Csv, NoHeaderIndexedLabelsAndFloatTargets) {
  const kiln::test::TempDir dir;
  const std::string path = write_file(dir / "b.tsv", "1\t2\t0.25\n3\t4\t1\n5\t6\t-2.5");  // no final newline
  CsvOptions o;
  o.header = false;
  o.delimiter = '\t';
  o.label_column = "-1";
  auto ds = load_csv(path, o);
  ASSERT_EQ(ds->size(), 3u);
  EXPECT_EQ(ds->column("input").shape(), (Shape{3, 2}));
  EXPECT_EQ(ds->column("input").data<float>()[5], 6.0f);
  const Tensor& y = ds->column("labels");
  ASSERT_EQ(y.dtype(), DType::Float32);  // not all integral
  EXPECT_EQ(y.data<float>()[0], 0.25f);
  EXPECT_EQ(y.data<float>()[2], -2.5f);
  o.label_column = "0";
  EXPECT_EQ(load_csv(path, o)->column("labels").data<int64_t>()[2], 5);
  o.label_column = "";  // features only
  auto features = load_csv(path, o);
  EXPECT_EQ(features->columns(), std::vector<std::string>{"input"});
  EXPECT_EQ(features->column("input").shape(), (Shape{3, 3}));
}

TEST(Csv, QuotedFieldsWithDelimitersQuotesAndNewlines) {
  const kiln::test::TempDir dir;
  // A quoted label name with a comma and a doubled quote; a header name spanning two lines.
  const std::string path = write_file(dir / "q.csv", "\"x,\"\"1\"\"\",\"la\nbel\",label\n7,8,9\n");
  CsvOptions o;
  o.label_column = "la\nbel";
  auto ds = load_csv(path, o);
  EXPECT_EQ(ds->column("labels").data<int64_t>()[0], 8);
  EXPECT_EQ(ds->column("input").data<float>()[1], 9.0f);
  // Line numbers count the newline inside the quoted header: the data row is line 3.
  const std::string bad = write_file(dir / "bad.csv", "\"x\",\"la\nbel\",label\n7,eight,9\n");
  expect_error<CorruptFile>([&] { load_csv(bad, o); }, {bad, "line 3, column 'la\nbel': 'eight' is not a number"});
}

TEST(Csv, CorruptFilesNameTheFileAndLine) {
  const kiln::test::TempDir dir;
  const std::string ragged = write_file(dir / "ragged.csv", "a,label\n1,2\n3,4\n5\n");
  expect_error<CorruptFile>([&] { load_csv(ragged); }, {ragged, "line 4: 1 fields, expected 2 (as line 1)"});
  const std::string text = write_file(dir / "text.csv", "a,label\r\n1,2\r\n3,x4\r\n");
  expect_error<CorruptFile>([&] { load_csv(text); }, {text, "line 3, column 'label': 'x4' is not a number"});
  const std::string partial = write_file(dir / "partial.csv", "a,label\n1.5.2,0\n");
  expect_error<CorruptFile>([&] { load_csv(partial); }, {partial, "line 2, column 'a': '1.5.2' is not a number"});
  const std::string empty_field = write_file(dir / "empty.csv", "a,b,label\n1,,0\n");
  expect_error<CorruptFile>([&] { load_csv(empty_field); }, {empty_field, "line 2, column 'b': empty field"});
  const std::string quote = write_file(dir / "quote.csv", "a,label\n1,2\n\"3,4\n5,6\n");
  expect_error<CorruptFile>([&] { load_csv(quote); }, {quote, "line 3: unterminated quoted field"});
  const std::string after = write_file(dir / "after.csv", "a,label\n\"1\"x,2\n");
  expect_error<CorruptFile>([&] { load_csv(after); }, {after, "line 2: unexpected 'x' after a closing quote"});
  const std::string header_only = write_file(dir / "header.csv", "a,label\n\n");
  expect_error<CorruptFile>([&] { load_csv(header_only); }, {header_only, "has no data rows"});
  const std::string nothing = write_file(dir / "nothing.csv", "");
  expect_error<CorruptFile>([&] { load_csv(nothing); }, {nothing, "no header line"});
  expect_error<IOError>([&] { load_csv((dir / "missing.csv").string()); }, {"cannot open CSV file", "missing.csv"});
  const std::string good = write_file(dir / "good.csv", "a,label\n1,2\n");
  CsvOptions o;
  o.label_column = "target";
  expect_error<InvalidArgument>([&] { load_csv(good, o); }, {"label_column 'target'", "(a, label)"});
  o.label_column = "5";
  expect_error<InvalidArgument>([&] { load_csv(good, o); }, "index 5 is out of range for 2 columns");
}

}  // namespace
}  // namespace kiln::data
