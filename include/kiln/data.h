// Data for training: datasets of named tensors, samplers, a random-access data loader, and readers
// for IDX (MNIST / Fashion-MNIST), .npy/.npz and CSV files. Names follow PyTorch and the Hugging
// Face Trainer (Dataset, RandomSampler, DataLoader, default collator, drop_last, seed / data_seed).
//
//   using namespace kiln::data;
//   auto train = load_idx("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
//                         {.normalize = kFashionMnistNormalization});   // "input" [N,1,28,28], "labels" [N]
//   auto sampler = std::make_shared<RandomSampler>(data_sampler_seed(args.seed, args.data_seed));
//   DataLoader loader(train, 64, sampler, /*drop_last=*/false);
//   for (int64_t epoch = 0; epoch < epochs; ++epoch)
//     for (size_t b = 0; b < loader.num_batches(); ++b) {
//       Example batch = loader.batch(epoch, b);     // {"input": [64,1,28,28], "labels": [64]}
//       ...
//     }
//
// Exact resume: a batch is a pure function of (sampler seed, epoch, batch index), so a resumed run
// asks for loader.batch(epoch, first_unseen) directly; the batches it skips are never loaded.
//
// Every reader throws IOError for a file it cannot open and CorruptFile (naming the file and the
// byte offset, or the line for CSV) for a truncated or malformed one.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::data {

// One item, or one batch: tensors by column name ("input", "labels", ...).
using Example = std::map<std::string, Tensor>;

// Turns a batch's items into one Example.
using Collator = std::function<Example(const std::vector<Example>&)>;

// A map-style dataset: a length and an item by index. Implementations must be safe to call from
// several threads at once (get is const).
class Dataset {
 public:
  virtual ~Dataset();
  virtual size_t size() const = 0;
  virtual Example get(size_t index) const = 0;
  // The column names of an item; the default asks item 0 (none for an empty dataset).
  virtual std::vector<std::string> columns() const;
  // The items at `indices` as one batch: by default collate(get(i) for each i). A dataset that
  // batches its items itself (a Python sequence with a Python data_collator, which takes the raw
  // items) overrides it and may ignore `collate`.
  virtual Example get_batch(const std::vector<size_t>& indices, const Collator& collate) const;
  // An item's length for length-grouped sampling (the Hugging Face Trainer's group_by_length): its
  // `length_column` value when it has that column (a scalar), else the first dimension of its
  // `input_column` (HF's len(item["input_ids"])). ShapeError naming the item when it has neither.
  virtual int64_t item_length(size_t index, const std::string& length_column, const std::string& input_column) const;
  // A stream (a Python IterableDataset behind an index): items are best read in index order, so the
  // Trainer does not shuffle or group it.
  virtual bool sequential() const { return false; }
  // Each item is a whole batch (a Python Trainer's get_train_dataloader batches): a DataLoader
  // takes one item per batch, whatever its batch_size.
  virtual bool is_batched() const { return false; }
  // The epoch about to be read (HF's set_epoch, which a stream of batches needs to reshuffle as its
  // loader does); called by the Trainer at the start of each epoch. The default does nothing.
  virtual void set_epoch(int64_t /*epoch*/) const {}
};

// Items held one by one (they may differ in shape from item to item: a JSON Lines file of token
// sequences); batches of different lengths need a padding collator (padding_collator below).
class ExampleListDataset : public Dataset {
 public:
  explicit ExampleListDataset(std::vector<Example> items) : items_(std::move(items)) {}
  size_t size() const override { return items_.size(); }
  Example get(size_t index) const override;  // InvalidArgument for index >= size()

 private:
  std::vector<Example> items_;
};

// A dataset whose batches another collator makes (a C++ data_collator): the loader's own is ignored.
class CollatedDataset : public Dataset {
 public:
  CollatedDataset(std::shared_ptr<const Dataset> dataset, Collator collate);  // InvalidArgument for nulls
  size_t size() const override { return dataset_->size(); }
  Example get(size_t index) const override { return dataset_->get(index); }
  std::vector<std::string> columns() const override;  // the columns of a batch of item 0
  Example get_batch(const std::vector<size_t>& indices, const Collator& collate) const override;
  int64_t item_length(size_t index, const std::string& length_column, const std::string& input_column) const override {
    return dataset_->item_length(index, length_column, input_column);
  }

 private:
  std::shared_ptr<const Dataset> dataset_;
  Collator collate_;
};

// Columns of tensors that share their first dimension; item i holds row i of each column as a
// view (no copy) into the column's buffer.
class TensorDataset : public Dataset {
 public:
  // Throws InvalidArgument for no columns or an undefined tensor, ShapeError naming two columns
  // whose first dimensions differ (or a scalar column). Non-contiguous columns are packed once.
  explicit TensorDataset(std::map<std::string, Tensor> columns);
  size_t size() const override { return size_; }
  Example get(size_t index) const override;  // InvalidArgument for index >= size()
  std::vector<std::string> columns() const override;
  const Tensor& column(const std::string& name) const;  // the whole column; KeyError if absent

 private:
  std::map<std::string, Tensor> columns_;
  size_t size_ = 0;
};

// The items of `dataset` at `indices`, in that order (torch.utils.data.Subset).
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<size_t> indices);  // InvalidArgument if out of range
  size_t size() const override { return indices_.size(); }
  Example get(size_t index) const override;
  std::vector<std::string> columns() const override { return dataset_->columns(); }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<size_t> indices_;
};

// Datasets one after another (torch.utils.data.ConcatDataset); all must have the same columns.
class ConcatDataset : public Dataset {
 public:
  explicit ConcatDataset(std::vector<std::shared_ptr<const Dataset>> datasets);
  size_t size() const override { return offsets_.empty() ? 0 : offsets_.back(); }
  Example get(size_t index) const override;
  std::vector<std::string> columns() const override;

 private:
  std::vector<std::shared_ptr<const Dataset>> datasets_;
  std::vector<size_t> offsets_;  // offsets_[i]: items in datasets_[0..i]
};

// The order in which an epoch visits the items of a dataset of n items. Must be a pure function of
// (n, epoch) so that any epoch can be recomputed on resume without replaying earlier ones.
class Sampler {
 public:
  virtual ~Sampler();
  virtual std::vector<size_t> order(size_t n, int64_t epoch) const = 0;
  // How many indices order(n, epoch) gives: n, but one rank's share for a DistributedSampler.
  virtual size_t length(size_t n) const { return n; }
};

// 0, 1, ..., n-1 in every epoch (evaluation, prediction).
class SequentialSampler : public Sampler {
 public:
  std::vector<size_t> order(size_t n, int64_t epoch) const override;
};

// A uniform random permutation per epoch, from a generator seeded with derive_seed(seed, epoch):
// the same seed and epoch give the same permutation on every platform and thread count, different
// epochs give independent permutations. (Accelerate's SeedableRandomSampler reseeds with
// seed + epoch in the same spirit; the permutations themselves differ from PyTorch's.)
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(uint64_t seed) : seed_(seed) {}
  std::vector<size_t> order(size_t n, int64_t epoch) const override;  // InvalidArgument for epoch < 0
  uint64_t seed() const { return seed_; }

 private:
  uint64_t seed_;
};

// One rank's share of another sampler's order, as torch's DistributedSampler takes it: every rank
// computes the same order of the whole dataset (`inner`'s), pads it to a multiple of `num_replicas`
// by repeating its first indices (or, with `drop_last`, drops the tail that does not divide), and
// rank r takes the indices at r, r + N, r + 2N, ... With `pad` false (evaluation) nothing is padded
// or dropped and the shares differ in length by at most one.
class DistributedSampler : public Sampler {
 public:
  // InvalidArgument for a null inner sampler, num_replicas < 1 or a rank outside [0, num_replicas).
  DistributedSampler(std::shared_ptr<const Sampler> inner, int rank, int num_replicas, bool drop_last = false,
                     bool pad = true);
  std::vector<size_t> order(size_t n, int64_t epoch) const override;
  size_t length(size_t n) const override;

 private:
  std::shared_ptr<const Sampler> inner_;
  int rank_, replicas_;
  bool drop_last_, pad_;
};

// Hugging Face's LengthGroupedSampler (group_by_length): a seeded permutation (RandomSampler's)
// cut into mega-batches of mega_batch_mult x batch_size items, each sorted by decreasing length (a
// stable sort), with the mega-batch holding the longest item moved first so that an out-of-memory
// shows on the first step. mega_batch_mult 0 means HF's default: min(n / (4 batch_size), 50), at
// least 1. Batches then hold items of similar lengths, so dynamic padding pads little.
class LengthGroupedSampler : public Sampler {
 public:
  // InvalidArgument for batch_size 0 or a negative length.
  LengthGroupedSampler(std::vector<int64_t> lengths, size_t batch_size, uint64_t seed, size_t mega_batch_mult = 0);
  // InvalidArgument when n is not the number of lengths.
  std::vector<size_t> order(size_t n, int64_t epoch) const override;

 private:
  std::vector<int64_t> lengths_;
  size_t batch_size_, mega_batch_mult_;
  RandomSampler random_;
};

// The lengths of every item of a dataset (Dataset::item_length).
std::vector<int64_t> item_lengths(const Dataset& dataset, const std::string& length_column,
                                  const std::string& input_column);

// The Hugging Face rule for the training sampler's seed: `data_seed` when set, else `seed`.
inline uint64_t data_sampler_seed(int64_t seed, std::optional<int64_t> data_seed) {
  return static_cast<uint64_t>(data_seed.value_or(seed));
}

// Stacks each column along a new first dimension: items of shape S give a batch of [B, ...S].
// Throws InvalidArgument for no items, ShapeError when an item lacks a column the first has (or has
// an extra one) or a column's shape differs, TypeError when its dtype differs, each naming the
// column and the two items.
Example default_collate(const std::vector<Example>& items);

// Dynamic padding (the collators of Hugging Face's DataCollatorWithPadding and
// DataCollatorForSeq2Seq, with a tokenizer's pad): items whose sequence columns differ in length
// are padded along their first dimension to the longest in the batch (rounded up to
// pad_to_multiple_of), every other dimension and the dtype must agree; columns of scalars are
// stacked.
struct PaddingOptions {
  int64_t pad_token_id = 0;           // for input_ids and any other padded column not named below
  int64_t label_pad_token_id = -100;  // for labels (ignored by the loss)
  // Per column pad values, over the rules: labels -100, attention_mask 0, token_type_ids 0,
  // special_tokens_mask 1, others pad_token_id.
  std::map<std::string, double> pad_values;
  std::string padding_side = "right";  // or "left" (decoder-only generation)
  int64_t pad_to_multiple_of = 0;      // 0: the batch's longest
  // The columns padded; empty: every column of rank 1 or more.
  std::vector<std::string> columns;
  // When items have input_ids and no attention_mask, add one (1 for tokens, 0 for padding) as a
  // tokenizer's pad does.
  bool add_attention_mask = true;
};
// A collator that pads as above. Its errors name the column and the two items that disagree.
Collator padding_collator(PaddingOptions options = {});

// Batches of a dataset in the order of a sampler, by random access: batch(epoch, index) loads
// exactly the items of that batch. Safe to call from several threads.
class DataLoader {
 public:
  // A null sampler means SequentialSampler. InvalidArgument for a null dataset or batch_size 0.
  DataLoader(std::shared_ptr<const Dataset> dataset, size_t batch_size,
             std::shared_ptr<const Sampler> sampler = nullptr, bool drop_last = false,
             Collator collate = default_collate);

  // Batches per epoch: floor(n / batch_size) with drop_last, else ceil(n / batch_size).
  size_t num_batches() const;
  // The items of the dataset (the Hugging Face Trainer's num_examples(dataloader)).
  size_t num_examples() const { return dataset_->size(); }
  size_t batch_size() const { return batch_size_; }
  bool drop_last() const { return drop_last_; }
  const std::shared_ptr<const Dataset>& dataset() const { return dataset_; }

  // The dataset indices of batch `index` of epoch `epoch` (the last may be short without drop_last).
  // InvalidArgument for index >= num_batches() or epoch < 0.
  std::vector<size_t> batch_indices(int64_t epoch, size_t index) const;
  Example batch(int64_t epoch, size_t index) const;

 private:
  std::shared_ptr<const Dataset> dataset_;
  size_t batch_size_;
  std::shared_ptr<const Sampler> sampler_;
  bool drop_last_;
  Collator collate_;
  // The last epoch's order, so that a pass over an epoch draws its permutation once.
  struct OrderCache;
  std::shared_ptr<OrderCache> cache_;
};

// Background loading (the Hugging Face Trainer's dataloader_num_workers): the batches [first, end) of
// an epoch loaded and collated on `workers` threads, at most workers x prefetch_factor batches ahead
// of the consumer, and handed out by next() in order, so that what a run sees is what it sees
// without workers. A batch whose loading failed rethrows its error from next(), naming the batch
// and its items. start() may be called again for the next epoch on the same threads (HF's
// dataloader_persistent_workers). The destructor stops and joins the threads.
class Prefetcher {
 public:
  Prefetcher(const DataLoader& loader, int workers, int prefetch_factor);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  void start(int64_t epoch, size_t first, size_t end);
  // The next batch, waiting for it; InvalidArgument past `end`.
  Example next();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// ---- Readers --------------------------------------------------------------------------------

// x -> (x - mean) / std after scaling pixels to [0, 1].
struct Normalization {
  float mean = 0.0f;
  float std = 1.0f;
};
// The training-set pixel statistics torchvision examples use.
inline constexpr Normalization kMnistNormalization{0.1307f, 0.3081f};
inline constexpr Normalization kFashionMnistNormalization{0.2860f, 0.3530f};

struct IdxOptions {
  std::optional<Normalization> normalize;  // none: pixels in [0, 1]
  std::string image_column = "input";
  std::string label_column = "labels";
};

// MNIST-style IDX files, gzipped or not (detected by magic): uint8 images [N, H, W] become float32
// [N, 1, H, W] = pixel / 255 (then normalised), integer labels [N] become int64. CorruptFile for a
// malformed or truncated file, or image and label counts that differ.
std::shared_ptr<TensorDataset> load_idx(const std::string& images, const std::string& labels,
                                        const IdxOptions& options = {});

// The arrays of a .npz archive (np.savez or np.savez_compressed) as columns. `columns` maps array
// names in the archive to column names; empty means every array under its own name. KeyError for
// an array the archive lacks; the arrays must share their first dimension (TensorDataset's rule).
std::shared_ptr<TensorDataset> load_npz(const std::string& path,
                                        const std::map<std::string, std::string>& columns = {});
// One .npy file per column: {"input": "x.npy", "labels": "y.npy"}.
std::shared_ptr<TensorDataset> load_npy(const std::map<std::string, std::string>& paths_by_column);

struct CsvOptions {
  // The label column: a header name, or (also without a header) a 0-based index, negative from the
  // end ("-1": the last). Empty: no labels, every column is a feature.
  std::string label_column = "label";
  bool header = true;
  char delimiter = ',';
  std::string input_column = "input";
  std::string labels_column = "labels";
};

// A numeric CSV file (RFC 4180 quoting, LF or CRLF line ends): the non-label columns become float32
// features [N, F] in `input_column`, the label column becomes `labels_column`, int64 when every
// label is integral, float32 otherwise. CorruptFile naming the file and line for a ragged row, a
// non-numeric or empty field, an unterminated quote, or no data rows.
std::shared_ptr<TensorDataset> load_csv(const std::string& path, const CsvOptions& options = {});

struct JsonlOptions {
  // The columns read (others are skipped, strings included); empty: every column, and a string
  // value is an error. "label" and "label_ids" are read as "labels" (HF's default collator's rule).
  std::vector<std::string> columns;
  // Leave out columns holding strings (raw text next to its tokens: HF's remove_unused_columns),
  // instead of failing on them.
  bool skip_text = false;
};

// A JSON Lines file (one JSON object per line, as `datasets` writes them): each line one item, each
// key a column; a value is a number, a boolean or a (nested, rectangular) array of them. A column
// is int64 when every value in it is an integer or boolean, else float32. Items may differ in
// length (token sequences: batch them with padding_collator). CorruptFile naming the file and line
// for malformed JSON, a line that is not an object, a string or null value, a ragged array, or a
// line whose columns differ from the first line's; no items at all is an error too.
std::shared_ptr<ExampleListDataset> load_jsonl(const std::string& path, const JsonlOptions& options = {});

}  // namespace kiln::data
