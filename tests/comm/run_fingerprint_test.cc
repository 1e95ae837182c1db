// The run fingerprint agreed over a real rendezvous store, with threads as
// ranks: equal settings pass with one fingerprint on every rank; any rank
// that differs makes every rank throw the same message, naming the first
// differing setting, its two values and the ranks that differ.
#include "comm/run_fingerprint.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "comm/tcp_store.h"

namespace weft::comm {
namespace {

using namespace std::chrono_literals;

Settings base() { return {{"train.steps", "300"}, {"optim.lr", "0.003"}, {"WORLD_SIZE", "4"}}; }

// Runs agree_on_settings on `settings.size()` ranks; each rank's outcome is
// its fingerprint as text or the error's message.
std::vector<std::string> agree(const std::vector<Settings>& settings) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  const int world = static_cast<int>(settings.size());
  std::vector<std::string> out(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      StoreOptions o;
      o.host = "127.0.0.1";
      o.port = server.port();
      o.token = "t";
      o.timeout = 10s;
      TcpStore store(o);
      try {
        out[r] = std::to_string(agree_on_settings(store, r, world, settings[r]));
      } catch (const SettingsMismatchError& e) {
        out[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  return out;
}

TEST(RunFingerprint, EqualSettingsAgreeOnOneFingerprint) {
  const auto out = agree({base(), base(), base(), base()});
  for (const auto& o : out) EXPECT_EQ(o, std::to_string(settings_fingerprint(base())));
}

TEST(RunFingerprint, ADifferentLearningRateStopsEveryRankNamingFieldValuesAndRanks) {
  std::vector<Settings> s(4, base());
  s[1][1].second = "0.01";
  s[3][1].second = "0.02";
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = agree(s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(out[r], out[0]) << "every rank says the same";
    EXPECT_NE(out[r].find("the ranks were started with different settings: optim.lr is 0.003 on rank 0 but 0.01 on "
                          "rank 1 (ranks 1, 3 of 4 differ from rank 0)"),
              std::string::npos)
        << out[r];
  }
}

// A rank beyond rank 0's world (WORLD_SIZE 3 against 2) is not waited for
// by rank 0, which finds its own gang agreed; that rank still refuses.
TEST(RunFingerprint, ARankOutsideRankZerosWorldRefusesOnItsOwn) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  std::string out[3];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      StoreOptions o;
      o.host = "127.0.0.1";
      o.port = server.port();
      o.token = "t";
      o.timeout = 10s;
      TcpStore store(o);
      Settings mine = base();
      mine[2].second = r == 2 ? "3" : "2";
      try {
        out[r] = std::to_string(agree_on_settings(store, r, r == 2 ? 3 : 2, mine));
      } catch (const SettingsMismatchError& e) {
        out[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(out[2], "the ranks were started with different settings: WORLD_SIZE is 2 on rank 0 but 3 on rank 2 "
                    "(rank 2 differs from rank 0)");
}

TEST(RunFingerprint, FirstDifferenceNamesMissingAndChangedSettings) {
  Settings a = base(), b = base();
  EXPECT_EQ(first_difference(a, 0, b, 2), "");
  b[0].second = "10";
  EXPECT_EQ(first_difference(a, 0, b, 2), "train.steps is 300 on rank 0 but 10 on rank 2");
  b = base();
  b.emplace_back("model.new_field", "1");
  EXPECT_EQ(first_difference(a, 0, b, 2), "model.new_field is 1 on rank 2 but unknown to rank 0 (another weft version?)");
  EXPECT_EQ(parse_settings_text(settings_text(a)), a);
  EXPECT_NE(settings_fingerprint(a), settings_fingerprint(b));
}

// A file entry (train/content_identity.h) that differs is a file that reads
// other bytes under the same name, and the message says so; its escaped
// name survives the settings text.
TEST(RunFingerprint, AFileEntryThatDiffersIsNamedAsAFile) {
  Settings a = base(), b = base();
  a.emplace_back("init_from file model.safetensors", "478560 bytes, content 00000000000000aa");
  a.emplace_back("data.shards file data/lang%3Den/train_000.bin", "9216 bytes, content 00000000000000bb");
  b.emplace_back("init_from file model.safetensors", "478560 bytes, content 00000000000000cc");
  b.push_back(a.back());
  EXPECT_TRUE(is_file_entry(a[3].first));
  EXPECT_FALSE(is_file_entry(a[0].first));
  EXPECT_EQ(parse_settings_text(settings_text(a)), a);
  EXPECT_EQ(first_difference(a, 0, b, 1),
            "init_from file model.safetensors is 478560 bytes, content 00000000000000aa on rank 0 but 478560 bytes, "
            "content 00000000000000cc on rank 1 (the same name reads different files: a relative path resolves "
            "against each rank's working directory, and each node reads its own copy)");
  const auto out = agree({a, a, b});
  EXPECT_EQ(out[0], out[2]);
  EXPECT_NE(out[0].find("init_from file model.safetensors is 478560 bytes, content 00000000000000aa on rank 0 but "),
            std::string::npos)
      << out[0];
  EXPECT_NE(out[0].find("(rank 2 of 3 differs from rank 0)"), std::string::npos) << out[0];
}

}  // namespace
}  // namespace weft::comm
