// Converting a Hugging Face checkpoint directory to GGUF (`ember convert`, and the input
// side of `ember quantize` when IN is a directory).
//
// The checkpoint is config.json, the weights in *.safetensors (one file, or shards named
// by model.safetensors.index.json) and the tokenizer files. ember reads them with its own
// parsers (no Python) and writes what llama.cpp's convert_hf_to_gguf.py writes for the
// same checkpoint: the same tensor names, shapes and types, the same values (rows of q
// and k permuted for Llama's adjacent-pair rope, Gemma's norms stored as 1 + w, the
// embedding cut to the vocabulary) and the same architecture and tokenizer metadata.
// tests/convert checks that against the converter's own output. docs/convert.md lists
// what is supported: the text models of every architecture ember runs (Llama and
// Mistral, Granite, Gemma 2 and 3, Qwen 2, 3 and 3 MoE, OLMo 2, Phi-3) with a SentencePiece
// tokenizer.model or a byte-level BPE tokenizer.json.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ember/export.hpp"

namespace ember {

// The type of the written matrices (1-D tensors and norms are always F32, as llama.cpp writes them).
enum class ConvertType {
  automatic,   // the source's type when every matrix has the same one of F32/F16/BF16, else F32: never lossy
  f32, f16, bf16,
};

struct ConvertProgress {
  int64_t tensor = 0;       // tensors written so far (1-based after each)
  int64_t tensors = 0;      // of this many
  std::string_view name;    // the GGUF name of the tensor just converted
};

struct ConvertOptions {
  ConvertType type = ConvertType::automatic;
  // Called after each tensor, from the calling thread.
  std::function<void(const ConvertProgress&)> progress;
};

struct ConvertReport {
  std::string hf_architecture;    // config.json "architectures"[0]
  std::string architecture;       // general.architecture written
  ConvertType type = ConvertType::f32;   // the matrices' type chosen
  int64_t tensors = 0;            // tensors written
  int64_t skipped = 0;            // source tensors not needed (rotary caches, vision tower)
  int64_t n_vocab = 0;            // tokens written
  uint64_t file_bytes = 0;        // size of the written file
  std::vector<std::string> warnings;
};

EMBER_API const char* to_string(ConvertType type) noexcept;

// True when `path` is a directory holding a config.json (what convert_hf_checkpoint reads).
EMBER_API bool is_hf_checkpoint(const std::string& path);

// Reads the checkpoint directory `dir` and writes the GGUF `output` (through a temporary
// file in its folder, renamed when complete; nothing is left on error). Throws
// ember::Error: io (a file cannot be read, the output cannot be written), malformed_file
// (bad JSON, safetensors or tokenizer.model; tensors that disagree with config.json),
// unsupported (an architecture, tensor, tensor dtype or tokenizer kind not converted;
// the message lists what is).
EMBER_API ConvertReport convert_hf_checkpoint(const std::string& dir, const std::string& output,
                                              const ConvertOptions& options = {});

}  // namespace ember
