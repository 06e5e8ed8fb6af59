// A TensorBoard event-file writer: the scalars a training run logs, in the files TensorBoard reads.
//
//   kiln::trainer::TensorBoardWriter tb("runs/exp1");      // runs/exp1/events.out.tfevents.<t>.<host>.<pid>.<n>
//   tb.add_scalar("train/loss", 0.693, /*step=*/10);
//   tb.flush();
//
// The file is a sequence of TFRecords (uint64 length, masked CRC32C of the length, data, masked
// CRC32C of the data), each holding a tensorflow.Event protobuf encoded by hand: no protobuf
// runtime is needed to write it. The first record carries file_version "brain.Event:2".
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::trainer {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord framing uses it.
uint32_t crc32c(std::string_view data);
// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8 modulo 2^32. Masking keeps a CRC
// of data that itself contains CRCs from being trivially related to them.
uint32_t masked_crc32c(std::string_view data);

class TensorBoardWriter {
 public:
  // Creates logdir (and its parents) and a new event file in it; writes the file_version record.
  // IOError naming the folder or file when either cannot be created.
  explicit TensorBoardWriter(const std::string& logdir);
  ~TensorBoardWriter();  // flushes and closes; never throws
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  TensorBoardWriter(TensorBoardWriter&&) noexcept;
  TensorBoardWriter& operator=(TensorBoardWriter&&) noexcept;

  // One Event{wall_time, step, summary{value{tag, simple_value}}}; the value is stored as float32
  // (TensorBoard's simple_value). wall_time defaults to now, in seconds since the Unix epoch.
  // InvalidArgument for an empty tag; IOError naming the file when writing fails.
  void add_scalar(const std::string& tag, double value, int64_t step, std::optional<double> wall_time = std::nullopt);
  // A text summary as TensorBoard's text plugin shows it (tag "<tag>/text_summary"), as
  // torch.utils.tensorboard's add_text writes it.
  void add_text(const std::string& tag, const std::string& text, int64_t step,
                std::optional<double> wall_time = std::nullopt);
  // Pushes buffered records to the file and the file to the disk (fflush + fsync).
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  struct FileCloser {
    void operator()(std::FILE* f) const;
  };
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
};

}  // namespace kiln::trainer
