// The state behind gguf::File (internal to lib/gguf).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/mapped_file.hpp"
#include "gguf/gguf.hpp"

namespace ember::gguf {

struct File::Impl {
  std::string name;                  // path, or the name given to from_bytes (for messages)
  MappedFile mapping;                // set by File::open
  std::vector<std::byte> owned;      // set by File::from_bytes
  std::span<const std::byte> bytes;  // the whole image: mapping.bytes(), owned, or the caller's (from_view)

  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;

  std::vector<KeyValue> metadata;
  std::vector<TensorInfo> tensors;
  // Lookup by name; the views point into `bytes`, which outlives the maps.
  std::unordered_map<std::string_view, size_t> key_index;
  std::unordered_map<std::string_view, size_t> tensor_index;
};

// Parses impl.bytes and fills the rest of `impl`. Throws malformed_file / unsupported.
void parse(File::Impl& impl);

}  // namespace ember::gguf
