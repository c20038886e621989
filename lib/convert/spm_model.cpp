// SentencePiece model reader (spm_model.hpp): a minimal protocol-buffer wire decoder.
#include "convert/spm_model.hpp"

#include <cstring>

#include "common/fail.hpp"
#include "common/mapped_file.hpp"

namespace ember::convert {

namespace {

class Wire {
 public:
  Wire(const uint8_t* p, size_t n, size_t base, const std::string& what) : p_(p), n_(n), base_(base), what_(what) {}
  bool done() const { return pos_ >= n_; }

  [[noreturn]] void error(std::string_view why) const {
    fail(ErrorCode::malformed_file, "'{}': not a SentencePiece model (byte {}: {})", what_, base_ + pos_, why);
  }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= n_) error("truncated varint");
      const uint8_t b = p_[pos_++];
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    error("varint longer than 10 bytes");
  }

  // A length-delimited field's bytes.
  std::pair<const uint8_t*, size_t> bytes() {
    const uint64_t len = varint();
    if (len > n_ - pos_) error("length runs past the end");
    const uint8_t* at = p_ + pos_;
    pos_ += size_t(len);
    return {at, size_t(len)};
  }

  uint32_t fixed32() {
    if (n_ - pos_ < 4) error("truncated fixed32");
    uint32_t v = uint32_t(p_[pos_]) | uint32_t(p_[pos_ + 1]) << 8 | uint32_t(p_[pos_ + 2]) << 16 |
                 uint32_t(p_[pos_ + 3]) << 24;
    pos_ += 4;
    return v;
  }

  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case 0: varint(); return;
      case 1:
        if (n_ - pos_ < 8) error("truncated fixed64");
        pos_ += 8;
        return;
      case 2: bytes(); return;
      case 5: fixed32(); return;
      default: error("unsupported wire type");
    }
  }

  size_t offset() const { return base_ + pos_; }

 private:
  const uint8_t* p_;
  size_t n_, base_, pos_ = 0;
  const std::string& what_;
};

SpmPiece read_piece(const uint8_t* p, size_t n, size_t base, const std::string& what) {
  Wire w(p, n, base, what);
  SpmPiece piece;
  while (!w.done()) {
    const uint64_t key = w.varint();
    const uint32_t field = uint32_t(key >> 3), type = uint32_t(key & 7);
    if (field == 1 && type == 2) {
      const auto [at, len] = w.bytes();
      piece.piece.assign(reinterpret_cast<const char*>(at), len);
    } else if (field == 2 && type == 5) {
      const uint32_t bits = w.fixed32();
      std::memcpy(&piece.score, &bits, 4);
    } else if (field == 3 && type == 0) {
      const uint64_t t = w.varint();
      if (t < 1 || t > 6) w.error("unknown piece type");
      piece.type = int32_t(t);
    } else {
      w.skip(type);
    }
  }
  return piece;
}

}  // namespace

std::vector<SpmPiece> read_spm_model(const std::string& path) {
  const MappedFile map(path);
  return parse_spm_model(map.bytes(), path);
}

std::vector<SpmPiece> parse_spm_model(std::span<const std::byte> bytes, const std::string& what) {
  const std::string& path = what;
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  Wire w(p, bytes.size(), 0, path);
  std::vector<SpmPiece> pieces;
  while (!w.done()) {
    const uint64_t key = w.varint();
    const uint32_t field = uint32_t(key >> 3), type = uint32_t(key & 7);
    if (field == 1 && type == 2) {
      const size_t base = w.offset();
      const auto [at, len] = w.bytes();
      pieces.push_back(read_piece(at, len, base, path));
    } else {
      w.skip(type);
    }
  }
  if (pieces.empty()) fail(ErrorCode::malformed_file, "'{}': a SentencePiece model without pieces", path);
  return pieces;
}

}  // namespace ember::convert
