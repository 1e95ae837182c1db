#include "comm/run_fingerprint.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <map>

#include "comm/tcp_store.h"

namespace weft::comm {
namespace {

constexpr const char* kRank0Key = "fingerprint/rank0";
constexpr const char* kResultKey = "fingerprint/result";
constexpr const char* kOk = "ok";

std::string verdict_key(int rank) { return "fingerprint/verdict/" + std::to_string(rank); }
std::string seen_key(int rank) { return "fingerprint/seen/" + std::to_string(rank); }

// A file entry's difference: the setting is spelled the same on both ranks.
constexpr const char* kSameNameOtherBytes =
    " (the same name reads different files: a relative path resolves against each rank's working directory, "
    "and each node reads its own copy)";

// At most this many differing ranks are listed by number: a message for a
// person, not a table.
constexpr size_t kRanksListed = 8;

}  // namespace

bool is_file_entry(const std::string& path) { return path.find(' ') != std::string::npos; }

std::string settings_text(const Settings& s) {
  std::string text;
  for (const auto& [path, value] : s) text += path + "=" + value + "\n";
  return text;
}

uint64_t settings_fingerprint(const Settings& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : settings_text(s)) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

Settings parse_settings_text(const std::string& text) {
  Settings s;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) s.emplace_back(line.substr(0, eq), line.substr(eq + 1));
    at = end + 1;
  }
  return s;
}

std::string first_difference(const Settings& a, int rank_a, const Settings& b, int rank_b) {
  std::map<std::string, std::string> in_b(b.begin(), b.end());
  for (const auto& [path, value] : a) {
    auto it = in_b.find(path);
    if (it == in_b.end())
      return path + " is " + value + " on rank " + std::to_string(rank_a) + " but unknown to rank " +
             std::to_string(rank_b) + " (another weft version?)";
    if (it->second != value)
      return path + " is " + value + " on rank " + std::to_string(rank_a) + " but " + it->second + " on rank " +
             std::to_string(rank_b) + (is_file_entry(path) ? kSameNameOtherBytes : "");
  }
  std::map<std::string, std::string> in_a(a.begin(), a.end());
  for (const auto& [path, value] : b)
    if (!in_a.count(path))
      return path + " is " + value + " on rank " + std::to_string(rank_b) + " but unknown to rank " +
             std::to_string(rank_a) + " (another weft version?)";
  return "";
}

uint64_t agree_on_settings(TcpStore& store, int rank, int world, const Settings& mine) {
  const uint64_t fp = settings_fingerprint(mine);
  std::string result;
  if (rank == 0) {
    store.set(kRank0Key, settings_text(mine));
    // Every other rank's verdict, in rank order: the first that differs is
    // the one whose difference is named.
    // One batched read, not world - 1 round trips to the store.
    std::string first;
    std::vector<int> differ;
    std::vector<std::string> keys;
    for (int r = 1; r < world; ++r) keys.push_back(verdict_key(r));
    const std::vector<std::string> verdicts = keys.empty() ? keys : store.multi_get(keys, store.timeout());
    for (int r = 1; r < world; ++r) {
      const std::string& v = verdicts[r - 1];
      if (v == kOk) continue;
      if (first.empty()) first = v;
      differ.push_back(r);
    }
    if (differ.empty()) {
      result = kOk;
    } else {
      std::string ranks;
      for (size_t i = 0; i < differ.size() && i < kRanksListed; ++i)
        ranks += (i ? ", " : "") + std::to_string(differ[i]);
      if (differ.size() > kRanksListed) ranks += " and " + std::to_string(differ.size() - kRanksListed) + " more";
      result = "the ranks were started with different settings: " + first + " (rank" +
               (differ.size() > 1 ? "s " : " ") + ranks + " of " + std::to_string(world) + " differ" +
               (differ.size() > 1 ? "" : "s") +
               " from rank 0). Start every rank with the same config, environment and files; only " +
               "the per-rank settings may differ (docs/user-guide/worker-config.md, " +
               "\"Settings every rank shares\")";
    }
    store.set(kResultKey, result);
    // Rank 0's store goes when it exits: a rank that had not read the
    // verdict yet would see a lost store (exit 3) instead of the mismatch.
    if (result != kOk) {
      std::vector<std::string> seen;
      for (int r = 1; r < world; ++r) seen.push_back(seen_key(r));
      try {
        store.wait(seen, std::chrono::seconds(10));
      } catch (const RendezvousError&) {
        // A rank that vanished since it reported has nothing left to read.
      }
    }
  } else {
    const Settings rank0 = parse_settings_text(store.get(kRank0Key));
    const std::string diff = first_difference(rank0, 0, mine, rank);
    store.set(verdict_key(rank), diff.empty() ? std::string(kOk) : diff);
    result = store.get(kResultKey);
    if (result != kOk) store.set(seen_key(rank), kOk);
    // A rank rank 0 does not count (its WORLD_SIZE is larger than rank 0's)
    // hears "ok" but knows it differs.
    if (result == kOk && !diff.empty())
      result = "the ranks were started with different settings: " + diff + " (rank " + std::to_string(rank) +
               " differs from rank 0)";
  }
  if (result != kOk) throw SettingsMismatchError(result);
  if (rank == 0)
    spdlog::info("settings: all {} ranks share run fingerprint {:016x} ({} settings)", world, fp, mine.size());
  return fp;
}

}  // namespace weft::comm
