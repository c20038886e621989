// Reading a SentencePiece model file (tokenizer.model): the pieces of its ModelProto.
//
// The file is a protocol-buffer message (sentencepiece_model.proto): field 1 repeats
// SentencePiece {1: piece (string), 2: score (float), 3: type (enum, default NORMAL)};
// the trainer and normalizer specs (fields 2 and 3) are skipped here, as llama.cpp's
// converter takes nothing from them. Types: 1 normal, 2 unknown, 3 control,
// 4 user-defined, 5 unused, 6 byte — the numbers GGUF's token types use.
// Malformed wire data throws ember::Error(ErrorCode::malformed_file) naming the byte offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ember::convert {

struct SpmPiece {
  std::string piece;
  float score = 0;
  int32_t type = 1;
};

std::vector<SpmPiece> read_spm_model(const std::string& path);
// The same from bytes in memory (`what` names them in messages). For tests and fuzzing.
std::vector<SpmPiece> parse_spm_model(std::span<const std::byte> bytes, const std::string& what);

}  // namespace ember::convert
