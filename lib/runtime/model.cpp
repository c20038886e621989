// ember::Model: loading, model facts and the tokenizer facade.
#include <fstream>
#include <map>

#include "common/fail.hpp"
#include "ember/error.hpp"
#include "ember/session.hpp"
#include "runtime/backend_factory.hpp"
#include "runtime/chat.hpp"
#include "runtime/model_impl.hpp"

namespace ember {
namespace {

// Calls the host's progress callback; a false return cancels the load.
void report(const ModelOptions& options, float fraction) {
  if (options.progress && !options.progress(fraction))
    fail(ErrorCode::invalid_argument, "model loading was cancelled by the progress callback");
}

// Reads a whole file into memory in 16 MiB steps, reporting progress in [from, to].
std::vector<std::byte> read_file(const std::filesystem::path& path, const ModelOptions& options, float from,
                                 float to) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(ErrorCode::io, "cannot open '{}'", path.string());
  const auto size = static_cast<size_t>(in.tellg());
  in.seekg(0);
  std::vector<std::byte> bytes(size);
  constexpr size_t kStep = size_t(16) << 20;
  for (size_t done = 0; done < size;) {
    const size_t n = std::min(kStep, size - done);
    if (!in.read(reinterpret_cast<char*>(bytes.data() + done), std::streamsize(n)))
      fail(ErrorCode::io, "reading '{}' failed at byte {}", path.string(), done);
    done += n;
    report(options, from + (to - from) * float(done) / float(size));
  }
  return bytes;
}

// Touches every page of a mapped region so that the first inference does not
// stall on page faults, reporting progress in [from, to].
void prefault(std::span<const std::byte> bytes, const ModelOptions& options, float from, float to) {
  constexpr size_t kPage = 4096, kStep = size_t(16) << 20;
  volatile unsigned char sink = 0;
  for (size_t done = 0; done < bytes.size();) {
    const size_t end = std::min(bytes.size(), done + kStep);
    for (size_t i = done; i < end; i += kPage) sink = sink + static_cast<unsigned char>(bytes[i]);
    done = end;
    report(options, from + (to - from) * float(done) / float(bytes.size()));
  }
}

ModelInfo describe(const model::LoadedModel& m, const gguf::File& file) {
  const model::HParams& hp = m.hparams;
  ModelInfo info;
  info.architecture = std::string(hp.arch->name);
  info.name = hp.name;
  info.n_vocab = hp.n_vocab;
  info.n_ctx_train = hp.n_ctx_train;
  info.n_embd = hp.n_embd;
  info.n_layer = hp.n_layer;
  info.n_head = hp.n_head;
  info.n_head_kv = hp.n_head_kv;
  info.head_dim = hp.head_dim_k;
  info.n_ff = hp.n_ff;
  for (const model::LayerParams& l : hp.layers) {
    if (l.sliding) {
      ++info.n_sliding_layers;
      info.sliding_window = l.window;
    }
  }
  for (const gguf::TensorInfo& t : file.tensors()) ++info.tensor_types[std::string(quant::type_name(t.type))];
  info.weight_bytes = m.weights.bytes;
  const bool tied = m.weights.output.buffer == m.weights.token_embd.buffer &&
                    m.weights.output.offset == m.weights.token_embd.offset;
  info.decode_bytes_per_token = m.weights.bytes - (tied ? 0 : m.weights.token_embd.bytes());
  // A mixture of experts reads n_expert_used of its n_expert experts per token.
  if (hp.n_expert > 0)
    for (const model::LayerWeights& l : m.weights.layers) {
      const size_t experts = l.exp_gate.bytes() + l.exp_up.bytes() + l.exp_down.bytes();
      info.decode_bytes_per_token -= experts - experts / size_t(hp.n_expert) * size_t(hp.n_expert_used);
    }
  info.file_bytes = file.file_size();
  info.kv_bytes_per_token = size_t(hp.n_layer) * 2 * size_t(hp.n_head_kv) * size_t(hp.head_dim_k) * 2;
  return info;
}

}  // namespace

const tok::Tokenizer& Model::Impl::require_tokenizer() const {
  if (!tokenizer)
    fail(ErrorCode::unsupported, "model '{}' has no tokenizer vocabulary (tokenizer.ggml.tokens)", file->name());
  return *tokenizer;
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

namespace {

void validate(const ModelOptions& options) {
  require(options.threads >= 0 && options.threads <= 1024, "ModelOptions::threads must be in [0, 1024], got {}",
          options.threads);
  require(options.device_index >= 0, "ModelOptions::device_index must be >= 0, got {}", options.device_index);
  require(options.kv_page_tokens >= 1 && options.kv_page_tokens <= 4096,
          "ModelOptions::kv_page_tokens must be in [1, 4096], got {}", options.kv_page_tokens);
  require(options.kv_pool_tokens >= 0 && options.kv_pool_tokens <= (int64_t(1) << 28),
          "ModelOptions::kv_pool_tokens must be in [0, 2^28], got {}", options.kv_pool_tokens);
}

// The part of every load after the image is parsed.
std::unique_ptr<Model::Impl> build(std::shared_ptr<const gguf::File> file, const ModelOptions& options) {
  auto impl = std::make_unique<Model::Impl>();
  impl->options = options;
  impl->logger = runtime::Logger(options.log);
  impl->threads = options.threads == 0 ? runtime::default_threads() : options.threads;
  impl->logger.info("loaded {}: GGUF v{}, {} tensors, {} metadata keys, {:.1f} MiB", file->name(), file->version(),
                    file->tensors().size(), file->metadata().size(), double(file->file_size()) / (1 << 20));

  if (file->find("tokenizer.ggml.tokens")) impl->tokenizer = tok::Tokenizer::from_gguf(*file, options.log);
  impl->file = file;
  if (options.vocab_only) {
    if (!impl->tokenizer)
      fail(ErrorCode::unsupported, "'{}' has no tokenizer vocabulary (tokenizer.ggml.tokens)", file->name());
    impl->info.architecture = std::string(file->find_string("general.architecture").value_or(""));
    impl->info.name = std::string(file->find_string("general.name").value_or(""));
    impl->info.n_vocab = impl->tokenizer->n_vocab();
    impl->info.file_bytes = file->file_size();
  } else {
    // The weights are placed with a backend of one thread (no worker threads);
    // sessions run them on backends of their own.
    impl->owner_backend = runtime::make_backend(options.backend, 1, options.device_index);
    impl->loaded = model::LoadedModel::from_file(file, *impl->owner_backend);
    // Matrices in the backend's own layout where it has a faster one (the CPU's AVX2
    // levels: Q4_0, Q4_1, Q5_1; cpu/kernels/repack.hpp).
    impl->loaded->weights.prepare_for_matmul(*impl->owner_backend);
    impl->info = describe(*impl->loaded, *file);
    const ModelInfo& i = impl->info;
    impl->logger.info(
        "model: {} '{}', {} layers, n_embd {}, {} heads ({} kv), head {}, vocab {}, {:.1f} MiB of weights",
        i.architecture, i.name, i.n_layer, i.n_embd, i.n_head, i.n_head_kv, i.head_dim, i.n_vocab,
        double(i.weight_bytes) / (1 << 20));
  }
  report(options, 0.95f);
  if (impl->tokenizer) impl->info.tokenizer = impl->tokenizer->model() == tok::TokenizerModel::spm ? "spm" : "bpe";
  impl->info.pre_tokenizer = std::string(file->find_string("tokenizer.ggml.pre").value_or(""));
  impl->info.chat_template = runtime::detect_chat_format(*file);
  report(options, 1.0f);
  return impl;
}

// Reads an image through the host's reader in 16 MiB steps, reporting progress in [0, 0.9].
std::vector<std::byte> read_through(uint64_t size, const Model::ReadAt& read, const ModelOptions& options) {
  require(bool(read), "Model::load_from_reader: the reader is empty");
  require(size <= uint64_t(PTRDIFF_MAX), "Model::load_from_reader: an image of {} bytes cannot be held", size);
  std::vector<std::byte> bytes;
  try {
    bytes.resize(size_t(size));
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::out_of_memory, "Model::load_from_reader: cannot allocate {} bytes for the image", size);
  }
  constexpr size_t kStep = size_t(16) << 20;
  for (size_t done = 0; done < bytes.size();) {
    const size_t n = std::min(kStep, bytes.size() - done);
    if (!read(done, bytes.data() + done, n))
      fail(ErrorCode::io, "Model::load_from_reader: the reader failed for {} bytes at offset {}", n, done);
    done += n;
    report(options, 0.9f * float(done) / float(bytes.size()));
  }
  return bytes;
}

}  // namespace

std::shared_ptr<Model> Model::load(const std::filesystem::path& path, const ModelOptions& options) {
  validate(options);
  report(options, 0.0f);
  std::shared_ptr<const gguf::File> file;
  if (options.use_mmap) {
    file = std::make_shared<const gguf::File>(gguf::File::open(path));
    prefault(file->bytes(), options, 0.0f, 0.9f);
  } else {
    file = std::make_shared<const gguf::File>(
        gguf::File::from_bytes(read_file(path, options, 0.0f, 0.9f), path.string()));
  }
  return std::shared_ptr<Model>(new Model(build(std::move(file), options)));
}

std::shared_ptr<Model> Model::load_from_memory(std::span<const std::byte> image, const ModelOptions& options,
                                               bool copy) {
  validate(options);
  report(options, 0.0f);
  std::shared_ptr<const gguf::File> file;
  const bool aligned = reinterpret_cast<uintptr_t>(image.data()) % 8 == 0;
  if (copy || !aligned) {
    if (!copy && options.log)
      options.log(LogLevel::warning, "load_from_memory: the image is not 8-byte aligned; ember reads a copy of it");
    file = std::make_shared<const gguf::File>(
        gguf::File::from_bytes(std::vector<std::byte>(image.begin(), image.end()), "<memory>"));
  } else {
    file = std::make_shared<const gguf::File>(gguf::File::from_view(image, "<memory>"));
  }
  report(options, 0.9f);
  return std::shared_ptr<Model>(new Model(build(std::move(file), options)));
}

std::shared_ptr<Model> Model::load_from_reader(uint64_t size, const ReadAt& read, const ModelOptions& options) {
  validate(options);
  report(options, 0.0f);
  auto file = std::make_shared<const gguf::File>(gguf::File::from_bytes(read_through(size, read, options), "<reader>"));
  return std::shared_ptr<Model>(new Model(build(std::move(file), options)));
}


// Share of the device memory free at pool creation that a KV pool may take.
constexpr double kDeviceKvShare = 0.8;

kv::PoolConfig Model::Impl::pool_config(kv::KVTypes types, size_t reserved) const {
  const model::HParams& hp = loaded->hparams;
  const int64_t tokens =
      options.kv_pool_tokens > 0 ? options.kv_pool_tokens : 4 * std::min<int64_t>(hp.n_ctx_train, 32768);
  kv::PoolConfig pc;
  pc.k_width = pc.v_width = int64_t(hp.n_head_kv) * hp.head_dim_k;
  pc.storage = types.k;
  if (types.v != types.k) pc.v_storage = types.v;
  pc.page_tokens = options.kv_page_tokens;
  const std::string storage = types.v == types.k
                                  ? std::string(quant::type_name(types.k))
                                  : fmt::format("{}/{}", quant::type_name(types.k), quant::type_name(types.v));
  int64_t pages = (tokens + pc.page_tokens - 1) / pc.page_tokens * hp.n_layer;
  if (options.kv_memory_budget > 0) {
    const size_t page_bytes =
        (quant::row_bytes(types.k, pc.k_width) + quant::row_bytes(types.v, pc.v_width)) * size_t(pc.page_tokens);
    const size_t left = options.kv_memory_budget > reserved ? options.kv_memory_budget - reserved : 0;
    // Whole pages of every layer, so that each layer can hold the same tokens.
    const int64_t fit = int64_t(left / (page_bytes * size_t(hp.n_layer))) * hp.n_layer;
    if (fit <= 0)
      fail(ErrorCode::invalid_argument,
           "ModelOptions::kv_memory_budget of {} bytes leaves {} bytes, less than one {}-token page of every layer "
           "({} bytes) for a {} KV pool",
           options.kv_memory_budget, left, pc.page_tokens, page_bytes * size_t(hp.n_layer), storage);
    pages = std::min(pages, fit);
  }
  // A device backend commits the whole pool when it is made: at most kDeviceKvShare of
  // the device memory free now, so that the pool fits beside the weights, the
  // activations and other programs (the default tokens are sized for the host, whose
  // pages are committed only when written).
  if (const auto mem = owner_backend->device_memory()) {
    const size_t page_bytes =
        (quant::row_bytes(types.k, pc.k_width) + quant::row_bytes(types.v, pc.v_width)) * size_t(pc.page_tokens);
    const size_t usable = size_t(double(mem->free) * kDeviceKvShare);
    const int64_t fit = int64_t(usable / (page_bytes * size_t(hp.n_layer))) * hp.n_layer;
    if (fit <= 0)
      fail(ErrorCode::out_of_memory,
           "KV pool: {:.1f} MiB of device memory free (of {:.1f} MiB) leave no room for one {}-token page of every "
           "layer ({:.1f} MiB of {})",
           double(mem->free) / 1048576.0, double(mem->total) / 1048576.0, pc.page_tokens,
           double(page_bytes * size_t(hp.n_layer)) / 1048576.0, storage);
    if (fit < pages)
      logger.info("KV pool {}: {} tokens fit in {:.0f} % of the device's {:.1f} MiB free ({} asked)",
                  storage, fit / hp.n_layer * pc.page_tokens, 100.0 * kDeviceKvShare,
                  double(mem->free) / 1048576.0, pages / hp.n_layer * pc.page_tokens);
    pages = std::min(pages, fit);
  }
  require(pages <= INT32_MAX, "ModelOptions::kv_pool_tokens: {} pages are too many", pages);
  pc.n_pages = int32_t(pages);
  return pc;
}

size_t Model::Impl::reserved_kv_bytes() const {
  size_t reserved = 0;
  for (const auto& [type, pool] : kv_pools) reserved += pool->stats().bytes_total();
  return reserved;
}

std::shared_ptr<kv::Pool> Model::Impl::kv_pool(kv::KVTypes types) const {
  std::lock_guard lock(kv_mutex);
  if (const auto it = kv_pools.find(types); it != kv_pools.end()) return it->second;
  const kv::PoolConfig pc = pool_config(types, reserved_kv_bytes());
  auto pool = std::make_shared<kv::Pool>(*owner_backend, pc);
  kv_pools[types] = pool;
  logger.debug("KV pool {}/{}: {} pages of {} tokens, {:.1f} MiB reserved", quant::type_name(types.k),
               quant::type_name(types.v), pc.n_pages,
               pc.page_tokens, double(pool->stats().bytes_total()) / (1 << 20));
  return pool;
}

size_t Model::kv_pool_bytes(KVStorage storage, int32_t group_size) const {
  if (!impl_->loaded) return 0;
  const kv::KVTypes types = runtime::kv_types(storage, group_size);
  std::lock_guard lock(impl_->kv_mutex);
  if (const auto it = impl_->kv_pools.find(types); it != impl_->kv_pools.end()) return it->second->stats().bytes_total();
  const kv::PoolConfig pc = impl_->pool_config(types, impl_->reserved_kv_bytes());
  return (quant::row_bytes(types.k, pc.k_width) + quant::row_bytes(types.v, pc.v_width)) * size_t(pc.page_tokens) *
         size_t(pc.n_pages);
}

runtime::Executor& Model::Impl::executor() const {
  std::lock_guard lock(executor_mutex);
  if (!executor_) {
    if (!loaded) fail(ErrorCode::invalid_argument, "the model was loaded with vocab_only; it has no weights to run");
    // A device has one backend per model (weights, pools and ops on one stream); the
    // CPU's executor gets a backend of its own whose pool has the model's threads.
    std::shared_ptr<backend::Backend> be = options.backend == Device::cpu
                                               ? std::shared_ptr<backend::Backend>(
                                                     runtime::make_backend(options.backend, threads, options.device_index))
                                               : owner_backend;
    executor_ = std::make_unique<runtime::Executor>(*loaded, std::move(be),
                                                    [this](kv::KVTypes types) { return kv_pool(types); });
    logger.debug("executor: {} threads", threads);
  }
  return *executor_;
}

kv::KVTypes runtime::kv_types(KVStorage storage, int32_t group_size) {
  if (storage != KVStorage::f16 && storage != KVStorage::f32)
    require(group_size == 32 || group_size == 64, "KVCacheOptions::group_size must be 32 or 64, got {}", group_size);
  const bool g32 = group_size == 32;
  const quant::DType int8 = g32 ? quant::DType::kv_q8_g32 : quant::DType::kv_q8_g64;
  const quant::DType int4 = g32 ? quant::DType::kv_q4_g32 : quant::DType::kv_q4_g64;
  switch (storage) {
    case KVStorage::f16: return {quant::DType::f16, quant::DType::f16};
    case KVStorage::f32: return {quant::DType::f32, quant::DType::f32};
    case KVStorage::int8: return {int8, int8};
    case KVStorage::int4: return {int4, int4};
    case KVStorage::int4o: {
      const quant::DType t = g32 ? quant::DType::kv_q4o_g32 : quant::DType::kv_q4o_g64;
      return {t, t};
    }
    case KVStorage::k8v4: return {int8, int4};
  }
  fail(ErrorCode::invalid_argument, "KVCacheOptions::storage has an unknown value {}", int(storage));
}

size_t Model::kv_bytes_per_token(KVStorage storage, int32_t group_size) const {
  if (!impl_->loaded) return 0;
  const model::HParams& hp = impl_->loaded->hparams;
  const kv::KVTypes types = runtime::kv_types(storage, group_size);
  const int64_t width = int64_t(hp.n_head_kv) * hp.head_dim_k;
  if (width % quant::type_info(types.k).block_elems != 0) return 0;
  return size_t(hp.n_layer) * (quant::row_bytes(types.k, width) + quant::row_bytes(types.v, width));
}

KVPoolMemory Model::kv_memory() const {
  KVPoolMemory m;
  m.page_tokens = impl_->options.kv_page_tokens;
  std::lock_guard lock(impl_->kv_mutex);
  for (const auto& [type, pool] : impl_->kv_pools) {
    const kv::PoolStats s = pool->stats();
    m.pages_total += s.pages_total;
    m.pages_used += s.pages_used;
    m.pages_free += s.pages_free;
    m.bytes_total += s.bytes_total();
    m.bytes_used += s.bytes_used();
  }
  return m;
}

const ModelInfo& Model::info() const { return impl_->info; }
const ModelOptions& Model::options() const { return impl_->options; }
int Model::threads() const { return impl_->threads; }
std::string Model::cpu_kernel_level() const {
  return impl_->options.backend == Device::cpu ? runtime::cpu_kernel_level() : std::string();
}

std::vector<int32_t> Model::tokenize(std::string_view text, bool add_bos, bool parse_special) const {
  return impl_->require_tokenizer().encode(text, add_bos, parse_special);
}

std::string Model::detokenize(std::span<const int32_t> tokens, bool render_special) const {
  return impl_->require_tokenizer().decode(tokens, render_special);
}

std::string Model::token_text(int32_t token) const {
  return impl_->require_tokenizer().token_piece(token, true);
}

int32_t Model::bos_token() const { return impl_->tokenizer ? impl_->tokenizer->bos() : -1; }
int32_t Model::eos_token() const { return impl_->tokenizer ? impl_->tokenizer->eos() : -1; }
bool Model::is_end_of_generation(int32_t token) const {
  return impl_->tokenizer && impl_->tokenizer->is_end_of_generation(token);
}

std::string Model::apply_chat_template(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  return runtime::render_chat(impl_->info.chat_template, *impl_->file, messages, add_generation_prompt);
}

}  // namespace ember
