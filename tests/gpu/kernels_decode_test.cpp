// Decoding with a KV cache on the host: the cache writes place each kv head's positions back to
// back, a decode step's attention is the fused forward's row for that position (the same blocks
// and online softmax): to the bit with the forward's rows computed alone, within fp32 rounding
// (kDecodeTolerance) of its blocks of 64 rows, whose products OpenBLAS rounds unlike one row's;
// and the rotary and learned position embeddings of a token at a start position are that row's to
// the bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/host/kernels/embedding.h"
#include "gpu/host/kernels/flash_attention.h"
#include "gpu/host/kernels/kv_cache.h"
#include "gpu/host/kernels/rope.h"

namespace strata::gpu::host::kernels {
namespace {

using i64 = std::int64_t;

std::vector<float> random_values(i64 count, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> values(static_cast<std::size_t>(count));
  for (float& value : values)
    value = uniform(generator);
  return values;
}

// Two sequences of 150 positions (past two blocks of 64), 4 query heads over 2 kv heads of 16.
constexpr i64 kBatch = 2, kSeq = 150, kHeads = 4, kKvHeads = 2, kHeadDim = 16;
constexpr i64 kStride = (kHeads + 2 * kKvHeads) * kHeadDim;
// Of the largest output value: a few fp32 ulps of sums of 150 terms.
constexpr float kDecodeTolerance = 1e-6f;

// The largest difference between `count` values of a and b, over b's largest magnitude.
float relative_difference(const float* a, const float* b, i64 count) {
  float difference = 0.0f, largest = 0.0f;
  for (i64 i = 0; i < count; ++i) {
    difference = std::max(difference, std::abs(a[i] - b[i]));
    largest = std::max(largest, std::abs(b[i]));
  }
  return difference / largest;
}

void write_cache(std::vector<float>& k_cache, std::vector<float>& v_cache,
                 const std::vector<float>& qkv, const std::vector<std::int32_t>& start,
                 i64 tokens) {
  kv_cache_write(reinterpret_cast<std::byte*>(k_cache.data()),
                 reinterpret_cast<std::byte*>(v_cache.data()),
                 reinterpret_cast<const std::byte*>(qkv.data()), start.data(), kBatch, tokens,
                 kHeads, kKvHeads, kHeadDim, kSeq, sizeof(float));
}

TEST(KvCache, EachKvHeadsPositionsLieBackToBackAtTheirStart) {
  const std::vector<float> qkv = random_values(kBatch * 3 * kStride, 1);
  std::vector<float> k_cache(kBatch * kKvHeads * kSeq * kHeadDim, 0.0f), v_cache = k_cache;
  write_cache(k_cache, v_cache, qkv, {5, 40}, 3);
  for (i64 b = 0; b < kBatch; ++b) {
    for (i64 t = 0; t < 3; ++t) {
      for (i64 g = 0; g < kKvHeads; ++g) {
        const float* row = qkv.data() + (b * 3 + t) * kStride;
        const i64 at = ((b * kKvHeads + g) * kSeq + (b == 0 ? 5 : 40) + t) * kHeadDim;
        EXPECT_EQ(0, std::memcmp(k_cache.data() + at, row + (kHeads + g) * kHeadDim, 64));
        EXPECT_EQ(0,
                  std::memcmp(v_cache.data() + at, row + (kHeads + kKvHeads + g) * kHeadDim, 64));
      }
    }
  }
  EXPECT_EQ(k_cache[4 * kHeadDim], 0.0f);  // before sequence 0's start: untouched
}

// Whole sequences' qkv, the fused forward's output over them (its query blocks at once, and each
// row alone), and the cache filled from them.
struct Sequences {
  explicit Sequences(unsigned seed) : qkv(random_values(kBatch * kSeq * kStride, seed)) {
    std::vector<float> lse(kBatch * kHeads * kSeq);
    flash_attention_forward(out.data(), lse.data(), qkv.data(), kBatch, kSeq, kHeads, kKvHeads,
                            kHeadDim);
    flash_attention_forward(out_alone.data(), lse.data(), qkv.data(), kBatch, kSeq, kHeads,
                            kKvHeads, kHeadDim, /*rows_alone=*/true);
    write_cache(k_cache, v_cache, qkv, {0, 0}, kSeq);
  }

  // The decode step of each sequence's token at position length[b] - 1, against the cache;
  // returns the largest difference of a sequence's output from `forward`'s row there.
  float step_difference(const std::vector<std::int32_t>& length,
                        const std::vector<float>& forward) const {
    std::vector<float> step_qkv(kBatch * kStride), step_out(kBatch * kHeads * kHeadDim);
    for (i64 b = 0; b < kBatch; ++b)
      std::memcpy(step_qkv.data() + b * kStride, qkv.data() + (b * kSeq + length[b] - 1) * kStride,
                  kStride * sizeof(float));
    decode_attention(step_out.data(), step_qkv.data(), k_cache.data(), v_cache.data(),
                     length.data(), kBatch, kHeads, kKvHeads, kHeadDim, kSeq);
    float largest = 0.0f;
    for (i64 b = 0; b < kBatch; ++b) {
      largest = std::max(largest, relative_difference(step_out.data() + b * kHeads * kHeadDim,
                                                      forward.data() + (b * kSeq + length[b] - 1) *
                                                                           kHeads * kHeadDim,
                                                      kHeads * kHeadDim));
    }
    return largest;
  }

  std::vector<float> qkv;
  std::vector<float> out = std::vector<float>(kBatch * kSeq * kHeads * kHeadDim);
  std::vector<float> out_alone = out;
  std::vector<float> k_cache = std::vector<float>(kBatch * kKvHeads * kSeq * kHeadDim, 0.0f);
  std::vector<float> v_cache = k_cache;
};

// The cache filled from a whole sequence's qkv; for every position p, the decode step's query is
// row p's and the cache holds positions [0, p]: the output is the forward's row p.
TEST(DecodeAttention, EachStepIsTheFusedForwardsRow) {
  const Sequences sequences(2);
  for (i64 p = 0; p < kSeq; ++p) {
    const std::vector<std::int32_t> length(kBatch, static_cast<std::int32_t>(p + 1));
    ASSERT_EQ(sequences.step_difference(length, sequences.out_alone), 0.0f) << "position " << p;
    ASSERT_LE(sequences.step_difference(length, sequences.out), kDecodeTolerance)
        << "position " << p;
  }
}

// Sequences at different lengths in one step: each attends over its own positions only.
TEST(DecodeAttention, SequencesOfOneStepStandAtTheirOwnLengths) {
  const Sequences sequences(3);
  EXPECT_EQ(sequences.step_difference({70, 129}, sequences.out_alone), 0.0f);
  EXPECT_LE(sequences.step_difference({70, 129}, sequences.out), kDecodeTolerance);
}

TEST(PositionsAtAStart, ATokenAtItsStartIsTheWholeSequencesRow) {
  constexpr i64 seq = 9, heads = 3, head_dim = 8, stride = 32;
  const std::vector<float> inv_freq = {1.0f, 0.1f, 0.01f, 0.001f};
  const std::vector<float> whole_input = random_values(2 * seq * stride, 4);
  std::vector<float> whole = whole_input;
  rope_forward(whole.data(), inv_freq.data(), 2, seq, heads, head_dim, stride);
  const std::vector<std::int32_t> start = {3, 8};
  std::vector<float> step(2 * stride);
  for (i64 b = 0; b < 2; ++b)
    std::memcpy(step.data() + b * stride, whole_input.data() + (b * seq + start[b]) * stride,
                stride * sizeof(float));
  rope_forward(step.data(), inv_freq.data(), 2, 1, heads, head_dim, stride, start.data());
  for (i64 b = 0; b < 2; ++b)
    EXPECT_EQ(0, std::memcmp(step.data() + b * stride, whole.data() + (b * seq + start[b]) * stride,
                             heads * head_dim * sizeof(float)));

  constexpr i64 channels = 6, vocab = 5;
  const std::vector<float> wte = random_values(vocab * channels, 5);
  const std::vector<float> wpe = random_values(seq * channels, 6);
  const std::vector<std::int32_t> tokens = {1, 4, 0, 2, 3, 3, 1, 0, 4, 2, 2, 1, 0, 3, 4, 4, 0, 1};
  std::vector<float> embedded(2 * seq * channels);
  embedding_forward(embedded.data(), tokens.data(), wte.data(), wpe.data(), 2, seq, channels,
                    vocab);
  const std::vector<std::int32_t> step_tokens = {tokens[3], tokens[seq + 8]};
  std::vector<float> step_embedded(2 * channels);
  embedding_forward(step_embedded.data(), step_tokens.data(), wte.data(), wpe.data(), 2, 1,
                    channels, vocab, start.data());
  for (i64 b = 0; b < 2; ++b)
    EXPECT_EQ(0, std::memcmp(step_embedded.data() + b * channels,
                             embedded.data() + (b * seq + start[b]) * channels,
                             channels * sizeof(float)));
}

}  // namespace
}  // namespace strata::gpu::host::kernels
