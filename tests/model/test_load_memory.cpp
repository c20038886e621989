// A model larger than its backend's memory: load() fails with out_of_memory, naming
// the file, the model's size and the backend's own numbers, and leaves nothing behind.
#include <memory>
#include <string>

#include "backend/reference/reference_backend.hpp"
#include "common/catch.hpp"
#include "common/paths.hpp"
#include "ember/error.hpp"
#include "model/loaded_model.hpp"

using namespace ember;

namespace {

// The reference backend with a device-like memory of `capacity` bytes: buffers larger
// than what is left fail as a GPU allocation does (ErrorCode::out_of_memory).
class SmallMemoryBackend final : public backend::Backend {
 public:
  explicit SmallMemoryBackend(size_t capacity) : inner_(reference::make_reference_backend()), capacity_(capacity) {}
  std::string_view name() const override { return "small-memory"; }
  std::unique_ptr<backend::Buffer> allocate(size_t bytes) override {
    take(bytes);
    return inner_->allocate(bytes);
  }
  std::shared_ptr<backend::Buffer> wrap_host(std::span<const std::byte> bytes, std::shared_ptr<const void> keep) override {
    take(bytes.size());
    return inner_->wrap_host(bytes, std::move(keep));
  }
  void upload(const backend::Tensor& dst, const void* src) override { inner_->upload(dst, src); }
  void download(const backend::Tensor& src, void* dst) override { inner_->download(src, dst); }
  void get_rows(const backend::Tensor& t, const backend::Tensor& i, const backend::Tensor& o) override { inner_->get_rows(t, i, o); }
  void matmul(const backend::Tensor& w, const backend::Tensor& x, const backend::Tensor& o) override { inner_->matmul(w, x, o); }
  void add(const backend::Tensor& a, const backend::Tensor& b, const backend::Tensor& o) override { inner_->add(a, b, o); }
  void mul(const backend::Tensor& a, const backend::Tensor& b, const backend::Tensor& o) override { inner_->mul(a, b, o); }
  void scale(const backend::Tensor& x, float f, const backend::Tensor& o) override { inner_->scale(x, f, o); }
  void rms_norm(const backend::Tensor& x, const backend::Tensor& w, float eps, const backend::Tensor& o) override {
    inner_->rms_norm(x, w, eps, o);
  }
  void rope(const backend::Tensor& x, const backend::Tensor& p, const backend::RopeParams& rp,
            const backend::Tensor& o) override {
    inner_->rope(x, p, rp, o);
  }
  void glu(const backend::Tensor& g, const backend::Tensor& u, backend::Activation a, const backend::Tensor& o) override {
    inner_->glu(g, u, a, o);
  }
  void kv_store(const backend::Tensor& s, const backend::Tensor& c, const backend::Tensor& sl) override {
    inner_->kv_store(s, c, sl);
  }
  void kv_load(const backend::Tensor& c, const backend::Tensor& sl, const backend::Tensor& o) override {
    inner_->kv_load(c, sl, o);
  }
  void copy_rows(const backend::Tensor& t, const backend::Tensor& s, const backend::Tensor& d) override {
    inner_->copy_rows(t, s, d);
  }
  void attention(const backend::Tensor& q, const backend::Tensor& k, const backend::Tensor& v,
                 const backend::AttentionParams& p, const backend::Tensor& o) override {
    inner_->attention(q, k, v, p, o);
  }

 private:
  void take(size_t bytes) {
    if (bytes > capacity_ - used_)
      throw Error(ErrorCode::out_of_memory, "cannot allocate " + std::to_string(bytes) + " bytes (" +
                                                std::to_string(capacity_ - used_) + " free of " +
                                                std::to_string(capacity_) + ")");
    used_ += bytes;
  }
  std::unique_ptr<backend::Backend> inner_;
  size_t capacity_, used_ = 0;
};

}  // namespace

TEST_CASE("a model larger than the backend's memory fails at load with the sizes", "[load]") {
  const auto path = test::golden_dir() / "llama-Q4_0.gguf";
  EMBER_SKIP_IF_MISSING(path);
  SmallMemoryBackend small(1 << 20);  // 1 MiB: the file's tensor data is 1.8 MB
  try {
    (void)model::LoadedModel::open(path, small);
    FAIL("the model loaded into 1 MiB");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::out_of_memory);
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("llama-Q4_0") != std::string::npos);
    CHECK(what.find("MiB of tensor data do not fit the small-memory backend") != std::string::npos);
    CHECK(what.find("free of 1048576") != std::string::npos);  // the backend's own numbers
  }
  // The same backend with room enough loads the model.
  SmallMemoryBackend large(size_t(64) << 20);
  CHECK_NOTHROW(model::LoadedModel::open(path, large));
}
