#include "model/weights.hpp"

#include <fmt/format.h>

#include "common/fail.hpp"
#include "ember/error.hpp"
#include "quant/quant.hpp"

namespace ember::model {
namespace {

class Loader {
 public:
  Loader(const gguf::File& file, backend::Backend& backend, std::shared_ptr<const void> keep_alive,
         std::vector<std::shared_ptr<backend::Buffer>>& buffers)
      : file_(file), backend_(backend), buffers_(buffers) {
    // One buffer for the whole tensor-data section: zero-copy on the CPU, one upload on a GPU.
    const auto bytes = file.bytes().subspan(size_t(file.data_offset()));
    try {
      data_ = backend.wrap_host(bytes, std::move(keep_alive));
    } catch (const Error& e) {
      // A device too small for the model: say so with the model's size, before any state.
      if (e.code() != ErrorCode::out_of_memory) throw;
      fail(ErrorCode::out_of_memory, "{}: the model's {:.1f} MiB of tensor data do not fit the {} backend: {}",
           file.name(), double(bytes.size()) / 1048576.0, backend.name(), e.what());
    }
    buffers_.push_back(data_);
  }

  void expect_backend_supports(const std::string& name, quant::DType type) const {
    if (!backend_.supports(backend::Op::matmul, type))
      fail(ErrorCode::unsupported, "{}: tensor '{}' has type {}, which the {} backend cannot multiply", file_.name(),
           name, quant::type_name(type), backend_.name());
  }

  // A matrix [rows, cols] in its file format.
  Tensor matrix(const std::string& name, int64_t rows, int64_t cols) {
    const gguf::TensorInfo& info = file_.tensor(name);
    check_shape(info, rows, cols);
    if (!quant::type_info(info.type).weight_supported)
      fail(ErrorCode::unsupported, "{}: tensor '{}' has type {}, which ember cannot multiply", file_.name(), name,
           quant::type_name(info.type));
    expect_backend_supports(name, info.type);
    bytes_ += info.n_bytes;
    return backend::make_tensor(*data_, size_t(info.offset), info.type, rows, cols);
  }

  // `n_expert` matrices [rows, cols] stacked in one GGUF tensor {cols, rows, n_expert},
  // seen as one matrix [n_expert * rows, cols].
  Tensor experts(const std::string& name, int64_t n_expert, int64_t rows, int64_t cols) {
    const gguf::TensorInfo& info = file_.tensor(name);
    if (info.shape != std::vector<int64_t>{cols, rows, n_expert})
      fail(ErrorCode::malformed_file, "{}: tensor '{}' is not [{}, {}, {}] (GGUF order)", file_.name(), name, cols,
           rows, n_expert);
    if (!quant::type_info(info.type).weight_supported)
      fail(ErrorCode::unsupported, "{}: tensor '{}' has type {}, which ember cannot multiply", file_.name(), name,
           quant::type_name(info.type));
    expect_backend_supports(name, info.type);
    bytes_ += info.n_bytes;
    return backend::make_tensor(*data_, size_t(info.offset), info.type, n_expert * rows, cols);
  }

  // A vector [1, n] as F32 (converted once when the file stores another type).
  Tensor vector(const std::string& name, int64_t n) {
    const gguf::TensorInfo& info = file_.tensor(name);
    check_shape(info, 1, n);
    if (info.type == quant::DType::f32) {
      bytes_ += info.n_bytes;
      return backend::make_tensor(*data_, size_t(info.offset), info.type, 1, n);
    }
    if (!quant::type_info(info.type).weight_supported)
      fail(ErrorCode::unsupported, "{}: tensor '{}' has type {}", file_.name(), name, quant::type_name(info.type));
    std::vector<float> values(static_cast<size_t>(n));
    quant::dequantize_row(info.type, info.data, values.data(), n);
    std::shared_ptr<backend::Buffer> buffer = backend_.allocate(size_t(n) * sizeof(float));
    Tensor t = backend::make_tensor(*buffer, 0, quant::DType::f32, 1, n);
    backend_.upload(t, values.data());
    buffers_.push_back(std::move(buffer));
    bytes_ += size_t(n) * sizeof(float);
    return t;
  }

  Tensor optional_vector(const std::string& name, int64_t n) {
    return file_.find_tensor(name) ? vector(name, n) : Tensor{};
  }
  bool has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }
  size_t bytes() const { return bytes_; }

 private:
  void check_shape(const gguf::TensorInfo& info, int64_t rows, int64_t cols) const {
    const bool ok = (info.shape.size() == 1 && rows == 1 && info.shape[0] == cols) ||
                    (info.shape.size() == 2 && info.shape[0] == cols && info.shape[1] == rows);
    if (!ok) {
      std::string dims;
      for (int64_t d : info.shape) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      fail(ErrorCode::malformed_file, "{}: tensor '{}' has shape [{}], expected [{}, {}] (GGUF order)", file_.name(),
           info.name, dims, cols, rows);
    }
  }

  const gguf::File& file_;
  backend::Backend& backend_;
  std::vector<std::shared_ptr<backend::Buffer>>& buffers_;
  std::shared_ptr<backend::Buffer> data_;
  size_t bytes_ = 0;
};

}  // namespace

Weights Weights::load(const gguf::File& file, const HParams& hp, backend::Backend& backend,
                      std::shared_ptr<const void> keep_alive) {
  Weights w;
  Loader load(file, backend, std::move(keep_alive), w.buffers_);
  const int64_t n_embd = hp.n_embd;
  const int64_t q_rows = int64_t(hp.n_head) * hp.head_dim_k;
  const int64_t kv_rows = int64_t(hp.n_head_kv) * hp.head_dim_k;

  const gguf::TensorInfo& embd = file.tensor("token_embd.weight");
  if (embd.shape.size() != 2 || embd.shape[0] != n_embd)
    fail(ErrorCode::malformed_file, "{}: token_embd.weight must be [{}, n_vocab]", file.name(), n_embd);
  const int64_t n_vocab = embd.shape[1];
  w.token_embd = load.matrix("token_embd.weight", n_vocab, n_embd);
  w.output_norm = load.vector("output_norm.weight", n_embd);
  w.output = load.has("output.weight") ? load.matrix("output.weight", n_vocab, n_embd) : w.token_embd;

  if (hp.arch->rope_factors) {
    w.rope_long = load.optional_vector("rope_factors_long.weight", hp.n_rot / 2);
    w.rope_short = load.optional_vector("rope_factors_short.weight", hp.n_rot / 2);
    if (w.rope_long.empty() != w.rope_short.empty())
      fail(ErrorCode::malformed_file, "{}: rope_factors_long.weight and rope_factors_short.weight come in pairs",
           file.name());
  }

  for (int il = 0; il < hp.n_layer; ++il) {
    const auto name = [il](const char* suffix) { return fmt::format("blk.{}.{}", il, suffix); };
    LayerWeights l;
    if (hp.arch->pre_norms) l.attn_norm = load.vector(name("attn_norm.weight"), n_embd);
    if (hp.arch->fused_projections) {
      // Q, K and V rows one after the other: three views of one matrix.
      const Tensor qkv = load.matrix(name("attn_qkv.weight"), q_rows + 2 * kv_rows, n_embd);
      l.wq = qkv.slice_rows(0, q_rows);
      l.wk = qkv.slice_rows(q_rows, kv_rows);
      l.wv = qkv.slice_rows(q_rows + kv_rows, kv_rows);
    } else {
      l.wq = load.matrix(name("attn_q.weight"), q_rows, n_embd);
      l.wk = load.matrix(name("attn_k.weight"), kv_rows, n_embd);
      l.wv = load.matrix(name("attn_v.weight"), kv_rows, n_embd);
    }
    l.bq = load.optional_vector(name("attn_q.bias"), q_rows);
    l.bk = load.optional_vector(name("attn_k.bias"), kv_rows);
    l.bv = load.optional_vector(name("attn_v.bias"), kv_rows);
    l.wo = load.matrix(name("attn_output.weight"), n_embd, q_rows);
    l.bo = load.optional_vector(name("attn_output.bias"), n_embd);
    if (hp.arch->qk_norm == QkNorm::per_head) {
      l.q_norm = load.vector(name("attn_q_norm.weight"), hp.head_dim_k);
      l.k_norm = load.vector(name("attn_k_norm.weight"), hp.head_dim_k);
    } else if (hp.arch->qk_norm == QkNorm::whole) {
      l.q_norm = load.vector(name("attn_q_norm.weight"), q_rows);
      l.k_norm = load.vector(name("attn_k_norm.weight"), kv_rows);
    }
    if (hp.arch->post_norms) {
      l.attn_post_norm = load.vector(name("post_attention_norm.weight"), n_embd);
      l.ffn_post_norm = load.vector(name("post_ffw_norm.weight"), n_embd);
    }
    if (hp.arch->pre_norms) l.ffn_norm = load.vector(name("ffn_norm.weight"), n_embd);
    if (hp.arch->moe) {
      l.ffn_gate_inp = load.matrix(name("ffn_gate_inp.weight"), hp.n_expert, n_embd);
      l.exp_gate = load.experts(name("ffn_gate_exps.weight"), hp.n_expert, hp.n_ff_exp, n_embd);
      l.exp_up = load.experts(name("ffn_up_exps.weight"), hp.n_expert, hp.n_ff_exp, n_embd);
      l.exp_down = load.experts(name("ffn_down_exps.weight"), hp.n_expert, n_embd, hp.n_ff_exp);
    } else if (hp.arch->fused_projections) {
      // Gate rows first, then up rows (llama.cpp's LLM_FFN_SWIGLU splits the row so).
      const Tensor gate_up = load.matrix(name("ffn_up.weight"), 2 * hp.n_ff, n_embd);
      l.w_gate = gate_up.slice_rows(0, hp.n_ff);
      l.w_up = gate_up.slice_rows(hp.n_ff, hp.n_ff);
    } else {
      l.w_gate = load.matrix(name("ffn_gate.weight"), hp.n_ff, n_embd);
      l.w_up = load.matrix(name("ffn_up.weight"), hp.n_ff, n_embd);
    }
    if (!hp.arch->moe) l.w_down = load.matrix(name("ffn_down.weight"), n_embd, hp.n_ff);
    w.layers.push_back(l);
  }
  w.bytes = load.bytes();
  return w;
}

std::vector<Tensor*> Weights::slots() {
  std::vector<Tensor*> out = {&token_embd, &output_norm, &output, &rope_long, &rope_short};
  for (LayerWeights& l : layers)
    for (Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm, &l.wo, &l.bo,
                      &l.attn_post_norm, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down, &l.ffn_post_norm,
                      &l.ffn_gate_inp, &l.exp_gate, &l.exp_up, &l.exp_down})
      out.push_back(t);
  return out;
}

void Weights::prepare_for_matmul(backend::Backend& backend) {
  // Each entry: the slots viewing consecutive row ranges of one matrix of the file.
  std::vector<std::vector<Tensor*>> matrices;
  const bool tied = output.buffer == token_embd.buffer && output.offset == token_embd.offset;
  if (!tied) matrices.push_back({&output});
  for (LayerWeights& l : layers) {
    for (Tensor* t : {&l.wq, &l.wk, &l.wv}) matrices.push_back({t});
    for (Tensor* t : {&l.w_gate, &l.w_up}) matrices.push_back({t});
    matrices.push_back({&l.wo});
    matrices.push_back({&l.w_down});
  }
  // Slots that are slices of one matrix (fused projections) are merged into one entry.
  std::vector<std::vector<Tensor*>> merged;
  for (auto& m : matrices) {
    Tensor* t = m[0];
    if (t->empty()) continue;
    if (!merged.empty()) {
      const Tensor* last = merged.back().back();
      if (last->buffer == t->buffer && last->type == t->type && last->cols == t->cols &&
          last->row_stride == t->row_stride && last->offset + size_t(last->rows) * last->row_stride == t->offset) {
        merged.back().push_back(t);
        continue;
      }
    }
    merged.push_back(m);
  }
  for (const auto& m : merged) {
    Tensor whole = *m[0];
    bool whole_groups = whole.rows % Tensor::kLayoutGroupRows == 0;
    for (size_t i = 1; i < m.size(); ++i) {
      whole.rows += m[i]->rows;
      whole_groups &= m[i]->rows % Tensor::kLayoutGroupRows == 0;
    }
    if (!whole_groups || whole.layout != 0) continue;
    Tensor prepared = whole;
    std::shared_ptr<backend::Buffer> buffer;
    try {
      buffer = backend.prepare_weight(prepared);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::out_of_memory) throw;
      continue;  // the file's layout works too
    }
    if (!buffer) continue;
    buffers_.push_back(std::move(buffer));
    prepared_.push_back({prepared, whole});
    // The file's bytes are only read again by rare paths (Weights::plain): their memory
    // may go back to the system until then.
    whole.buffer->release_pages(whole.offset, whole.bytes());
    int64_t first = 0;
    for (Tensor* t : m) {
      *t = prepared.slice_rows(first, t->rows);
      first += t->rows;
    }
  }
}

Tensor Weights::plain(const Tensor& t) const {
  if (t.layout == 0) return t;
  for (const Prepared& p : prepared_)
    if (p.prepared.buffer == t.buffer && t.offset >= p.prepared.offset &&
        t.offset < p.prepared.offset + p.prepared.bytes()) {
      const int64_t first = int64_t((t.offset - p.prepared.offset) / p.prepared.row_stride);
      return p.original.slice_rows(first, t.rows);
    }
  fail(ErrorCode::internal, "Weights::plain: a repacked matrix these weights did not prepare");
}

}  // namespace ember::model
