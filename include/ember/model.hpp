// ember::Model: a GGUF model loaded once and shared by any number of sessions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ember/export.hpp"
#include "ember/kv_cache.hpp"
#include "ember/log.hpp"

namespace ember {

class Session;
struct SessionOptions;

// Where a model's weights live and its ops run.
enum class Device {
  cpu,   // the CPU backend (kernel level chosen at run time: Model::cpu_kernel_level())
  cuda,  // an NVIDIA GPU, when ember was built with CUDA and a device is present
};

struct ModelOptions {
  // Backend for weights and compute. Default cpu.
  Device backend = Device::cpu;
  // Which device of that kind: the CUDA device ordinal (0 .. devices - 1); the CPU has
  // only device 0. Default 0.
  int device_index = 0;
  // Threads of the model's one thread pool, the calling thread included, shared by
  // every session and engine of the model (started with the first of them, so
  // threads - 1 workers). Default 0 = the physical cores this process may run on
  // (its CPU affinity; SMT siblings counted once: they add little to matrix work);
  // range [0, 1024]. ember starts no other threads, except the one Engine::start()
  // asks for. Model::threads() tells the number in use.
  int threads = 0;
  // Map the file instead of reading it into memory. Default true.
  bool use_mmap = true;
  // Load only the metadata and the tokenizer (no weights): tokenize/detokenize and
  // chat templates work, new_session() throws. Also opens vocabulary-only GGUF files.
  // Default false.
  bool vocab_only = false;
  // Called with the fraction loaded, in [0, 1], as loading progresses; return
  // false to cancel (load() then throws Error with code invalid_argument). Default none.
  std::function<bool(float fraction)> progress;
  // Receives the model's log messages (and those of its sessions). Default none: silent.
  LogCallback log;
  // Tokens per KV-cache page, the unit of allocation and sharing for every session.
  // Default 16; range [1, 4096].
  int32_t kv_page_tokens = 16;
  // Size of each KV page pool (one per storage type in use), in tokens of every layer.
  // Default 0 = four contexts of min(training context, 32768) tokens. Host memory is
  // reserved as address space, committed only when pages are written, and handed
  // back to the system when the sessions using it end.
  int64_t kv_pool_tokens = 0;
  // Most bytes all KV pools of the model may reserve together: a pool gets
  // min(kv_pool_tokens or its default, what the budget has left). Default 0 = no
  // budget. A session whose storage type finds no room left throws invalid_argument
  // naming the budget; a context larger than the pool fails with cache_full.
  size_t kv_memory_budget = 0;
};

// What a model is, for display and for sizing.
struct ModelInfo {
  std::string architecture;         // general.architecture: llama, qwen2, qwen3, qwen3moe, gemma2, gemma3,
                                    // granite, olmo2, phi3
  std::string name;                 // general.name, when present
  int64_t n_vocab = 0;              // vocabulary size
  int64_t n_ctx_train = 0;          // context length the model was trained with
  int64_t n_embd = 0;               // embedding width
  int n_layer = 0;                  // transformer blocks
  int n_head = 0;                   // query heads
  int n_head_kv = 0;                // key/value heads
  int head_dim = 0;                 // values per head
  int64_t n_ff = 0;                 // feed-forward width
  int sliding_window = 0;           // window of the sliding-window layers, 0 if none
  int n_sliding_layers = 0;         // layers that use the window
  std::map<std::string, int> tensor_types;  // weight type name -> number of tensors
  size_t weight_bytes = 0;          // bytes of weights the backend holds
  size_t decode_bytes_per_token = 0;  // weight bytes one decode step reads (all matrices, of a mixture of
                                      // experts only the experts used per token; embeddings only if tied)
  size_t file_bytes = 0;            // size of the GGUF file
  size_t kv_bytes_per_token = 0;    // KV-cache bytes per token at F16 storage
  std::string tokenizer;            // "spm" or "bpe"
  std::string pre_tokenizer;        // tokenizer.ggml.pre as the file names it, "" when absent
  std::string chat_template;        // detected chat format: "gemma", "chatml", "llama3" or "" if none
};

// One message of a conversation.
struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;
};

// What ember makes of a GGUF file without running it (Model::inspect).
struct ModelSupport {
  std::string architecture;   // general.architecture, "" when absent
  std::string tokenizer;      // tokenizer.ggml.model (llama, gpt2, ...), "" when absent
  std::string pre_tokenizer;  // tokenizer.ggml.pre, "" when absent
  // Every reason ember cannot run the file, one line each, naming what is missing or
  // unsupported (architecture, metadata key, tensor, tensor type, tokenizer); empty
  // when Model::load() would succeed.
  std::vector<std::string> missing;
  bool runnable() const { return missing.empty(); }
};

// A loaded model. Immutable and thread-safe: sessions on different threads may
// share it. Keep it alive with the shared_ptr that load() returns.
class EMBER_API Model : public std::enable_shared_from_this<Model> {
 public:
  // Loads a GGUF file. Throws Error: io (cannot open), malformed_file (corrupt),
  // unsupported (architecture or tensor type), invalid_argument (options).
  // Thread-safe: loads of different models may run at once.
  static std::shared_ptr<Model> load(const std::filesystem::path& path, const ModelOptions& options = {});
  // Reads a GGUF file's metadata and tensor table and checks everything load() checks,
  // collecting every problem instead of stopping at the first (ModelSupport::missing).
  // Maps the file but reads no weights. Throws Error only when the file cannot be
  // opened (io) or is not a well-formed GGUF file (malformed_file).
  static ModelSupport inspect(const std::filesystem::path& path);

  // Loads a GGUF image already in memory (an asset packed into the host's binary or
  // archive), with the same validation and errors as load(path).
  //   copy == false: ember reads the bytes in place (no copy, like a mapped file). The
  //     caller keeps them alive and unchanged until the Model and every Session,
  //     fork and Engine made from it are destroyed.
  //   copy == true: ember copies the image first; the caller may free it as soon as
  //     load_from_memory returns.
  // ModelOptions::use_mmap is ignored. The image must be at least 8-byte aligned
  // (any pointer from malloc or new is) so that tensors can be read in place.
  // Thread-safe like load().
  static std::shared_ptr<Model> load_from_memory(std::span<const std::byte> image, const ModelOptions& options = {},
                                                 bool copy = false);

  // Reads a GGUF image of `size` bytes through the host's own I/O (an archive, a
  // pack file, a network store): read(offset, dst, n) must fill dst with the n bytes
  // at `offset` and return true, or return false when it cannot (load then throws
  // io naming the offset). It is called only inside this call, on the calling
  // thread, in ascending offsets; ember keeps its own copy of the image. Thread-safe
  // like load().
  using ReadAt = std::function<bool(uint64_t offset, void* dst, size_t n)>;
  static std::shared_ptr<Model> load_from_reader(uint64_t size, const ReadAt& read, const ModelOptions& options = {});

  // Every Session and Engine holds a reference to its model, so the last of them (or
  // the host's shared_ptr) destroys it. Not copyable.
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Every const member below is safe from any number of threads at once; references
  // returned live as long as the model.
  const ModelInfo& info() const;
  const ModelOptions& options() const;
  // Threads of the model's thread pool: options().threads, or what 0 resolved to.
  int threads() const;
  // The CPU kernel level the CPU backend runs: the best this CPU supports ("avx512",
  // "avx2vnni", "avx2" on x86-64; "i8mm", "dotprod", "neon" on ARM64; else "scalar"),
  // or the one the environment variable EMBER_CPU_ISA names. Empty for other devices.
  std::string cpu_kernel_level() const;
  // Pages and bytes of the KV pools shared by this model's sessions.
  KVPoolMemory kv_memory() const;
  // Bytes of address space the KV pool of this storage reserves (now, or when a
  // session first uses it): ModelOptions::kv_pool_tokens and kv_memory_budget
  // applied. Memory is committed only as pages are written. Throws invalid_argument
  // when the budget has no room left for such a pool; 0 for a vocab-only model.
  size_t kv_pool_bytes(KVStorage storage = KVStorage::f16, int32_t group_size = 32) const;
  // Bytes of keys and values one cached token takes over all layers (0 when the
  // storage does not fit the head size, or the model has no weights).
  size_t kv_bytes_per_token(KVStorage storage, int32_t group_size = 32) const;

  // A new session on this model: one sequence in the model's shared KV cache, run
  // by the model's executor. The caller owns it; it keeps the model alive.
  // Thread-safe. Throws invalid_argument for bad options or a vocab-only model.
  std::unique_ptr<Session> new_session(const SessionOptions& options) const;
  std::unique_ptr<Session> new_session() const;

  // ---- tokenizer ----
  // Text to token ids. add_bos prepends the BOS token when the model uses one;
  // parse_special turns control-token text such as "<start_of_turn>" into its id.
  std::vector<int32_t> tokenize(std::string_view text, bool add_bos = false, bool parse_special = false) const;
  // Token ids back to text; special tokens are rendered when render_special is true.
  std::string detokenize(std::span<const int32_t> tokens, bool render_special = false) const;
  // The text of one token (its raw vocabulary entry, decoded).
  std::string token_text(int32_t token) const;
  int32_t bos_token() const;   // -1 when the model has none
  int32_t eos_token() const;
  // True for tokens that end a turn or the text (EOS, end-of-turn, ...).
  bool is_end_of_generation(int32_t token) const;

  // Renders a conversation with the model's chat format; with add_generation_prompt
  // it ends with the opening of the assistant's turn. Throws unsupported when the
  // model has no known chat format.
  std::string apply_chat_template(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember
