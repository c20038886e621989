// TempFile (temp_file.hpp).
#include "common/temp_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/fail.hpp"

namespace ember {

namespace fs = std::filesystem;

TempFile::TempFile(const fs::path& output, std::string who) : output_(output), who_(std::move(who)) {
  const fs::path folder = output.has_parent_path() ? output.parent_path() : fs::path(".");
  for (int attempt = 0;; ++attempt) {
    path_ = folder / fmt::format(".{}.tmp-{}-{}", output.filename().string(), ::getpid(), attempt);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      return;
    }
    if (errno != EEXIST || attempt >= 100)
      fail(ErrorCode::io, "{}: cannot create a file in '{}' for '{}': {}", who_, folder.string(), output.string(),
           std::strerror(errno));
  }
}

TempFile::~TempFile() {
  if (!committed_) {
    std::error_code ignored;
    fs::remove(path_, ignored);
  }
}

void TempFile::commit() {
  std::error_code ec;
  fs::rename(path_, output_, ec);
  if (ec) fail(ErrorCode::io, "{}: cannot rename '{}' to '{}': {}", who_, path_.string(), output_.string(), ec.message());
  committed_ = true;
}

}  // namespace ember
