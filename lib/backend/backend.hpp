// The Backend interface: memory on a device plus the ops a forward pass needs.
//
// Ops take Tensors on buffers this backend allocated (or wrapped) and never raw
// host pointers owned by the caller, so the same model code drives the CPU
// backends and a GPU backend. The contract of each op (shapes, numerics) is
// written once in lib/backend/ops/<op>.hpp, together with the shape check that
// ops::<op>() runs before calling the virtual here. The reference backend
// (lib/backend/reference/) implements every op in plain scalar C++; the other
// backends are tested against it op by op.
//
// A Backend instance is used by one thread at a time (a Session owns one); the
// weights it wraps can be shared by several instances of the same device.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "backend/tensor.hpp"

namespace ember::backend {

enum class Activation { silu, gelu_tanh };
enum class RopeMode { normal, neox };  // normal: pairs (2i, 2i+1) (llama); neox: pairs (i, i + n_rot/2)

struct RopeParams {
  int n_head = 0;        // heads in the row: x is [n_tok, n_head * head_dim]
  int head_dim = 0;      // values per head
  int n_rot = 0;         // leading dims of each head that rotate (<= head_dim, even)
  RopeMode mode = RopeMode::normal;
  float freq_base = 10000.0f;  // theta_i = pos * freq_scale * freq_base^(-2i / n_rot)
  float freq_scale = 1.0f;     // linear position scaling (1 / rope scaling factor)
  float mscale = 1.0f;         // multiplies cos and sin, so the rotated dims (LongRoPE attention factor)
  // Optional f32 [1, n_rot / 2] (LongRoPE / "su" factors, phi3): theta_i is divided by
  // freq_factors[i] before freq_scale is applied. Empty: all 1.
  Tensor freq_factors;
};

struct AttentionParams {
  int n_head = 0;        // query heads
  int n_head_kv = 0;     // key/value heads; query head h reads kv head h / (n_head / n_head_kv)
  int head_dim = 0;
  float scale = 1.0f;    // multiplies q.k before the softmax
  int window = 0;        // 0: causal over the whole sequence; else only keys with pos_q - pos_k < window
  // 0: none; > 0: keys with pos_q - pos_k < exclude_recent are not seen (the caller reads
  // the newest tokens from another cache and merges the two calls: see prior_out).
  int exclude_recent = 0;
  float softcap = 0.0f;  // 0: none; else scores become softcap * tanh(scores / softcap)
  int page_tokens = 0;   // cache slots per page
  // Per query token, i32 [n_tok, 1]: its position, and the page_table row of its sequence.
  Tensor token_pos;
  Tensor token_seq;
  // i32 [n_seq, max_pages]: page ids of each sequence's cells, in cell order.
  Tensor page_table;
  // i32 [n_seq, 1]: cells in use by each sequence (after this batch's kv_store).
  Tensor seq_cells;
  // i32 [n_seq, max_cells] (max_cells >= every seq_cells): the position held by each
  // cell of each sequence row, -1 for an empty cell (evicted or never written).
  Tensor cell_pos;
  // Optional f32 [n_seq, max_cells * n_head_kv], for H2O eviction. When it has rows, the
  // op adds to score_acc[row][c * n_head_kv + kv_head] the softmax probability that cell c
  // received, summed over the query heads sharing kv_head and over the row's query tokens.
  Tensor score_acc;
  // Optional f32 [n_tok, n_head]: when it has rows, the op also writes, per query token and
  // head, the log of the sum of exp(score) over the cells it saw (the softmax's
  // normaliser; -inf when it saw none), counting the cells of `prior` (below) too.
  Tensor lse;
  // Optional: the attention of the same query tokens over another, disjoint set of cells
  // (another cache: a full-precision window of the newest tokens, see kv/kv_cache.hpp),
  // f32 [n_tok, n_head * head_dim] normalised output and f32 [n_tok, n_head] lse as
  // written by an earlier call. When prior_out has rows, the op returns the attention
  // over the union of both sets: with l1 = prior_lse, l2 = this call's own normaliser
  // and M = max(l1, l2), out = (e^(l1-M) prior_out + e^(l2-M) own) / (e^(l1-M) + e^(l2-M)).
  // Not combined with score_acc.
  Tensor prior_out;
  Tensor prior_lse;
};

// How the ops of a batch may order their sums.
enum class SumOrder {
  // llama.cpp's orders, so that a single sequence gets llama.cpp's logits bit for
  // bit; a token's result may then depend on the batch it is in (Q4_K sums whole
  // groups of 4 tokens in another order than the rest, and attention sums a lone
  // query token in another order than several).
  llama_cpp,
  // Every token's result is independent of the rest of the batch and of how a
  // sequence's tokens are cut into steps: one order per weight type and for
  // attention, whatever the batch. The Engine runs so, so that a request's output
  // does not depend on the other requests.
  batch_invariant,
};

// The ops of the backend contract, for Backend::supports.
enum class Op { get_rows, matmul, add, mul, scale, rms_norm, rope, glu, kv_store, kv_load, copy_rows, attention };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // The order of sums for the ops that follow (default llama_cpp). Backends whose
  // results never depend on the batch ignore it.
  virtual void set_sum_order(SumOrder order) {}

  // ---- memory ----
  // New buffer of `bytes` bytes (contents undefined). Throws out_of_memory.
  virtual std::unique_ptr<Buffer> allocate(size_t bytes) = 0;
  // A buffer holding `bytes` of host memory that stays valid and unchanged while
  // `keep_alive` lives (weights in a mapped file). CPU backends reference it
  // without copying; device backends upload it once.
  virtual std::shared_ptr<Buffer> wrap_host(std::span<const std::byte> bytes, std::shared_ptr<const void> keep_alive) = 0;
  // Copies dst.bytes() bytes from host memory into a contiguous tensor.
  virtual void upload(const Tensor& dst, const void* src) = 0;
  // Copies a contiguous tensor into host memory (src.bytes() bytes); waits for pending ops.
  virtual void download(const Tensor& src, void* dst) = 0;
  // Waits until every op issued so far has finished.
  virtual void synchronize() {}
  // Free and total bytes of a device backend's own memory (what allocate() draws
  // from), for sizing caches to fit it; nullopt for backends on host memory, whose
  // buffers commit pages only when written.
  struct DeviceMemory {
    size_t free = 0, total = 0;
  };
  virtual std::optional<DeviceMemory> device_memory() const { return std::nullopt; }
  // Called once at load for a weight that only ever goes to matmul as `weights`: the
  // backend may rewrite it into a layout of its own that its matmul reads faster
  // (Tensor::layout != 0; same bytes or more), in a new buffer it returns, and set
  // `weight` to view it. The caller keeps the buffer alive as long as the tensor and
  // passes the tensor to no other op. Returns nullptr and leaves `weight` as it was
  // when the backend has no better layout for it.
  virtual std::shared_ptr<Buffer> prepare_weight(Tensor& weight) { return nullptr; }

  // Whether this backend runs `op` with `type` as its typed operand: get_rows the table,
  // matmul the weights, kv_store / kv_load / copy_rows / attention the cache, the
  // other ops their f32 inputs. For checks before a model is placed on a backend (an
  // error naming the type, not a failure in the middle of a forward pass). The default
  // is the whole contract (every weight type of quant::weight_types(), every KV
  // storage type, any type for copy_rows, f32 elsewhere), which the CPU, reference and CUDA backends implement.
  virtual bool supports(Op op, DType type) const;

  // ---- ops: see lib/backend/ops/<op>.hpp for each contract; call through ops::<op>() ----
  virtual void get_rows(const Tensor& table, const Tensor& ids, const Tensor& out) = 0;
  virtual void matmul(const Tensor& weights, const Tensor& x, const Tensor& out) = 0;
  virtual void add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void mul(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void scale(const Tensor& x, float factor, const Tensor& out) = 0;
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) = 0;
  virtual void rope(const Tensor& x, const Tensor& positions, const RopeParams& params, const Tensor& out) = 0;
  virtual void glu(const Tensor& gate, const Tensor& up, Activation activation, const Tensor& out) = 0;
  virtual void kv_store(const Tensor& src, const Tensor& cache, const Tensor& slots) = 0;
  virtual void kv_load(const Tensor& cache, const Tensor& slots, const Tensor& out) = 0;
  virtual void copy_rows(const Tensor& tensor, const Tensor& src_rows, const Tensor& dst_rows) = 0;
  virtual void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionParams& params,
                         const Tensor& out) = 0;
};

}  // namespace ember::backend
