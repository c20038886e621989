// GELU through the F16 table (scalar::gelu_f16_table, elementwise.cpp explains): the
// input rounded to F16, the table's F16 result, except that x <= -10 gives 0 and
// x >= 10 gives x. Internal linkage: compiled with several levels' flags.
#pragma once

#include <cstdint>

#include "common/fp16.hpp"

namespace ember::cpu {
namespace {

inline float gelu_f16(const uint16_t* table, float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  return fp16_to_fp32(table[fp32_to_fp16(x)]);
}

}  // namespace
}  // namespace ember::cpu
