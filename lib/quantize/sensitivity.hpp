// Measured sensitivity (`ember quantize --sensitivity kl`): for each tensor t, the
// KL divergence of the model's next-token distribution when t alone is quantized to a
// given type and every other tensor stays as the source has it,
//   KL(t) = mean over the scored positions i of  sum_v p_i(v) (log p_i(v) - log q_i(v)),
// p = softmax of the source model's logits, q = with t quantized (nats per position).
//
// Cost: the source's log-probabilities are computed once and kept
// ([windows * positions][n_vocab] floats: 2 * 64 * 262144 * 4 B = 128 MiB for Gemma 3);
// then one forward pass over windows * window_tokens tokens per tensor, with the output
// matrix applied at the scored positions only. The tensor is swapped in memory: the
// model's weight slot (every slot that views it: tied embeddings, fused row slices) is
// pointed at a buffer holding the quantized bytes and restored afterwards; the file is
// neither copied nor rewritten. The quantization is round-to-nearest (the writer's
// quantizers), without AWQ scales or GPTQ.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "gguf/gguf.hpp"
#include "quant/dtype.hpp"

namespace ember::quantize {

struct KlSettings {
  int64_t windows = 2;            // windows of the text, each from an empty context, >= 1
  int64_t window_tokens = 256;    // tokens per window (BOS first when the model adds one), >= 16
  int64_t positions = 64;         // scored positions per window, at most (evenly spaced over its last 7/8), >= 1
  int threads = 1;
  std::function<void(int64_t done, int64_t total)> on_tensor;   // after each tensor measured
};

// One tensor to measure: its index in file.tensors() and the type to quantize it to.
struct KlTarget {
  size_t tensor = 0;
  quant::DType type = quant::DType::q4_0;
};

struct KlResult {
  std::map<size_t, double> kl;    // by tensor index; targets the model does not read are absent
  int64_t windows = 0, tokens = 0, positions = 0;   // what was run and scored
};

// `tokens`: text tokens (no BOS); windows are cut from its start. Fewer windows than
// asked are used when the text is short; throws invalid_argument when it holds less than
// one window. Also throws what loading and running the model throws.
KlResult measure_kl(const std::shared_ptr<const gguf::File>& file, std::span<const int32_t> tokens,
                    std::span<const KlTarget> targets, const KlSettings& settings);

}  // namespace ember::quantize
