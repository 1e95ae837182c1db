// The run fingerprint: the settings every rank of a job must share (the
// model, the optimizer, the data, the strategy, the resolved launch facts),
// compared at the rendezvous before any group is built, with what the files
// that settings name hold (a relative init_from or data.shards reads other
// bytes from another working directory). Ranks started with
// different configs (a ConfigMap edited between two pods' starts, a rank
// started by hand) would otherwise train together and drift apart silently,
// or end at different steps and restart forever.
//
// Invariant: every rank of a gang that gets past agree_on_settings holds the
// same settings text; otherwise every rank throws SettingsMismatchError with
// the same message (the first differing setting, its values on rank 0 and
// the first rank that differs, and every rank that differs).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"

namespace weft::comm {

class TcpStore;

// (path, value text) pairs in a fixed order, e.g. ("optim.lr", "0.003").
// Besides the settings, file entries say what a setting that names files
// reads: ("init_from file model.safetensors", "<size> bytes, content <hash>")
// (train/content_identity.h). A file entry's path has a space (a setting's
// never has), and a difference in one is named as a file that differs.
using Settings = std::vector<std::pair<std::string, std::string>>;
bool is_file_entry(const std::string& path);

// The ranks' settings differ: bad input, not retryable (the worker exits 1).
struct SettingsMismatchError : CommError {
  using CommError::CommError;
};

// "path=value" lines, the text every rank publishes.
std::string settings_text(const Settings& s);
// 64-bit FNV-1a of settings_text: the fingerprint logged and compared.
uint64_t settings_fingerprint(const Settings& s);
// The first difference between two ranks' settings, as "path is A on rank
// ra but B on rank rb" ("" when equal).
std::string first_difference(const Settings& a, int rank_a, const Settings& b, int rank_b);
Settings parse_settings_text(const std::string& text);

// Collective over the store (every rank of the world calls it once, before
// the groups are built): rank 0 publishes its settings, every other rank
// compares its own with them and reports, rank 0 publishes the verdict.
// Returns the agreed fingerprint; throws SettingsMismatchError on every rank
// when any rank differs, RendezvousError when a rank never reports.
uint64_t agree_on_settings(TcpStore& store, int rank, int world, const Settings& mine);

}  // namespace weft::comm
