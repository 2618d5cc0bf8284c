// `normjit cache`, `prewarm` and `dump --cache-entry` on hostile cache directories (issue 16):
// FIFOs, directories and links to FIFOs named like entries or like stats.json, in the
// writable directory and in read-only layers; sparse files whose headers claim 100 GiB;
// directories that are refused, unwritable or not directories at all. Each command must finish,
// report what it found and did, and exit non-zero when it did not do what was asked.
//
// The tool runs under a deadline (kDeadlineSeconds, then SIGKILL) and, unless sanitized, with
// its address space capped: a regression fails these tests instead of hanging CI on a FIFO or
// eating the machine's memory for a size a header claims.
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cache/cache.hpp"
#include "normjit/normjit.hpp"
#include "runtime/compiler.hpp"
#include "tests/unit/cache/test_util.hpp"
#include "tests/unit/tools/manifest.hpp"
#include "tests/unit/tools/run_tool.hpp"

extern char** environ;

namespace normjit::testing {
namespace {

using cache::Entry;
using cache::testing::sample_entry;

constexpr size_t npos = std::string::npos;
constexpr int kDeadlineSeconds = 20;
constexpr int kPrewarmDeadlineSeconds = 300;  // NVRTC on a busy 2-core machine
constexpr uid_t kNobody = 65534;
constexpr uint64_t kHundredGiB = uint64_t{100} << 30;

struct Options {
  std::vector<std::string> env;  // "NAME=value" sets, "NAME" removes
  int uid = -1;                  // >= 0: run as that user (and group)
  int deadline = kDeadlineSeconds;
};

// A running `normjit`, started by start() and reaped by finish().
struct Child {
  pid_t pid = -1;
  std::string out_path, err_path;
  std::chrono::steady_clock::time_point deadline;
};

struct Result {
  int exit_code = -1;  // 128 + signal when killed
  bool timed_out = false;
  std::string out, err;
  std::vector<std::string> err_lines(const std::string& prefix) const {
    return ToolResult{exit_code, out, err}.err_lines(prefix);
  }
  std::string describe() const {
    return (timed_out ? "TIMED OUT (killed after the deadline: a hang)\n" : "") +
           ToolResult{exit_code, out, err}.describe();
  }
};

Child start(const std::vector<std::string>& args, const Options& options, const TempDir& io) {
  Child child;
  child.out_path = io / ("stdout-" + std::to_string(::getpid()) + "-" + std::to_string(rand()));
  child.err_path = child.out_path + ".err";
  std::vector<std::string> environment;
  for (char** e = environ; *e; ++e) environment.push_back(*e);
  for (const std::string& change : options.env) {
    const std::string name = change.substr(0, change.find('='));
    std::erase_if(environment, [&](const std::string& v) { return v.rfind(name + "=", 0) == 0; });
    if (change.find('=') != npos) environment.push_back(change);
  }
  std::vector<std::string> words = {tool_path()};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> envp, argv;
  for (std::string& v : environment) envp.push_back(v.data());
  envp.push_back(nullptr);
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  // Opened here, before a child drops privileges, so that it can write them anywhere.
  const int out = ::open(child.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int err = ::open(child.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::fflush(nullptr);
  child.pid = ::fork();
  if (child.pid == 0) {
    ::setpgid(0, 0);  // the deadline kills the whole group
    ::dup2(in, STDIN_FILENO);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
#ifndef NORMJIT_SANITIZED
    const rlimit limit{uint64_t{16} << 30, uint64_t{16} << 30};
    ::setrlimit(RLIMIT_AS, &limit);
#endif
    if (options.uid >= 0 &&
        (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(options.uid)) != 0 ||
         ::setuid(static_cast<uid_t>(options.uid)) != 0)) {
      ::_exit(126);
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out);
  ::close(err);
  ::close(in);
  if (child.pid < 0) ADD_FAILURE() << "fork: " << std::strerror(errno);
  child.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.deadline);
  return child;
}

Result finish(Child& child) {
  Result result;
  if (child.pid < 0) return result;
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(child.pid, &status, WNOHANG);
    if (done == child.pid || (done < 0 && errno != EINTR)) break;
    if (std::chrono::steady_clock::now() > child.deadline) {
      result.timed_out = true;
      ::kill(-child.pid, SIGKILL);
      ::kill(child.pid, SIGKILL);
      while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = read_file(child.out_path);
  result.err = read_file(child.err_path);
  return result;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != npos; }

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != npos; at = text.find(part, at + 1)) ++n;
  return n;
}

std::string entry_path(const std::string& dir, const std::string& key) {
  return dir + "/" + key + ".entry";
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

std::string stray_key(int i) { return sample_entry(100 + i).key; }

void make_fifo(const std::string& path) { ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0) << path; }

void make_full_directory(const std::string& path) {
  ASSERT_EQ(::mkdir(path.c_str(), 0700), 0) << path;
  write_file(path + "/inside", "not an entry");
}

// Entries 0..n-1 of the cache tests, published by the library as a process would.
void fill(const std::string& dir, int n) {
  cache::StoreOptions options;
  options.dir = dir;
  cache::Store store(options);
  for (int i = 0; i < n; ++i) store.save(sample_entry(i));
}

size_t entry_files(const std::string& dir) {
  size_t n = 0;
  std::error_code ignored;
  for (const auto& e : std::filesystem::directory_iterator(dir, ignored)) {
    const std::string name = e.path().filename().string();
    n += name.size() == 70 && name.ends_with(".entry") && e.is_regular_file(ignored);
  }
  return n;
}

void put_u64(std::string& bytes, size_t offset, uint64_t value) {
  for (int i = 0; i < 8; ++i) bytes[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

// A header right in magic, version and key, whose lengths add up to `bytes`; ftruncate makes
// the file that size, so it is sparse: it claims 100 GiB and occupies a few KiB.
void write_sparse_entry(const std::string& dir, const std::string& key, uint64_t bytes) {
  std::string header = cache::encode_entry(sample_entry(0)).substr(0, 140);
  header.replace(12, 64, key);
  put_u64(header, 76, bytes - 140);
  for (size_t offset : {84, 92, 100}) put_u64(header, offset, 0);
  const std::string path = entry_path(dir, key);
  write_file(path, header);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(bytes)), 0) << std::strerror(errno);
}

const std::vector<std::string> kSpecs = {"op=rmsnorm shape=2,64,32,32 dtype=f32 affine=none",
                                         "op=rmsnorm shape=1,7,9 dtype=f16 affine=none"};

std::string key_of(const std::string& spec) {
  return key_inputs(NormSpec::parse(spec), Target::parse("sm_90")).key();
}

class CacheHostile : public ::testing::Test {
 protected:
  // No test reads ~/.cache or the prewarmed layers of the environment it runs in.
  Result run(const std::vector<std::string>& args, Options options = {}) {
    options.env.insert(options.env.begin(),
                       {"NORMJIT_CACHE_DIR=" + (home_ / "default-cache"), "NORMJIT_CACHE_READONLY",
                        "NORMJIT_CACHE_MAX_BYTES", "NORMJIT_CACHE_FAULT"});
    Child child = start(args, options, io_);
    Result r = finish(child);
    if (r.timed_out) {
      std::string command;
      for (const std::string& a : args) command += " " + a;
      ADD_FAILURE() << "hung: normjit" << command << "\n" << r.describe();
    }
    return r;
  }
  Options readonly_layer(const std::string& layer) { return {{"NORMJIT_CACHE_READONLY=" + layer}}; }
  void SetUp() override {
    // Traversable by the unprivileged runs; every directory below it sets its own mode.
    ::chmod(home_.path().c_str(), 0755);
    ::chmod(io_.path().c_str(), 0777);
  }

  TempDir home_, io_;
};

// ---------------------------------------------------------------------------------------
// Names that are not regular files

TEST_F(CacheHostile, NoCommandHangsOnFifos) {
  const std::string dir = home_ / "cache";
  const std::string layer = home_ / "layer";
  fill(dir, 2);
  make_fifo(entry_path(dir, stray_key(0)));
  ASSERT_EQ(::unlink((dir + "/stats.json").c_str()), 0);
  make_fifo(dir + "/stats.json");
  ASSERT_EQ(::mkdir(layer.c_str(), 0755), 0);
  make_fifo(entry_path(layer, stray_key(1)));
  make_fifo(home_ / "elsewhere.fifo");
  ASSERT_EQ(::symlink((home_ / "elsewhere.fifo").c_str(), entry_path(layer, stray_key(2)).c_str()),
            0);
  const Options ro = readonly_layer(layer);

  const Result ls = run({"cache", "ls", "--cache-dir", dir}, ro);
  EXPECT_EQ(ls.exit_code, 0) << ls.describe();
  EXPECT_EQ(count_of(ls.out, "FIFO"), 3u) << "the FIFO, the FIFO of the layer, the link\n"
                                          << ls.describe();
  EXPECT_TRUE(contains(ls.out, "5 entries")) << ls.describe();

  const Result stats = run({"cache", "stats", "--cache-dir", dir}, ro);
  EXPECT_EQ(stats.exit_code, 0) << stats.describe();
  EXPECT_TRUE(contains(stats.err, "stats.json")) << "says why no counters\n" << stats.describe();
  EXPECT_TRUE(contains(stats.out, "1 of them bad")) << stats.describe();
  EXPECT_TRUE(contains(stats.out, "2 in read-only layers, 0 B, 2 of them bad")) << stats.describe();

  const Result verify = run({"cache", "verify", "--cache-dir", dir}, ro);
  EXPECT_NE(verify.exit_code, 0) << verify.describe();
  EXPECT_EQ(count_of(verify.out, "BAD "), 3u) << verify.describe();
  EXPECT_TRUE(contains(verify.out, "5 entries checked, 3 bad")) << verify.describe();

  for (const std::string& key : {stray_key(0), stray_key(1), sample_entry(1).key}) {
    const Result explain = run({"cache", "explain", key, "--cache-dir", dir}, ro);
    EXPECT_EQ(explain.exit_code, 0) << explain.describe();
  }
  for (const std::string& key : {stray_key(1), stray_key(2)}) {
    const Result dump = run({"dump", "--cache-entry", key, "--cache-dir", dir}, ro);
    EXPECT_NE(dump.exit_code, 0) << dump.describe();
    EXPECT_TRUE(contains(dump.err, "FIFO")) << dump.describe();
    EXPECT_EQ(dump.err_lines("normjit: error: no valid cache entry").size(), 1u) << dump.describe();
  }
  const Result dump =
      run({"dump", "--cache-entry", sample_entry(0).key, "--cache-dir", dir, "--emit", "ptx"}, ro);
  EXPECT_EQ(dump.exit_code, 0) << dump.describe();
  EXPECT_EQ(dump.out, sample_entry(0).ptx);

  const Result gc = run({"cache", "gc", "--cache-dir", dir, "--max-bytes", "0"}, ro);
  EXPECT_EQ(gc.exit_code, 0) << gc.describe();
  EXPECT_TRUE(contains(gc.out, "evicted 2 entries")) << gc.describe();

  make_fifo(entry_path(dir, stray_key(3)));
  const Result remove = run({"cache", "verify", "--remove", "--cache-dir", dir}, ro);
  EXPECT_NE(remove.exit_code, 0) << "the read-only layer keeps its two\n" << remove.describe();
  EXPECT_EQ(count_of(remove.out, "(removed)"), 2u) << remove.describe();
  EXPECT_FALSE(exists(entry_path(dir, stray_key(0))));
  EXPECT_TRUE(exists(entry_path(layer, stray_key(1)))) << "read-only layers are never changed";

  make_fifo(entry_path(dir, stray_key(4)));
  const Result clear = run({"cache", "clear", "--cache-dir", dir});
  EXPECT_EQ(clear.exit_code, 0) << clear.describe();
  EXPECT_TRUE(contains(clear.out, "removed 1 entry")) << clear.describe();
  EXPECT_FALSE(exists(entry_path(dir, stray_key(4))));
}

TEST_F(CacheHostile, PrewarmAndCheckGoOnPastAFifoNamedLikeAKernel) {
  const std::string manifest = home_ / "manifest.json";
  write_file(manifest, manifest_of({kSpecs[0]}));
  const std::string dir = home_ / "cache";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  make_fifo(entry_path(dir, key_of(kSpecs[0])));
  Options slow;
  slow.deadline = kPrewarmDeadlineSeconds;

  const Result check = run({"prewarm", manifest, "--arch", "sm_90", "--cache-dir", dir, "--check"});
  EXPECT_NE(check.exit_code, 0) << check.describe();
  // Reported as the entry that is there but no kernel, with why.
  EXPECT_TRUE(contains(check.out, "corrupt entry 0")) << check.describe();
  EXPECT_TRUE(contains(check.out, "FIFO")) << check.describe();
  EXPECT_TRUE(contains(check.err, "FIFO")) << check.describe();

  const Result prewarm = run({"prewarm", manifest, "--arch", "sm_90", "--cache-dir", dir}, slow);
  EXPECT_EQ(prewarm.exit_code, 0) << prewarm.describe();
  EXPECT_TRUE(contains(prewarm.out, "prewarm: 1 compiled, 0 already cached, 0 failed"))
      << prewarm.describe();
  EXPECT_TRUE(contains(prewarm.err, "FIFO")) << prewarm.describe();

  const Result again = run({"prewarm", manifest, "--arch", "sm_90", "--cache-dir", dir, "--check"});
  EXPECT_EQ(again.exit_code, 0) << again.describe();
}

// A directory with files in it on one kernel's name fails that kernel alone; the rest of the
// run still writes to the directory. Maintenance reports that it stays.
TEST_F(CacheHostile, DirectoryNamedLikeAKernelFailsOnlyThatKernel) {
  const std::string manifest = home_ / "manifest.json";
  write_file(manifest, manifest_of(kSpecs));
  const std::string dir = home_ / "cache";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  const std::string blocked = entry_path(dir, key_of(kSpecs[0]));
  make_full_directory(blocked);
  Options slow;
  slow.deadline = kPrewarmDeadlineSeconds;

  const Result prewarm =
      run({"prewarm", manifest, "--arch", "sm_90", "--cache-dir", dir, "-j", "1"}, slow);
  EXPECT_NE(prewarm.exit_code, 0) << prewarm.describe();
  EXPECT_TRUE(contains(prewarm.out, "prewarm: 1 compiled, 0 already cached, 1 failed"))
      << prewarm.describe();
  EXPECT_TRUE(contains(prewarm.err, "cannot publish cache entry " + blocked)) << prewarm.describe();
  EXPECT_TRUE(exists(entry_path(dir, key_of(kSpecs[1]))));

  const Result remove = run({"cache", "verify", "--remove", "--cache-dir", dir});
  EXPECT_NE(remove.exit_code, 0) << remove.describe();
  EXPECT_TRUE(contains(remove.out, "not removed")) << remove.describe();
  EXPECT_FALSE(contains(remove.out, "(removed)")) << remove.describe();
  EXPECT_EQ(remove.err_lines("normjit: error: ").size(), 1u) << remove.describe();

  const Result gc = run({"cache", "gc", "--cache-dir", dir, "--max-bytes", "0"});
  EXPECT_EQ(gc.exit_code, 0) << gc.describe();
  EXPECT_TRUE(contains(gc.out, "evicted 1 entry")) << "not stopped by the directory\n"
                                                   << gc.describe();

  fill(dir, 3);
  const Result clear = run({"cache", "clear", "--cache-dir", dir});
  EXPECT_NE(clear.exit_code, 0) << clear.describe();
  EXPECT_TRUE(contains(clear.out, "removed 3 entries")) << clear.describe();
  EXPECT_TRUE(contains(clear.out, "NOT REMOVED " + blocked)) << clear.describe();
  EXPECT_EQ(clear.err_lines("normjit: error: cannot clear").size(), 1u) << clear.describe();
  EXPECT_TRUE(exists(blocked + "/inside"));
  EXPECT_EQ(entry_files(dir), 0u);
}

// ---------------------------------------------------------------------------------------
// Sizes that lie

TEST_F(CacheHostile, SparseEntryClaimingHundredGiBIsReportedAndCostsNoEntry) {
  const std::string dir = home_ / "cache";
  fill(dir, 7);
  write_sparse_entry(dir, stray_key(0), kHundredGiB);

  const Result ls = run({"cache", "ls", "--cache-dir", dir});
  EXPECT_EQ(ls.exit_code, 0) << ls.describe();
  EXPECT_TRUE(contains(ls.out, "implausibly large")) << ls.describe();
  EXPECT_TRUE(contains(ls.out, "100.0 GiB")) << "the file's size, in its row\n" << ls.describe();
  EXPECT_TRUE(contains(ls.out, "8 entries")) << ls.describe();

  const Result stats = run({"cache", "stats", "--cache-dir", dir});
  EXPECT_EQ(stats.exit_code, 0) << stats.describe();
  EXPECT_FALSE(contains(stats.out, "GiB of")) << "counts what is on disk\n" << stats.describe();
  EXPECT_TRUE(contains(stats.out, "1 of them bad")) << stats.describe();

  const Result verify = run({"cache", "verify", "--cache-dir", dir});
  EXPECT_NE(verify.exit_code, 0) << verify.describe();
  EXPECT_TRUE(contains(verify.out, "8 entries checked, 1 bad")) << verify.describe();

  const Result gc = run({"cache", "gc", "--cache-dir", dir});
  EXPECT_EQ(gc.exit_code, 0) << gc.describe();
  EXPECT_TRUE(contains(gc.out, "evicted 0 entries")) << gc.describe();
  EXPECT_EQ(entry_files(dir), 8u) << "no valid entry removed\n" << gc.describe();
}

// ---------------------------------------------------------------------------------------
// Reports

// A directory that the store refuses (writable by others, another user's), a path that is a
// file or a FIFO: every cache command fails with one error naming it, none says "0 bad".
TEST_F(CacheHostile, DirectoryThatIsNotReadIsAnErrorForEveryCommand) {
  const std::string open_to_all = home_ / "open";
  fill(open_to_all, 2);
  ASSERT_EQ(::chmod(open_to_all.c_str(), 0777), 0);
  const std::string foreign = home_ / "foreign";
  fill(foreign, 2);
  const bool can_chown = ::chown(foreign.c_str(), kNobody, kNobody) == 0;
  const std::string file = home_ / "file";
  write_file(file, "not a directory");
  const std::string fifo = home_ / "fifo";
  make_fifo(fifo);

  struct Case {
    std::string dir, says;
  };
  std::vector<Case> cases = {{open_to_all, "chmod go-w"},
                             {file, "is a regular file, not a directory"},
                             {fifo, "is a FIFO, not a directory"}};
  if (can_chown && ::geteuid() != kNobody) cases.push_back({foreign, "belongs to uid"});
  for (const Case& c : cases) {
    for (const std::vector<std::string>& command :
         std::vector<std::vector<std::string>>{{"verify"},
                                               {"verify", "--remove"},
                                               {"ls"},
                                               {"stats"},
                                               {"gc"},
                                               {"clear"},
                                               {"explain", sample_entry(0).key}}) {
      std::vector<std::string> args = {"cache"};
      args.insert(args.end(), command.begin(), command.end());
      args.insert(args.end(), {"--cache-dir", c.dir});
      const Result r = run(args);
      EXPECT_NE(r.exit_code, 0) << r.describe();
      const std::vector<std::string> errors =
          r.err_lines("normjit: error: invalid --cache-dir '" + c.dir + "': ");
      ASSERT_EQ(errors.size(), 1u) << r.describe();
      EXPECT_TRUE(contains(errors[0], c.says)) << errors[0];
      EXPECT_FALSE(contains(r.out, "0 bad")) << r.describe();
    }
  }
  EXPECT_EQ(entry_files(open_to_all), 2u) << "a refused directory is not touched";
  if (!can_chown) GTEST_SKIP() << "cannot chown to uid " << kNobody << ": the foreign case ran not";
}

// Removal that the file system refuses (a directory without write permission; as root, run as
// nobody, since root ignores permission bits) is reported name by name, and the exit fails.
TEST_F(CacheHostile, ClearAndGcOfAnUnwritableDirectoryFail) {
  const std::string dir = home_ / "cache";
  fill(dir, 6);
  // A killed writer's temporary file, which gc --temp-age 0 sweeps.
  const std::string temporary = dir + "/.tmp-" + std::string(64, 'a') + "-124-00000000deadbeef";
  write_file(temporary, "half an entry");
  Options options;
  if (::geteuid() == 0) {
    options.uid = static_cast<int>(kNobody);
    std::error_code ignored;
    ASSERT_EQ(::chown(dir.c_str(), kNobody, kNobody), 0) << std::strerror(errno);
    for (const auto& e : std::filesystem::directory_iterator(dir, ignored)) {
      ASSERT_EQ(::chown(e.path().c_str(), kNobody, kNobody), 0);
    }
  }
  ASSERT_EQ(::chmod(dir.c_str(), 0500), 0);

  const Result clear = run({"cache", "clear", "--cache-dir", dir}, options);
  if (clear.exit_code == 126) GTEST_SKIP() << "cannot run as uid " << kNobody;
  EXPECT_NE(clear.exit_code, 0) << clear.describe();
  EXPECT_TRUE(contains(clear.out, "removed 0 entries")) << clear.describe();
  EXPECT_EQ(count_of(clear.out, "NOT REMOVED "), 6u) << clear.describe();
  EXPECT_EQ(clear.err_lines("normjit: error: cannot clear " + dir + ": 6 of 6 entries").size(), 1u)
      << clear.describe();

  const Result gc = run({"cache", "gc", "--cache-dir", dir, "--max-bytes", "0"}, options);
  EXPECT_NE(gc.exit_code, 0) << gc.describe();
  EXPECT_TRUE(contains(gc.out, "evicted 0 entries")) << gc.describe();
  EXPECT_EQ(gc.err_lines("normjit: error: cannot shrink " + dir).size(), 1u) << gc.describe();
  // A temporary file it cannot sweep is named, and fails the run (it said "freed 0 B").
  const Result swept = run({"cache", "gc", "--cache-dir", dir, "--temp-age", "0"}, options);
  EXPECT_NE(swept.exit_code, 0) << swept.describe();
  EXPECT_TRUE(contains(swept.out, "NOT REMOVED " + temporary)) << swept.describe();
  EXPECT_EQ(swept.err_lines("normjit: error: cannot sweep " + dir + ": 1 temporary file").size(),
            1u)
      << swept.describe();
  ::chmod(dir.c_str(), 0700);
  EXPECT_EQ(entry_files(dir), 6u);
  EXPECT_TRUE(std::filesystem::exists(temporary));
}

// `cache clear` removes what a running prewarm wrote: its read-back then says so, and does not
// point at warnings that were never printed.
TEST_F(CacheHostile, PrewarmRacingClearSaysWhatHappened) {
  const std::string manifest = home_ / "manifest.json";
  write_file(manifest, manifest_of(kSpecs));
  const std::string dir = home_ / "cache";
  Options slow;
  slow.deadline = kPrewarmDeadlineSeconds;
  // Every write pauses half-way, so the second kernel is still being written (or compiled)
  // when the clear below removes the first.
  slow.env = {"NORMJIT_CACHE_DIR=" + (home_ / "default-cache"), "NORMJIT_CACHE_READONLY",
              "NORMJIT_CACHE_TEST_PAUSE_WRITE=3"};
  Child prewarm =
      start({"prewarm", manifest, "--arch", "sm_90", "--cache-dir", dir, "-j", "1"}, slow, io_);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (entry_files(dir) == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(entry_files(dir), 1u);
  const Result clear = run({"cache", "clear", "--cache-dir", dir});
  EXPECT_EQ(clear.exit_code, 0) << clear.describe();
  EXPECT_TRUE(contains(clear.out, "removed 1 entry")) << clear.describe();

  const Result r = finish(prewarm);
  ASSERT_FALSE(r.timed_out) << r.describe();
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(r.err_lines("normjit: warning").empty()) << r.describe();
  EXPECT_FALSE(contains(r.err, "see the warnings above")) << r.describe();
  EXPECT_TRUE(contains(r.err, "another process removed it")) << r.describe();
}

}  // namespace
}  // namespace normjit::testing
