// The last step of the chain: temperature and the random draw.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "sampling/candidates.hpp"

namespace ember::sampling {

// Weights are w_i = exp((logit_i - max) / T): the scaled difference
// (logit_i - max) * (1 / T) is computed in double, rounded to float and passed to
// exp_nonpositive() (exp.hpp); the weights are summed in double, in the order of
// c.items.

// Probabilities of the candidates at `temperature` (> 0), in the order of c.items:
// p_i = w_i / sum_j w_j.
std::vector<double> probabilities(const Candidates& c, float temperature);

// Inverse-CDF draw: the index i into c.items with cdf(i - 1) <= u * total < cdf(i),
// where cdf is the running sum of the weights w in the order of c.items.
// `u` must be in [0, 1); `storage` is scratch space reused between calls.
// Candidates whose weight underflows to 0 are never picked.
size_t draw_index(const Candidates& c, float temperature, double u, std::vector<float>& storage);

}  // namespace ember::sampling
