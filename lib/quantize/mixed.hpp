// Mixed precision by sensitivity (`ember quantize --bpw B | --budget SIZE`): the tensor
// types of the layers' projections are chosen from a ladder of types (Q4_K < Q5_K < Q6_K
// < Q8_0 for the K recipes, Q4_0 < Q5_0 < Q8_0 for the others) so that the tensor data
// fits a byte budget and the summed sensitivity is smallest.
//
// Sensitivity of tensor t in type T: its relative layer-wise output error
//   D(t, T) = OutputError.error / OutputError.energy   (output_error.hpp)
// with the calibration Hessian of its input when there is one (else the identity: the
// relative weight error), on at most search_rows rows. The allocation is greedy by
// marginal gain: every projection starts at the ladder's first type; the upgrade with the
// largest drop of D per extra byte that still fits is taken until none fits.
// Everything else (embeddings, output, norms, tensors whose rows the ladder cannot hold)
// keeps the recipe's type and counts against the budget first.
//
// With measured sensitivities (MixOptions::measured, sensitivity.hpp: the KL divergence of
// the model with the tensor alone in the ladder's first type) D is rescaled so that its
// value at the first type is the measured one and the other types keep the proxy's
// ratios:  D_kl(t, T) = KL(t) * D(t, T) / D(t, ladder[0]).  One forward pass per tensor
// measures the first type only; the wider types' KL is not measured.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "gguf/gguf.hpp"
#include "quant/dtype.hpp"
#include "quantize/calibration.hpp"
#include "quantize/type_rules.hpp"

namespace ember::quantize {

struct MixOptions {
  uint64_t budget_bytes = 0;      // the output's tensor data, all tensors
  int64_t search_rows = 256;
  int threads = 1;
  const std::map<size_t, double>* measured = nullptr;   // by tensor index: KL at ladder[0]; null: the proxy
};

struct MixChoice {
  size_t plan = 0;                // index into plans
  double sensitivity = 0;         // D at the chosen type
  double first = 0;               // D at the ladder's first type (with measured: the KL)
};

// The ladder for a recipe's base type.
std::vector<quant::DType> mix_ladder(quant::DType base);

// The plan indices of the tensors a mixture over ladder(base) takes part in.
std::vector<size_t> mixable(const gguf::File& file, std::span<const TensorPlan> plans, quant::DType base);

// Rewrites plans[i].type of the mixed tensors and returns them. Throws invalid_argument
// when the budget is below the smallest mixture (the message gives it) or no tensor can be
// mixed. `calibration` may be null.
std::vector<MixChoice> mix_types(const gguf::File& file, std::span<TensorPlan> plans, const Calibration* calibration,
                                 quant::DType base, const MixOptions& options,
                                 const std::function<void(int64_t done, int64_t total)>& on_tensor = {});

}  // namespace ember::quantize
