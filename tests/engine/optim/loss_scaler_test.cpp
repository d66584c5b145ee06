// Loss-scale sequences of DeepSpeed's DynamicLossScaler.update_scale
// (deepspeed/runtime/fp16/loss_scaler.py). The expected (scale, hysteresis) after each step is
// what the Python class gives for the same overflow pattern, e.g.
//   s = DynamicLossScaler(init_scale=16., scale_window=4, min_scale=1., delayed_shift=2,
//                         consecutive_hysteresis=False)
//   for o in "OGOOGGGGGGOO": s.update_scale(o == "O"); print(s.cur_scale, s.cur_hysteresis)
#include "engine/optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/config/config_error.h"

namespace strata::engine::optim {
namespace {

Fp16Config dynamic_fp16(std::int64_t power, std::int64_t window, double min_scale,
                        std::int64_t hysteresis, bool consecutive) {
  Fp16Config c;
  c.enabled = true;
  c.initial_scale_power = power;
  c.loss_scale_window = window;
  c.min_loss_scale = min_scale;
  c.hysteresis = hysteresis;
  c.consecutive_hysteresis = consecutive;
  return c;
}

struct After {
  double scale;
  std::int64_t hysteresis_left;
};

// Feeds the pattern ('O' overflow, 'G' good) and checks the state after each update.
void expect_sequence(LossScaler& scaler, const std::string& pattern,
                     const std::vector<After>& expected) {
  ASSERT_EQ(pattern.size(), expected.size());
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const bool overflow = pattern[i] == 'O';
    EXPECT_EQ(scaler.update(overflow), overflow) << "step " << i;
    EXPECT_EQ(scaler.scale(), expected[i].scale) << "step " << i << " of " << pattern;
    EXPECT_EQ(scaler.state().hysteresis_left, expected[i].hysteresis_left)
        << "step " << i << " of " << pattern;
  }
}

TEST(LossScaler, DefaultsAreDeepSpeeds) {
  Fp16Config fp16;
  fp16.enabled = true;
  LossScaler scaler(fp16);
  EXPECT_TRUE(scaler.dynamic());
  EXPECT_EQ(scaler.scale(), 65536.0);  // 2**16
  EXPECT_EQ(scaler.state().hysteresis_left, 2);
  EXPECT_EQ(scaler.state().last_overflow_iteration, -1);
}

// stable_interval = cur_iter - last_overflow_iter - 1 starts at 0, so the first doubling comes
// on the 5th good step (cur_iter 4) and then every 4.
TEST(LossScaler, DoublesEveryWindowWithoutOverflow) {
  LossScaler scaler(dynamic_fp16(4, 4, 1, 2, false));
  expect_sequence(scaler, "GGGGGGGGGGGGG",
                  {{16, 2},
                   {16, 2},
                   {16, 2},
                   {16, 2},
                   {32, 2},
                   {32, 2},
                   {32, 2},
                   {32, 2},
                   {64, 2},
                   {64, 2},
                   {64, 2},
                   {64, 2},
                   {128, 2}});
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

// Hysteresis 2: the first overflow only spends hysteresis; it is refilled only when the scale
// doubles (consecutive_hysteresis off), so later overflows halve at once.
TEST(LossScaler, HysteresisTwoWindowFour) {
  LossScaler scaler(dynamic_fp16(4, 4, 1, 2, false));
  expect_sequence(scaler, "OGOOGGGGGGOO",
                  {{16, 1},
                   {16, 1},
                   {8, 1},
                   {4, 1},
                   {4, 1},
                   {4, 1},
                   {4, 1},
                   {4, 1},
                   {8, 2},
                   {8, 2},
                   {8, 1},
                   {4, 1}});
  EXPECT_EQ(scaler.skipped_steps(), 5);
  EXPECT_EQ(scaler.state().iteration, 12);
  EXPECT_EQ(scaler.state().last_overflow_iteration, 11);
}

// consecutive_hysteresis: every good step refills the hysteresis.
TEST(LossScaler, ConsecutiveHysteresis) {
  LossScaler scaler(dynamic_fp16(4, 4, 1, 2, true));
  expect_sequence(scaler, "OGOOGGGGG",
                  {{16, 1}, {16, 2}, {16, 1}, {8, 1}, {8, 2}, {8, 2}, {8, 2}, {8, 2}, {16, 2}});
}

TEST(LossScaler, HysteresisOneHalvesOnEveryOverflow) {
  LossScaler scaler(dynamic_fp16(2, 4, 1, 1, false));
  expect_sequence(scaler, "OGGGGGO", {{2, 1}, {2, 1}, {2, 1}, {2, 1}, {2, 1}, {4, 1}, {2, 1}});
}

// The scale never goes under min_loss_scale; an overflow that would lower it from there stops
// the run, as DeepSpeed raises "Current loss scale already at minimum".
TEST(LossScaler, StopsAtTheMinimum) {
  LossScaler scaler(dynamic_fp16(2, 4, 1, 2, false));
  expect_sequence(scaler, "OOO", {{4, 1}, {2, 1}, {1, 1}});
  try {
    (void)scaler.update(true);
    FAIL() << "expected an error at the minimum scale";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("fp16.min_loss_scale = 1"), std::string::npos)
        << error.what();
    EXPECT_NE(error.fix().find("bf16"), std::string::npos);
    EXPECT_EQ(error.exit_status(), 1);
  }
  EXPECT_EQ(scaler.scale(), 1);
  EXPECT_EQ(scaler.skipped_steps(), 3);
}

TEST(LossScaler, HalvingIsFlooredAtTheMinimum) {
  // max(3 / 2, 1.5) = 1.5, then 1.5 == min_scale refuses.
  Fp16Config c = dynamic_fp16(0, 1000, 1.5, 1, false);
  LossScaler scaler(c);
  LossScalerState start = scaler.state();
  start.scale = 3;
  scaler.restore(start);
  expect_sequence(scaler, "O", {{1.5, 1}});
  EXPECT_THROW((void)scaler.update(true), UserError);
}

TEST(LossScaler, StaticScaleNeverChanges) {
  Fp16Config c;
  c.enabled = true;
  c.loss_scale = 128;
  LossScaler scaler(c);
  EXPECT_FALSE(scaler.dynamic());
  for (int i = 0; i < 3000; ++i) {
    const bool overflow = i % 7 == 0;
    EXPECT_EQ(scaler.update(overflow), overflow);
    ASSERT_EQ(scaler.scale(), 128);
  }
  EXPECT_EQ(scaler.skipped_steps(), 429);  // len(range(0, 3000, 7))
}

TEST(LossScaler, Bf16AndFp32UseScaleOne) {
  Fp16Config off;  // enabled false, even with dynamic settings present
  off.loss_scale = 0;
  LossScaler scaler(off);
  EXPECT_FALSE(scaler.dynamic());
  EXPECT_EQ(scaler.scale(), 1);
  EXPECT_TRUE(scaler.update(true));  // an overflow still skips the step
  EXPECT_EQ(scaler.scale(), 1);
}

TEST(LossScaler, RestoresACheckpointedState) {
  LossScaler first(dynamic_fp16(4, 4, 1, 2, false));
  for (char c : std::string("OGOOGG"))
    (void)first.update(c == 'O');
  LossScaler second(dynamic_fp16(4, 4, 1, 2, false));
  second.restore(first.state());
  for (char c : std::string("GGGGOOG")) {
    EXPECT_EQ(first.update(c == 'O'), second.update(c == 'O'));
    EXPECT_EQ(first.scale(), second.scale());
    EXPECT_EQ(first.state().hysteresis_left, second.state().hysteresis_left);
  }
  LossScalerState bad = first.state();
  bad.hysteresis_left = 3;  // above fp16.hysteresis
  EXPECT_THROW(second.restore(bad), UserError);
  bad = first.state();
  bad.scale = std::numeric_limits<double>::infinity();
  EXPECT_THROW(second.restore(bad), UserError);
}

void expect_refused(const Fp16Config& c, const std::string& key) {
  try {
    LossScaler scaler(c);
    ADD_FAILURE() << "accepted; expected an error naming " << key;
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find(key), std::string::npos) << error.what();
    EXPECT_EQ(error.exit_status(), 2);
  }
}

TEST(LossScaler, RefusesWhatDeepSpeedRefuses) {
  Fp16Config c = dynamic_fp16(16, 0, 1, 2, false);
  expect_refused(c, "fp16.loss_scale_window");
  c = dynamic_fp16(16, 1000, 1, 0, false);
  expect_refused(c, "fp16.hysteresis");
  c = dynamic_fp16(16, 1000, 0, 2, false);
  expect_refused(c, "fp16.min_loss_scale");
  c = dynamic_fp16(5000, 1000, 1, 2, false);
  expect_refused(c, "fp16.initial_scale_power");
  c = dynamic_fp16(16, 1000, 1, 2, false);
  c.loss_scale = -4;
  expect_refused(c, "fp16.loss_scale");
}

}  // namespace
}  // namespace strata::engine::optim
