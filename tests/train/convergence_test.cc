// The demo's promise: the tiny preset on synthetic Markov data gets within
// 0.1 nats of the chain's entropy rate (the best any model can do) in the
// demo's step budget.
#include <gtest/gtest.h>

#include "train/train_util.h"
#include "train/trainer.h"

namespace weft {
namespace {

TEST(Convergence, TinyPresetReachesEntropyFloorWithinDemoBudget) {
  auto dir = testing::fresh_dir("converge");
  WorkerConfig c = preset("tiny");
  c.train.out_dir = dir.string();
  c.train.log_every = 50;
  TrainSummary s = Trainer(c).run();
  ASSERT_GT(s.entropy_floor, 0);
  EXPECT_EQ(s.steps_done, c.train.steps);
  EXPECT_LT(s.tail_loss - s.entropy_floor, 0.1)
      << "loss " << s.tail_loss << " floor " << s.entropy_floor;
  EXPECT_GT(s.losses.front() - s.tail_loss, 1.0) << "the run should have learned something";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weft
