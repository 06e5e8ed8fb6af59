// DataLoader: batch `index` of epoch `epoch` by random access. The sampler's order is a pure
// function of the epoch, so skipping batches on resume costs nothing but the order itself.
#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "kiln/data.h"

namespace kiln::data {

struct DataLoader::OrderCache {
  std::mutex mutex;
  int64_t epoch = -1;
  std::shared_ptr<const std::vector<size_t>> order;
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, size_t batch_size,
                       std::shared_ptr<const Sampler> sampler, bool drop_last, Collator collate)
    : dataset_(std::move(dataset)),
      batch_size_(batch_size),
      sampler_(sampler ? std::move(sampler) : std::make_shared<SequentialSampler>()),
      drop_last_(drop_last),
      collate_(std::move(collate)),
      cache_(std::make_shared<OrderCache>()) {
  if (!dataset_) throw InvalidArgument("DataLoader: the dataset is null");
  if (batch_size_ == 0) throw InvalidArgument("DataLoader: batch_size must be positive, got 0");
  if (!collate_) throw InvalidArgument("DataLoader: the collator is empty");
}

size_t DataLoader::num_batches() const {
  const size_t n = sampler_->length(dataset_->size());
  const size_t per = dataset_->is_batched() ? 1 : batch_size_;
  return drop_last_ ? n / per : (n + per - 1) / per;
}

std::vector<size_t> DataLoader::batch_indices(int64_t epoch, size_t index) const {
  if (epoch < 0) throw InvalidArgument(fmt::format("DataLoader: epoch {} is negative", epoch));
  if (index >= num_batches())
    throw InvalidArgument(
        fmt::format("DataLoader: batch {} is out of range: an epoch has {} batches ({} items, "
                    "batch_size {}, drop_last {})",
                    index, num_batches(), dataset_->size(), batch_size_, drop_last_));
  std::shared_ptr<const std::vector<size_t>> order;
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (cache_->epoch != epoch || !cache_->order) {
      auto fresh = std::make_shared<const std::vector<size_t>>(sampler_->order(dataset_->size(), epoch));
      if (fresh->size() != sampler_->length(dataset_->size()))
        throw InvalidArgument(
            fmt::format("DataLoader: the sampler gave {} indices for a dataset of {} items ({} expected)",
                        fresh->size(), dataset_->size(), sampler_->length(dataset_->size())));
      cache_->order = std::move(fresh);
      cache_->epoch = epoch;
    }
    order = cache_->order;
  }
  const size_t per = dataset_->is_batched() ? 1 : batch_size_;
  const size_t begin = index * per;
  const size_t end = std::min(begin + per, order->size());
  return std::vector<size_t>(order->begin() + static_cast<std::ptrdiff_t>(begin),
                             order->begin() + static_cast<std::ptrdiff_t>(end));
}

Example DataLoader::batch(int64_t epoch, size_t index) const {
  return dataset_->get_batch(batch_indices(epoch, index), collate_);
}

}  // namespace kiln::data
