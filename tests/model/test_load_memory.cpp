// A model larger than its backend's memory: load() fails with out_of_memory, naming
// the file, the model's size and the backend's own numbers, and leaves nothing behind.
#include <memory>
#include <optional>
#include <string>

#include "backend/reference/reference_backend.hpp"
#include "common/catch.hpp"
#include "common/paths.hpp"
#include "ember/ember.hpp"
#include "ember/error.hpp"
#include "kv/page_pool.hpp"
#include "model/loaded_model.hpp"
#include "runtime/backend_factory.hpp"
#include "runtime/backend_registry.hpp"

using namespace ember;

namespace {

// The reference backend with a device-like memory of `capacity` bytes: buffers larger
// than what is left fail as a GPU allocation does (ErrorCode::out_of_memory).
class SmallMemoryBackend final : public backend::Backend {
 public:
  explicit SmallMemoryBackend(size_t capacity) : inner_(reference::make_reference_backend()), capacity_(capacity) {}
  std::string_view name() const override { return "small-memory"; }
  // Backend::supports, except for the type `refused` (for the tests of the checks at load).
  bool supports(backend::Op op, backend::DType type) const override {
    return type != refused && inner_->supports(op, type);
  }
  std::optional<backend::DType> refused;
  // Reports itself as a device backend (the memory it has left) when set.
  bool device = false;
  std::optional<DeviceMemory> device_memory() const override {
    if (!device) return std::nullopt;
    return DeviceMemory{capacity_ - used_, capacity_};
  }
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

TEST_CASE("weights and KV caches of a type the backend does not support are refused at load", "[load]") {
  const auto path = test::golden_dir() / "llama-Q4_0.gguf";
  EMBER_SKIP_IF_MISSING(path);
  SmallMemoryBackend be(size_t(64) << 20);
  CHECK(be.supports(backend::Op::matmul, backend::DType::q4_0));
  CHECK_FALSE(be.supports(backend::Op::matmul, backend::DType::i32));
  CHECK(be.supports(backend::Op::attention, backend::DType::kv_q4_g32));
  CHECK_FALSE(be.supports(backend::Op::attention, backend::DType::q4_0));
  CHECK(be.supports(backend::Op::copy_rows, backend::DType::q4_0));
  CHECK(be.supports(backend::Op::add, backend::DType::f32));
  CHECK_FALSE(be.supports(backend::Op::add, backend::DType::f16));
  be.refused = backend::DType::q4_0;
  try {
    (void)model::LoadedModel::open(path, be);
    FAIL("Q4_0 weights loaded on a backend that cannot multiply them");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::unsupported);
    INFO(e.what());
    CHECK(std::string(e.what()).find("which the small-memory backend cannot multiply") != std::string::npos);
  }
  be.refused = backend::DType::f16;
  kv::PoolConfig config;
  config.n_pages = 2;
  config.page_tokens = 16;
  config.k_width = config.v_width = 64;
  config.storage = backend::DType::f16;
  try {
    kv::Pool pool(be, config);
    FAIL("an F16 KV pool was made on a backend without F16 attention");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::unsupported);
    CHECK(std::string(e.what()).find("cannot store or attend over F16 rows") != std::string::npos);
  }
  config.storage = backend::DType::kv_q8_g32;
  CHECK_NOTHROW(kv::Pool(be, config));
}

TEST_CASE("backends come from the registry, checked by name and interface version", "[load][registry]") {
  const std::vector<runtime::BackendFactory> all = runtime::registered_backends();
  REQUIRE_FALSE(all.empty());
  CHECK(all[0].name == "cpu");  // every build has it, registered first
  const auto cpu = runtime::find_backend("cpu");
  REQUIRE(cpu);
  CHECK(cpu->interface_version == runtime::kBackendInterfaceVersion);
  CHECK(cpu->device_count() == 1);
  CHECK(cpu->create(1, 0)->name() == "cpu");
  CHECK_THROWS_AS(cpu->create(1, 1), Error);
  CHECK_FALSE(runtime::find_backend("no-such-backend"));
  // make_backend goes through the registry; a CUDA build registers "cuda", and with no
  // device its factory reports 0 devices and create fails with unsupported.
  CHECK(runtime::make_backend(Device::cpu, 1)->name() == "cpu");
  if (const auto cuda = runtime::find_backend("cuda")) {
    if (cuda->device_count() == 0) {
      try {
        (void)runtime::make_backend(Device::cuda, 1);
        FAIL("a CUDA backend without a device");
      } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::unsupported);
      }
    }
  } else {
    try {
      (void)runtime::make_backend(Device::cuda, 1);
      FAIL("a CUDA backend in a build without one");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::unsupported);
      CHECK(std::string(e.what()).find("no CUDA backend") != std::string::npos);
    }
  }
  // Registration: a new name is found; a duplicate name, a missing function or another
  // interface version is refused.
  const auto create = [](int threads, int index) { return runtime::find_backend("cpu")->create(threads, index); };
  const auto one = [] { return 1; };
  runtime::register_backend({"test-registry", runtime::kBackendInterfaceVersion, one, create});
  CHECK(runtime::find_backend("test-registry"));
  CHECK(runtime::registered_backends().size() == all.size() + 1);
  const auto two = [] { return 2; };
  runtime::register_backend({"test-registry", runtime::kBackendInterfaceVersion, two, create}, true);  // replaced
  CHECK(runtime::find_backend("test-registry")->device_count() == 2);
  CHECK(runtime::registered_backends().size() == all.size() + 1);
  try {
    runtime::register_backend({"cpu", runtime::kBackendInterfaceVersion, one, create});
    FAIL("a second backend named cpu");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
  }
  try {
    runtime::register_backend({"test-old", runtime::kBackendInterfaceVersion - 1, one, create});
    FAIL("a backend of another interface version");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::internal);
    CHECK(std::string(e.what()).find("interface version") != std::string::npos);
  }
  CHECK_THROWS_AS(runtime::register_backend({"test-empty", runtime::kBackendInterfaceVersion, nullptr, create}), Error);
  CHECK_FALSE(runtime::find_backend("test-old"));
}

// A fake device registered as "cuda" in a build without CUDA: what Model does with a
// device backend, checked without a GPU. Runs after the registry case above (which
// expects no "cuda" in such a build).
TEST_CASE("a device backend: one per model, KV pool sized from its free memory", "[load][registry][device]") {
  const auto path = test::golden_dir() / "llama-Q4_0.gguf";
  EMBER_SKIP_IF_MISSING(path);
  // A CUDA build without a GPU: its "cuda" is replaced for this case and put back after.
  const std::optional<runtime::BackendFactory> real = runtime::find_backend("cuda");
  if (real && real->device_count() > 0) {
    WARN("a CUDA device is present: the fake device is not registered (tests/cuda checks the real one)");
    return;
  }
  struct Restore {
    std::optional<runtime::BackendFactory> real;
    ~Restore() {
      if (real) runtime::register_backend(*real, true);
    }
  } restore{real};
  static int created = 0;
  static constexpr size_t kCapacity = size_t(16) << 20;
  runtime::register_backend({"cuda", runtime::kBackendInterfaceVersion, [] { return 1; },
                             [](int, int index) -> std::unique_ptr<backend::Backend> {
                               if (index != 0) throw Error(ErrorCode::invalid_argument, "one fake device");
                               ++created;
                               auto be = std::make_unique<SmallMemoryBackend>(kCapacity);
                               be->device = true;
                               return be;
                             }},
                            true);
  auto model = Model::load(path, {.backend = Device::cuda});
  CHECK(created == 1);
  // The default pool (four training contexts) does not fit 16 MiB: it is cut to 80 % of
  // what the weights left free.
  const size_t pool = model->kv_pool_bytes(KVStorage::f16);
  CHECK(pool > 0);
  CHECK(pool <= size_t(0.8 * double(kCapacity)));
  auto session = model->new_session();
  REQUIRE(session->prefill(std::vector<int32_t>{1, 5, 9, 13}) == Outcome::ok);
  REQUIRE(session->decode(7) == Outcome::ok);
  auto second = model->new_session();
  REQUIRE(second->prefill(std::vector<int32_t>{1, 2}) == Outcome::ok);
  CHECK(created == 1);  // the weights', pools' and every session's backend is the one made at load
  CHECK(model->kv_pool_bytes(KVStorage::f16) == pool);
}
