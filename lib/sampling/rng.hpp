// The sampler's random generator: xoshiro256** seeded through SplitMix64.
//
// Both algorithms use only 64-bit integer shifts, xors, rotations and
// multiplications, so a seed gives the same stream on every compiler and CPU; the
// conversion to a double in [0, 1) is ours too (std::uniform_real_distribution is
// implementation-defined and would break cross-platform reproducibility).
//
//   SplitMix64: G. Steele, D. Lea, C. Flood, "Fast splittable pseudorandom number
//     generators", OOPSLA 2014. Used only to spread a 64-bit seed over the state.
//   xoshiro256** 1.0: D. Blackman, S. Vigna, "Scrambled linear pseudorandom number
//     generators", ACM TOMS 2021. Period 2^256 - 1; the state must not be all zero.
#pragma once

#include <array>
#include <cstdint>

namespace ember::sampling {

// Advances a SplitMix64 counter by the golden-ratio increment and returns the
// mixed value of the new counter.
inline uint64_t splitmix64_next(uint64_t& state) {
  state += 0x9e3779b97f4a7c15ull;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  using State = std::array<uint64_t, 4>;

  // The state is four consecutive SplitMix64 outputs from `seed`. They are distinct
  // (SplitMix64's mixer is a bijection of distinct counters), so never all zero.
  explicit Rng(uint64_t seed) {
    uint64_t counter = seed;
    for (uint64_t& word : state_) word = splitmix64_next(counter);
  }

  // A generator with the given raw state (for reference test vectors); a state of
  // all zeros is replaced by the seed-0 state, since xoshiro would stay at zero.
  static Rng from_state(const State& state) {
    Rng rng(0);
    if (state[0] | state[1] | state[2] | state[3]) rng.state_ = state;
    return rng;
  }

  // Next 64-bit output of xoshiro256**.
  uint64_t next() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t shifted = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= shifted;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // A double in [0, 1): the top 53 bits of next() times 2^-53. Every value is a
  // multiple of 2^-53 and all 2^53 of them are equally likely; conversion and
  // scaling are exact, so the result is the same everywhere.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  const State& state() const { return state_; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  State state_{};
};

}  // namespace ember::sampling
