#include "common/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "common/fail.hpp"

namespace ember {
namespace {

// Closes the descriptor on every path out of the constructor; the mapping keeps
// the file referenced on its own.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void fail_io(const std::filesystem::path& path, const char* what, int err) {
  fail(ErrorCode::io, "cannot {} '{}': {}", what, path.string(), std::strerror(err));
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail_io(path, "open", errno);
  FdGuard guard{fd};

  struct stat st {};
  if (::fstat(fd, &st) != 0) fail_io(path, "stat", errno);
  if (!S_ISREG(st.st_mode)) fail(ErrorCode::io, "cannot map '{}': not a regular file", path.string());
  if (st.st_size < 0 || uint64_t(st.st_size) > std::numeric_limits<size_t>::max())
    fail(ErrorCode::io, "cannot map '{}': size {} does not fit in memory", path.string(), int64_t(st.st_size));
  if (st.st_size == 0) return;

  const size_t size = size_t(st.st_size);
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (mapping == MAP_FAILED) fail_io(path, "map", errno);
  data_ = static_cast<const std::byte*>(mapping);
  size_ = size;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { release(); }

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace ember
