// Pearson's chi-square goodness-of-fit test for the statistical sampling tests.
//
// The critical value is computed, not looked up: it is the x with
// Q(df / 2, x / 2) = alpha, where Q is the regularised upper incomplete gamma
// function (the chi-square survival function), solved by bisection. Q comes from
// its power series below a + 1 and its continued fraction above (evaluated with
// the modified Lentz method), the two standard expansions.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace ember::test {

// Regularised upper incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a), a > 0, x >= 0.
inline double gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double log_prefix = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1.0) {
    // P(a, x) = x^a e^-x / Gamma(a + 1) * sum_n x^n / ((a + 1) ... (a + n))
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000 && std::abs(term) > std::abs(sum) * 1e-16; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_prefix);
  }
  // Q(a, x) = x^a e^-x / Gamma(a) * 1 / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a - ...)))
  constexpr double kTiny = 1e-300;
  double b = x + 1.0 - a;
  double c = 1.0 / kTiny;
  double d = 1.0 / b;
  double h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::abs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double step = d * c;
    h *= step;
    if (std::abs(step - 1.0) < 1e-16) break;
  }
  return std::exp(log_prefix) * h;
}

// P(X > x) for X ~ chi-square with df degrees of freedom.
inline double chi_square_survival(double x, int df) { return gamma_q(df / 2.0, x / 2.0); }

// The x with P(X > x) = alpha (the test rejects when the statistic exceeds it).
inline double chi_square_critical(int df, double alpha) {
  double low = 0.0, high = 1.0;
  while (chi_square_survival(high, df) > alpha) high *= 2.0;
  for (int i = 0; i < 200 && high - low > 1e-12 * high; ++i) {
    const double mid = 0.5 * (low + high);
    (chi_square_survival(mid, df) > alpha ? low : high) = mid;
  }
  return 0.5 * (low + high);
}

// Pearson's statistic sum (observed - expected)^2 / expected over the cells with
// probability > 0; `probs` sums to 1 and has one entry per cell of `counts`.
inline double chi_square_statistic(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  int64_t total = 0;
  for (int64_t count : counts) total += count;
  double statistic = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] <= 0.0) continue;
    const double expected = probs[i] * static_cast<double>(total);
    const double diff = static_cast<double>(counts[i]) - expected;
    statistic += diff * diff / expected;
  }
  return statistic;
}

}  // namespace ember::test
