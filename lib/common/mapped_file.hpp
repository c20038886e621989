// A whole file mapped read-only into memory (RAII).
//
// The mapping is private and read-only: the bytes stay valid, and unchanged by
// this process, until the MappedFile is destroyed or moved from. An empty file
// maps to an empty span (mmap cannot map zero bytes, so nothing is mapped).
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>

namespace ember {

class MappedFile {
 public:
  MappedFile() = default;
  // Opens and maps `path`. Throws ember::Error(ErrorCode::io) naming the path and
  // the system's reason when the file cannot be opened, inspected or mapped, or is
  // not a regular file.
  explicit MappedFile(const std::filesystem::path& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void release() noexcept;

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ember
