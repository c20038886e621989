// ember-make-model: writes a random-weight llama-architecture GGUF file that both
// ember and llama.cpp load, for side-by-side speed measurements (bench/compare.py).
//
//   ember-make-model --preset tinyllama-1.1b --type q4_k_m -o ~/.cache/ember/bench/tinyllama-1.1b-Q4_K_M.gguf
//   ember-make-model --preset qwen3-30b-a3b --type q4_0 -o ~/.cache/ember/bench/qwen3moe-30b-a3b-4l-Q4_0.gguf
//
// The qwen3-30b-a3b preset writes a "qwen3moe" model (Qwen3-30B-A3B's layer shapes,
// fewer layers); --n-expert, --n-expert-used, --n-ff-exp and --head-dim shape it.
//
// --arch gemma2|granite|olmo2|phi3|qwen3moe writes the small F32 test model of that family
// instead (bench/model_writer.hpp, write_arch_test_model); only --seed applies.
//
// Shape options override the preset's values.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "bench/model_writer.hpp"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: ember-make-model [--arch llama] [--preset tinyllama-1.1b|tiny|qwen3-30b-a3b] --type TYPE -o FILE\n"
               "       ember-make-model --arch gemma2|granite|olmo2|phi3|qwen3moe [--seed N] -o FILE   (F32 test model)\n"
               "                        [--n-embd N] [--n-ff N] [--n-layer N] [--n-head N] [--n-head-kv N]\n"
               "                        [--n-vocab N] [--n-ctx N] [--seed N]\n"
               "                        [--head-dim N] [--n-expert N] [--n-expert-used N] [--n-ff-exp N]\n"
               "  TYPE: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k_m q5_k_m q6_k\n"
               "  (per-tensor types follow llama-quantize: see bench/model_writer.hpp)\n");
}

long long to_int(const std::string& option, const std::string& value) {
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v <= 0) {
    std::fprintf(stderr, "ember-make-model: %s wants a positive integer, got '%s'\n", option.c_str(), value.c_str());
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ember::bench;
  ModelSpec spec;
  spec.shape = *llama_preset("tinyllama-1.1b");
  std::string output, type_name, preset = "tinyllama-1.1b", arch = "llama";
  bool preset_given = false;
  bool have_type = false;
  // Shape overrides, applied after the preset.
  long long n_embd = 0, n_ff = 0, n_layer = 0, n_head = 0, n_head_kv = 0, n_vocab = 0, n_ctx = 0;
  long long head_dim = 0, n_expert = 0, n_expert_used = 0, n_ff_exp = 0;

  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "ember-make-model: %s needs a value\n", arg.c_str());
      usage(stderr);
      return 2;
    }
    const std::string value = argv[++i];
    if (arg == "--arch") {
      if (value != "llama" && value != "gemma2" && value != "granite" && value != "olmo2" && value != "phi3" &&
          value != "qwen3moe") {
        std::fprintf(stderr, "ember-make-model: --arch must be llama, gemma2, granite, olmo2, phi3 or qwen3moe\n");
        return 2;
      }
      arch = value;
    } else if (arg == "--preset") {
      preset = value;
      preset_given = true;
    } else if (arg == "--type") {
      type_name = value;
      have_type = true;
    } else if (arg == "-o" || arg == "--output") {
      output = value;
    } else if (arg == "--n-embd") {
      n_embd = to_int(arg, value);
    } else if (arg == "--n-ff") {
      n_ff = to_int(arg, value);
    } else if (arg == "--n-layer") {
      n_layer = to_int(arg, value);
    } else if (arg == "--n-head") {
      n_head = to_int(arg, value);
    } else if (arg == "--n-head-kv") {
      n_head_kv = to_int(arg, value);
    } else if (arg == "--n-vocab") {
      n_vocab = to_int(arg, value);
    } else if (arg == "--n-ctx") {
      n_ctx = to_int(arg, value);
    } else if (arg == "--head-dim") {
      head_dim = to_int(arg, value);
    } else if (arg == "--n-expert") {
      n_expert = to_int(arg, value);
    } else if (arg == "--n-expert-used") {
      n_expert_used = to_int(arg, value);
    } else if (arg == "--n-ff-exp") {
      n_ff_exp = to_int(arg, value);
    } else if (arg == "--seed") {
      spec.seed = uint32_t(to_int(arg, value));
    } else {
      std::fprintf(stderr, "ember-make-model: unknown option %s\n", arg.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (arch != "llama") {
    if (preset_given || !type_name.empty()) {
      // --arch writes the fixed small F32 test model; a shape or type would be ignored.
      std::fprintf(stderr,
                   "ember-make-model: --arch %s writes the small F32 test model and takes no --preset or --type "
                   "(a large Qwen3-MoE file: --preset qwen3-30b-a3b without --arch)\n",
                   arch.c_str());
      return 2;
    }
    if (output.empty()) {
      usage(stderr);
      return 2;
    }
    try {
      write_arch_test_model(arch, spec.seed, output);
      std::fprintf(stderr, "wrote %s (%s test model, F32)\n", output.c_str(), arch.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ember-make-model: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  const auto shape = llama_preset(preset);
  if (!shape) {
    std::fprintf(stderr, "ember-make-model: unknown preset '%s' (tinyllama-1.1b, tiny, qwen3-30b-a3b)\n", preset.c_str());
    return 2;
  }
  spec.shape = *shape;
  if (n_embd) spec.shape.n_embd = n_embd;
  if (n_ff) spec.shape.n_ff = n_ff;
  if (n_layer) spec.shape.n_layer = int(n_layer);
  if (n_head) spec.shape.n_head = int(n_head);
  if (n_head_kv) spec.shape.n_head_kv = int(n_head_kv);
  if (n_vocab) spec.shape.n_vocab = n_vocab;
  if (n_ctx) spec.shape.n_ctx = n_ctx;
  if (head_dim) spec.shape.head_dim = head_dim;
  if (n_expert) spec.shape.n_expert = int(n_expert);
  if (n_expert_used) spec.shape.n_expert_used = int(n_expert_used);
  if (n_ff_exp) spec.shape.n_ff_exp = n_ff_exp;
  const auto type = file_type_from_name(type_name);
  if (!have_type || !type || output.empty()) {
    if (have_type && !type) std::fprintf(stderr, "ember-make-model: unknown type '%s'\n", type_name.c_str());
    usage(stderr);
    return 2;
  }
  spec.type = *type;
  spec.name = preset + "-random-" + std::string(file_type_name(*type));

  try {
    const auto t0 = std::chrono::steady_clock::now();
    write_llama_model(spec, output);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "wrote %s (%s, %s) in %.1f s\n", output.c_str(), preset.c_str(),
                 std::string(file_type_name(*type)).c_str(), seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember-make-model: %s\n", e.what());
    return 1;
  }
  return 0;
}
