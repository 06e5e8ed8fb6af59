// kiln._kiln's datasets: Kiln's own (TensorDataset and the readers) as Python objects, and any
// Python sequence of dicts as a Kiln Dataset through an adapter that takes the GIL per item.
// python/kiln/trainer_data.py turns a list of same-shaped dicts into one TensorDataset instead, so
// that training such a list never touches Python.
#include <fmt/format.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <mutex>

#include "kiln/error.h"
#include "numpy_tensor.h"
#include "trainer_bindings.h"

namespace kiln::python {

namespace {

std::string type_name(const py::handle& obj) { return py::str(obj.get_type().attr("__name__")); }

// HF's default_data_collator renames "label" and "label_ids" to "labels".
std::string column_name(std::string key) {
  if (key == "label" || key == "label_ids") return "labels";
  return key;
}

data::Example example_from_py(const py::handle& item, size_t index) {
  if (!py::isinstance<py::dict>(item) && !py::hasattr(item, "keys"))
    throw TypeError(fmt::format("item {} of the dataset is a {}, not a dict of arrays (column name -> array)", index,
                                type_name(item)));
  data::Example example;
  const py::object keys = item.attr("keys")();
  for (const auto& key : keys) {
    if (!py::isinstance<py::str>(key))
      throw TypeError(
          fmt::format("item {} of the dataset has a key of type {}; column names are str", index, type_name(key)));
    const std::string name = key.cast<std::string>();
    example[column_name(name)] = tensor_from_py(item[key], fmt::format("column '{}' of item {}", name, index));
  }
  return example;
}

// Adds a note (PEP 678, shown under the traceback) to a Python exception on its way out.
void note(py::error_already_set& e, const std::string& text) {
  if (py::hasattr(e.value(), "add_note")) e.value().attr("add_note")(text);
}

// kiln/trainer_data.py's IterableDataset adapter marks itself so: its items come from a stream.
bool is_stream(const py::object& sequence) { return py::hasattr(sequence, "_kiln_stream"); }

// group_by_length over raw Python items (HF's rule): item[length_column] when the item has it, else
// len(item[input_column]).
int64_t raw_item_length(const py::object& sequence, size_t index, const std::string& length_column,
                        const std::string& input_column) {
  py::gil_scoped_acquire gil;
  const py::object item = sequence[py::int_(index)];
  if (!py::hasattr(item, "keys"))
    throw TypeError(fmt::format("item {} of the dataset is a {}, not a dict", index, type_name(item)));
  const py::object keys = item.attr("keys")();
  if (keys.contains(length_column)) return py::int_(item[py::str(length_column)]).cast<int64_t>();
  if (!keys.contains(input_column))
    throw ShapeError(fmt::format("item {} has neither a '{}' column nor a '{}' column to take its length from", index,
                                 length_column, input_column));
  return static_cast<int64_t>(py::len(item[py::str(input_column)]));
}

// What the Python sequence datasets share: the sequence (len + __getitem__), its length, whether
// it is a stream read in order, and the item lengths group_by_length reads.
class PythonSequenceDataset : public data::Dataset {
 public:
  explicit PythonSequenceDataset(const py::object& sequence)
      : sequence_(hold(sequence)), size_(py::len(sequence)), sequential_(is_stream(sequence)) {}
  size_t size() const override { return size_; }
  int64_t item_length(size_t index, const std::string& length_column, const std::string& input_column) const override {
    return raw_item_length(*sequence_, index, length_column, input_column);
  }
  bool sequential() const override { return sequential_; }

 protected:
  // Item `index` (the caller holds the GIL); the user's exception carries the item's index.
  py::object item(size_t index) const {
    if (index >= size_)
      throw InvalidArgument(fmt::format("dataset index {} is out of range for {} items", index, size_));
    try {
      return (*sequence_)[py::int_(index)];
    } catch (py::error_already_set& e) {  // the item's index on the user's own exception (a worker's too)
      note(e, fmt::format("while Kiln loaded item {} of the dataset", index));
      throw;
    }
  }

 private:
  PyRef sequence_;
  size_t size_;
  bool sequential_;
};

// A Python sequence of dicts, read item by item under the GIL.
class PythonDataset final : public PythonSequenceDataset {
 public:
  using PythonSequenceDataset::PythonSequenceDataset;
  data::Example get(size_t index) const override {
    py::gil_scoped_acquire gil;
    const py::object it = item(index);
    try {
      return example_from_py(it, index);
    } catch (py::error_already_set& e) {
      note(e, fmt::format("while Kiln loaded item {} of the dataset", index));
      throw;
    }
  }
};

// A Python sequence batched by a Python data_collator, as Hugging Face's DataLoader does: the
// collator gets the raw items (dicts that may hold strings, or lists of different lengths) and
// returns a mapping of arrays or torch tensors (a BatchEncoding too), each with the batch first.
// The loader's own collate is not used. get(i) is the batch of item i alone, without its batch axis.
class CollatedPythonDataset final : public PythonSequenceDataset {
 public:
  CollatedPythonDataset(const py::object& sequence, const py::object& collator)
      : PythonSequenceDataset(sequence), collator_(hold(collator)) {}
  data::Example get(size_t index) const override {
    data::Example batch = get_batch({index}, data::default_collate);
    for (auto& [name, t] : batch) {
      Shape item(t.shape().begin() + 1, t.shape().end());
      t = t.contiguous().reshape(item);
    }
    return batch;
  }
  // The columns of the first batch made (the collator runs once for them when none was yet).
  std::vector<std::string> columns() const override {
    {
      const std::lock_guard lock(mutex_);
      if (!columns_.empty()) return columns_;
    }
    if (size() == 0) return {};
    return data::Dataset::columns();  // get(0) records them
  }
  data::Example get_batch(const std::vector<size_t>& indices, const data::Collator& /*collate*/) const override {
    data::Example batch = collate(indices);
    const std::lock_guard lock(mutex_);
    if (columns_.empty())
      for (const auto& [name, t] : batch) columns_.push_back(name);
    return batch;
  }

 private:
  data::Example collate(const std::vector<size_t>& indices) const {
    py::gil_scoped_acquire gil;
    py::list items;
    for (size_t i : indices) items.append(item(i));
    const py::object out = (*collator_)(items);
    if (!py::isinstance<py::dict>(out) && !py::hasattr(out, "keys"))
      throw TypeError(
          fmt::format("data_collator returned a {}; it must return a dict of arrays or tensors "
                      "(column name -> batch)",
                      type_name(out)));
    data::Example batch;
    const py::object keys = out.attr("keys")();
    for (const auto& key : keys) {
      const std::string name = py::str(key);
      const std::string what = fmt::format("column '{}' of the data_collator's batch", name);
      const py::object value = out[key];
      if (value.is_none()) continue;  // HF collators may leave optional columns None
      Tensor t = tensor_from_py(value, what);
      if (t.rank() == 0 || t.dim(0) != static_cast<int64_t>(indices.size()))
        throw ShapeError(fmt::format("{} has shape {}; its first dimension must be the batch's {} items", what,
                                     to_string(t.shape()), indices.size()));
      batch[column_name(name)] = std::move(t);
    }
    if (batch.empty()) throw InvalidArgument("data_collator returned no columns");
    return batch;
  }

  PyRef collator_;
  mutable std::mutex mutex_;
  mutable std::vector<std::string> columns_;
};

// A Python Trainer's own DataLoader (get_train_dataloader & co.) as a dataset of whole batches:
// item i is the i-th batch of the current epoch (kiln/trainer_data.py's LoaderBatches, which the
// Trainer's set_epoch reaches), read in order. get(i) is its first row, so that columns and
// export see one item.
class BatchesPythonDataset final : public data::Dataset {
 public:
  explicit BatchesPythonDataset(const py::object& batches) : batches_(hold(batches)), size_(py::len(batches)) {}
  size_t size() const override { return size_; }
  bool sequential() const override { return true; }
  bool is_batched() const override { return true; }
  void set_epoch(int64_t epoch) const override {
    py::gil_scoped_acquire gil;
    batches_->attr("set_epoch")(epoch);
  }
  data::Example get(size_t index) const override {
    data::Example batch = get_batch({index}, data::default_collate);
    for (auto& [name, t] : batch) {  // row 0, a view
      const Tensor c = t.contiguous();
      t = Tensor::view_of(c.storage(), c.byte_offset(), c.dtype(), Shape(c.shape().begin() + 1, c.shape().end()));
    }
    return batch;
  }
  data::Example get_batch(const std::vector<size_t>& indices, const data::Collator& /*collate*/) const override {
    if (indices.size() != 1) throw InvalidArgument("a loader's batches are read one at a time");
    const size_t i = indices.front();
    if (i >= size_) throw InvalidArgument(fmt::format("batch {} is out of range for {} batches", i, size_));
    py::gil_scoped_acquire gil;
    const py::object out = (*batches_)[py::int_(i)];
    if (!py::isinstance<py::dict>(out) && !py::hasattr(out, "keys"))
      throw TypeError(
          fmt::format("the DataLoader's batch {} is a {}, not a dict of arrays or tensors", i, type_name(out)));
    data::Example batch;
    int64_t rows = -1;
    const py::object keys = out.attr("keys")();
    for (const auto& key : keys) {
      const std::string name = py::str(key);
      const py::object value = out[key];
      if (value.is_none()) continue;
      Tensor t = tensor_from_py(value, fmt::format("column '{}' of the DataLoader's batch {}", name, i));
      if (t.rank() == 0 || (rows >= 0 && t.dim(0) != rows))
        throw ShapeError(
            fmt::format("column '{}' of the DataLoader's batch {} has shape {}; every column needs the "
                        "batch's {} rows first",
                        name, i, to_string(t.shape()), rows < 0 ? std::string("same") : std::to_string(rows)));
      rows = t.dim(0);
      batch[column_name(name)] = std::move(t);
    }
    if (batch.empty()) throw InvalidArgument(fmt::format("the DataLoader's batch {} has no columns", i));
    return batch;
  }

 private:
  PyRef batches_;
  size_t size_;
};

std::map<std::string, std::string> str_map(const py::dict& d) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : d) out[k.cast<std::string>()] = py::str(py::module_::import("os").attr("fspath")(v));
  return out;
}

std::string fspath(const py::object& path) { return py::str(py::module_::import("os").attr("fspath")(path)); }

}  // namespace

Tensor tensor_from_py(const py::handle& value, const std::string& what) {
  py::object array = py::reinterpret_borrow<py::object>(value);
  if (!py::isinstance<py::array>(value)) {
    const py::module_ np = py::module_::import("numpy");
    try {
      array = np.attr("asarray")(value);
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_ValueError)) throw;
      throw TypeError(
          fmt::format("{}: cannot be made an array ({}); items of a column must share one shape", what, e.what()));
    }
    // Python numbers and lists as torch.tensor makes them: float32 and int64.
    const char kind = array.attr("dtype").attr("kind").cast<char>();
    if (kind == 'f') array = array.attr("astype")(np.attr("float32"));
    if (kind == 'i') array = array.attr("astype")(np.attr("int64"));
  }
  const char kind = array.attr("dtype").attr("kind").cast<char>();
  if (kind == 'O' || kind == 'U' || kind == 'S' || kind == 'c' || kind == 'V' || kind == 'M' || kind == 'm')
    throw TypeError(fmt::format("{}: dtype {} is not numeric; Kiln datasets hold numbers (tokenize text first)", what,
                                std::string(py::str(array.attr("dtype")))));
  py::object keep;
  return borrow_array(array, what, keep).clone();
}

py::dict example_to_py(const data::Example& example) {
  py::dict out;
  for (const auto& [name, tensor] : example) out[py::str(name)] = to_array(tensor);
  return out;
}

std::shared_ptr<const data::Dataset> dataset_from_py(const py::object& obj) {
  if (py::isinstance<data::Dataset>(obj)) return obj.cast<std::shared_ptr<data::Dataset>>();
  if (!py::hasattr(obj, "__len__") || !py::hasattr(obj, "__getitem__"))
    throw TypeError(
        fmt::format("a dataset must be a sequence of dicts (len() and [i]), a dict of columns or a kiln "
                    "Dataset, not {}",
                    type_name(obj)));
  return std::make_shared<PythonDataset>(obj);
}

void register_data(py::module_& m) {
  using namespace kiln::data;
  py::class_<Dataset, std::shared_ptr<Dataset>>(m, "Dataset")
      .def("__len__", &Dataset::size)
      .def("__getitem__",
           [](const Dataset& d, int64_t index) {
             const int64_t n = static_cast<int64_t>(d.size());
             if (index < -n || index >= n)
               throw py::index_error(fmt::format("dataset index {} out of range for {} items", index, n));
             const size_t i = static_cast<size_t>(index < 0 ? index + n : index);
             data::Example item;
             {
               py::gil_scoped_release release;  // a Python-backed dataset takes it back
               item = d.get(i);
             }
             return example_to_py(item);
           })
      .def("columns", &Dataset::columns);
  py::class_<TensorDataset, Dataset, std::shared_ptr<TensorDataset>>(m, "TensorDataset")
      .def(py::init([](const py::dict& columns) {
             std::map<std::string, Tensor> tensors;
             for (const auto& [k, v] : columns) {
               const std::string name = py::str(k);
               tensors[column_name(name)] = tensor_from_py(v, "column '" + name + "'");
             }
             return std::make_shared<TensorDataset>(std::move(tensors));
           }),
           py::arg("columns"))
      .def("column", [](const TensorDataset& d, const std::string& name) { return to_array(d.column(name)); });
  py::class_<ExampleListDataset, Dataset, std::shared_ptr<ExampleListDataset>>(m, "ExampleListDataset");
  m.def(
      "load_jsonl",
      [](const py::object& path, const std::vector<std::string>& columns, bool skip_text) {
        JsonlOptions o;
        o.columns = columns;
        o.skip_text = skip_text;
        return load_jsonl(fspath(path), o);
      },
      py::arg("path"), py::arg("columns") = std::vector<std::string>(), py::arg("skip_text") = false);
  m.def("batches_dataset", [](const py::object& batches) -> std::shared_ptr<Dataset> {
    return std::make_shared<BatchesPythonDataset>(batches);
  });
  m.def("python_dataset", [](const py::object& sequence) -> std::shared_ptr<Dataset> {
    return std::make_shared<PythonDataset>(sequence);
  });
  m.def(
      "collated_dataset",
      [](const py::object& sequence, const py::object& collator) -> std::shared_ptr<Dataset> {
        if (!PyCallable_Check(collator.ptr()))
          throw TypeError(fmt::format("data_collator must be callable, not {}", type_name(collator)));
        return std::make_shared<CollatedPythonDataset>(sequence, collator);
      },
      py::arg("sequence"), py::arg("collator"));
  m.def(
      "load_npz",
      [](const py::object& path, const py::dict& columns) {
        return load_npz(fspath(path), [&] {
          std::map<std::string, std::string> out;
          for (const auto& [k, v] : columns) out[k.cast<std::string>()] = v.cast<std::string>();
          return out;
        }());
      },
      py::arg("path"), py::arg("columns") = py::dict());
  m.def(
      "load_npy", [](const py::dict& paths) { return load_npy(str_map(paths)); }, py::arg("paths_by_column"));
  m.def(
      "load_csv",
      [](const py::object& path, const std::string& label_column, bool header, char delimiter) {
        CsvOptions o;
        o.label_column = label_column;
        o.header = header;
        o.delimiter = delimiter;
        return load_csv(fspath(path), o);
      },
      py::arg("path"), py::arg("label_column") = "label", py::arg("header") = true, py::arg("delimiter") = ',');
  m.def(
      "load_idx",
      [](const py::object& images, const py::object& labels, std::optional<std::pair<float, float>> normalize) {
        IdxOptions o;
        if (normalize) o.normalize = Normalization{normalize->first, normalize->second};
        return load_idx(fspath(images), fspath(labels), o);
      },
      py::arg("images"), py::arg("labels"), py::arg("normalize") = std::nullopt);
}

}  // namespace kiln::python
