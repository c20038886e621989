#include "bench/model_writer.hpp"

#include <array>
#include <cmath>
#include <cctype>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "common/fail.hpp"
#include "gguf/gguf.hpp"
#include "quant/quant.hpp"

namespace ember::bench {
namespace {

using quant::DType;

struct FileTypeRow {
  FileType type;
  std::string_view name;
  uint32_t ftype;   // llama.cpp's llama_ftype (include/llama.h)
  DType base;       // type of the tensors without a special rule
};

constexpr std::array<FileTypeRow, 11> kFileTypes{{
    {FileType::f32, "F32", 0, DType::f32},
    {FileType::f16, "F16", 1, DType::f16},
    {FileType::bf16, "BF16", 32, DType::bf16},
    {FileType::q8_0, "Q8_0", 7, DType::q8_0},
    {FileType::q4_0, "Q4_0", 2, DType::q4_0},
    {FileType::q4_1, "Q4_1", 3, DType::q4_1},
    {FileType::q5_0, "Q5_0", 8, DType::q5_0},
    {FileType::q5_1, "Q5_1", 9, DType::q5_1},
    {FileType::q4_k_m, "Q4_K_M", 15, DType::q4_k},
    {FileType::q5_k_m, "Q5_K_M", 17, DType::q5_k},
    {FileType::q6_k, "Q6_K", 18, DType::q6_k},
}};

const FileTypeRow& row_of(FileType type) {
  for (const FileTypeRow& row : kFileTypes)
    if (row.type == type) return row;
  fail(ErrorCode::invalid_argument, "unknown file type {}", int(type));
}

// llama.cpp's use_more_bits (src/llama-quant.cpp): the first and last eighth of
// the layers and every third layer in between get more bits in the _M mixes.
bool use_more_bits(int layer, int n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

// A [rows, cols] tensor of `type` (GGUF shape {cols, rows}) made of copies of 64
// distinct rows quantized from N(0, sigma) values.
std::vector<std::byte> random_matrix(DType type, int64_t rows, int64_t cols, float sigma, std::mt19937& rng) {
  constexpr int kPool = 64;
  const size_t row_bytes = quant::row_bytes(type, cols);
  const int pool_rows = int(std::min<int64_t>(kPool, rows));
  std::vector<std::byte> pool(size_t(pool_rows) * row_bytes);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> values(static_cast<size_t>(cols));
  for (int r = 0; r < pool_rows; ++r) {
    for (float& v : values) v = normal(rng);
    quant::quantize_row(type, values.data(), pool.data() + size_t(r) * row_bytes, cols);
  }
  std::vector<std::byte> data(size_t(rows) * row_bytes);
  for (int64_t r = 0; r < rows; ++r) {
    const size_t pick = r < pool_rows ? size_t(r) : size_t(rng() % uint32_t(pool_rows));
    std::memcpy(data.data() + size_t(r) * row_bytes, pool.data() + pick * row_bytes, row_bytes);
  }
  return data;
}

// An RMSNorm weight: values near 1.
std::vector<std::byte> norm_vector(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(0.9f, 1.1f);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = uniform(rng);
  std::vector<std::byte> data(values.size() * sizeof(float));
  std::memcpy(data.data(), values.data(), data.size());
  return data;
}

void check_shape(const LlamaShape& s, DType widest_block) {
  require(s.n_layer > 0 && s.n_head > 0 && s.n_head_kv > 0, "model shape: layers and heads must be positive");
  require(s.n_head % s.n_head_kv == 0, "model shape: {} heads cannot be grouped over {} kv heads", s.n_head,
          s.n_head_kv);
  if (s.head_dim == 0)
    require(s.n_embd % s.n_head == 0 && (s.n_embd / s.n_head) % 2 == 0,
            "model shape: n_embd {} is not a multiple of 2 * n_head ({})", s.n_embd, s.n_head);
  else
    require(s.head_dim > 0 && s.head_dim % 2 == 0, "model shape: head_dim {} must be positive and even", s.head_dim);
  if (s.n_expert > 0)
    require(s.n_expert_used > 0 && s.n_expert_used <= s.n_expert && s.n_ff_exp > 0,
            "model shape: {} experts need 1..{} used per token and a positive n_ff_exp", s.n_expert, s.n_expert);
  require(s.n_vocab >= 259, "model shape: n_vocab {} is below 259 (3 special and 256 byte tokens)", s.n_vocab);
  require(s.n_ctx > 0, "model shape: n_ctx must be positive");
  const int64_t block = quant::type_info(widest_block).block_elems;
  require(s.n_embd % block == 0 && s.n_ff % block == 0,
          "model shape: n_embd {} and n_ff {} must be multiples of {} for {}", s.n_embd, s.n_ff, block,
          quant::type_name(widest_block));
  const int64_t head_dim = s.head_dim ? s.head_dim : s.n_embd / s.n_head;
  require(head_dim * s.n_head % block == 0 && s.n_ff_exp % block == 0,
          "model shape: n_head * head_dim {} and n_ff_exp {} must be multiples of {} for {}", head_dim * s.n_head,
          s.n_ff_exp, block, quant::type_name(widest_block));
}

// A SentencePiece vocabulary shaped like llama's: <unk> <s> </s>, the 256 byte
// tokens <0x00>..<0xFF> (llama.cpp looks up <0x0A> for the newline), then
// made-up word pieces with decreasing scores.
void add_vocabulary(gguf::Writer& w, int64_t n_vocab) {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;   // 1 normal, 2 unknown, 3 control, 6 byte
  tokens.reserve(size_t(n_vocab));
  const auto add = [&](std::string text, float score, int32_t type) {
    tokens.push_back(std::move(text));
    scores.push_back(score);
    types.push_back(type);
  };
  add("<unk>", 0.0f, 2);
  add("<s>", 0.0f, 3);
  add("</s>", 0.0f, 3);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0.0f, 6);
  // Distinct pieces: "▁" + a base-26 spelling of the index.
  for (int64_t i = int64_t(tokens.size()); i < n_vocab; ++i) {
    std::string piece = "\xE2\x96\x81";
    for (int64_t v = i; v > 0; v /= 26) piece += char('a' + v % 26);
    add(std::move(piece), -float(i), 1);
  }
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_float32_array("tokenizer.ggml.scores", scores);
  w.add_int32_array("tokenizer.ggml.token_type", types);
  w.add_uint32("tokenizer.ggml.unknown_token_id", 0);
  w.add_uint32("tokenizer.ggml.bos_token_id", 1);
  w.add_uint32("tokenizer.ggml.eos_token_id", 2);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  w.add_bool("tokenizer.ggml.add_eos_token", false);
}

}  // namespace

std::optional<LlamaShape> llama_preset(std::string_view name) {
  if (name == "tinyllama-1.1b") return LlamaShape{};
  if (name == "tiny") {
    LlamaShape s;
    s.n_embd = 256;
    s.n_ff = 512;
    s.n_layer = 2;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_vocab = 512;
    s.n_ctx = 512;
    return s;
  }
  if (name == "qwen3-30b-a3b") {
    LlamaShape s;
    s.n_embd = 2048;
    s.n_ff = 6144;
    s.n_layer = 4;
    s.n_head = 32;
    s.n_head_kv = 4;
    s.head_dim = 128;
    s.n_vocab = 32000;
    s.n_ctx = 4096;
    s.rope_base = 1000000.0f;
    s.rms_eps = 1e-6f;
    s.n_expert = 128;
    s.n_expert_used = 8;
    s.n_ff_exp = 768;
    return s;
  }
  return std::nullopt;
}

std::optional<FileType> file_type_from_name(std::string_view name) {
  for (const FileTypeRow& row : kFileTypes) {
    if (row.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size(); ++i)
      same = same && std::toupper(static_cast<unsigned char>(name[i])) == row.name[i];
    if (same) return row.type;
  }
  return std::nullopt;
}

std::string_view file_type_name(FileType type) { return row_of(type).name; }
uint32_t llama_ftype(FileType type) { return row_of(type).ftype; }

DType weight_type_of(FileType type, std::string_view kind, int layer, int n_layer) {
  const DType base = row_of(type).base;
  if (kind.ends_with("norm.weight") || kind == "ffn_gate_inp.weight") return DType::f32;
  if (quant::is_float_type(base)) return base;
  if (kind == "output.weight") return base == DType::q8_0 ? DType::q8_0 : DType::q6_k;
  if ((type == FileType::q4_k_m || type == FileType::q5_k_m) && (kind == "attn_v.weight" || kind.starts_with("ffn_down")) &&
      use_more_bits(layer, n_layer))
    return DType::q6_k;
  return base;
}

void write_llama_model(const ModelSpec& spec, const std::filesystem::path& path) {
  const LlamaShape& s = spec.shape;
  const bool k_quants = spec.type == FileType::q4_k_m || spec.type == FileType::q5_k_m || spec.type == FileType::q6_k;
  check_shape(s, k_quants ? DType::q4_k : row_of(spec.type).base);
  const bool moe = s.n_expert > 0;
  const int64_t head_dim = s.head_dim ? s.head_dim : s.n_embd / s.n_head;
  const int64_t n_embd_q = head_dim * s.n_head, n_embd_kv = head_dim * s.n_head_kv;
  const std::string arch = moe ? "qwen3moe" : "llama", p = arch + ".";

  gguf::Writer w;
  w.add_string("general.architecture", arch);
  w.add_string("general.name", spec.name);
  w.add_uint32("general.file_type", llama_ftype(spec.type));
  w.add_uint32("general.alignment", 32);   // the default, written out
  w.add_uint32(p + "context_length", uint32_t(s.n_ctx));
  w.add_uint32(p + "embedding_length", uint32_t(s.n_embd));
  w.add_uint32(p + "block_count", uint32_t(s.n_layer));
  w.add_uint32(p + "feed_forward_length", uint32_t(s.n_ff));
  w.add_uint32(p + "attention.head_count", uint32_t(s.n_head));
  w.add_uint32(p + "attention.head_count_kv", uint32_t(s.n_head_kv));
  w.add_float32(p + "attention.layer_norm_rms_epsilon", s.rms_eps);
  w.add_uint32(p + "rope.dimension_count", uint32_t(head_dim));
  w.add_float32(p + "rope.freq_base", s.rope_base);
  w.add_uint32(p + "vocab_size", uint32_t(s.n_vocab));
  if (s.head_dim) {
    w.add_uint32(p + "attention.key_length", uint32_t(head_dim));
    w.add_uint32(p + "attention.value_length", uint32_t(head_dim));
  }
  if (moe) {
    w.add_uint32(p + "expert_count", uint32_t(s.n_expert));
    w.add_uint32(p + "expert_used_count", uint32_t(s.n_expert_used));
    w.add_uint32(p + "expert_feed_forward_length", uint32_t(s.n_ff_exp));
  }
  add_vocabulary(w, s.n_vocab);

  std::mt19937 rng(spec.seed);
  constexpr float kSigma = 0.02f;   // the usual initialisation scale of transformer weights
  // A matrix of `rows` outputs over `cols` inputs (GGUF shape {cols, rows}).
  const auto matrix = [&](const std::string& name, std::string_view kind, int layer, int64_t rows, int64_t cols) {
    const DType type = weight_type_of(spec.type, kind, layer, s.n_layer);
    w.add_tensor(name, type, {cols, rows}, random_matrix(type, rows, cols, kSigma, rng));
  };
  const auto vector = [&](const std::string& name, int64_t n) {
    w.add_tensor(name, DType::f32, {n}, norm_vector(n, rng));
  };
  // n_expert matrices [rows, cols] stacked (GGUF shape {cols, rows, n_expert}).
  const auto experts = [&](const std::string& name, std::string_view kind, int layer, int64_t rows, int64_t cols) {
    const DType type = weight_type_of(spec.type, kind, layer, s.n_layer);
    w.add_tensor(name, type, {cols, rows, s.n_expert}, random_matrix(type, s.n_expert * rows, cols, kSigma, rng));
  };

  matrix("token_embd.weight", "token_embd.weight", 0, s.n_vocab, s.n_embd);
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string blk = fmt::format("blk.{}.", il);
    vector(blk + "attn_norm.weight", s.n_embd);
    matrix(blk + "attn_q.weight", "attn_q.weight", il, n_embd_q, s.n_embd);
    matrix(blk + "attn_k.weight", "attn_k.weight", il, n_embd_kv, s.n_embd);
    matrix(blk + "attn_v.weight", "attn_v.weight", il, n_embd_kv, s.n_embd);
    if (moe) {
      vector(blk + "attn_q_norm.weight", head_dim);
      vector(blk + "attn_k_norm.weight", head_dim);
    }
    matrix(blk + "attn_output.weight", "attn_output.weight", il, s.n_embd, n_embd_q);
    vector(blk + "ffn_norm.weight", s.n_embd);
    if (moe) {
      // The router: F32 as llama-quantize leaves it, every row drawn (copied rows would tie
      // experts), so that the tokens spread over all the experts as in a trained model.
      std::normal_distribution<float> normal(0.0f, kSigma);
      std::vector<float> router(size_t(s.n_expert * s.n_embd));
      for (float& v : router) v = normal(rng);
      std::vector<std::byte> router_bytes(router.size() * sizeof(float));
      std::memcpy(router_bytes.data(), router.data(), router_bytes.size());
      w.add_tensor(blk + "ffn_gate_inp.weight", DType::f32, {s.n_embd, s.n_expert}, std::move(router_bytes));
      experts(blk + "ffn_gate_exps.weight", "ffn_gate_exps.weight", il, s.n_ff_exp, s.n_embd);
      experts(blk + "ffn_up_exps.weight", "ffn_up_exps.weight", il, s.n_ff_exp, s.n_embd);
      experts(blk + "ffn_down_exps.weight", "ffn_down_exps.weight", il, s.n_embd, s.n_ff_exp);
    } else {
      matrix(blk + "ffn_gate.weight", "ffn_gate.weight", il, s.n_ff, s.n_embd);
      matrix(blk + "ffn_up.weight", "ffn_up.weight", il, s.n_ff, s.n_embd);
      matrix(blk + "ffn_down.weight", "ffn_down.weight", il, s.n_embd, s.n_ff);
    }
  }
  vector("output_norm.weight", s.n_embd);
  matrix("output.weight", "output.weight", 0, s.n_vocab, s.n_embd);
  w.write(path);
}

namespace {

// F32 bytes of n values drawn from N(0, sigma), or uniform in [lo, hi] when sigma is 0.
std::vector<std::byte> f32_values(int64_t n, float sigma, std::mt19937& rng, float lo = 0.0f, float hi = 0.0f) {
  std::normal_distribution<float> normal(0.0f, sigma > 0.0f ? sigma : 1.0f);
  std::uniform_real_distribution<float> uniform(lo, hi);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = sigma > 0.0f ? normal(rng) : uniform(rng);
  std::vector<std::byte> data(values.size() * sizeof(float));
  std::memcpy(data.data(), values.data(), data.size());
  return data;
}

}  // namespace

void write_arch_test_model(std::string_view arch, uint32_t seed, const std::filesystem::path& path) {
  const bool gemma2 = arch == "gemma2", granite = arch == "granite", olmo2 = arch == "olmo2", phi3 = arch == "phi3";
  const bool moe = arch == "qwen3moe";
  require(gemma2 || granite || olmo2 || phi3 || moe,
          "no test model for architecture '{}' (gemma2, granite, olmo2, phi3, qwen3moe)", arch);
  constexpr int64_t n_embd = 64, n_ff = 192, n_vocab = 320, n_ctx = 4096;
  constexpr int n_layer = 2, n_head = 4, n_head_kv = 2;
  // Gemma 2's heads are wider than n_embd / n_head (as in the 2B and 9B models).
  // Qwen3-MoE: 8 experts of width 32, 2 per token, heads of 32 with per-head Q/K norms.
  constexpr int n_expert = 8, n_expert_used = 2;
  constexpr int64_t n_ff_exp = 32;
  const int64_t head_dim = gemma2 || moe ? 32 : n_embd / n_head;
  const int64_t q_rows = n_head * head_dim, kv_rows = n_head_kv * head_dim;
  // Phi-3: partial rotary (12 of 16 dims), as Phi-4-mini's partial_rotary_factor.
  const int64_t n_rot = phi3 ? 12 : head_dim;
  const std::string p = std::string(arch) + ".";

  gguf::Writer w;
  w.add_string("general.architecture", std::string(arch));
  // Not naming the family: llama.cpp gives tokens of models named "phi3" special attributes.
  w.add_string("general.name", "ember random-weight test model");
  w.add_uint32("general.file_type", 0);
  w.add_uint32(p + "context_length", uint32_t(n_ctx));
  w.add_uint32(p + "embedding_length", uint32_t(n_embd));
  w.add_uint32(p + "block_count", uint32_t(n_layer));
  w.add_uint32(p + "feed_forward_length", uint32_t(n_ff));
  w.add_uint32(p + "attention.head_count", uint32_t(n_head));
  w.add_uint32(p + "attention.head_count_kv", uint32_t(n_head_kv));
  w.add_float32(p + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.add_uint32(p + "rope.dimension_count", uint32_t(n_rot));
  w.add_float32(p + "rope.freq_base", 10000.0f);
  if (moe) {
    w.add_uint32(p + "attention.key_length", uint32_t(head_dim));
    w.add_uint32(p + "attention.value_length", uint32_t(head_dim));
    w.add_uint32(p + "expert_count", n_expert);
    w.add_uint32(p + "expert_used_count", n_expert_used);
    w.add_uint32(p + "expert_feed_forward_length", uint32_t(n_ff_exp));
  }
  if (gemma2) {
    w.add_uint32(p + "attention.key_length", uint32_t(head_dim));
    w.add_uint32(p + "attention.value_length", uint32_t(head_dim));
    w.add_uint32(p + "attention.sliding_window", 16);   // the 64-token test sequence crosses it
    // Far below Gemma 2's 50 and 30, so that tanh bends the random scores and logits.
    w.add_float32(p + "attn_logit_softcapping", 1.5f);
    w.add_float32(p + "final_logit_softcapping", 6.0f);
  }
  if (granite) {
    w.add_float32(p + "embedding_scale", 3.0f);
    w.add_float32(p + "residual_scale", 0.5f);
    w.add_float32(p + "attention.scale", 0.4f);       // instead of 1/sqrt(16) = 0.25
    w.add_float32(p + "logit_scale", 0.5f);           // logits are divided by it
  }
  if (phi3) {
    // LongRoPE: the long factors apply when the context exceeds the original 32 tokens.
    w.add_uint32(p + "rope.scaling.original_context_length", 32);
    w.add_float32(p + "rope.scaling.attn_factor", 1.25f);
    w.add_uint32(p + "attention.sliding_window", 0);
  }
  add_vocabulary(w, n_vocab);

  std::mt19937 rng(seed);
  // Unit-variance outputs for unit-variance inputs; logits of standard deviation ~2.
  const auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    w.add_tensor(name, DType::f32, {cols, rows}, f32_values(rows * cols, 1.0f / std::sqrt(float(cols)), rng));
  };
  const auto norm = [&](const std::string& name, int64_t n) {
    w.add_tensor(name, DType::f32, {n}, f32_values(n, 0.0f, rng, 0.8f, 1.2f));
  };
  w.add_tensor("token_embd.weight", DType::f32, {n_embd, n_vocab}, f32_values(n_vocab * n_embd, 0.25f, rng));
  if (phi3) {
    w.add_tensor("rope_factors_long.weight", DType::f32, {n_rot / 2}, f32_values(n_rot / 2, 0.0f, rng, 1.0f, 8.0f));
    w.add_tensor("rope_factors_short.weight", DType::f32, {n_rot / 2}, f32_values(n_rot / 2, 0.0f, rng, 1.0f, 2.0f));
  }
  for (int il = 0; il < n_layer; ++il) {
    const std::string blk = fmt::format("blk.{}.", il);
    if (!olmo2) norm(blk + "attn_norm.weight", n_embd);
    if (phi3) {
      matrix(blk + "attn_qkv.weight", q_rows + 2 * kv_rows, n_embd);
    } else {
      matrix(blk + "attn_q.weight", q_rows, n_embd);
      matrix(blk + "attn_k.weight", kv_rows, n_embd);
      matrix(blk + "attn_v.weight", kv_rows, n_embd);
    }
    if (olmo2) {
      norm(blk + "attn_q_norm.weight", q_rows);
      norm(blk + "attn_k_norm.weight", kv_rows);
    }
    if (moe) {
      norm(blk + "attn_q_norm.weight", head_dim);
      norm(blk + "attn_k_norm.weight", head_dim);
    }
    matrix(blk + "attn_output.weight", n_embd, q_rows);
    if (gemma2 || olmo2) norm(blk + "post_attention_norm.weight", n_embd);
    if (!olmo2) norm(blk + "ffn_norm.weight", n_embd);
    if (moe) {
      // Router scores of standard deviation ~2, so that the choice of experts is rarely close.
      w.add_tensor(blk + "ffn_gate_inp.weight", DType::f32, {n_embd, n_expert},
                   f32_values(n_expert * n_embd, 2.0f / std::sqrt(float(n_embd)), rng));
      const auto experts = [&](const std::string& name, int64_t rows, int64_t cols) {
        w.add_tensor(name, DType::f32, {cols, rows, n_expert},
                     f32_values(n_expert * rows * cols, 1.0f / std::sqrt(float(cols)), rng));
      };
      experts(blk + "ffn_gate_exps.weight", n_ff_exp, n_embd);
      experts(blk + "ffn_up_exps.weight", n_ff_exp, n_embd);
      experts(blk + "ffn_down_exps.weight", n_embd, n_ff_exp);
    } else if (phi3) {
      matrix(blk + "ffn_up.weight", 2 * n_ff, n_embd);   // gate rows, then up rows
    } else {
      matrix(blk + "ffn_gate.weight", n_ff, n_embd);
      matrix(blk + "ffn_up.weight", n_ff, n_embd);
    }
    if (!moe) matrix(blk + "ffn_down.weight", n_embd, n_ff);
    if (gemma2 || olmo2) norm(blk + "post_ffw_norm.weight", n_embd);
  }
  norm("output_norm.weight", n_embd);
  // Gemma 2 ties the output to token_embd.
  if (!gemma2) w.add_tensor("output.weight", DType::f32, {n_embd, n_vocab}, f32_values(n_vocab * n_embd, 0.25f, rng));
  w.write(path);
}

}  // namespace ember::bench
