#!/usr/bin/env python3
"""Independent re-implementation of ember's sampling chain, used to produce the
pinned tokens of test_sampler.cpp ("sampling is reproducible across runs and
platforms"). Plain Python integers and doubles; run it with no arguments.

Generator: SplitMix64 seeding of xoshiro256**, uniform = (next >> 11) * 2^-53.
Weights: ember's exp_nonpositive (lib/sampling/exp.cpp) emulated exactly: each
float32 operation is done in double and rounded to float32, which gives the
correctly rounded float32 result for + and *.
Chain: top-k by (logit desc, id asc), top-p with running sum >= p * total at
temperature 1, then the inverse-CDF draw over exp((logit - max) * (1 / T)).
"""
import struct

MASK = (1 << 64) - 1


def f32(x):
    """Rounds a Python float to the nearest float32, as the C++ literals are."""
    return struct.unpack("f", struct.pack("f", x))[0]


def exp_nonpositive(x):
    """exp(x) for x <= 0 with ember's float32 operations (0 below -80)."""
    x = f32(x)
    if x < -80.0:
        return 0.0
    log2e, ln2_high, ln2_low, shift = f32(1.44269504088896341), 0.693359375, f32(-2.12194440e-4), 12582912.0
    k = f32(f32(f32(x * log2e) + shift) - shift)
    r = f32(f32(x - f32(k * ln2_high)) - f32(k * ln2_low))
    poly = f32(1.0 / 5040.0)
    for c in (f32(1.0 / 720.0), f32(1.0 / 120.0), f32(1.0 / 24.0), f32(1.0 / 6.0), 0.5, 1.0, 1.0):
        poly = f32(f32(poly * r) + c)
    return f32(poly * 2.0 ** int(k))


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK


class Generator:
    def __init__(self, seed):
        self.state = []
        counter = seed
        for _ in range(4):
            counter = (counter + 0x9E3779B97F4A7C15) & MASK
            z = counter
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
            self.state.append(z ^ (z >> 31))

    def next(self):
        s = self.state
        result = (rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        shifted = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= shifted
        s[3] = rotl(s[3], 45)
        return result

    def uniform(self):
        return (self.next() >> 11) / 2.0**53


def sample_sequence(logits, seed, temperature, top_k, top_p, count):
    logits = [f32(v) for v in logits]
    temperature = f32(temperature)
    top_p = f32(top_p)
    ranked = sorted(range(len(logits)), key=lambda i: (-logits[i], i))[:top_k]
    best = logits[ranked[0]]
    weights = [exp_nonpositive(logits[i] - best) for i in ranked]
    total = sum(weights)
    running = 0.0
    kept = ranked
    for n, weight in enumerate(weights):
        running += weight
        if running >= top_p * total:
            kept = ranked[: n + 1]
            break
    generator = Generator(seed)
    tokens = []
    for _ in range(count):
        draw_weights = [exp_nonpositive((logits[i] - best) * (1.0 / temperature)) for i in kept]
        target = generator.uniform() * sum(draw_weights)
        running = 0.0
        for token, weight in zip(kept, draw_weights):
            running += weight
            if target < running:
                tokens.append(token)
                break
    return kept, tokens


if __name__ == "__main__":
    kept, tokens = sample_sequence(
        [0.5, 2.25, -1.0, 1.75, 3.0, 0.0, 2.5, -0.5, 1.0, 2.0, -2.0, 1.5],
        seed=7, temperature=0.9, top_k=6, top_p=0.9, count=24)
    print("kept:", kept)
    print("tokens:", ", ".join(str(t) for t in tokens))
