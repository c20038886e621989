// MappedFile: maps whole files read-only; io errors name the path and the reason.
#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "common/mapped_file.hpp"
#include "gguf_test_util.hpp"

using namespace ember;
using ember::test::require_error;

namespace {

std::filesystem::path write_temp(std::string_view stem, std::string_view content) {
  const auto path = std::filesystem::temp_directory_path() / fmt::format("ember-mf-{}-{}.bin", stem, ::getpid());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(content.data(), 1, content.size(), f) == content.size());
  REQUIRE(std::fclose(f) == 0);
  return path;
}

}  // namespace

TEST_CASE("mapped file: contents, moves and empty files", "[gguf][mapped_file]") {
  const auto path = write_temp("content", "hello mapping");
  MappedFile file(path);
  CHECK(file.size() == 13);
  CHECK(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()) == "hello mapping");
  CHECK(file.path() == path);

  const std::byte* data = file.data();
  MappedFile moved(std::move(file));
  CHECK(moved.data() == data);
  CHECK(moved.size() == 13);
  CHECK(file.size() == 0);   // NOLINT: moved-from is empty by contract
  CHECK(file.data() == nullptr);

  MappedFile assigned;
  assigned = std::move(moved);
  CHECK(assigned.bytes().size() == 13);
  CHECK(std::to_integer<char>(assigned.bytes()[4]) == 'o');
  std::filesystem::remove(path);

  const auto empty = write_temp("empty", "");
  MappedFile none(empty);
  CHECK(none.size() == 0);
  CHECK(none.bytes().empty());
  std::filesystem::remove(empty);
}

TEST_CASE("mapped file: io errors", "[gguf][mapped_file]") {
  require_error([] { MappedFile("/nonexistent/ember/file.bin"); }, ErrorCode::io,
                {"'/nonexistent/ember/file.bin'", "No such file or directory"});
  require_error([] { MappedFile(std::filesystem::temp_directory_path()); }, ErrorCode::io,
                {"not a regular file"});
}
