// normjit prewarm: compile every (spec, arch) of a manifest into a cache directory, in
// parallel, on a build machine without a GPU; --check lists what a directory lacks.
//
// Never touches the CUDA driver (Engine::precompile needs only NVRTC), so it runs in image
// builds and CI. See docs/deployment.md.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "cache/cache.hpp"
#include "generator/plan.hpp"
#include "normjit/error.hpp"
#include "normjit/normjit.hpp"
#include "runtime/compiler.hpp"
#include "tools/commands.hpp"
#include "tools/util.hpp"

namespace normjit::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct PrewarmOptions {
  std::string manifest;
  std::vector<std::string> archs;
  std::string cache_dir;  // empty: not given ("" given is refused, not the default)
  int jobs = 0;           // 0: one per hardware thread
  bool check = false;
};

struct ManifestEntry {
  NormSpec spec;
  std::string where;  // "entry 3 (line 9)", for messages
};

// ---------------------------------------------------------------------------------------
// The manifest

// A manifest lists specs of about a hundred bytes each: 16 MiB holds over a hundred thousand.
// A larger file, or one that never ends (/dev/zero, a pipe), is refused before it fills memory.
constexpr size_t kMaxManifestBytes = size_t{16} << 20;
// Nesting a manifest may have: it needs 3 ([{"shape": [...]}]); printing or destroying a JSON
// value recurses on its depth, so a deeper one is refused while it is read.
constexpr int kMaxManifestDepth = 32;

std::string read_manifest(const std::string& path) {
  return read_bounded_file("manifest", path, kMaxManifestBytes, "split it into several manifests");
}

// The manifest's JSON value, built from nlohmann's SAX events (as its own DOM parser does, a
// heap stack and no recursion), refusing on the way what that parser accepts but a manifest
// must not hold: nesting deeper than kMaxManifestDepth, a key given twice in one object (the
// DOM keeps the last one silently), and integers past 64 bits (the DOM turns them into doubles,
// later reported as "not an integer"). Parsing stops at the first problem: error() says what,
// entry() in which top-level element.
class ManifestReader {
 public:
  using Json = nlohmann::json;
  explicit ManifestReader(Json& root) : root_(root) {}

  bool null() { return add(nullptr); }
  bool boolean(bool v) { return add(v); }
  bool number_integer(Json::number_integer_t v) { return add(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return add(v); }
  bool number_float(Json::number_float_t v, const std::string& text) {
    if (text.find_first_of(".eE") == std::string::npos) {  // an integer too long for 64 bits
      value();
      return fail("invalid " + (field_.empty() ? std::string("number") : field_) + " " +
                  excerpt(text) + ": is past the 64-bit integer range");
    }
    return add(v);
  }
  bool string(std::string& v) { return add(std::move(v)); }
  bool binary(Json::binary_t& v) { return add(Json::binary(std::move(v))); }
  bool start_object(size_t /*size*/) { return open(Json::object()); }
  bool start_array(size_t /*size*/) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& k) {
    if (!frames_.back().keys.insert(k).second) {
      return fail("invalid field " + json_key(k) + ": is given twice; give each field once");
    }
    if (frames_.size() == 2 && !frames_[0].value->is_object()) field_ = k;  // an entry's field
    key_ = std::move(k);
    return true;
  }
  bool parse_error(size_t /*position*/, const std::string& last_token,
                   const nlohmann::json::exception& e) {
    if (dynamic_cast<const nlohmann::json::out_of_range*>(&e) != nullptr) {
      // A number no double holds (1e400, or an integer of 400 digits): a bad value of an entry
      // rather than bad JSON.
      value();
      const bool integer = last_token.find_first_of(".eE") == std::string::npos;
      return fail(
          "invalid " + (field_.empty() ? std::string("number") : field_) + " " +
          excerpt(last_token) +
          (integer ? ": is past the 64-bit integer range" : ": is out of the range of a double"));
    }
    // "[json.exception.parse_error.101] parse error at line 3, column 5: ...; last read: 'TOKEN'"
    // without the tag, the token (a whole unterminated string, maybe) excerpted.
    std::string message = e.what();
    if (const size_t tag = message.find("] "); tag != std::string::npos) {
      message = message.substr(tag + 2);
    }
    const std::string token = "'" + last_token + "'";
    if (const size_t at = message.rfind(token); !last_token.empty() && at != std::string::npos) {
      message.replace(at, token.size(), quoted_excerpt(last_token));
    }
    syntax_error_ = true;
    return fail(excerpt(message, 400));
  }

  const std::string& error() const { return error_; }
  bool syntax_error() const { return syntax_error_; }
  int64_t entry() const { return entry_; }  // -1: not inside a top-level element

 private:
  struct Frame {
    Json* value;                 // the open list or object
    std::set<std::string> keys;  // of an object: the keys seen so far
  };

  static std::string json_key(const std::string& k) {
    return excerpt(Json(k).dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace));
  }

  // Every value starts here: one directly inside the top-level list is the next entry.
  void value() {
    if (frames_.size() == 1 && frames_[0].value->is_array()) {
      ++entry_;
      field_.clear();
    }
  }
  // Places v in the open list or object (or as the root) and returns where it now lives: a list
  // grows only after its last element is closed, so the pointer stays valid while it is open.
  Json* place(Json v) {
    value();
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Json& parent = *frames_.back().value;
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    Json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }
  bool add(Json v) {
    place(std::move(v));
    return true;
  }
  bool open(Json container) {
    if (frames_.size() >= size_t{kMaxManifestDepth}) {
      value();
      return fail("nests lists and objects deeper than " + std::to_string(kMaxManifestDepth) +
                  " levels; a manifest needs 3");
    }
    frames_.push_back({place(std::move(container)), {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }
  bool fail(std::string why) {
    error_ = std::move(why);
    return false;
  }

  Json& root_;
  std::vector<Frame> frames_;
  std::string key_;  // the key of the next value of the open object
  int64_t entry_ = -1;
  std::string field_;  // the entry's field whose value is being read
  std::string error_;
  bool syntax_error_ = false;
};

// The line (1-based) on which each element of the top-level JSON array starts. The parser
// does not report positions of values, and a scan that only tracks strings and nesting is
// enough to point a person at the entry an error is about; it needs no well-formed text, so it
// also serves a manifest that ManifestReader stopped in.
std::vector<int> element_lines(std::string_view text) {
  std::vector<int> lines;
  int line = 1, depth = 0;
  bool in_string = false, escaped = false, expect_element = false;
  for (const char c : text) {
    if (c == '\n') ++line;
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    if (depth == 1 && expect_element && c != ']') {
      lines.push_back(line);
      expect_element = false;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth == 1) expect_element = true;
        break;
      case ']':
      case '}':
        --depth;
        break;
      case ',':
        if (depth == 1) expect_element = true;
        break;
      default:
        break;
    }
  }
  return lines;
}

// A JSON value as it appears in an error message: compact, one line, bounded. Only the values
// of a manifest that ManifestReader let through, so dump() recurses at most kMaxManifestDepth.
std::string json_text(const nlohmann::json& value) {
  return excerpt(
      value.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace), 60);
}

[[noreturn]] void wrong_type(const std::string& field, const nlohmann::json& value,
                             const std::string& expected) {
  throw_invalid_argument(field, json_text(value),
                         std::string("is a JSON ") + value.type_name() + "; expected " + expected);
}

std::string string_field(const std::string& field, const nlohmann::json& value,
                         const char* example) {
  if (!value.is_string()) wrong_type(field, value, std::string("a string such as ") + example);
  return value.get<std::string>();
}

int64_t integer_field(const std::string& field, const nlohmann::json& value, int64_t min,
                      int64_t max) {
  if (!value.is_number_integer()) wrong_type(field, value, "an integer");
  const bool fits = value.is_number_unsigned()
                        ? value.get<uint64_t>() <= static_cast<uint64_t>(max)
                        : value.get<int64_t>() >= min && value.get<int64_t>() <= max;
  if (!fits) {
    throw_invalid_argument(field, json_text(value),
                           "is out of range; expected an integer from " + std::to_string(min) +
                               " to " + std::to_string(max));
  }
  return value.get<int64_t>();
}

// One manifest entry: the spec flags' names as fields, omitted ones taking the flags' defaults.
NormSpec entry_spec(const nlohmann::json& entry) {
  constexpr const char* kExample = "{\"op\": \"rmsnorm\", \"shape\": [8, 64, 32, 32]}";
  if (!entry.is_object()) {
    throw_invalid_argument(
        "entry", json_text(entry),
        std::string("is a JSON ") + entry.type_name() + "; expected an object such as " + kExample);
  }
  SpecFields f;
  for (const auto& [name, value] : entry.items()) {
    if (name == "op") {
      f.op = parse_op(string_field(name, value, "\"rmsnorm\""), name);
    } else if (name == "shape") {
      constexpr const char* kShape = "a list of integers such as [8, 64, 32, 32]";
      if (value.is_string()) {  // the flag's syntax, "8,64,32,32", is accepted too
        f.shape = parse_shape(value.get<std::string>(), name);
      } else if (value.is_array()) {
        std::vector<int64_t> shape;
        for (const nlohmann::json& size : value) {
          if (!size.is_number_integer()) {
            throw_invalid_argument(
                name, json_text(value),
                "size " + json_text(size) + " is not an integer; expected " + kShape);
          }
          shape.push_back(integer_field(name, size, std::numeric_limits<int64_t>::min(),
                                        std::numeric_limits<int64_t>::max()));
        }
        f.shape = std::move(shape);
      } else {
        wrong_type(name, value, kShape);
      }
    } else if (name == "dtype") {
      f.dtype = parse_dtype(string_field(name, value, "\"bf16\""), name);
    } else if (name == "normalized_dims") {
      f.normalized_dims = int(integer_field(name, value, 0, kMaxRank));
    } else if (name == "groups") {
      f.groups = integer_field(name, value, std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max());
    } else if (name == "affine") {
      f.affine = parse_affine(string_field(name, value, "\"both\""), name);
    } else if (name == "eps") {
      if (!value.is_number()) wrong_type(name, value, "a number such as 1e-5");
      f.eps = value.get<double>();
    } else if (name == "param_dtype") {
      f.param_dtype = parse_dtype(string_field(name, value, "\"f32\""), name);
    } else if (name == "out_dtype") {
      f.out_dtype = parse_out_dtype(string_field(name, value, "\"e4m3\""), name);
    } else if (name == "residual") {
      f.residual = parse_dtype(string_field(name, value, "\"bf16\""), name);
    } else if (name == "weight_offset") {
      if (!value.is_number()) wrong_type(name, value, "a number such as 1");
      f.weight_offset = value.get<double>();  // validate() checks the range
    } else if (name == "activation") {
      f.activation = parse_activation(string_field(name, value, "\"silu\""), name);
    } else if (name == "save_stats") {
      if (!value.is_boolean()) wrong_type(name, value, "true or false");
      f.save_stats = value.get<bool>();
    } else if (name == "layout") {
      f.layout = parse_layout(string_field(name, value, "\"nhwc\""), name);
    } else if (name == "backward") {
      if (!value.is_boolean()) wrong_type(name, value, "true or false");
      f.backward = value.get<bool>();
    } else {
      throw_invalid_argument("field", json_text(nlohmann::json(name)),
                             "unknown; the fields are op, shape, dtype, normalized_dims, groups, "
                             "affine, eps, param_dtype, out_dtype, residual, weight_offset, "
                             "activation, save_stats, layout, backward");
    }
  }
  return NormSpec::from_fields(f);
}

// Every entry, validated before anything compiles: a bad manifest is one error naming the
// entry (index and line) and the offending value.
std::vector<ManifestEntry> parse_manifest(const std::string& path) {
  const std::string text = read_manifest(path);
  const std::string what = "manifest " + quoted_excerpt(path, kPathExcerpt);
  const auto where_of = [](size_t i, const std::vector<int>& lines) {
    std::string where = "entry " + std::to_string(i);
    if (i < lines.size()) where += " (line " + std::to_string(lines[i]) + ")";
    return where;
  };
  nlohmann::json manifest;
  ManifestReader reader(manifest);
  if (!nlohmann::json::sax_parse(text, &reader)) {
    if (reader.syntax_error()) {
      throw Error(ErrorCode::kInvalidArgument, what + " is not valid JSON: " + reader.error());
    }
    if (reader.entry() < 0) throw Error(ErrorCode::kInvalidArgument, what + ": " + reader.error());
    throw Error(ErrorCode::kInvalidArgument,
                what + ", " + where_of(size_t(reader.entry()), element_lines(text)) + ": " +
                    reader.error());
  }
  if (!manifest.is_array()) {
    throw Error(ErrorCode::kInvalidArgument,
                what + " is a JSON " + std::string(manifest.type_name()) +
                    "; expected a list of specs such as [{\"op\": \"rmsnorm\", \"shape\": [8, "
                    "64, 32, 32]}]");
  }
  if (manifest.empty()) {  // a generator that produced nothing: no kernel is no success
    throw Error(ErrorCode::kInvalidArgument,
                what +
                    " lists no spec; expected a list of specs such as [{\"op\": \"rmsnorm\", "
                    "\"shape\": [8, 64, 32, 32]}]");
  }
  const std::vector<int> lines = element_lines(text);
  std::vector<ManifestEntry> entries;
  for (size_t i = 0; i < manifest.size(); ++i) {
    const std::string where = where_of(i, lines);
    try {
      entries.push_back({entry_spec(manifest[i]), where});
    } catch (const Error& e) {
      throw Error(e.code(), what + ", " + where + ": " + e.what());
    }
  }
  return entries;
}

// ---------------------------------------------------------------------------------------
// Shared pieces of prewarm and --check

// Each --arch value is a comma-separated list, split here rather than by CLI11: its delimiter
// turned ",," into no values and then took the next argument ("--check") as a target.
std::vector<Target> parse_archs(const std::vector<std::string>& archs) {
  std::vector<Target> targets;
  for (const std::string& list : archs) {
    size_t begin = 0;
    for (;;) {
      const size_t comma = std::min(list.find(',', begin), list.size());
      const std::string arch = list.substr(begin, comma - begin);
      if (arch.empty()) {
        throw_invalid_argument("--arch", quoted_excerpt(list),
                               "names an empty target; list targets like sm_80,sm_90");
      }
      const Target target = parse_arch("--arch", arch);
      if (std::find(targets.begin(), targets.end(), target) == targets.end()) {
        targets.push_back(target);
      }
      if (comma == list.size()) break;
      begin = comma + 1;
    }
  }
  if (targets.empty()) {
    throw_invalid_argument("--arch", "''", "name at least one target, e.g. --arch sm_80,sm_90");
  }
  return targets;
}

std::string cache_dir_of(const PrewarmOptions& o) {
  const std::string dir = o.cache_dir.empty() ? default_cache_dir() : o.cache_dir;
  if (dir.empty()) {
    throw_invalid_argument("--cache-dir", "(missing)",
                           "no default cache directory (HOME is unset); name one");
  }
  return dir;
}

// Whether dir exists (false: it does not, which --check reports as holding nothing). Anything
// else that keeps it from being read is an error naming it, not every kernel "missing".
bool check_directory(const PrewarmOptions& o, const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    throw_invalid_argument(cache_dir_source(o.cache_dir), "'" + dir + "'",
                           std::string("cannot be read (") + std::strerror(errno) + ")");
  }
  if (!S_ISDIR(st.st_mode)) {
    throw_invalid_argument(cache_dir_source(o.cache_dir), "'" + dir + "'", "is not a directory");
  }
  return true;
}

// A store that only reads dir: the entries a later process would find there, and nothing
// written, created, stamped or removed on the way (the directory may be a shipped image).
std::unique_ptr<cache::Store> read_only_store(const std::string& dir) {
  cache::StoreOptions options;
  options.readonly = {dir};
  return std::make_unique<cache::Store>(options);
}

// One (entry, arch) pair: one kernel.
struct Task {
  size_t entry = 0;
  Target target;
  std::string key;  // empty when the spec cannot be planned for the target (error says why)
  // The kernels of the spec's other batch class (generator/plan.hpp: a row kernel with
  // parameters, or the backward of rows of 2049-4096, has a second plan for launches of another
  // size), which precompile() compiles with it and a JIT-off engine loads.
  struct OtherClass {
    NormSpec spec;
    std::string key;
  };
  std::vector<OtherClass> others;
  std::string error;  // why it failed
  // The keys of its kernels, its own first (none when it cannot be planned).
  std::vector<std::string> keys() const {
    std::vector<std::string> all;
    if (key.empty()) return all;
    all.push_back(key);
    for (const OtherClass& other : others) all.push_back(other.key);
    return all;
  }
  enum class Result { kPending, kCompiled, kCached, kFailed } result = Result::kPending;
};

std::vector<Task> make_tasks(const std::vector<ManifestEntry>& entries,
                             const std::vector<Target>& targets) {
  std::vector<Task> tasks;
  for (size_t i = 0; i < entries.size(); ++i) {
    for (const Target& target : targets) {
      Task t;
      t.entry = i;
      t.target = target;
      try {
        t.key = key_inputs(entries[i].spec, target).key();
        const std::vector<NormSpec> classes = batch_class_specs(entries[i].spec);
        for (size_t c = 1; c < classes.size(); ++c) {
          // A class whose plan comes out the same as the spec's (rows whose parameters load
          // with x either way) is the same kernel: one entry, counted once.
          std::string other_key = key_inputs(classes[c], target).key();
          if (other_key != t.key) t.others.push_back({classes[c], std::move(other_key)});
        }
      } catch (const Error& e) {
        // Not yet supported (or not plannable for this target): a failed kernel, not a bad
        // manifest, so that the rest still compiles.
        t.error = e.what();
        t.result = Task::Result::kFailed;
      }
      tasks.push_back(std::move(t));
    }
  }
  return tasks;
}

std::string describe(const std::vector<ManifestEntry>& entries, const Task& t) {
  return entries[t.entry].spec.to_string() + " arch=" + t.target.text();
}

std::string plural(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string duration_text(double seconds) {
  char text[32];
  if (seconds < 60) {
    std::snprintf(text, sizeof(text), "%.0fs", seconds);
  } else if (seconds < 3600) {
    std::snprintf(text, sizeof(text), "%dm%02ds", int(seconds) / 60, int(seconds) % 60);
  } else {
    std::snprintf(text, sizeof(text), "%dh%02dm", int(seconds) / 3600, int(seconds) / 60 % 60);
  }
  return text;
}

// ---------------------------------------------------------------------------------------
// --check

void run_check(const PrewarmOptions& o, const std::vector<ManifestEntry>& entries,
               const std::vector<Target>& targets) {
  const std::string dir = cache_dir_of(o);
  const bool exists = check_directory(o, dir);
  const auto store = exists ? read_only_store(dir) : nullptr;
  if (store && !store->readonly_problems().empty()) {
    throw_invalid_argument(cache_dir_source(o.cache_dir), "'" + dir + "'",
                           "cannot be read: " + store->readonly_problems()[0]);
  }
  const std::vector<Task> tasks = make_tasks(entries, targets);
  // Every kernel a JIT-off engine loads for the manifest: each spec's, and that of its other
  // batch class where it has one.
  size_t present = 0, missing = 0, unknown = 0;
  // How a kernel that did not load is reported: "missing" (no entry), or "corrupt" with the
  // problem of the entry that every load rejects (to end its line).
  const auto absent = [&](const std::string& key) -> std::pair<const char*, std::string> {
    if (store) {
      for (const cache::EntryInfo& info : store->list_key(key)) {
        if (!info.valid) return {"corrupt", ": " + info.problem};
      }
    }
    return {"missing", ""};
  };
  // Each kernel once, as prewarm compiles it: entries that differ only in the batch or eps, and
  // targets the plan does not tell apart, share their kernels (it counted and printed each
  // (entry, arch) pair's).
  std::set<std::string> checked;
  for (const Task& t : tasks) {
    const std::string what = entries[t.entry].where + ": " + describe(entries, t);
    if (t.key.empty()) {
      ++unknown;
      std::printf("cannot check %s: %s\n", what.c_str(), indent(t.error).c_str());
      continue;
    }
    if (checked.insert(t.key).second) {
      if (store && store->load(t.key)) {
        ++present;
      } else {
        ++missing;
        const auto [state, why] = absent(t.key);
        std::printf("%s %s key=%s%s\n", state, what.c_str(), t.key.c_str(), why.c_str());
      }
    }
    for (const Task::OtherClass& other : t.others) {
      if (!checked.insert(other.key).second) continue;
      if (store && store->load(other.key)) {
        ++present;
      } else {
        ++missing;
        const auto [state, why] = absent(other.key);
        std::printf("%s %s: the kernel of its other batch class, %s arch=%s key=%s%s\n", state,
                    what.c_str(), other.spec.to_string().c_str(), t.target.text().c_str(),
                    other.key.c_str(), why.c_str());
      }
    }
  }
  const size_t total = present + missing + unknown;
  // Never loaded, but shipped with the directory: a prewarm that was interrupted leaves them.
  if (store) {
    if (const auto temporaries = store->temporary_files(); !temporaries.empty()) {
      std::printf(
          "note: %s holds %zu temporary file%s of writes that did not finish (e.g. %s), "
          "which would be shipped with it; 'normjit cache gc --temp-age 0 --cache-dir "
          "%s' removes them\n",
          dir.c_str(), temporaries.size(), temporaries.size() == 1 ? "" : "s",
          temporaries[0].c_str(), dir.c_str());
    }
  }
  std::printf("%s%s holds %zu of %s of %s; %zu missing%s\n", dir.c_str(),
              exists ? "" : " (no such directory)", present,
              plural(total, "kernel", "kernels").c_str(), o.manifest.c_str(), missing,
              unknown ? (", " + std::to_string(unknown) + " cannot be checked").c_str() : "");
  std::fflush(stdout);
  if (missing + unknown > 0) {
    throw Error(ErrorCode::kCacheMiss,
                std::to_string(missing + unknown) + " of " + std::to_string(total) +
                    " kernels of " + o.manifest + " are not in " + dir +
                    "; run 'normjit prewarm' with the same manifest, --arch and normjit build");
  }
}

// ---------------------------------------------------------------------------------------
// prewarm

// Progress on stderr: one rewritten line on a terminal, one line per kernel otherwise (logs
// of image builds). Warnings of the cache go through the same lock so lines never interleave.
class Progress {
 public:
  Progress(size_t total, bool terminal)
      : total_(total), terminal_(terminal), start_(Clock::now()) {}

  void finished(const std::string& what, const Task& t, double seconds) {
    std::lock_guard lock(mutex_);
    ++done_;
    if (t.result == Task::Result::kFailed) ++failed_;
    if (terminal_) {
      draw();
      return;
    }
    const char* verb = t.result == Task::Result::kCompiled ? "compiled"
                       : t.result == Task::Result::kCached ? "cached  "
                                                           : "FAILED  ";
    std::fprintf(stderr, "[%zu/%zu] %s %s (%.1fs)\n", done_, total_, verb, what.c_str(), seconds);
  }

  void warning(const std::string& message) {
    std::lock_guard lock(mutex_);
    if (terminal_) std::fputs("\r\033[K", stderr);
    std::fprintf(stderr, "normjit: warning: %s\n", message.c_str());
    if (terminal_ && done_ > 0) draw();
  }

  void end() {
    std::lock_guard lock(mutex_);
    if (terminal_ && done_ > 0) std::fputc('\n', stderr);
  }

 private:
  void draw() {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const double rate = elapsed > 0 ? double(done_) / elapsed : 0;
    const std::string eta = rate > 0 ? duration_text(double(total_ - done_) / rate) : "?";
    std::fprintf(stderr, "\r\033[K[%zu/%zu] %.2f specs/s ETA %s", done_, total_, rate, eta.c_str());
    if (failed_) std::fprintf(stderr, ", %zu failed", failed_);
    std::fflush(stderr);
  }

  std::mutex mutex_;
  const size_t total_;
  const bool terminal_;
  const Clock::time_point start_;
  size_t done_ = 0, failed_ = 0;
};

// Restores the default warning sink however the command ends.
struct SinkGuard {
  ~SinkGuard() { cache::set_warning_sink(nullptr); }
};

// A prewarm that wrote nothing would pass for a success, so an unusable directory is an error
// (the library, outside a prewarm engine, only warns and falls back to memory); checked here
// first so that the error names the flag.
void require_writable(const PrewarmOptions& o, const std::string& dir) {
  if (const std::optional<std::string> problem = cache_dir_problem(dir)) {
    throw_invalid_argument(cache_dir_source(o.cache_dir), "'" + dir + "'",
                           "prewarm cannot write its kernels there (" + *problem +
                               "), so it fails; give a directory it can create or write");
  }
}

void run_prewarm(const PrewarmOptions& o, const std::vector<ManifestEntry>& entries,
                 const std::vector<Target>& targets) {
  const std::string dir = cache_dir_of(o);
  require_writable(o, dir);
  // The directory alone, uncapped, the JIT on (EngineOptions::prewarm): it is shipped, and
  // production reads it as a read-only layer, where no cap applies; kernels of
  // NORMJIT_CACHE_READONLY layers would count as "already cached" without being in dir.
  EngineOptions engine_options;
  engine_options.cache_dir = dir;
  engine_options.prewarm = true;
  Engine engine(engine_options);

  std::vector<Task> tasks = make_tasks(entries, targets);
  // Entries that differ only in the batch, eps or a layout the kernel does not depend on share
  // their kernels, and so do targets that differ only in a part's size the plan does not use
  // (sm_90 and sm_90:114 for most kernels): compile each once. A task whose kernels (its own and
  // its other batch class's) an earlier one already has is a duplicate: [8, 4096] and [1000, 4096]
  // are the same two kernels, each the other's class.
  std::vector<size_t> work;
  std::set<std::string> keys;  // the kernels of the work, each once
  size_t duplicates = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const std::vector<std::string> kernels = tasks[i].keys();
    if (!kernels.empty() && std::all_of(kernels.begin(), kernels.end(),
                                        [&keys](const auto& k) { return keys.count(k) > 0; })) {
      ++duplicates;
      continue;
    }
    keys.insert(kernels.begin(), kernels.end());
    work.push_back(i);
  }

  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const size_t jobs =
      std::min<size_t>(o.jobs > 0 ? size_t(o.jobs) : hardware, std::max<size_t>(work.size(), 1));
  const bool terminal = ::isatty(STDERR_FILENO) == 1;
  std::fprintf(
      stderr, "prewarm: %s (%s x %s: %s and %s) into %s with %s\n",
      plural(keys.size(), "kernel", "kernels").c_str(),
      plural(entries.size(), "spec", "specs").c_str(),
      plural(targets.size(), "arch", "archs").c_str(),
      plural(work.size(), "distinct (spec, arch) pair", "distinct (spec, arch) pairs").c_str(),
      work.size() == 1 ? "its batch classes" : "their batch classes", dir.c_str(),
      plural(jobs, "thread", "threads").c_str());
  Progress progress(work.size(), terminal);
  SinkGuard restore;
  std::atomic<size_t> warnings{0};  // printed by the cache; the read-back below cites them
  cache::set_warning_sink([&progress, &warnings](const std::string& w) {
    ++warnings;
    progress.warning(w);
  });

  const Clock::time_point start = Clock::now();
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t w; (w = next.fetch_add(1)) < work.size();) {
      Task& t = tasks[work[w]];
      const Clock::time_point t0 = Clock::now();
      if (t.result != Task::Result::kFailed) {
        try {
          const bool compiled = engine.precompile(entries[t.entry].spec, t.target.text());
          t.result = compiled ? Task::Result::kCompiled : Task::Result::kCached;
        } catch (const std::exception& e) {
          t.result = Task::Result::kFailed;
          t.error = e.what();
        }
      }
      progress.finished(describe(entries, t), t,
                        std::chrono::duration<double>(Clock::now() - t0).count());
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < jobs; ++i) threads.emplace_back(worker);
  worker();
  for (std::thread& thread : threads) thread.join();
  progress.end();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // Read back what a deployment will read: a save that failed (full disk, lost permission)
  // leaves the kernel in this process's memory only, which must not pass for success.
  const auto check = read_only_store(dir);
  for (size_t i : work) {
    Task& t = tasks[i];
    if (t.result == Task::Result::kFailed) continue;
    std::string lost;  // the kernels the directory lacks, when any
    if (!check->load(t.key)) lost = "its kernel";
    for (const Task::OtherClass& other : t.others) {
      if (check->load(other.key)) continue;
      lost += std::string(lost.empty() ? "" : " and ") + "the kernel of its other batch class (" +
              other.spec.to_string() + ")";
    }
    if (lost.empty()) continue;
    t.result = Task::Result::kFailed;
    // Cite warnings only when some were printed. With none, every write succeeded, so the
    // entry was removed since by another process ('normjit cache clear' or 'gc' meanwhile).
    t.error = warnings > 0 ? "compiled, but " + lost + " not found in " + dir +
                                 " afterwards: its write failed (see the warnings above) or "
                                 "another process removed it"
                           : "compiled and written, but " + dir + " no longer holds " + lost +
                                 ": another process removed it meanwhile "
                                 "('normjit cache clear' or 'gc'?); run prewarm again";
  }

  // What the directory holds of the work's kernels now, for the summary: all of them only where
  // nothing failed.
  size_t present = 0;
  for (const std::string& key : keys) present += check->load(key) ? 1 : 0;

  size_t compiled = 0, cached = 0, failed = 0;
  for (size_t i : work) {
    const Task& t = tasks[i];
    compiled += t.result == Task::Result::kCompiled;
    cached += t.result == Task::Result::kCached;
    if (t.result == Task::Result::kFailed) {
      ++failed;
      std::fprintf(stderr, "failed: %s: %s: %s\n", entries[t.entry].where.c_str(),
                   describe(entries, t).c_str(), indent(t.error).c_str());
    }
  }
  std::fflush(stderr);
  const std::string held = present == keys.size() ? plural(keys.size(), "kernel", "kernels")
                                                  : std::to_string(present) + " of the " +
                                                        plural(keys.size(), "kernel", "kernels");
  std::printf("prewarm: %zu compiled, %zu already cached, %zu failed (%s in %s", compiled, cached,
              failed, held.c_str(), dir.c_str());
  if (duplicates) {
    std::printf(
        "; %s the kernels of another (what they differ in, the batch, eps, a layout or the "
        "part's multiprocessors or bandwidth, does not change those kernels)",
        plural(duplicates, "more (spec, arch) pair shares", "more (spec, arch) pairs share")
            .c_str());
  }
  std::printf(", %.1f s)\n", seconds);
  std::fflush(stdout);
  if (failed) {
    throw Error(ErrorCode::kCompile,
                std::to_string(failed) + " of " +
                    plural(work.size(), "(spec, arch) pair", "(spec, arch) pairs") +
                    " failed (listed above)");
  }
}

void run(const PrewarmOptions& o) {
  const std::vector<Target> targets = parse_archs(o.archs);
  const std::vector<ManifestEntry> entries = parse_manifest(o.manifest);
  if (o.check) {
    run_check(o, entries, targets);
  } else {
    run_prewarm(o, entries, targets);
  }
}

}  // namespace

void add_prewarm_command(CLI::App& app) {
  auto options = std::make_shared<PrewarmOptions>();
  CLI::App* prewarm = app.add_subcommand(
      "prewarm",
      "Compile every spec of a manifest for every listed architecture into a cache directory,\n"
      "in parallel. Needs no GPU and never initializes CUDA, so it runs on build machines; ship\n"
      "the directory and point NORMJIT_CACHE_READONLY at it (docs/deployment.md). Only the\n"
      "directory counts and all of it stays: NORMJIT_CACHE_READONLY, NORMJIT_CACHE_MAX_BYTES and\n"
      "NORMJIT_JIT are ignored here.\n"
      "The manifest is a JSON list of specs whose fields are the spec flags' names: op, shape\n"
      "(list of ints), dtype, normalized_dims, groups, affine, eps, param_dtype, out_dtype,\n"
      "residual (a dtype), weight_offset (a number), activation (none, silu or gelu),\n"
      "save_stats and backward (true or false), layout (nchw or nhwc); omitted fields take the\n"
      "flags' defaults, a field given twice is an error; at most 16 MiB. Exits non-zero if any\n"
      "kernel fails. --check compiles nothing and fails if any kernel is missing from the\n"
      "directory (CI of deployment images).");
  prewarm->add_option("manifest", options->manifest, "JSON manifest of specs")->required();
  prewarm
      ->add_option("--arch", options->archs,
                   "targets, comma-separated: sm_80,sm_90,sm_90a (must match the GPUs that run "
                   "the kernels); sm_90:114 plans for a part with 114 multiprocessors (H100 "
                   "PCIe), sm_90:132:4814 for one with 132 and 4814 GB/s of DRAM bandwidth "
                   "(H200) (default: the arch's full-size part, which long rows' kernels and "
                   "large f32 GroupNorm backward kernels depend on); may be given again")
      ->required()
      // One value an occurrence: `--arch sm_90 models.json` used to take the manifest as a
      // second target and then say the manifest was missing.
      ->allow_extra_args(false);
  add_text_option(*prewarm, "--cache-dir", options->cache_dir,
                  "directory to fill (default: $NORMJIT_CACHE_DIR, else "
                  "$XDG_CACHE_HOME/normjit, else ~/.cache/normjit)");
  CLI::Option* jobs =
      add_integer_option(*prewarm, "-j,--jobs", options->jobs, 1, 1024,
                         "parallel compilations, 1 to 1024 (default: one per hardware thread)");
  prewarm->add_flag("--check", options->check,
                    "compile nothing; list the kernels missing from the directory and fail if any");
  prewarm->footer(
      "Example:\n"
      "  normjit prewarm tools/manifests/seeds.json --arch sm_80,sm_90 --cache-dir "
      "/opt/app/normjit-cache -j 8\n"
      "  normjit prewarm tools/manifests/seeds.json --arch sm_80,sm_90 --cache-dir "
      "/opt/app/normjit-cache --check\n"
      "  normjit prewarm models.json --arch sm_90,sm_90:114 --cache-dir /opt/app/normjit-cache\n"
      "      (H100 SXM and PCIe: kernels that do not depend on the count are compiled once)\n"
      "Manifest:\n"
      "  [{\"op\": \"groupnorm\", \"shape\": [112, 64, 512, 512], \"groups\": 8, \"dtype\": "
      "\"f32\"},\n"
      "   {\"op\": \"layernorm\", \"shape\": [32, 4096], \"normalized_dims\": 1, \"dtype\": "
      "\"bf16\"}]");
  prewarm->callback([options, jobs] {
    // A pipeline may pass the same flags to both steps; --check only reads what is there.
    if (options->check && jobs->count() > 0) {
      std::fprintf(stderr,
                   "normjit: warning: --jobs sets parallel compilations, and --check "
                   "compiles nothing: not used\n");
    }
    run(*options);
  });
}

}  // namespace normjit::tools
