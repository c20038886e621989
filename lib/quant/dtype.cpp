#include "quant/dtype.hpp"

#include <array>

#include "common/fail.hpp"

namespace ember::quant {
namespace {

// Sizes follow ggml's block structs (ggml/src/ggml-common.h).
constexpr TypeInfo kTypes[] = {
#define EMBER_TYPE_INFO(id, NAME, type_id, elems, bytes, ...) {DType::id, #NAME, elems, bytes, true},
    EMBER_WEIGHT_TYPES(EMBER_TYPE_INFO)
#undef EMBER_TYPE_INFO
    {DType::q8_1, "Q8_1", 32, 36, false},
    {DType::q2_k, "Q2_K", 256, 84, false},
    {DType::q3_k, "Q3_K", 256, 110, false},
    {DType::q8_k, "Q8_K", 256, 292, false},
    {DType::iq2_xxs, "IQ2_XXS", 256, 66, false},
    {DType::iq2_xs, "IQ2_XS", 256, 74, false},
    {DType::iq3_xxs, "IQ3_XXS", 256, 98, false},
    {DType::iq1_s, "IQ1_S", 256, 50, false},
    {DType::iq4_nl, "IQ4_NL", 32, 18, false},
    {DType::iq3_s, "IQ3_S", 256, 110, false},
    {DType::iq2_s, "IQ2_S", 256, 82, false},
    {DType::iq4_xs, "IQ4_XS", 256, 136, false},
    {DType::i8, "I8", 1, 1, false},
    {DType::i16, "I16", 1, 2, false},
    {DType::i32, "I32", 1, 4, false},
    {DType::i64, "I64", 1, 8, false},
    {DType::f64, "F64", 1, 8, false},
    {DType::iq1_m, "IQ1_M", 256, 56, false},
    {DType::tq1_0, "TQ1_0", 256, 54, false},
    {DType::tq2_0, "TQ2_0", 256, 66, false},
    {DType::q8_t, "Q8_T", 32, 34, false},
    {DType::q8_tr, "Q8_TR", 64, 68, false},
};

// KV-cache storage types (quant/kv_formats.hpp): block = one group.
constexpr std::array<TypeInfo, 6> kKvTypes{{
    {DType::kv_q8_g32, "KV_Q8_G32", 32, 34, false},
    {DType::kv_q8_g64, "KV_Q8_G64", 64, 66, false},
    {DType::kv_q4_g32, "KV_Q4_G32", 32, 20, false},
    {DType::kv_q4_g64, "KV_Q4_G64", 64, 36, false},
    {DType::kv_q4o_g32, "KV_Q4O_G32", 32, 26, false},
    {DType::kv_q4o_g64, "KV_Q4O_G64", 64, 42, false},
}};

constexpr DType kWeightTypes[] = {
#define EMBER_WEIGHT_DTYPE(id, ...) DType::id,
    EMBER_WEIGHT_TYPES(EMBER_WEIGHT_DTYPE)
#undef EMBER_WEIGHT_DTYPE
};

}  // namespace

std::optional<TypeInfo> type_info_from_id(uint32_t id) {
  for (const TypeInfo& info : kTypes)
    if (static_cast<uint32_t>(info.type) == id) return info;
  return std::nullopt;
}

bool is_kv_storage_type(DType type) {
  if (type == DType::f32 || type == DType::f16) return true;
  for (const TypeInfo& info : kKvTypes)
    if (info.type == type) return true;
  return false;
}

const TypeInfo& type_info(DType type) {
  for (const TypeInfo& info : kTypes)
    if (info.type == type) return info;
  for (const TypeInfo& info : kKvTypes)
    if (info.type == type) return info;
  fail(ErrorCode::internal, "type_info: unknown DType {}", static_cast<uint32_t>(type));
}

std::span<const DType> weight_types() { return kWeightTypes; }

}  // namespace ember::quant
