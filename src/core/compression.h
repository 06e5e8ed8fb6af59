// zlib's CRC-32, and zlib decompression (gzip files, zip members), with errors that name the file and the byte offset
// at which the data went wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

// zlib's CRC-32 of any number of bytes (zlib takes at most 4 GiB a call: this feeds it slices).
uint32_t crc32_of(std::string_view bytes);

// Whether the bytes start with gzip's magic (1f 8b).
bool is_gzip(const std::string& bytes);

// Decompresses a gzip file's bytes (every member, as gzip -d does). CorruptFile naming `path` and
// the compressed byte offset for corrupt or truncated data.
std::string gunzip(const std::string& bytes, const std::string& path);

// Inflates raw deflate data (a zip member) that must decompress to exactly `expected` bytes.
// `label` names the member in errors and `base_offset` is the data's offset in its file, so that
// errors give file offsets.
std::string inflate_raw(const char* data, size_t size, size_t expected, const std::string& label, size_t base_offset);

}  // namespace kiln
