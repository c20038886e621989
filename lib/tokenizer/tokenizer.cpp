// Tokenizer: construction from GGUF, encode, and the vocabulary accessors.
#include "tokenizer/tokenizer.hpp"

#include <algorithm>
#include <limits>

#include "common/fail.hpp"
#include "gguf/gguf.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/spm.hpp"
#include "tokenizer/tokenizer_impl.hpp"

namespace ember::tok {

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::from_gguf(const gguf::File& file, const LogCallback& log) {
  auto impl = std::make_shared<Impl>();
  impl->vocab = load_vocab(file, log);
  impl->specials = SpecialTokenMatcher(impl->vocab);
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  // Offsets inside the encoder are 32-bit.
  require(text.size() < std::numeric_limits<uint32_t>::max(), "tokenizer: text of {} bytes is too long to encode",
          text.size());
  const Vocab& v = impl_->vocab;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && v.add_bos) out.push_back(v.bos);

  std::vector<Fragment> fragments;
  impl_->specials.partition(text, parse_special, fragments);

  // SentencePiece adds the dummy-prefix space at the start of the text and
  // after every special token.
  bool after_special = true;
  for (const Fragment& f : fragments) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    const std::string_view piece = text.substr(f.start, f.size);
    if (v.model == TokenizerModel::spm) {
      spm_encode(v, piece, v.add_space_prefix && after_special, out);
    } else {
      bpe_encode(v, piece, out);
    }
    after_special = false;
  }

  if (add_bos && v.add_eos) out.push_back(v.eos);
  return out;
}

std::string_view Tokenizer::token_text(int32_t id) const {
  impl_->check_id(id);
  return impl_->vocab.text(id);
}

TokenType Tokenizer::token_type(int32_t id) const {
  impl_->check_id(id);
  return impl_->vocab.types[id];
}

float Tokenizer::token_score(int32_t id) const {
  impl_->check_id(id);
  return impl_->vocab.scores[id];
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const int32_t id = impl_->vocab.find(text);
  if (id == kNoToken) return std::nullopt;
  return id;
}

int32_t Tokenizer::n_vocab() const { return impl_->vocab.n_tokens(); }
int32_t Tokenizer::bos() const { return impl_->vocab.bos; }
int32_t Tokenizer::eos() const { return impl_->vocab.eos; }
int32_t Tokenizer::eot() const { return impl_->vocab.eot; }
int32_t Tokenizer::eom() const { return impl_->vocab.eom; }
int32_t Tokenizer::unk() const { return impl_->vocab.unk; }
int32_t Tokenizer::pad() const { return impl_->vocab.pad; }
bool Tokenizer::adds_bos() const { return impl_->vocab.add_bos; }
bool Tokenizer::adds_eos() const { return impl_->vocab.add_eos; }

bool Tokenizer::is_end_of_generation(int32_t id) const {
  const auto& ids = impl_->vocab.eog_ids;
  return std::binary_search(ids.begin(), ids.end(), id);
}

std::span<const int32_t> Tokenizer::end_of_generation_ids() const { return impl_->vocab.eog_ids; }

TokenizerModel Tokenizer::model() const { return impl_->vocab.model; }
PreTokenizer Tokenizer::pre_tokenizer() const { return impl_->vocab.pre; }

}  // namespace ember::tok
