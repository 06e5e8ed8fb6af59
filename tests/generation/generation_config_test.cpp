// GenerationConfig's checks and JSON (the search itself is checked against Hugging Face's
// algorithms in tests/python/test_generation.py).
#include <gtest/gtest.h>

#include "kiln/error.h"
#include "kiln/generation.h"

namespace kiln::generation {
namespace {

TEST(GenerationConfig, HuggingFaceDefaultsAndJson) {
  const GenerationConfig d;
  EXPECT_EQ(d.max_length, 20);
  EXPECT_EQ(d.num_beams, 1);
  EXPECT_EQ(d.top_k, 50);
  EXPECT_DOUBLE_EQ(d.top_p, 1.0);
  EXPECT_FALSE(d.do_sample);
  const GenerationConfig c = GenerationConfig::from_json(
      R"({"max_new_tokens": 7, "num_beams": 3, "num_return_sequences": 2, "early_stopping": "never",
          "eos_token_id": [2, 5], "pad_token_id": 0, "transformers_version": "4.36.0", "top_p": null})");
  EXPECT_EQ(c.max_new_tokens, 7);
  EXPECT_EQ(c.num_beams, 3);
  EXPECT_EQ(c.early_stopping, EarlyStopping::Never);
  EXPECT_EQ(c.eos_token_id, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_DOUBLE_EQ(c.top_p, 1.0);  // null keeps the default
  const GenerationConfig back = GenerationConfig::from_json(c.to_json());
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(GenerationConfig::from_json(R"({"eos_token_id": 9, "early_stopping": true})").eos_token_id,
            (std::vector<int64_t>{9}));
}

TEST(GenerationConfig, RefusesImpossibleValuesNamingTheField) {
  auto refused = [](const std::string& json, const std::string& field) {
    try {
      GenerationConfig::from_json(json);
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << json << " was accepted";
  };
  refused(R"({"num_beams": 2, "num_return_sequences": 3})", "num_return_sequences");
  refused(R"({"num_return_sequences": 2})", "num_return_sequences");
  refused(R"({"do_sample": true, "top_p": 0})", "top_p");
  refused(R"({"temperature": 0})", "temperature");
  refused(R"({"max_new_tokens": 0})", "max_new_tokens");
  refused(R"({"early_stopping": "sometimes"})", "early_stopping");
  refused(R"({"num_beams": "four"})", "num_beams");
  refused("[1, 2]", "object");
  refused("{", "JSON");
  EXPECT_THROW(GenerationConfig::from_json(R"({"num_beams": 2, "do_sample": true})"), Unsupported);
  GenerationConfig sampling;
  sampling.do_sample = true;
  sampling.num_return_sequences = 4;
  EXPECT_NO_THROW(sampling.validate());
}

}  // namespace
}  // namespace kiln::generation
