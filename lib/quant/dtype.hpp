// Element types of tensors as stored in GGUF files.
//
// The numeric values are the type ids of the GGUF format (ember's own weight formats: 1100 up) (ggml's `ggml_type`), so a
// DType can be read straight from a tensor-info record once validated with
// dtype_from_id(). Block geometry facts come from ggml's block definitions
// (ggml/src/ggml-common.h); ember's arithmetic for the types it computes with lives
// beside this file, one file per format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "quant/weight_types.hpp"

namespace ember::quant {

enum class DType : uint32_t {
#define EMBER_DTYPE_ENUM(id, NAME, type_id, ...) id = type_id,
  EMBER_WEIGHT_TYPES(EMBER_DTYPE_ENUM)  // the weight types: lib/quant/weight_types.hpp
#undef EMBER_DTYPE_ENUM
  // GGUF types ember reads the layout of but does not compute with.
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  tq1_0 = 34,
  tq2_0 = 35,
  // ember's per-token INT8 activation format of Q8_W (lib/quant/q8_w.cpp); never in a file.
  q8_t = 1103,
  // Q8_T in a Hadamard-rotated basis, the activation format of Q8_WR (lib/quant/q8_wr.cpp).
  q8_tr = 1105,
  // ember's own KV-cache storage types (quant/kv_formats.hpp). They never appear in a
  // GGUF file: type_info_from_id() does not know their ids.
  kv_q8_g32 = 1000,  // INT8, one f16 scale per 32 values
  kv_q8_g64 = 1001,  // INT8, one f16 scale per 64 values
  kv_q4_g32 = 1002,  // INT4, f16 scale and minimum per 32 values
  kv_q4_g64 = 1003,  // INT4, f16 scale and minimum per 64 values
  kv_q4o_g32 = 1004,  // INT4 g32 + the 2 largest values of each group as f16
  kv_q4o_g64 = 1005,  // INT4 g64 + the 2 largest values of each group as f16
};

// Layout of one type: `block_elems` consecutive values are stored in `block_bytes`.
struct TypeInfo {
  DType type;
  std::string_view name;   // GGUF/ggml spelling, e.g. "Q4_K"
  uint32_t block_elems;    // values per block (1 for plain types)
  uint32_t block_bytes;    // bytes per block
  bool weight_supported;   // ember can multiply with it (matmul / embedding lookup)
};

// Type info for a raw GGUF type id; nullopt for ids that no GGUF type uses.
std::optional<TypeInfo> type_info_from_id(uint32_t id);
// Type info for a known DType.
const TypeInfo& type_info(DType type);
inline std::string_view type_name(DType type) { return type_info(type).name; }
// Every type ember can use as weights, in the registry's order (lib/quant/weight_types.hpp).
std::span<const DType> weight_types();

// The plain float types F32, F16 and BF16: one value per element, nothing to dequantize.
inline bool is_float_type(DType type) { return type == DType::f32 || type == DType::f16 || type == DType::bf16; }

// ember's own weight formats (registry ids from 1100 up): no GGUF reader but ember's loads them.
inline bool is_ember_weight_type(DType type) { return static_cast<uint32_t>(type) >= 1100 && type_info(type).weight_supported; }

// Types a KV cache can be stored in: F32, F16 and the kv_* types.
bool is_kv_storage_type(DType type);

// Bytes of a row of `n` values; `n` must be a multiple of block_elems.
inline size_t row_bytes(DType type, int64_t n) {
  const TypeInfo& info = type_info(type);
  return size_t(n / info.block_elems) * info.block_bytes;
}

// Block sizes of the super-block ("K") formats and the 32-wide formats.
inline constexpr int kQK = 32;    // Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1
inline constexpr int kQKK = 256;  // Q2_K..Q8_K

}  // namespace ember::quant
