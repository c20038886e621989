// ember's own exponential for the sampler's weights exp(x), x <= 0.
//
// The C library's exp/expf differ between platforms in the last bit, and one bit
// can move a draw across a cumulative boundary, so a seeded sampler would not
// give the same tokens everywhere. This one uses only IEEE-754 additions,
// multiplications and integer bit operations, compiled without FMA contraction,
// so it returns the same float on every platform (in the default round-to-nearest
// mode), and the array form vectorises.
//
// Method: the usual reduction x = k ln2 + r with |r| <= ln2 / 2 (ln2 split in a
// high part with few mantissa bits and a low part, after Cody & Waite), e^r by its
// degree-7 Taylor polynomial in Horner form, and 2^k built from the exponent bits.
// The relative error is below 2e-7 (about 2 float ulps); exp(0) is exactly 1. It is
// not exactly monotonic: in about 3000 of the 1.1e9 floats in [-80, 0] the result
// is 1 ulp above that of the next larger input. Nothing relies on monotonicity:
// rankings come from logits, and each weight is only compared or summed.
// Inputs below kExpCutoff (including -inf) give 0: such weights are < 2e-35 of the
// largest one, and keeping every result a normal float makes it immune to the
// flush-to-zero modes some hosts set.
#pragma once

#include <cstddef>
#include <span>

namespace ember::sampling {

inline constexpr float kExpCutoff = -80.0f;

// e^x for x <= 0 (0 below kExpCutoff). Positive or NaN input is a caller bug; the
// result is then unspecified (but no trap).
float exp_nonpositive(float x);

// values[i] = exp_nonpositive(values[i]) for every i; identical results to the
// scalar form, several values per instruction.
void exp_nonpositive(std::span<float> values);

}  // namespace ember::sampling
