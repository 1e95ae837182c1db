// llm.c token shards, memory-mapped. Every file is validated when the source
// is built, so a bad file fails the job at start (exit code 1) rather than
// hours in. A row is a window of T+1 consecutive tokens inside one shard;
// windows never cross files, because the files a glob matches need not be
// consecutive pieces of one token stream.
#include <fcntl.h>
#include <glob.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "small_file.h"
#include "data/sample_order.h"
#include "data/shard_writer.h"
#include "data/shard_source.h"

namespace weft {
namespace {

std::string errno_text() { return std::strerror(errno); }

// A read-only mapping of a whole regular file; unmapped on destruction. The
// descriptor stays open so reads can check that the file still has the size
// that was mapped (a shrunk file turns reads past its end into SIGBUS).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    // Only regular files: opening a FIFO blocks until a writer comes, a
    // device may never end. Checked before the open and again on the
    // descriptor (the path may change in between); O_NONBLOCK keeps the open
    // itself from blocking.
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw DataError(path + ": cannot stat shard (" + errno_text() + ")");
    if (!S_ISREG(st.st_mode)) throw DataError(path + ": " + not_regular_file(st.st_mode));
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) throw DataError(path + ": cannot open shard (" + errno_text() + ")");
    if (::fstat(fd_, &st) != 0) {
      std::string err = errno_text();
      ::close(fd_);
      throw DataError(path + ": cannot stat shard (" + err + ")");
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw DataError(path + ": " + not_regular_file(st.st_mode));
    }
    size_ = static_cast<size_t>(st.st_size);
    mtime_ = st.st_mtim;
    ctime_ = st.st_ctim;
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
      if (p == MAP_FAILED) {
        std::string err = errno_text();
        ::close(fd_);
        throw DataError(path + ": cannot map shard (" + err + ")");
      }
      data_ = static_cast<const unsigned char*>(p);
      // Rows are read at random offsets: readahead would only waste I/O.
      ::madvise(p, size_, MADV_RANDOM);
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
    if (fd_ >= 0) ::close(fd_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  // The file's size now (-1 when fstat fails).
  int64_t current_size() const {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  }
  // CRC-32 of the mapped bytes as they are now.
  uint32_t content_crc() const {
    uLong crc = ::crc32(0L, Z_NULL, 0);
    for (size_t at = 0; at < size_; at += kCrcChunk) {
      const size_t n = std::min(kCrcChunk, size_ - at);
      crc = ::crc32(crc, data_ + at, static_cast<uInt>(n));
    }
    return static_cast<uint32_t>(crc);
  }
  // How the file differs from what was mapped, from one fstat: its size, or
  // its modification time (a rewrite in place keeps the size but not the
  // time), or, when only its change time moved (the time a writer cannot
  // set: a rewrite with the old modification time put back, but also a
  // chmod, chown or new hard link), its content against `mapped_crc`, the
  // CRC-32 taken when it was mapped; empty when it does not differ.
  std::string change_since_mapped(uint32_t mapped_crc) const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return "cannot stat it (" + errno_text() + ")";
    if (static_cast<size_t>(st.st_size) != size_)
      return "mapped " + std::to_string(size_) + " bytes, the file now has " + std::to_string(st.st_size);
    if (st.st_mtim.tv_sec != mtime_.tv_sec || st.st_mtim.tv_nsec != mtime_.tv_nsec)
      return "written after it was mapped, at the same size";
    std::lock_guard lock(ctime_mu_);
    if (st.st_ctim.tv_sec == ctime_.tv_sec && st.st_ctim.tv_nsec == ctime_.tv_nsec) return {};
    if (content_crc() != mapped_crc)
      return "rewritten after it was mapped, at the same size and with its old modification time put back "
             "(its change time and content differ)";
    ctime_ = st.st_ctim;  // attributes only: the same bytes, read on
    return {};
  }

  static constexpr size_t kCrcChunk = size_t{1} << 20;

 private:
  int fd_ = -1;
  struct timespec mtime_ {};
  mutable std::mutex ctime_mu_;  // fill() may run on several threads
  mutable struct timespec ctime_ {};
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// A read from a mapping whose file shrank underneath raises SIGBUS. While a
// thread copies rows out of the mappings it points t_bus_jump at a jump
// buffer; the handler jumps back there and the read fails as bad data. A
// SIGBUS anywhere else gets the default action (the fault repeats on return).
thread_local sigjmp_buf* t_bus_jump = nullptr;

void on_sigbus(int, siginfo_t*, void*) {
  if (t_bus_jump != nullptr) siglongjmp(*t_bus_jump, 1);
  ::signal(SIGBUS, SIG_DFL);
}

void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
  });
}

struct Shard {
  std::string path;
  std::unique_ptr<MappedFile> file;
  const uint16_t* tokens = nullptr;  // [count], inside the mapping
  int64_t count = 0;
  uint32_t crc = 0;                  // of the whole file when it was opened
  uint16_t max_token = 0;
};

// One pass over a shard's bytes in cache-sized chunks: its CRC-32 (what a
// later change of its inode is checked against) and its largest token id.
void scan_shard(Shard& s) {
  const unsigned char* bytes = s.file->data();
  uLong crc = ::crc32(::crc32(0L, Z_NULL, 0), bytes, static_cast<uInt>(kShardHeaderBytes));
  const size_t chunk_tokens = MappedFile::kCrcChunk / sizeof(uint16_t);
  uint16_t max_token = 0;
  for (int64_t at = 0; at < s.count; at += static_cast<int64_t>(chunk_tokens)) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk_tokens), s.count - at);
    crc = ::crc32(crc, reinterpret_cast<const unsigned char*>(s.tokens + at), static_cast<uInt>(n * 2));
    max_token = std::max(max_token, *std::max_element(s.tokens + at, s.tokens + at + n));
  }
  s.crc = static_cast<uint32_t>(crc);
  s.max_token = max_token;
}

Shard open_shard(const std::string& path) {
  Shard s;
  s.path = path;
  s.file = std::make_unique<MappedFile>(path);
  const size_t size = s.file->size();
  if (size < static_cast<size_t>(kShardHeaderBytes)) {
    throw DataError(path + ": not an llm.c token shard (" + std::to_string(size) +
                    " bytes, shorter than the " + std::to_string(kShardHeaderBytes) +
                    "-byte header)");
  }
  int32_t header[3];
  std::memcpy(header, s.file->data(), sizeof header);
  if (header[0] != kShardMagic) {
    throw DataError(path + ": not an llm.c token shard (magic " + std::to_string(header[0]) +
                    ", expected " + std::to_string(kShardMagic) + ")");
  }
  if (header[1] != kShardVersion) {
    throw DataError(path + ": unsupported llm.c shard version " + std::to_string(header[1]) +
                    " (expected " + std::to_string(kShardVersion) + ", uint16 tokens)");
  }
  const int64_t count = header[2];
  if (count < 0) {
    throw DataError(path + ": corrupt header: token count " + std::to_string(count));
  }
  const int64_t want = kShardHeaderBytes + 2 * count;
  const int64_t have = static_cast<int64_t>(size);
  if (have != want) {
    throw DataError(path + ": " + (have < want ? "truncated: " : "") + "header says " +
                    std::to_string(count) + " tokens (" + std::to_string(want) +
                    " bytes) but file has " + std::to_string(have) + " bytes" +
                    (have > want ? " (trailing data)" : ""));
  }
  if (count == 0) throw DataError(path + ": empty shard (0 tokens)");
  s.tokens = reinterpret_cast<const uint16_t*>(s.file->data() + kShardHeaderBytes);
  s.count = count;
  return s;
}

}  // namespace

std::vector<std::string> expand_glob(const std::string& pattern, const std::string& field) {
  glob_t g{};
  int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0) paths.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty())) {
    throw DataError(field + ": no file matches '" + pattern + "'");
  }
  if (rc != 0) throw DataError(field + ": cannot expand '" + pattern + "' (read error)");
  // Byte order, not the locale's collation: the sample order must not depend
  // on LC_COLLATE.
  std::sort(paths.begin(), paths.end());
  return paths;
}

namespace {

class ShardSource final : public TokenSource {
 public:
  ShardSource(std::string pattern, uint64_t seed, const std::string& field)
      : pattern_(std::move(pattern)), seed_(seed) {
    install_sigbus_handler();
    for (const std::string& path : expand_glob(pattern_, field)) shards_.push_back(open_shard(path));
    uint16_t max_token = 0;
    for (Shard& s : shards_) {
      scan_shard(s);
      max_token = std::max(max_token, s.max_token);
      total_tokens_ += s.count;
    }
    vocab_ = int{max_token} + 1;
  }

  void fill(Batch& batch, int B, int T, const BatchIndex& at) const override {
    shape_batch(batch, B, T);
    const int64_t row0 = first_sample_row(at, B);
    // Every window of T+1 tokens inside a shard is equally likely: shard i is
    // picked with weight count_i - T, the number of windows it holds.
    std::vector<int64_t> windows_end(shards_.size());
    int64_t windows = 0;
    for (size_t i = 0; i < shards_.size(); ++i) {
      if (shards_[i].count < int64_t{T} + 1) {
        throw DataError(shards_[i].path + ": " + std::to_string(shards_[i].count) +
                        " tokens, too short for a row of seq_len + 1 = " + std::to_string(T + 1) +
                        " tokens");
      }
      windows_end[i] = (windows += shards_[i].count - T);
    }
    // A shard truncated or rewritten while mapped is bad data, named: its
    // size, modification and change times (and, when only the change time
    // moved, its content) are checked before the reads, a shrink during them
    // ends in SIGBUS
    // (caught in copy_rows), and a token beyond the largest id read at start
    // means the bytes changed.
    for (const Shard& s : shards_) check_unchanged(s);
    size_t reading = 0;
    const int r = copy_rows(batch, B, T, row0, windows, windows_end.data(), &reading);
    if (r == kReadFault) {
      const Shard& s = shards_[reading];
      throw DataError(s.path + ": shard changed while the run reads it (a read past its end raised SIGBUS; " +
                      "mapped " + std::to_string(s.file->size()) + " bytes, the file has " +
                      std::to_string(s.file->current_size()) + "); shards must not be modified during training");
    }
    if (r >= 0)
      throw DataError(shards_[reading].path + ": shard changed while the run reads it (token " + std::to_string(r) +
                      " is beyond the largest id " + std::to_string(vocab_ - 1) +
                      " read at start); shards must not be modified during training");
  }

  static constexpr int kReadFault = -2;

  // Copies the B rows out of the mappings under the SIGBUS guard. Returns -1
  // when all is well, kReadFault after a SIGBUS, or a token id beyond the
  // vocabulary; *reading is then the shard. Only trivially destructible
  // locals live here: a siglongjmp back skips no destructor.
  int copy_rows(Batch& batch, int B, int T, int64_t row0, int64_t windows, const int64_t* windows_end,
                volatile size_t* reading) const {
    sigjmp_buf jump;
    if (sigsetjmp(jump, 1) != 0) {
      t_bus_jump = nullptr;
      return kReadFault;
    }
    t_bus_jump = &jump;
    int bad_token = -1;
    for (int b = 0; b < B && bad_token < 0; ++b) {
      SplitMix64 rng(hash_seed(seed_, kDomainShardRow, static_cast<uint64_t>(row0 + b)));
      const int64_t w = static_cast<int64_t>(rng.below(static_cast<uint64_t>(windows)));
      const size_t i = std::upper_bound(windows_end, windows_end + shards_.size(), w) - windows_end;
      *reading = i;  // volatile: stored before the reads that may fault
      const int64_t offset = w - (windows_end[i] - (shards_[i].count - T));
      const uint16_t* src = shards_[i].tokens + offset;
      int32_t* in = batch.inputs.data() + int64_t{b} * T;
      int32_t* tgt = batch.targets.data() + int64_t{b} * T;
      for (int t = 0; t < T; ++t) {
        in[t] = src[t];
        tgt[t] = src[t + 1];
      }
      for (int t = 0; t <= T; ++t)
        if (src[t] >= vocab_) bad_token = src[t];
    }
    t_bus_jump = nullptr;
    return bad_token;
  }

  int vocab_size() const override { return vocab_; }

  // The same size with other bytes would train on valid tokens written over
  // valid tokens without a word, so the times are checked too, and the
  // content when a writer put the modification time back.
  static void check_unchanged(const Shard& s) {
    if (const std::string change = s.file->change_since_mapped(s.crc); !change.empty())
      throw DataError(s.path + ": shard changed while the run reads it (" + change +
                      "); shards must not be modified during training");
  }

  std::string describe() const override {
    return "llm.c shards '" + pattern_ + "' (" + std::to_string(shards_.size()) + " files, " +
           std::to_string(total_tokens_) + " tokens, max token id " + std::to_string(vocab_ - 1) +
           ", seed=" + std::to_string(seed_) + ")";
  }

 private:
  std::string pattern_;
  uint64_t seed_;
  std::vector<Shard> shards_;
  int64_t total_tokens_ = 0;
  int vocab_ = 0;
};

}  // namespace

std::unique_ptr<TokenSource> make_shard_source(const std::string& glob, uint64_t seed, const std::string& field) {
  return std::make_unique<ShardSource>(glob, seed, field);
}

}  // namespace weft
