// Calibration for `ember quantize --method gptq`: a text is cut into samples (windows
// of sample_tokens tokens, each starting with BOS where the vocabulary has one) and run
// through the source model with ember's own forward pass; for every dense projection
// matrix the Hessian of its layer-wise loss, H = sum over its input rows x of x^T x, is
// accumulated (in double, from float rank-k updates of one sample each). q/k/v and
// gate/up read the same rows and share one H.
//
// The inputs are those of the unquantized model (no sequential re-run with the layers
// already quantized, unlike the GPTQ paper's reference code).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.hpp"

namespace ember::quantize {

struct CalibrationSettings {
  std::string text_path;          // UTF-8 text
  int64_t samples = 512;          // windows wanted; fewer are used (with a warning) when the text is short
  int64_t sample_tokens = 512;    // tokens per window, >= 2
  int threads = 1;                // CPU backend threads
  int64_t max_tokens = -1;        // read only the text's first max_tokens tokens (-1: all; the gate's held-out tail follows)
  // Input rows kept per group (Hessian::kept) for searches that need the activations
  // themselves, not only H (SmoothQuant's search: W8A8 quantizes them). 0: none. Taken
  // evenly from every sample, at most max(1, keep_rows / samples) per sample, BOS skipped.
  int64_t keep_rows = 0;
  std::function<void(int64_t done, int64_t total)> on_sample;   // after each window
};

struct Hessian {
  int64_t cols = 0;               // the input width
  std::vector<double> h;          // [cols][cols], symmetric
  int64_t rows_seen = 0;          // input rows summed
  std::vector<float> abs_max;     // [cols], the largest |x| seen on each channel
  std::vector<float> kept;        // [n_kept][cols], input rows kept (CalibrationSettings::keep_rows)
  int64_t n_kept = 0;
};

struct Calibration {
  // Keyed by the weight's tensor name ("blk.3.attn_q.weight"); shared where inputs are.
  std::map<std::string, std::shared_ptr<const Hessian>> hessians;
  int64_t samples = 0, tokens = 0;   // used
  std::vector<std::string> warnings;
};

// Throws ember::Error: io (text unreadable), invalid_argument (bad settings, or a text
// too short for one sample: the message gives its token count), and what loading or
// running the model throws (unsupported architecture, ...).
Calibration calibrate(const std::shared_ptr<const gguf::File>& file, const CalibrationSettings& settings);

// Runs fn(0) .. fn(n - 1) on n threads, fn(0) on the calling thread; rethrows the first
// failure after all have finished.
void run_parallel(int n, const std::function<void(int)>& fn);

}  // namespace ember::quantize
