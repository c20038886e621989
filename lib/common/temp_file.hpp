// A temporary sibling of an output file: written in full, then renamed into place, so
// that a reader never sees a partial output and an error leaves nothing behind.
#pragma once

#include <filesystem>
#include <string>

namespace ember {

class TempFile {
 public:
  // Creates an empty ".NAME.tmp-PID-N" beside `output` at once, so that an unwritable
  // folder fails before any work (io error prefixed with `who`, e.g. "quantize").
  TempFile(const std::filesystem::path& output, std::string who);
  ~TempFile();   // removes the temporary unless committed
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  void commit();   // renames it to the output; io error on failure

 private:
  std::filesystem::path output_, path_;
  std::string who_;
  bool committed_ = false;
};

}  // namespace ember
