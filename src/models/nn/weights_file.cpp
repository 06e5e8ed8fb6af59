// load_weights_file: a torch state_dict saved as safetensors (safetensors.torch.save_file) or as a
// numpy archive (np.savez / np.savez_compressed of {key: array}). The format is told by the file's
// first bytes, not its name: a zip archive starts with "PK", anything else is read as safetensors.
#include <fmt/format.h>

#include <fstream>

#include "core/zip.h"
#include "kiln/error.h"
#include "kiln/nn/module.h"
#include "kiln/npy.h"
#include "kiln/safetensors.h"

namespace kiln::nn {

namespace {

std::map<std::string, Tensor> read_npz(const std::string& path) {
  const ZipArchive zip(path);
  std::map<std::string, Tensor> out;
  for (const ZipMember& m : zip.members()) {
    if (m.name.size() < 4 || m.name.compare(m.name.size() - 4, 4, ".npy") != 0)
      throw CorruptFile(
          fmt::format("'{}': member '{}' is not a .npy array (a weights archive holds only arrays)", path, m.name));
    const std::string key = m.name.substr(0, m.name.size() - 4);
    try {
      out.emplace(key, parse_npy(zip.read(m), fmt::format("'{}' member '{}'", path, m.name)));
    } catch (const Unsupported&) {
      throw;
    } catch (const CorruptFile&) {
      throw;
    } catch (const Error& e) {
      throw CorruptFile(fmt::format("'{}': bad .npy array '{}' (data at byte offset {}): {}", path, m.name,
                                    zip.data_offset(m), e.what()));
    }
  }
  if (out.empty()) throw CorruptFile(fmt::format("'{}' holds no arrays", path));
  return out;
}

}  // namespace

std::map<std::string, Tensor> load_weights_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IOError(fmt::format("cannot open weights file '{}'", path));
  char magic[2] = {0, 0};
  in.read(magic, 2);
  if (in.gcount() < 2)
    throw CorruptFile(fmt::format("weights file '{}' is empty or truncated ({} bytes)", path, in.gcount()));
  in.close();
  if (magic[0] == 'P' && magic[1] == 'K') return read_npz(path);
  SafetensorsFile f = read_safetensors(path);
  return std::map<std::string, Tensor>(f.tensors.begin(), f.tensors.end());
}

}  // namespace kiln::nn
