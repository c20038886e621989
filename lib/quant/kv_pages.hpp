// Per-channel key pages (KIVI-style INT4 keys; issue 18, point 5): the reference
// arithmetic of a key-page format that quantizes a whole page of cache rows at once,
// one f16 minimum and one f16 step per channel (a column of the page) instead of per
// group of a row. This is the format layer only: no KV storage type uses it yet
// (docs/kv-cache.md, "Per-channel key pages: the format, and the cache it needs").
//
// Why per channel: keys carry a few large channels (rope pairs of 10-25 times the
// typical size) whose value turns slowly with the position. Within one row they set
// the range of their group; down a page of consecutive tokens each channel keeps a
// small range of its own. Simulated on Gemma 3 270M (docs/kv-cache.md), pages of 16
// tokens with the open page kept in full precision raised perplexity by 0.44-0.76 % over
// F16 on four texts, against 1.56-5.59 % for today's INT4 g32 rows.
//
// A page of P rows (the cache's page_tokens) of W values (n_head_kv * head_dim, even):
//   bytes [0, 2W)                  m[c]   f16 minimum of channel c
//   bytes [2W, 4W)                 d[c]   f16 step of channel c (>= 0)
//   bytes [4W + j W/2, 4W + (j+1) W/2)   row j's codes: channel c in byte c / 2, the low
//                                  nibble for even c, the high one for odd c
//   x[j][c] = D[c] * q[j][c] + M[c], q in [0, 15], D = f32(d), M = f32(m)
// so a page is 4W + P W / 2 bytes, 0.5 + 4 / P bytes per value (0.75 at P = 16, 0.625
// at 32); multi-byte fields are little-endian IEEE binary16 bits, read at any address.
//
// Quantizer, per channel over the page's first n rows (n <= P; the codes of rows n..P-1
// are zero): lo, hi = min, max of the n values; m = f16 of lo rounded toward -inf; d =
// f16 of (hi - M) / 15 rounded toward +inf (so all n values lie in [M, M + 15 D]); q =
// clamp(round_half_even((x - M) / D), 0, 15); a constant channel (hi == M) stores d = 0
// and q = 0. Error per value |x - x'| <= D / 2 + tiny: a sixtieth of the channel's range
// over the page. Values must lie within the f16 range.
//
// Scores: for a query q over the channels [c0, c0 + n) of one head,
//   q . x[j] = sum_c (q_c D_c) q[j][c] + sum_c q_c M_c,
// so a kernel scales the query by the page's steps once and takes one dot product with
// the minimums per page, then 4-bit dot products per row (page_scores below is the
// reference, in that order).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ember::quant::kv {

// Bytes of one page of `page_tokens` rows of `width` values.
constexpr size_t key_page_bytes(int page_tokens, int64_t width) {
  return size_t(width) * 4 + size_t(page_tokens) * size_t(width) / 2;
}

// Quantizes rows [0, n_rows) of src ([n_rows][width] f32) into `page`
// (key_page_bytes(page_tokens, width) bytes); 0 < n_rows <= page_tokens, width even.
void quantize_key_page(const float* src, int n_rows, int page_tokens, int64_t width, void* page);
// Decodes row j (0 <= j < page_tokens) of a page into dst[width].
void dequantize_key_page_row(const void* page, int j, int64_t width, float* dst);
// Scores of query q[n] against rows [0, n_rows) of a page over the channels [c0, c0 + n)
// (one head): s[j] = scale * (sum_c (q_c D_c) code[j][c] + sum_c q_c M_c), summed in f32
// in channel order, the two sums apart as written. c0 and n even.
void key_page_scores(const float* q, int64_t c0, int64_t n, const void* page, int64_t width, int n_rows,
                     float scale, float* s);

}  // namespace ember::quant::kv
