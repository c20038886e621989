// Byte layouts of the GGUF block formats ember computes with.
//
// Field order, sizes and bit packing follow ggml's block definitions
// (ggml/src/ggml-common.h) and its numpy dequantizers (gguf-py/gguf/quants.py).
// Each struct is the exact on-disk image of one block: no padding, little-endian,
// half-precision fields stored as raw IEEE binary16 bits. Blocks are read through
// these structs at any byte address (rows of Q4_0 are 18-byte strides), so every
// member has alignment 1 or 2 and fields are loaded with memcpy where wider.
//
// Notation in the comments: a block holds `n` values x[0..n); "q" are the stored
// integer codes, "d" the scale, "m" the offset (min).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/fp16.hpp"
#include "quant/dtype.hpp"

namespace ember::quant {

// x[i] = d * (q[i] - 8); q[i] in [0, 16). 32 values, 18 bytes.
struct BlockQ4_0 {
  uint16_t d;        // fp16 scale
  uint8_t qs[16];    // q[i] in the low nibble of qs[i], q[i + 16] in the high nibble
};

// x[i] = d * q[i] + m; q[i] in [0, 16). 32 values, 20 bytes.
struct BlockQ4_1 {
  uint16_t d;        // fp16 scale
  uint16_t m;        // fp16 offset (the block minimum)
  uint8_t qs[16];    // as BlockQ4_0
};

// x[i] = d * (q[i] - 16); q[i] in [0, 32). 32 values, 22 bytes.
struct BlockQ5_0 {
  uint16_t d;        // fp16 scale
  uint8_t qh[4];     // bit i of this little-endian uint32 is bit 4 of q[i]
  uint8_t qs[16];    // low 4 bits, as BlockQ4_0
};

// x[i] = d * q[i] + m; q[i] in [0, 32). 32 values, 24 bytes.
struct BlockQ5_1 {
  uint16_t d;        // fp16 scale
  uint16_t m;        // fp16 offset
  uint8_t qh[4];     // as BlockQ5_0
  uint8_t qs[16];    // as BlockQ4_0
};

// x[i] = d * q[i]; q[i] in [-127, 127]. 32 values, 34 bytes. Weights and activations.
struct BlockQ8_0 {
  uint16_t d;        // fp16 scale
  int8_t qs[32];
};

// Activation format for Q4_1 / Q5_1: x[i] = d * q[i]. 32 values, 36 bytes.
struct BlockQ8_1 {
  uint16_t d;        // fp16 scale
  uint16_t s;        // fp16 of d * sum(q), computed with the unrounded d
  int8_t qs[32];
};

// Q4_K: 256 values in 8 sub-blocks of 32, 144 bytes.
// x[32j + l] = d * sc[j] * q - dmin * mn[j]; q in [0, 16); sc, mn are 6-bit (see unpack_k_scales).
struct BlockQ4_K {
  uint16_t d;          // fp16 super-block scale of the sub-block scales
  uint16_t dmin;       // fp16 super-block scale of the sub-block mins
  uint8_t scales[12];  // 8 scales and 8 mins, 6 bits each
  uint8_t qs[128];     // 32-byte group g: low nibbles -> sub-block 2g, high nibbles -> 2g + 1
};

// Q5_K: as Q4_K with a fifth bit; q in [0, 32). 256 values, 176 bytes.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];      // bit j of qh[l] is bit 4 of the value l of sub-block j
  uint8_t qs[128];     // low 4 bits, as BlockQ4_K
};

// Q6_K: 256 values in 16 sub-blocks of 16, 210 bytes. x[16j + l] = d * sc[j] * (q - 32), q in [0, 64).
// For half h (values 128h + [0, 128)), with L = ql + 64h and H = qh + 32h, l in [0, 32):
//   value 128h +      l: low  nibble of L[l]      | bits 0-1 of H[l] << 4
//   value 128h + 32 + l: low  nibble of L[l + 32] | bits 2-3 of H[l] << 4
//   value 128h + 64 + l: high nibble of L[l]      | bits 4-5 of H[l] << 4
//   value 128h + 96 + l: high nibble of L[l + 32] | bits 6-7 of H[l] << 4
struct BlockQ6_K {
  uint8_t ql[128];     // low 4 bits
  uint8_t qh[64];      // high 2 bits
  int8_t scales[16];   // signed 8-bit sub-block scales
  uint16_t d;          // fp16 super-block scale
};

// Activation format for the K formats: x[i] = d * q[i], q in [-127, 127]. 256 values, 292 bytes.
struct BlockQ8_K {
  float d;             // f32 scale (blocks are 4-byte aligned when the row is)
  int8_t qs[256];
  int16_t bsums[16];   // bsums[j] = sum of q[16j .. 16j + 16)
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 &&
              sizeof(BlockQ8_K) == 292);

// Reads a half-precision field.
inline float load_fp16(const uint16_t& h) { return fp16_to_fp32(h); }

// The 32 fifth bits of a Q5_0 / Q5_1 block (qh, little-endian), bit i for value i.
inline uint32_t q5_high_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return bits;
}

// 5-bit code of value i of a Q5_0 / Q5_1 block: low nibble from qs (values 0..15 in
// the low nibbles, 16..31 in the high ones), fifth bit from qh.
template <class Block>
inline int q5_code(const Block& b, uint32_t qh, int i) {
  const int low = i < 16 ? (b.qs[i] & 15) : (b.qs[i - 16] >> 4);
  return low | int((qh >> i) & 1u) << 4;
}

// x * y + z with the product rounded to float first, whatever the compiler's
// contraction settings (-ffp-contract, -march with FMA): the dequantizers promise
// the two roundings of gguf-py's numpy code, bit for bit.
inline float mul_then_add(float x, float y, float z) {
  volatile float product = x * y;
  return product + z;
}

// Six-bit scales and mins of Q4_K / Q5_K, unpacked from their 12 bytes:
//   j < 4: sc = b[j] & 63,                          mn = b[j + 4] & 63
//   j >= 4: sc = (b[j + 4] & 15) | (b[j - 4] >> 6) << 4, mn = (b[j + 4] >> 4) | (b[j] >> 6) << 4
struct KScales {
  uint8_t sc[8];
  uint8_t mn[8];
};
inline KScales unpack_k_scales(const uint8_t* b) {
  KScales s;
  for (int j = 0; j < 4; ++j) {
    s.sc[j] = b[j] & 63;
    s.mn[j] = b[j + 4] & 63;
    s.sc[j + 4] = uint8_t((b[j + 8] & 15) | ((b[j] >> 6) << 4));
    s.mn[j + 4] = uint8_t((b[j + 8] >> 4) | ((b[j + 4] >> 6) << 4));
  }
  return s;
}
// Inverse of unpack_k_scales; sc and mn must be < 64.
inline void pack_k_scales(const uint8_t* sc, const uint8_t* mn, uint8_t* b) {
  for (int j = 0; j < 4; ++j) {
    b[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
    b[j + 4] = uint8_t(mn[j] | ((mn[j + 4] >> 4) << 6));
    b[j + 8] = uint8_t((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

}  // namespace ember::quant
