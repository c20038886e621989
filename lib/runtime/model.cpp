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

std::shared_ptr<Model> Model::load(const std::filesystem::path& path, const ModelOptions& options) {
  require(options.threads >= 0 && options.threads <= 1024, "ModelOptions::threads must be in [0, 1024], got {}",
          options.threads);
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->logger = runtime::Logger(options.log);
  impl->threads = options.threads == 0 ? runtime::default_threads() : options.threads;

  report(options, 0.0f);
  std::shared_ptr<const gguf::File> file;
  if (options.use_mmap) {
    file = std::make_shared<const gguf::File>(gguf::File::open(path));
    prefault(file->bytes(), options, 0.0f, 0.9f);
  } else {
    file = std::make_shared<const gguf::File>(
        gguf::File::from_bytes(read_file(path, options, 0.0f, 0.9f), path.string()));
  }
  impl->logger.info("loaded {}: GGUF v{}, {} tensors, {} metadata keys, {:.1f} MiB", file->name(), file->version(),
                    file->tensors().size(), file->metadata().size(), double(file->file_size()) / (1 << 20));

  if (file->find("tokenizer.ggml.tokens")) impl->tokenizer = tok::Tokenizer::from_gguf(*file);
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
    impl->owner_backend = runtime::make_backend(options.backend, 1);
    impl->loaded = model::LoadedModel::from_file(file, *impl->owner_backend);
    impl->info = describe(*impl->loaded, *file);
    const ModelInfo& i = impl->info;
    impl->logger.info(
        "model: {} '{}', {} layers, n_embd {}, {} heads ({} kv), head {}, vocab {}, {:.1f} MiB of weights",
        i.architecture, i.name, i.n_layer, i.n_embd, i.n_head, i.n_head_kv, i.head_dim, i.n_vocab,
        double(i.weight_bytes) / (1 << 20));
  }
  report(options, 0.95f);
  if (impl->tokenizer) impl->info.tokenizer = impl->tokenizer->model() == tok::TokenizerModel::spm ? "spm" : "bpe";
  impl->info.chat_template = runtime::detect_chat_format(*file);
  report(options, 1.0f);
  return std::shared_ptr<Model>(new Model(std::move(impl)));
}

const ModelInfo& Model::info() const { return impl_->info; }
const ModelOptions& Model::options() const { return impl_->options; }

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
