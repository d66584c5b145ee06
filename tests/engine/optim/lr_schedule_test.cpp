// Values of DeepSpeed's schedules at chosen steps. Each literal is what the formula in
// deepspeed/runtime/lr_schedules.py (commit 22779f2c) gives in Python; the expression that
// produced it is in the comment beside it (W = max(2, warmup_num_steps), i =
// last_batch_iteration).
#include "engine/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/config_error.h"

namespace strata::engine::optim {
namespace {

SchedulerConfig warmup(SchedulerType type, double min_lr, double max_lr, std::int64_t steps,
                       WarmupType warmup_type) {
  SchedulerConfig s;
  s.type = type;
  s.warmup_min_lr = min_lr;
  s.warmup_max_lr = max_lr;
  s.warmup_num_steps = steps;
  s.warmup_type = warmup_type;
  return s;
}

SchedulerConfig one_cycle(std::int64_t first_stairs, std::int64_t second_stairs) {
  SchedulerConfig s;
  s.type = SchedulerType::one_cycle;
  s.cycle_min_lr = 0.001;
  s.cycle_max_lr = 0.01;
  s.cycle_first_step_size = 4;
  s.cycle_second_step_size = 6;
  s.cycle_first_stair_count = first_stairs;
  s.cycle_second_stair_count = second_stairs;
  s.cycle_min_mom = 0.8;
  s.cycle_max_mom = 0.9;
  return s;
}

TEST(LrSchedule, NoneIsTheOptimizerLr) {
  OptimizerConfig optimizer;
  optimizer.lr = 3e-4;
  LrSchedule schedule(SchedulerConfig{}, optimizer);
  for (std::int64_t step : {0, 1, 1000000})
    EXPECT_EQ(schedule.lr(step), 3e-4);
  EXPECT_FALSE(schedule.cycles_momentum());
  EXPECT_EQ(schedule.betas(7), optimizer.betas);
}

// The step counting: the first optimizer step runs at i = -1 (the value the constructor sets),
// and the schedule moves only with applied steps. With log warmup the first two steps both run
// at warmup_min_lr.
TEST(LrSchedule, FirstStepRunsAtIterationMinusOne) {
  LrSchedule schedule(warmup(SchedulerType::warmup_lr, 1e-4, 1e-2, 10, WarmupType::log), {});
  EXPECT_EQ(schedule.batch_iteration(0), -1);
  EXPECT_EQ(schedule.lr(0), 1e-4);  // get_lr() with last_batch_iteration < 0: min_lrs
  EXPECT_EQ(schedule.lr(1), 1e-4);  // 1e-4 + (1e-2 - 1e-4) * log(0 + 1) / log(10)
  EXPECT_GT(schedule.lr(2), 1e-4);
}

TEST(LrSchedule, ResumesFromLastBatchIteration) {
  SchedulerConfig s = warmup(SchedulerType::warmup_lr, 0.001, 0.01, 4, WarmupType::linear);
  s.last_batch_iteration = 2;
  LrSchedule schedule(s, {});
  EXPECT_EQ(schedule.batch_iteration(0), 2);
  EXPECT_DOUBLE_EQ(schedule.lr(0), 0.0055000000000000005);  // 0.001 + 0.009 * 2 / 4
  EXPECT_DOUBLE_EQ(schedule.lr(1), 0.007750000000000001);   // 0.001 + 0.009 * 3 / 4
  EXPECT_DOUBLE_EQ(schedule.lr(2), 0.010000000000000002);   // i = 4 = W: gamma 1
}

TEST(LrSchedule, WarmupLrLog) {
  LrSchedule s(warmup(SchedulerType::warmup_lr, 0.0, 0.01, 10, WarmupType::log), {});
  EXPECT_EQ(s.lr_at_iteration(-1), 0.0);
  EXPECT_EQ(s.lr_at_iteration(0), 0.0);                           // 0.01 * log(1) / log(10)
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(1), 0.0030102999566398113);  // 0.01 * log(2) / log(10)
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(5), 0.007781512503836435);   // 0.01 * log(6) / log(10)
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(9), 0.009999999999999998);   // warmup end: log(10)/log(10)
  EXPECT_EQ(s.lr_at_iteration(10), 0.01);                         // i >= W: gamma 1
  EXPECT_EQ(s.lr_at_iteration(1000), 0.01);                       // holds forever
}

TEST(LrSchedule, WarmupLrLinear) {
  LrSchedule s(warmup(SchedulerType::warmup_lr, 0.001, 0.01, 4, WarmupType::linear), {});
  EXPECT_EQ(s.lr_at_iteration(-1), 0.001);
  EXPECT_EQ(s.lr_at_iteration(0), 0.001);                         // 0.001 + 0.009 * 0 / 4
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(1), 0.0032500000000000003);  // 0.001 + 0.009 * 1 / 4
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(3), 0.007750000000000001);   // 0.001 + 0.009 * 3 / 4
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(4), 0.010000000000000002);   // 0.001 + 0.009 * 1.0
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(100), 0.010000000000000002);
}

// warmup_num_steps = 1 becomes W = max(2, 1) = 2, so that log(W) is not 0.
TEST(LrSchedule, WarmupOfOneStepIsTwo) {
  LrSchedule linear(warmup(SchedulerType::warmup_lr, 0.001, 0.01, 1, WarmupType::linear), {});
  EXPECT_DOUBLE_EQ(linear.lr_at_iteration(1), 0.0055000000000000005);  // 0.001 + 0.009 * 1 / 2
  EXPECT_DOUBLE_EQ(linear.lr_at_iteration(2), 0.010000000000000002);
  LrSchedule log(warmup(SchedulerType::warmup_lr, 0.001, 0.01, 1, WarmupType::log), {});
  EXPECT_EQ(log.lr_at_iteration(0), 0.001);
  EXPECT_DOUBLE_EQ(log.lr_at_iteration(1), 0.010000000000000002);  // log(2) / log(2)
}

// warmup_num_steps = 0, what the HF Trainer fills an "auto" warm-up with by default, trains too:
// W = max(2, 0) = 2, the same schedule as 1 or 2 (and the config loader accepts it alike).
TEST(LrSchedule, WarmupOfZeroStepsIsTwo) {
  OptimizerConfig optimizer;
  optimizer.lr = 0.01;
  for (SchedulerType type : {SchedulerType::warmup_lr, SchedulerType::warmup_decay_lr,
                             SchedulerType::warmup_cosine_lr}) {
    SchedulerConfig zero = warmup(type, 0.001, 0.01, 0, WarmupType::linear);
    zero.total_num_steps = 10;
    SchedulerConfig two = zero;
    two.warmup_num_steps = 2;
    LrSchedule zero_schedule(zero, optimizer);
    LrSchedule two_schedule(two, optimizer);
    for (std::int64_t i = -1; i < 12; ++i)
      EXPECT_EQ(zero_schedule.lr_at_iteration(i), two_schedule.lr_at_iteration(i)) << i;
  }
  LrSchedule linear(warmup(SchedulerType::warmup_lr, 0.001, 0.01, 0, WarmupType::linear), {});
  EXPECT_DOUBLE_EQ(linear.lr_at_iteration(1), 0.0055000000000000005);  // 0.001 + 0.009 * 1 / 2
}

TEST(LrSchedule, WarmupDecayLrLinear) {
  SchedulerConfig c = warmup(SchedulerType::warmup_decay_lr, 0.0, 0.01, 5, WarmupType::linear);
  c.total_num_steps = 20;
  LrSchedule s(c, {});
  EXPECT_EQ(s.lr_at_iteration(-1), 0.0);
  EXPECT_EQ(s.lr_at_iteration(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(4), 0.008);  // 0.01 * 4 / 5
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(5), 0.01);   // warmup end: (20 - 5) / max(1, 20 - 5)
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(10), 0.006666666666666666);   // 0.01 * (20 - 10) / 15
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(19), 0.0006666666666666666);  // 0.01 * (20 - 19) / 15
  EXPECT_EQ(s.lr_at_iteration(20), 0.0);                           // total end
  EXPECT_EQ(s.lr_at_iteration(25), 0.0);                           // past it: max(0, ...)
}

TEST(LrSchedule, WarmupDecayLrLog) {
  SchedulerConfig c = warmup(SchedulerType::warmup_decay_lr, 0.001, 0.01, 5, WarmupType::log);
  c.total_num_steps = 20;
  LrSchedule s(c, {});
  EXPECT_EQ(s.lr_at_iteration(-1), 0.001);
  EXPECT_EQ(s.lr_at_iteration(0), 0.001);
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(1), 0.0048760890226605385);  // 0.001 + 0.009*log(2)/log(5)
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(4), 0.010000000000000002);   // log(5) / log(5)
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(5), 0.010000000000000002);
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(12), 0.0058000000000000005);  // 0.001 + 0.009 * 8 / 15
  EXPECT_EQ(s.lr_at_iteration(20), 0.001);                         // decays to warmup_min_lr
  EXPECT_EQ(s.lr_at_iteration(21), 0.001);
}

// total_num_steps < warmup_num_steps: the decay starts below 0 and is floored at 0 at once.
TEST(LrSchedule, WarmupDecayLrShorterThanWarmup) {
  SchedulerConfig c = warmup(SchedulerType::warmup_decay_lr, 0.0, 0.01, 5, WarmupType::linear);
  c.total_num_steps = 3;
  LrSchedule s(c, {});
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(4), 0.008);
  EXPECT_EQ(s.lr_at_iteration(5), 0.0);  // max(0, (3 - 5) / max(1, 3 - 5))
}

SchedulerConfig cosine(double warmup_min_ratio, double cos_min_ratio, std::int64_t total,
                       WarmupType type) {
  SchedulerConfig c;
  c.type = SchedulerType::warmup_cosine_lr;
  c.warmup_num_steps = 5;
  c.total_num_steps = total;
  c.warmup_min_ratio = warmup_min_ratio;
  c.cos_min_ratio = cos_min_ratio;
  c.warmup_type = type;
  return c;
}

TEST(LrSchedule, WarmupCosineLrLinear) {
  OptimizerConfig optimizer;
  optimizer.lr = 0.1;
  LrSchedule s(cosine(0.1, 0.01, 20, WarmupType::linear), optimizer);
  EXPECT_EQ(s.lr_at_iteration(-1), 0.0);  // get_lr() before the first step(): 0.0
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(0), 0.010000000000000002);  // 0.1 * (0.1 + 0 * 0.9)
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(4), 0.08200000000000002);   // 0.1 * (0.1 + 4/5 * 0.9)
  // 0.1 * (0.01 + 0.99 * (1 + cos(pi * 1/15)) / 2): the first cosine step
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(5), 0.09891830623632339);
  // 0.1 * (0.01 + 0.99 * (1 + cos(pi * 8/15)) / 2)
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(12), 0.04532584106825116);
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(19), 0.001);  // progress 15/15: 0.1 * cos_min_ratio
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(20), 0.001);  // clamped at 1: no rise after the end
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(30), 0.001);
}

TEST(LrSchedule, WarmupCosineLrLog) {
  OptimizerConfig optimizer;
  optimizer.lr = 0.1;
  LrSchedule s(cosine(0.0, 1e-4, 20, WarmupType::log), optimizer);
  EXPECT_EQ(s.lr_at_iteration(-1), 0.0);
  EXPECT_EQ(s.lr_at_iteration(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(1), 0.04306765580733931);  // 0.1 * log(2) / log(5)
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(4), 0.1);
  // 0.1 * (1e-4 + (1 - 1e-4) * (1 + cos(pi / 15)) / 2)
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(5), 0.09890748929868662);
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(19), 1e-05);
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(100), 1e-05);
}

TEST(LrSchedule, WarmupCosineLrShorterThanWarmup) {
  OptimizerConfig optimizer;
  optimizer.lr = 0.1;
  LrSchedule s(cosine(0.0, 0.01, 3, WarmupType::linear), optimizer);
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(4), 0.08000000000000002);  // still warming up
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(5), 0.001);  // progress min(1, 1 / max(1, 3 - 5)) = 1
}

TEST(LrSchedule, OneCycleLrAndDecay) {
  SchedulerConfig c = one_cycle(0, 0);
  c.decay_lr_rate = 0.5;
  c.decay_step_size = 2;
  LrSchedule s(c, {});
  EXPECT_EQ(s.lr_at_iteration(-1), 0.001);  // the constructor sets cycle_min_lr
  // batch 1 of a 10-step cycle, first half 4: x = 0.1, scale = 0.1 / 0.4
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(0), 0.0032500000000000025);
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(1), 0.0055);                // scale 0.5
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(3), 0.009999999999999998);  // peak: x = 0.4 = step_ratio
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(4), 0.0085);                // (0.5 - 1) / (0.4 - 1) = 5/6
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(6), 0.005500000000000001);  // (0.7 - 1) / (0.4 - 1)
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(9), 0.001);                 // cycle end: batch 10, x = 0
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(10), 0.0008);  // 0.001 / (1 + 0.5 * (10 - 10 + 1) / 2)
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(11), 0.0006666666666666666);  // 0.001 / (1 + 0.5 * 2 / 2)
  EXPECT_DOUBLE_EQ(s.lr_at_iteration(13), 0.0005);                 // 0.001 / (1 + 0.5 * 4 / 2)
}

TEST(LrSchedule, OneCycleWithoutDecayStaysAtMin) {
  LrSchedule s(one_cycle(0, 0), {});  // decay_lr_rate 0 (and decay_step_size 0): min_lrs
  for (std::int64_t i : {10, 11, 15, 1000})
    EXPECT_EQ(s.lr_at_iteration(i), 0.001);
  EXPECT_EQ(s.betas_at_iteration(1000)[0], 0.9);  // cycle_max_mom
}

TEST(LrSchedule, OneCycleStairs) {
  LrSchedule s(one_cycle(2, 3), {});
  // first half: floor(offset * 2 / 4) / 2; second half: floor((10 - offset) * 3 / 6) / 3
  const double expected[] = {
      0.001,                  // i=0, offset 1: floor(0.5) = 0
      0.0055000000000000005,  // i=1, offset 2: 1/2
      0.0055000000000000005,  // i=2, offset 3: floor(1.5) / 2
      0.010000000000000002,   // i=3, offset 4: 2/2, the peak
      0.007,                  // i=4, offset 5: floor(2.5) / 3
      0.007,                  // i=5, offset 6: 2/3
      0.004,                  // i=6, offset 7: floor(1.5) / 3
      0.004,                  // i=7
      0.001,                  // i=8, offset 9: floor(0.5) / 3
      0.001,                  // i=9, offset 10 % 10 = 0
  };
  for (std::int64_t i = 0; i < 10; ++i)
    EXPECT_DOUBLE_EQ(s.lr_at_iteration(i), expected[i]) << "i=" << i;
  EXPECT_DOUBLE_EQ(s.betas_at_iteration(1)[0], 0.8500000000000001);  // 0.9 - 0.1 * 1/2
  EXPECT_DOUBLE_EQ(s.betas_at_iteration(4)[0], 0.8333333333333334);  // 0.9 - 0.1 * 2/3
}

TEST(LrSchedule, OneCycleMomentum) {
  SchedulerConfig c = one_cycle(0, 0);
  c.decay_mom_rate = 0.1;
  c.decay_step_size = 2;
  OptimizerConfig optimizer;
  optimizer.betas = {0.9, 0.999};
  LrSchedule s(c, optimizer);
  ASSERT_TRUE(s.cycles_momentum());
  // The constructor writes (cycle_min_mom, 0.99); beta2 stays 0.99 throughout.
  EXPECT_EQ(s.betas(0), (std::array<double, 2>{0.8, 0.99}));
  EXPECT_DOUBLE_EQ(s.beta1(1), 0.875);  // i=0: 0.9 - 0.1 * 0.25
  EXPECT_EQ(s.betas(1)[1], 0.99);
  EXPECT_DOUBLE_EQ(s.betas_at_iteration(3)[0], 0.8);                 // lr peak, momentum trough
  EXPECT_DOUBLE_EQ(s.betas_at_iteration(4)[0], 0.8166666666666667);  // 0.9 - 0.1 * 5/6
  EXPECT_DOUBLE_EQ(s.betas_at_iteration(9)[0], 0.9);
  // After the cycle DeepSpeed multiplies: 0.9 * (1 + 0.1 * (i - 10 + 1) / 2)
  EXPECT_DOUBLE_EQ(s.betas_at_iteration(10)[0], 0.9450000000000001);
  EXPECT_DOUBLE_EQ(s.betas_at_iteration(13)[0], 1.08);
}

TEST(LrSchedule, OneCycleMomentumOffForAdagradAndWhenDisabled) {
  OptimizerConfig adagrad;
  adagrad.type = OptimizerType::adagrad;
  LrSchedule a(one_cycle(0, 0), adagrad);
  EXPECT_FALSE(a.cycles_momentum());
  EXPECT_EQ(a.betas(3), adagrad.betas);
  SchedulerConfig off = one_cycle(0, 0);
  off.cycle_momentum = false;
  OptimizerConfig adamw;
  LrSchedule b(off, adamw);
  EXPECT_FALSE(b.cycles_momentum());
  EXPECT_EQ(b.betas(3), adamw.betas);
  OptimizerConfig lion;
  lion.type = OptimizerType::lion;
  EXPECT_TRUE(LrSchedule(one_cycle(0, 0), lion).cycles_momentum());
}

// The config loader's closed form (engine/config/config.h) for where a schedule falls to lr 0 for
// good, which its start-up warning uses, agrees with the schedule itself: 0 from that iteration
// on, above 0 just before it, and no such point when the lr never stays at 0.
TEST(LrSchedule, ZeroFromIterationAgreesWithTheSchedule) {
  OptimizerConfig optimizer;
  optimizer.lr = 0.01;
  std::vector<SchedulerConfig> schedules;
  for (std::int64_t warmup_steps : {0, 1, 3, 8}) {
    for (std::int64_t total : {1, 2, 5, 9, 30}) {
      for (WarmupType type : {WarmupType::log, WarmupType::linear}) {
        SchedulerConfig decay = warmup(SchedulerType::warmup_decay_lr, 0, 0.01, warmup_steps, type);
        decay.total_num_steps = total;
        schedules.push_back(decay);
        SchedulerConfig floor = decay;
        floor.warmup_min_lr = 1e-4;
        schedules.push_back(floor);
        SchedulerConfig cos = cosine(0, 0, total, type);
        cos.warmup_num_steps = warmup_steps;
        schedules.push_back(cos);
        schedules.push_back(cosine(0, 0.1, total, type));
      }
    }
  }
  for (std::int64_t stairs : {0, 3}) {
    SchedulerConfig cycle = one_cycle(stairs, stairs);
    cycle.cycle_min_lr = 0;
    schedules.push_back(cycle);
    cycle.decay_lr_rate = 0.5;
    cycle.decay_step_size = 2;
    schedules.push_back(cycle);
    schedules.push_back(one_cycle(stairs, stairs));
  }
  schedules.push_back(warmup(SchedulerType::warmup_lr, 0, 0.01, 4, WarmupType::linear));
  for (const SchedulerConfig& s : schedules) {
    const LrSchedule schedule(s, optimizer);
    const std::optional<std::int64_t> zero = lr_zero_from_iteration(s, optimizer);
    const std::string which = fmt::format("{} W={} T={} min_lr={} cos_min={} cycle_min={}",
                                          to_string(s.type), s.warmup_num_steps, s.total_num_steps,
                                          s.warmup_min_lr, s.cos_min_ratio, s.cycle_min_lr);
    if (!zero) {
      EXPECT_GT(schedule.lr_at_iteration(200), 0.0) << which;
      continue;
    }
    EXPECT_GT(schedule.lr_at_iteration(*zero - 1), 0.0) << which;
    for (std::int64_t i = *zero; i < *zero + 50; ++i)
      EXPECT_EQ(schedule.lr_at_iteration(i), 0.0) << which << " i=" << i;
  }
}

// Every value DeepSpeed would refuse is a ConfigError naming the key.
void expect_refused(const SchedulerConfig& s, const OptimizerConfig& optimizer,
                    const std::string& key) {
  try {
    LrSchedule schedule(s, optimizer);
    ADD_FAILURE() << "accepted; expected an error naming " << key;
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find(key), std::string::npos) << error.what();
    EXPECT_EQ(error.exit_status(), 2);
  }
}

TEST(LrSchedule, RefusesWhatDeepSpeedRefuses) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  SchedulerConfig cosine_zero = cosine(0, 0.01, 10, WarmupType::log);
  cosine_zero.warmup_num_steps = -3;
  expect_refused(cosine_zero, {}, "scheduler.params.warmup_num_steps");
  expect_refused(warmup(SchedulerType::warmup_decay_lr, 0, nan, 5, WarmupType::log), {},
                 "scheduler.params.warmup_max_lr");
  SchedulerConfig cycle = one_cycle(0, 0);
  cycle.cycle_second_step_size = 0;
  expect_refused(cycle, {}, "scheduler.params.cycle_second_step_size");
  cycle = one_cycle(-1, 0);
  expect_refused(cycle, {}, "scheduler.params.cycle_first_stair_count");
  SchedulerConfig resume;
  resume.last_batch_iteration = -2;
  expect_refused(resume, {}, "scheduler.params.last_batch_iteration");
  OptimizerConfig bad_lr;
  bad_lr.lr = -1;
  expect_refused(SchedulerConfig{}, bad_lr, "optimizer.params.lr");
}

}  // namespace
}  // namespace strata::engine::optim
