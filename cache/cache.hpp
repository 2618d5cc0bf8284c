// cache/: the content-addressed on-disk store of compiled kernels. No CUDA dependency.
//
// Layers: one writable directory plus read-only prewarmed layers, searched in that order.
// Every problem with a directory or an entry degrades (memory-only, or a miss) with one
// warning; nothing here throws for I/O trouble.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normjit::cache {

constexpr int kFormatVersion = 1;
constexpr uint64_t kDefaultMaxBytes = uint64_t{2} << 30;  // 2 GiB: NORMJIT_CACHE_MAX_BYTES unset
// No cap, for a directory that must end up complete (a prewarm's): half of uint64_t's range, so
// that adding an entry's size to a total cannot wrap.
constexpr uint64_t kNoMaxBytes = ~uint64_t{0} / 2;
// Temporary files older than this are taken for leftovers of killed writers and swept.
constexpr int64_t kStaleTemporarySeconds = 3600;

std::string sha256_hex(std::string_view data);

// Everything that decides the compiled bytes. Never paths, the working directory or the
// order in which options were given.
struct KeyInputs {
  std::string source;                // emitted entry translation unit
  std::string name_expression;       // instantiated by nvrtcAddNameExpression
  std::string template_digest;       // digest of the embedded template bundle
  std::vector<std::string> options;  // NVRTC options; canonicalized (sorted) in the preimage
  std::string target;                // exact target, "sm_90" != "sm_90a"
  std::string output_kind;           // "cubin+ptx"
  std::string compiler;              // NVRTC version and build, "nvrtc 13.0"

  // Canonical text hashed into the key: one "field: value" line per input, in a fixed order,
  // the format version first. Stored in every entry so a miss can be explained.
  std::string preimage() const;
  std::string key() const { return sha256_hex(preimage()); }
};

// The value of one preimage line with its escapes undone ("source: a\\nb" -> "a\nb"); the
// preimage escapes backslashes, newlines and control bytes so that every input is one line.
std::string preimage_unescape(std::string_view escaped);

struct Entry {
  std::string key;       // 64 hex digits
  std::string preimage;  // KeyInputs::preimage() of the key
  std::string metadata;  // JSON object: spec, plan, lowered name, launch shape, versions, created
  std::string cubin;
  std::string ptx;
};

// The on-disk bytes of an entry (docs/cache-format.md), and back. decode_entry() checks
// everything: magic, version, key (== expected_key and == SHA-256 of the stored preimage),
// lengths (== file size), payload checksum; on failure it returns nullopt and says why.
std::string encode_entry(const Entry& entry);
std::optional<Entry> decode_entry(std::string_view bytes, const std::string& expected_key,
                                  std::string* problem = nullptr);

struct StoreOptions {
  std::string dir;                        // writable layer; empty means memory-only
  std::vector<std::string> readonly;      // read-only layers, searched after dir, in order
  uint64_t max_bytes = kDefaultMaxBytes;  // cap on the writable layer
  bool max_bytes_from_env = false;        // from_env(): max_bytes came from the variable
  std::string max_bytes_problem;          // from_env(): why the variable's value was not used
  // The writable layer must be usable: where it cannot be created, opened, trusted or written,
  // the constructor throws Error(kInvalidArgument) saying why, instead of warning and caching
  // in memory only (the engine of a prewarm, which must not pass for a success).
  bool must_write = false;

  // NORMJIT_CACHE_DIR (default $XDG_CACHE_HOME/normjit, else ~/.cache/normjit),
  // NORMJIT_CACHE_READONLY (colon-separated), NORMJIT_CACHE_MAX_BYTES.
  static StoreOptions from_env();
  // The writable layer's directory alone, as from_env() finds it ("" and a warning without a
  // home directory): for a prewarm, which reads neither of the other variables.
  static std::string dir_from_env();
};

// NORMJIT_CACHE_MAX_BYTES syntax: a byte count with an optional binary suffix K, M, G or T
// (KiB, MiB, ... also accepted), e.g. "2G", "512MiB", "1048576", read exactly as given (no
// spaces around it). nullopt when malformed.
std::optional<uint64_t> parse_byte_size(std::string_view text);
// Why NORMJIT_CACHE_MAX_BYTES's value is not used ("" when it is unset or a byte size), without
// the warning from_env() gives: for a command that refuses to go on instead.
std::string max_bytes_env_problem();

struct StoreStats {
  uint64_t hits = 0;         // load() found a valid entry
  uint64_t misses = 0;       // load() found none
  uint64_t bad_entries = 0;  // entries rejected as corrupt, truncated, foreign or stale
  uint64_t writes = 0;       // entries published by save()
  uint64_t evictions = 0;    // entries removed to stay under max_bytes
};

struct EntryInfo {
  std::string key;
  std::string path;
  std::string layer;      // directory of the layer holding it
  bool readonly = false;  // in a read-only layer
  uint64_t bytes = 0;     // the file's size; 0 when the name is not a regular file
  uint64_t disk_bytes =
      0;                 // what it occupies on disk (less for a sparse file): what the cap counts
  int64_t last_use = 0;  // unix seconds, from the entry's last-use stamp
  std::string metadata;  // the entry's metadata JSON (empty when unreadable)
  bool valid = false;    // passed every check
  std::string problem;   // why not, when !valid
  std::string preimage;  // the stored preimage (empty when unreadable)
};

// Why a request misses: `normjit cache explain`. Lines are compared as multisets, so a changed
// option shows as one line missing and one extra.
struct Explanation {
  std::string key;                   // SHA-256 of the preimage asked about
  std::optional<EntryInfo> found;    // a valid entry with that key, first layer holding one
  std::optional<EntryInfo> nearest;  // the valid entry of another key sharing the most lines
  size_t shared_lines = 0;           // lines of the preimage that nearest also has
  size_t total_lines = 0;            // lines of the preimage
  std::vector<std::string> missing;  // lines of the preimage that nearest lacks
  std::vector<std::string> extra;    // lines of nearest's preimage that the preimage lacks
  std::string source_difference;     // the first differing source line, when sources differ
};
Explanation explain(const std::vector<EntryInfo>& entries, const std::string& preimage);

// What clear() and gc() did. Maintenance reports what it removed and what it could not, so that
// a command never claims more than happened.
struct Removal {
  uint64_t entries = 0;               // entry names removed
  uint64_t bytes = 0;                 // disk bytes freed (gc: swept temporaries included)
  uint64_t temporary_bytes = 0;       // of bytes, the temporary files' (writes never finished)
  std::vector<std::string> failures;  // "<path>: <why>" for each name that should have gone
};

class Store {
 public:
  explicit Store(StoreOptions options);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // A valid entry for key from the first layer that has one, or nullopt. Bad entries are
  // misses (one warning each; removed from the writable layer). Stamps last use. Thread-safe.
  // counted false: a second look after a counted miss (before compiling, in case another
  // process saved it meanwhile), left out of the hit and miss counters.
  std::optional<Entry> load(const std::string& key, bool counted = true);
  // Publishes atomically (unique temp + fsync + rename), then evicts least recently used
  // entries above max_bytes. Failures warn once and leave the store memory-only. Thread-safe.
  // A memory-only store keeps what it is given in memory (LRU, max_bytes). Throws
  // Error(kInvalidArgument) if entry.key is not the SHA-256 of entry.preimage: every load
  // would reject such an entry.
  void save(const Entry& entry);
  // The driver rejected the cubin of a loaded entry: remove it (writable layer) so that
  // the rebuild replaces it.
  void discard(const std::string& key);

  bool writable() const;  // false when memory-only
  // Whether the writable directory holds a valid entry for key: what a prewarm has made, where
  // a load may also find the memory layer (a save that failed, a name a directory has taken).
  bool published(const std::string& key);
  const StoreOptions& options() const;
  StoreStats stats() const;
  // Counters of every Store that used this writable directory, persisted best-effort in
  // DIR/stats.json (at destruction, after a save, every 64 loads); zeros when memory-only.
  StoreStats persisted_stats() const;

  // Maintenance, for `normjit cache`.
  // Every entry of every layer, in layer order. Without verify, valid means the header and the
  // preimage check out (no cubin is read); verify also checks the payload checksum.
  std::vector<EntryInfo> list(bool verify) const;
  // The entries of one key in every layer, in layer order, each checked whole (the payload's
  // checksum included): what a load of key would find. Empty for a name that is not a key.
  std::vector<EntryInfo> list_key(const std::string& key) const;
  // Evicts LRU down to max_bytes and sweeps temporaries older than kStaleTemporarySeconds;
  // the bytes freed count those the constructor swept too (once, by the first gc).
  // Sizes are counted as they are on disk; files that cannot be entries (implausible sizes) go
  // before any entry, and names that are not regular files are neither counted nor removed.
  Removal gc(uint64_t max_bytes);
  // Removes every name of the writable layer that has an entry's name: files, and empty
  // directories and other non-regular files squatting on such a name.
  Removal clear();
  // Removes the name of key from the writable layer, whatever it holds (`cache verify
  // --remove`); true when it is gone, else false and *problem says why it stays.
  bool remove(const std::string& key, std::string* problem);
  // Why the writable directory is not read at all (refused, cannot be opened or created): the
  // warning given at construction. Empty when it is read or none was configured.
  const std::string& directory_problem() const;
  // The same for each read-only layer that is skipped, one line each.
  std::vector<std::string> readonly_problems() const;
  // The read-only layers searched, as configured, in order: options().readonly less the empty
  // ones and those naming a directory already searched (the writable one or an earlier layer,
  // under another name).
  std::vector<std::string> searched_readonly() const;
  // The temporary files (".tmp-*": writes a process did not finish, never loaded) of every
  // layer, as paths: listed by `cache ls` and `prewarm --check`, which would ship them.
  std::vector<std::string> temporary_files() const;
  // Removes temporary files of the writable layer older than that (left by killed writers):
  // the bytes freed, and each name that could not be removed (entries stays 0).
  Removal sweep_temporaries(int64_t older_than_seconds);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Every warning of the library goes through this sink (default: "normjit: warning: ..." on
// stderr). Tools and tests replace it.
using WarningSink = std::function<void(const std::string&)>;
void set_warning_sink(WarningSink sink);
void warn(const std::string& message);

// Test hooks, read from the environment at each save() so that forked children and the
// normjit command honour them too (docs/cache-format.md):
//   NORMJIT_CACHE_FAULT=enospc|eacces      the write path fails as if the disk were full or
//                                          the directory unwritable
//   NORMJIT_CACHE_TEST_PAUSE_WRITE=SECONDS the writer sleeps after writing half the temp file

}  // namespace normjit::cache
