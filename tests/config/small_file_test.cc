// read_small_file: only regular files of bounded size are read, and the
// open never waits (a FIFO without a writer is refused at once); the worker
// config goes through it.
#include "small_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "config/config.h"
#include "support/run_process.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::fresh_dir;
using testing::write_file;

TEST(SmallFile, ReadsRegularFilesWithinTheBoundAndRefusesTheRest) {
  const fs::path d = fresh_dir("smallfile");
  write_file(d / "ok", "step-12\n");
  SmallFile f = read_small_file((d / "ok").string(), 16);
  ASSERT_TRUE(f.ok()) << f.problem;
  EXPECT_EQ(f.text, "step-12\n");
  // Exactly at the bound is fine; one byte past is not.
  write_file(d / "bound", std::string(16, 'x'));
  EXPECT_TRUE(read_small_file((d / "bound").string(), 16).ok());
  f = read_small_file((d / "bound").string(), 15);
  EXPECT_EQ(f.status, SmallFile::Status::Refused);
  EXPECT_EQ(f.problem, (d / "bound").string() + ": 16 bytes, more than the 15 such a file may have");

  EXPECT_EQ(read_small_file((d / "absent").string(), 16).status, SmallFile::Status::Missing);
  EXPECT_EQ(irregular_file_problem((d / "absent").string()), "");
  EXPECT_EQ(irregular_file_problem((d / "ok").string()), "");

  const fs::path fifo = d / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  f = read_small_file(fifo.string(), 16);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(f.problem, fifo.string() + ": not a regular file (a FIFO)");
  EXPECT_EQ(irregular_file_problem(fifo.string()), fifo.string() + ": not a regular file (a FIFO)");
  EXPECT_EQ(read_small_file("/dev/zero", 16).problem, "/dev/zero: not a regular file (a character device)");
  EXPECT_EQ(read_small_file(d.string(), 16).problem, d.string() + ": not a regular file (a directory)");
  fs::remove_all(d);
}

TEST(SmallFile, AConfigFileThatIsAFifoOrHugeIsAConfigError) {
  const fs::path d = fresh_dir("smallcfg");
  const fs::path fifo = d / "c.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    load_config_file(fifo.string());
    ADD_FAILURE() << "read a FIFO as the config";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(fifo.string() + ": not a regular file (a FIFO) (the config file)"),
              std::string::npos)
        << e.what();
  }
  const fs::path huge = d / "huge.yaml";
  { std::ofstream(huge) << "preset: tiny\n"; }
  fs::resize_file(huge, kMaxTextFileBytes + 1);
  EXPECT_THROW(load_config_file(huge.string()), ConfigError);
  fs::remove_all(d);
}

}  // namespace
}  // namespace weft
