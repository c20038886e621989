#include "bench/model_writer.hpp"

#include <array>
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

bool is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

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
  require(s.n_embd % s.n_head == 0 && (s.n_embd / s.n_head) % 2 == 0,
          "model shape: n_embd {} is not a multiple of 2 * n_head ({})", s.n_embd, s.n_head);
  require(s.n_vocab >= 259, "model shape: n_vocab {} is below 259 (3 special and 256 byte tokens)", s.n_vocab);
  require(s.n_ctx > 0, "model shape: n_ctx must be positive");
  const int64_t block = quant::type_info(widest_block).block_elems;
  require(s.n_embd % block == 0 && s.n_ff % block == 0,
          "model shape: n_embd {} and n_ff {} must be multiples of {} for {}", s.n_embd, s.n_ff, block,
          quant::type_name(widest_block));
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
  if (kind.ends_with("norm.weight")) return DType::f32;
  if (is_float(base)) return base;
  if (kind == "output.weight") return base == DType::q8_0 ? DType::q8_0 : DType::q6_k;
  if ((type == FileType::q4_k_m || type == FileType::q5_k_m) && (kind == "attn_v.weight" || kind == "ffn_down.weight") &&
      use_more_bits(layer, n_layer))
    return DType::q6_k;
  return base;
}

void write_llama_model(const ModelSpec& spec, const std::filesystem::path& path) {
  const LlamaShape& s = spec.shape;
  const bool k_quants = spec.type == FileType::q4_k_m || spec.type == FileType::q5_k_m || spec.type == FileType::q6_k;
  check_shape(s, k_quants ? DType::q4_k : row_of(spec.type).base);
  const int64_t head_dim = s.n_embd / s.n_head;
  const int64_t n_embd_kv = head_dim * s.n_head_kv;

  gguf::Writer w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", spec.name);
  w.add_uint32("general.file_type", llama_ftype(spec.type));
  w.add_uint32("general.alignment", 32);   // the default, written out
  w.add_uint32("llama.context_length", uint32_t(s.n_ctx));
  w.add_uint32("llama.embedding_length", uint32_t(s.n_embd));
  w.add_uint32("llama.block_count", uint32_t(s.n_layer));
  w.add_uint32("llama.feed_forward_length", uint32_t(s.n_ff));
  w.add_uint32("llama.attention.head_count", uint32_t(s.n_head));
  w.add_uint32("llama.attention.head_count_kv", uint32_t(s.n_head_kv));
  w.add_float32("llama.attention.layer_norm_rms_epsilon", s.rms_eps);
  w.add_uint32("llama.rope.dimension_count", uint32_t(head_dim));
  w.add_float32("llama.rope.freq_base", s.rope_base);
  w.add_uint32("llama.vocab_size", uint32_t(s.n_vocab));
  add_vocabulary(w, s.n_vocab);

  std::mt19937 rng(spec.seed);
  constexpr float kSigma = 0.02f;   // the usual initialisation scale of transformer weights
  // A matrix of `rows` outputs over `cols` inputs (GGUF shape {cols, rows}).
  const auto matrix = [&](const std::string& name, std::string_view kind, int layer, int64_t rows, int64_t cols) {
    const DType type = weight_type_of(spec.type, kind, layer, s.n_layer);
    w.add_tensor(name, type, {cols, rows}, random_matrix(type, rows, cols, kSigma, rng));
  };
  const auto vector = [&](const std::string& name) {
    w.add_tensor(name, DType::f32, {s.n_embd}, norm_vector(s.n_embd, rng));
  };

  matrix("token_embd.weight", "token_embd.weight", 0, s.n_vocab, s.n_embd);
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string blk = fmt::format("blk.{}.", il);
    vector(blk + "attn_norm.weight");
    matrix(blk + "attn_q.weight", "attn_q.weight", il, s.n_embd, s.n_embd);
    matrix(blk + "attn_k.weight", "attn_k.weight", il, n_embd_kv, s.n_embd);
    matrix(blk + "attn_v.weight", "attn_v.weight", il, n_embd_kv, s.n_embd);
    matrix(blk + "attn_output.weight", "attn_output.weight", il, s.n_embd, s.n_embd);
    vector(blk + "ffn_norm.weight");
    matrix(blk + "ffn_gate.weight", "ffn_gate.weight", il, s.n_ff, s.n_embd);
    matrix(blk + "ffn_up.weight", "ffn_up.weight", il, s.n_ff, s.n_embd);
    matrix(blk + "ffn_down.weight", "ffn_down.weight", il, s.n_embd, s.n_ff);
  }
  vector("output_norm.weight");
  matrix("output.weight", "output.weight", 0, s.n_vocab, s.n_embd);
  w.write(path);
}

}  // namespace ember::bench
