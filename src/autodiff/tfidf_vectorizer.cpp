// TfIdfVectorizer (kernels/cpu/tfidf_vectorizer.cpp) counts integer tokens: no gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient no_grad{{"", "TfIdfVectorizer", 9, kMaxOpset}};

}  // namespace
}  // namespace kiln
