#include "train/train_util.h"

#include <unistd.h>

namespace weft::testing {

WorkerConfig small_config(const std::string& out_dir) {
  WorkerConfig c = preset("tiny");
  c.model.vocab_size = 32;
  c.model.d_model = 32;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.max_seq_len = 16;
  c.train.seq_len = 16;
  c.train.micro_batch = 4;
  c.train.steps = 20;
  c.train.log_every = 0;
  c.train.out_dir = out_dir;
  c.optim.warmup_steps = 3;
  c.data.branching = 3;
  return c;
}

std::filesystem::path scratch_dir(const std::string& tag) {
  auto p = std::filesystem::temp_directory_path() /
           ("weft-test-" + tag + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace weft::testing
