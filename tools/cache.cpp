// normjit cache ls | stats | verify | gc | clear | explain: thin wrappers over cache::Store.
#include "cache/cache.hpp"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cache/fs.hpp"
#include "generator/plan.hpp"
#include "normjit/error.hpp"
#include "normjit/spec.hpp"
#include "runtime/compiler.hpp"
#include "tools/commands.hpp"
#include "tools/util.hpp"

namespace normjit::tools {
namespace {

struct CacheFlags {
  std::string cache_dir;  // empty: not given ("" given is refused, not the default)
};

void add_cache_dir_flag(CLI::App& command, CacheFlags& flags) {
  add_text_option(command, "--cache-dir", flags.cache_dir,
                  "cache directory (default: $NORMJIT_CACHE_DIR, else $XDG_CACHE_HOME/normjit, "
                  "else ~/.cache/normjit); read-only layers come from NORMJIT_CACHE_READONLY");
}

std::string resolve_dir(const CacheFlags& flags) {
  return flags.cache_dir.empty() ? default_cache_dir() : flags.cache_dir;
}

std::string dir_source(const CacheFlags& flags) { return cache_dir_source(flags.cache_dir); }

// Whether the user named the directory (--cache-dir, NORMJIT_CACHE_DIR), not the default.
bool dir_named(const CacheFlags& flags) { return dir_source(flags).rfind("default", 0) != 0; }

// Restores the default warning sink however the command ends.
struct SinkGuard {
  ~SinkGuard() { cache::set_warning_sink(nullptr); }
};

// The store over the cache directory plus the read-only layers of the environment. These
// commands only look or remove: a missing directory is not created, it is an empty cache. A
// directory that exists but is not read (refused as unsafe, unreadable) or a path that is not a
// directory is an error: an empty listing, "0 bad" or "removed 0" would not be true.
std::unique_ptr<cache::Store> open_store(const CacheFlags& flags) {
  const std::string dir = resolve_dir(flags);
  cache::StoreOptions options = cache::StoreOptions::from_env();
  options.dir = dir;
  struct stat st;
  if (!dir.empty() && ::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      throw_invalid_argument(
          dir_source(flags), "'" + dir + "'",
          "is " + cache::detail::file_type_text(st.st_mode) + ", not a directory");
    }
  } else if (errno == ENOENT) {
    options.dir.clear();
  }
  // The store's own warning ends in "kernels are cached in memory only", which is about
  // running kernels; here the refusal is the error itself, so warnings are held until then.
  std::vector<std::string> warnings;
  std::unique_ptr<cache::Store> store;
  {
    SinkGuard restore;
    cache::set_warning_sink([&](const std::string& w) { warnings.push_back(w); });
    store = std::make_unique<cache::Store>(options);
  }
  if (!store->directory_problem().empty()) {
    throw_invalid_argument(dir_source(flags), "'" + dir + "'", store->directory_problem());
  }
  for (const std::string& w : warnings) cache::warn(w);
  return store;
}

std::string human_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  }
  return text;
}

std::string count(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string local_time(int64_t seconds) {
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M", &tm);
  return text;
}

// The spec recorded in an entry's metadata, for people reading a listing.
std::string spec_of(const cache::EntryInfo& info) {
  const nlohmann::json j =
      nlohmann::json::parse(info.metadata, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "-";
  std::string out;
  if (auto spec = j.find("spec"); spec != j.end() && spec->is_string())
    out = spec->get<std::string>();
  if (auto arch = j.find("arch"); arch != j.end() && arch->is_string()) {
    out += (out.empty() ? "" : " ") + std::string("arch=") + arch->get<std::string>();
  }
  return out.empty() ? "-" : out;
}

std::string shorten(const std::string& line) {
  constexpr size_t kMax = 110;
  if (line.size() <= kMax) return line;
  return line.substr(0, kMax) + "... (" + std::to_string(line.size()) + " chars)";
}

// Each failure of a maintenance command on its own line, before the one-line error.
void print_failures(const std::vector<std::string>& failures) {
  for (const std::string& failure : failures) std::printf("NOT REMOVED %s\n", failure.c_str());
}

void print_layers(const cache::Store& store, const std::string& dir) {
  if (store.options().dir.empty()) {
    std::printf("writable layer: %s (missing)\n", dir.empty() ? "(none)" : dir.c_str());
  } else {
    std::printf("writable layer: %s%s\n", dir.c_str(),
                store.writable() ? "" : " (not written to: see the warning above)");
  }
  // The searched layers are the configured ones in order, less those the store searches once
  // under another name.
  const std::vector<std::string> searched = store.searched_readonly();
  size_t next = 0;
  for (const std::string& layer : store.options().readonly) {
    if (layer.empty()) continue;
    if (next < searched.size() && searched[next] == layer) {
      ++next;
      std::printf("read-only layer: %s\n", layer.c_str());
    } else {
      std::printf(
          "read-only layer: %s (the writable layer or an earlier one under another name: "
          "searched once)\n",
          layer.c_str());
    }
  }
}

// The read-only layers that could not be read, each on its own line, and the error that ends a
// listing of the others (a listing without them is not the whole cache).
void fail_on_unread_layers(const cache::Store& store) {
  const std::vector<std::string> skipped = store.readonly_problems();
  if (skipped.empty()) return;
  for (const std::string& problem : skipped) std::printf("NOT READ %s\n", problem.c_str());
  throw Error(ErrorCode::kInvalidArgument,
              count(skipped.size(), "read-only layer", "read-only layers") +
                  " could not be read (NORMJIT_CACHE_READONLY; listed above)");
}

void run_ls(const CacheFlags& flags) {
  const std::string dir = resolve_dir(flags);
  const auto store = open_store(flags);
  print_layers(*store, dir);
  // Each entry checked whole, as a load and `cache verify` check it: an entry whose payload is
  // corrupt is listed as BAD, not with the spec its intact header names.
  const auto infos = store->list(/*verify=*/true);
  uint64_t bytes = 0;
  if (!infos.empty()) {
    std::printf("%-64s  %10s  %-16s  %-9s  %s\n", "KEY", "SIZE", "LAST USE", "LAYER", "SPEC");
  }
  for (const cache::EntryInfo& info : infos) {
    bytes += info.disk_bytes;
    std::printf("%-64s  %10s  %-16s  %-9s  %s\n", info.key.c_str(), human_bytes(info.bytes).c_str(),
                local_time(info.last_use).c_str(), info.readonly ? "read-only" : "writable",
                info.valid ? spec_of(info).c_str() : ("BAD: " + info.problem).c_str());
  }
  std::printf("%s, %s on disk\n", count(infos.size(), "entry", "entries").c_str(),
              human_bytes(bytes).c_str());
  if (const auto temporaries = store->temporary_files(); !temporaries.empty()) {
    std::printf(
        "and %s of writes that did not finish, never loaded (e.g. %s); 'normjit cache gc "
        "--temp-age 0' removes those of the writable layer\n",
        count(temporaries.size(), "temporary file", "temporary files").c_str(),
        temporaries[0].c_str());
  }
  fail_on_unread_layers(*store);
}

void run_stats(const CacheFlags& flags) {
  const std::string dir = resolve_dir(flags);
  const auto store = open_store(flags);
  print_layers(*store, dir);
  uint64_t entries[2] = {0, 0}, bytes[2] = {0, 0}, bad[2] = {0, 0};
  // Checked whole (payload checksums included), so that the bad entries counted here are those
  // that `cache verify` names.
  for (const cache::EntryInfo& info : store->list(/*verify=*/true)) {
    ++entries[info.readonly];
    // What the files occupy, as the cap counts them: a sparse file's claimed size is not used.
    bytes[info.readonly] += info.disk_bytes;
    bad[info.readonly] += !info.valid;
  }
  auto bad_text = [&](int layer) {
    return bad[layer] == 0 ? std::string()
                           : ", " + std::to_string(bad[layer]) +
                                 " of them bad ('normjit cache verify' says why)";
  };
  const uint64_t max = store->options().max_bytes;
  // The limit's source: an unset or malformed NORMJIT_CACHE_MAX_BYTES leaves the default.
  const bool max_from_env = store->options().max_bytes_from_env;
  std::printf("entries:    %llu in the writable layer, %s of %s (%s)%s\n",
              static_cast<unsigned long long>(entries[0]), human_bytes(bytes[0]).c_str(),
              human_bytes(max).c_str(), max_from_env ? "NORMJIT_CACHE_MAX_BYTES" : "default",
              bad_text(0).c_str());
  if (!store->options().readonly.empty()) {
    std::printf("            %llu in read-only layers, %s%s\n",
                static_cast<unsigned long long>(entries[1]), human_bytes(bytes[1]).c_str(),
                bad_text(1).c_str());
  }
  // Counters every process added to DIR/stats.json (best effort; see docs/cache-format.md).
  const cache::StoreStats s = store->persisted_stats();
  const uint64_t lookups = s.hits + s.misses;
  std::printf("lookups:    %llu hits, %llu misses", static_cast<unsigned long long>(s.hits),
              static_cast<unsigned long long>(s.misses));
  if (lookups > 0) std::printf(" (%.1f%% hits)", 100.0 * static_cast<double>(s.hits) / lookups);
  std::printf(
      "\nrejected:   %llu entries turned away by lookups (corrupt, or refused by the driver)\n",
      static_cast<unsigned long long>(s.bad_entries));
  std::printf("writes:     %llu entries written, %llu evicted\n",
              static_cast<unsigned long long>(s.writes),
              static_cast<unsigned long long>(s.evictions));
  fail_on_unread_layers(*store);
}

void run_verify(const CacheFlags& flags, bool remove) {
  const auto store = open_store(flags);
  // A directory named (--cache-dir, NORMJIT_CACHE_DIR) that does not exist: "0 entries checked,
  // 0 bad" would pass an image's check of a mistyped path. The default may not exist yet.
  if (store->options().dir.empty() && dir_named(flags)) {
    throw_invalid_argument(dir_source(flags), "'" + resolve_dir(flags) + "'",
                           "does not exist: nothing to verify");
  }
  const auto infos = store->list(/*verify=*/true);
  size_t bad = 0, kept = 0, bad_readonly = 0;
  for (const cache::EntryInfo& info : infos) {
    if (info.valid) continue;
    ++bad;
    bad_readonly += info.readonly;
    std::string outcome = info.readonly ? " (read-only layer)" : "";
    if (remove && !info.readonly) {
      std::string why;
      if (store->remove(info.key, &why)) {
        outcome = " (removed)";
      } else {
        outcome = " (not removed: " + why + ")";
        ++kept;
      }
    } else if (remove) {
      ++kept;
    }
    std::printf("BAD %s: %s%s\n", info.path.c_str(), info.problem.c_str(), outcome.c_str());
  }
  // A layer that could not be read was not verified.
  const std::vector<std::string> skipped = store->readonly_problems();
  for (const std::string& problem : skipped) std::printf("NOT CHECKED %s\n", problem.c_str());
  std::printf("%s checked, %zu bad\n", count(infos.size(), "entry", "entries").c_str(), bad);
  std::string failure;
  if (remove && kept > 0) {
    failure = std::to_string(kept) + " of " + std::to_string(infos.size()) +
              " cache entries are bad and were not removed (listed above)";
  } else if (!remove && bad > 0) {
    failure =
        std::to_string(bad) + " of " + std::to_string(infos.size()) + " cache entries are bad";
    if (bad > bad_readonly) {
      failure +=
          "; 'normjit cache verify --remove' deletes those of the writable layer (they "
          "are rebuilt on demand)";
    }
    if (bad_readonly > 0) {
      failure += std::string(bad > bad_readonly ? "; those in read-only layers"
                                                : "; they are in read-only layers, which") +
                 " are never changed: ship the layer again (normjit prewarm into a fresh "
                 "directory)";
    }
  }
  if (!skipped.empty()) {
    failure += (failure.empty() ? "" : "; ") +
               count(skipped.size(), "read-only layer", "read-only layers") +
               " could not be read (NORMJIT_CACHE_READONLY)";
  }
  if (!failure.empty()) throw Error(ErrorCode::kInvalidArgument, failure);
}

void run_gc(const CacheFlags& flags, std::optional<uint64_t> max_bytes, int64_t temp_age) {
  const std::string dir = resolve_dir(flags);
  // gc removes entries down to its limit: a limit the user meant but mistyped is not replaced by
  // the default (which may be smaller than what they meant to keep). Refused before the store
  // is opened, whose warning would say it uses the default.
  if (const std::string problem = cache::max_bytes_env_problem(); !max_bytes && !problem.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                problem +
                    "; cache gc evicts down to its limit, so it does not guess one: fix the "
                    "variable or give --max-bytes");
  }
  const auto store = open_store(flags);
  const uint64_t max = max_bytes.value_or(store->options().max_bytes);
  if (store->options().dir.empty()) {
    std::printf("no cache directory at %s: nothing to collect\n", dir.c_str());
    return;
  }
  cache::Removal removal = store->gc(max);
  cache::Removal temporary;  // --temp-age's sweep: bytes, and the names it could not remove
  if (temp_age >= 0) temporary = store->sweep_temporaries(temp_age);
  // gc's own sweep of stale temporaries (an hour old), which opening the store may have done,
  // and --temp-age's.
  const uint64_t temporary_bytes = removal.temporary_bytes + temporary.bytes;
  removal.bytes += temporary.bytes;
  print_failures(temporary.failures);
  uint64_t left = 0;
  size_t entries = 0;
  for (const cache::EntryInfo& info : store->list(/*verify=*/false)) {
    if (!info.readonly) {
      left += info.disk_bytes;  // as eviction counted it
      ++entries;
    }
  }
  print_failures(removal.failures);
  // What the temporary files gave of the bytes freed (not entries evicted): said with
  // --temp-age, and wherever stale ones went.
  const std::string temporaries =
      temp_age >= 0 || temporary_bytes > 0
          ? " (" + human_bytes(temporary_bytes) + " of it temporary files)"
          : "";
  std::printf("evicted %s, freed %s%s; %s now holds %s, %s on disk (limit %s)\n",
              count(removal.entries, "entry", "entries").c_str(),
              human_bytes(removal.bytes).c_str(), temporaries.c_str(), dir.c_str(),
              count(entries, "entry", "entries").c_str(), human_bytes(left).c_str(),
              human_bytes(max).c_str());
  if (!removal.failures.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "cannot shrink " + dir + " to " + human_bytes(max) + ": " +
                    count(removal.failures.size(), "entry", "entries") +
                    " could not be removed (listed above); " + human_bytes(left) + " remain");
  }
  if (!temporary.failures.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "cannot sweep " + dir + ": " +
                    count(temporary.failures.size(), "temporary file", "temporary files") +
                    " older than --temp-age could not be removed (listed above)");
  }
}

void run_clear(const CacheFlags& flags) {
  const std::string dir = resolve_dir(flags);
  const auto store = open_store(flags);
  if (store->options().dir.empty()) {
    std::printf("no cache directory at %s: nothing to clear\n", dir.c_str());
    return;
  }
  // What was removed, counted as it went, not what was there before.
  const cache::Removal removal = store->clear();
  print_failures(removal.failures);
  std::printf("removed %s (%s) from %s\n", count(removal.entries, "entry", "entries").c_str(),
              human_bytes(removal.bytes).c_str(), dir.c_str());
  if (!removal.failures.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "cannot clear " + dir + ": " + std::to_string(removal.failures.size()) + " of " +
                    count(removal.entries + removal.failures.size(), "entry", "entries") +
                    " could not be removed (listed above)");
  }
}

void print_explanation(const cache::Explanation& e) {
  if (e.found) {
    // A hit needs no comparison: the nearest other entry (another op, maybe) would only
    // suggest a difference that does not matter.
    std::printf("present:    yes, in the %s layer %s\n            %s\n",
                e.found->readonly ? "read-only" : "writable", e.found->layer.c_str(),
                e.found->path.c_str());
    return;
  }
  std::printf("present:    no valid entry in any layer\n");
  if (!e.nearest) {
    std::printf("nearest:    no entry to compare with\n");
    return;
  }
  std::printf("nearest:    %s (%s)\n            in %s; shares %zu of %zu preimage lines\n",
              e.nearest->key.c_str(), spec_of(*e.nearest).c_str(), e.nearest->path.c_str(),
              e.shared_lines, e.total_lines);
  std::printf("differs:\n");
  for (const std::string& line : e.missing) std::printf("  requested: %s\n", shorten(line).c_str());
  for (const std::string& line : e.extra) std::printf("  stored:    %s\n", shorten(line).c_str());
  if (!e.source_difference.empty()) std::printf("  %s\n", e.source_difference.c_str());
}

void run_explain(const CacheFlags& flags, const std::vector<std::string>& words,
                 const std::optional<std::string>& arch_flag) {
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : " ") + word;
  // A spec as cache ls or prewarm --check print it ("... arch=sm_90 key=...") or as dump
  // --emit plan does ("spec: ..."): the target from its arch= word where --arch is not given.
  const PrintedSpec printed = printed_spec(text);
  // A lone key= word is the key itself.
  const std::string request = printed.spec.empty() && printed.key ? *printed.key : printed.spec;
  const bool is_key =
      request.size() == 64 && request.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (printed.arch && arch_flag && *printed.arch != *arch_flag) {
    throw_invalid_argument("--arch", "'" + *arch_flag + "'",
                           "differs from the request's arch=" + *printed.arch);
  }
  // Checked as dump and prewarm check it, before anything is printed, key or spec.
  const Target target = printed.arch ? parse_arch("arch", *printed.arch)
                                     : parse_arch("--arch", arch_flag.value_or("sm_90"));
  // A key was made for one target already: a target given beside it would be silently unused.
  if (is_key && (arch_flag || printed.arch)) {
    throw_invalid_argument(arch_flag ? "--arch" : "arch",
                           quoted_excerpt(arch_flag ? *arch_flag : *printed.arch),
                           std::string("applies to a spec; a key names its target already") +
                               (arch_flag ? "" : " (drop the arch= word)"));
  }
  const auto store = open_store(flags);
  auto infos = store->list(/*verify=*/false);
  // The entries of the key asked about are checked whole, as a load checks them: an entry whose
  // payload is corrupt is no hit, and explain must not call it present.
  const auto check_whole = [&](const std::string& key) {
    std::vector<cache::EntryInfo> checked = store->list_key(key);
    for (cache::EntryInfo& info : infos) {
      for (const cache::EntryInfo& whole : checked) {
        if (whole.path == info.path) info = whole;
      }
    }
  };

  std::string preimage;
  if (is_key) {
    std::printf("key:        %s\n", request.c_str());
    check_whole(request);
    for (const cache::EntryInfo& info : infos) {
      if (info.key != request) continue;
      if (!info.valid) {
        std::printf("present:    a bad entry at %s: %s\n", info.path.c_str(), info.problem.c_str());
        continue;
      }
      preimage = info.preimage;
      break;
    }
    if (preimage.empty()) {
      std::printf(
          "present:    no valid entry in any layer; its preimage is unknown, so explain "
          "the spec instead: normjit cache explain 'op=... shape=...' --arch sm_XX\n");
      return;
    }
  } else {
    const NormSpec spec = NormSpec::parse(request);
    preimage = key_inputs(spec, target).preimage();
    const std::string key = cache::sha256_hex(preimage);
    std::printf("spec:       %s\ntarget:     %s\nkey:        %s\n", spec.to_string().c_str(),
                target.text().c_str(), key.c_str());
    check_whole(key);
    for (const cache::EntryInfo& info : infos) {
      if (info.key == key && !info.valid) {
        std::printf("present:    a bad entry at %s: %s\n", info.path.c_str(), info.problem.c_str());
      }
    }
    if (printed.key && *printed.key != key) {
      std::printf("note:       the request's key=%s is not this spec's on this target\n",
                  printed.key->c_str());
    }
    // A kernel with a second plan for launches of another size: a prepared kernel (and a
    // JIT-off engine) loads that one too.
    const std::vector<NormSpec> classes = batch_class_specs(spec);
    for (size_t c = 1; c < classes.size(); ++c) {
      // The other class's plan may come out the same (the same key): one kernel, nothing to add.
      if (key_inputs(classes[c], target).key() == key) continue;
      std::printf(
          "other:      %s key=%s (the batch class of launches of %s %lld rows; prepare and "
          "prewarm compile it with this one)\n",
          classes[c].to_string().c_str(), key_inputs(classes[c], target).key().c_str(),
          batch_class(classes[c]) == kBatchFewRows ? "at most" : "more than",
          static_cast<long long>(few_rows_limit(spec)));
    }
  }
  print_explanation(cache::explain(infos, preimage));
}

}  // namespace

void add_cache_command(CLI::App& app) {
  CLI::App* cache = app.add_subcommand(
      "cache", "Inspect and maintain the on-disk kernel cache (docs/cache-format.md)");
  cache->require_subcommand(1);
  cache->footer("Example:\n  normjit cache ls --cache-dir ~/.cache/normjit");

  {
    auto flags = std::make_shared<CacheFlags>();
    CLI::App* ls = cache->add_subcommand(
        "ls", "List the entries of every layer, each checked whole (BAD: why)");
    add_cache_dir_flag(*ls, *flags);
    ls->footer("Example:\n  normjit cache ls --cache-dir /tmp/normjit-cache");
    ls->callback([flags] { run_ls(*flags); });
  }
  {
    auto flags = std::make_shared<CacheFlags>();
    CLI::App* stats = cache->add_subcommand(
        "stats",
        "Entries (bad ones counted, checksums included), bytes, and hit/miss counters "
        "accumulated by every process");
    add_cache_dir_flag(*stats, *flags);
    stats->footer("Example:\n  normjit cache stats --cache-dir ~/.cache/normjit");
    stats->callback([flags] { run_stats(*flags); });
  }
  {
    auto flags = std::make_shared<CacheFlags>();
    auto remove = std::make_shared<bool>(false);
    CLI::App* verify = cache->add_subcommand(
        "verify", "Check every entry (checksums included); fails if any is bad");
    add_cache_dir_flag(*verify, *flags);
    verify->add_flag("--remove", *remove, "delete bad entries of the writable layer");
    verify->footer("Example:\n  normjit cache verify --cache-dir ~/.cache/normjit --remove");
    verify->callback([flags, remove] { run_verify(*flags, *remove); });
  }
  {
    auto flags = std::make_shared<CacheFlags>();
    auto max = std::make_shared<std::optional<uint64_t>>();  // nullopt: not given
    auto temp_age = std::make_shared<int>(-1);  // -1: not given (a value given is >= 0)
    CLI::App* gc = cache->add_subcommand(
        "gc", "Evict least recently used entries down to a size; sweep stale temporary files");
    add_cache_dir_flag(*gc, *flags);
    gc->add_option_function<std::string>(
        "--max-bytes",
        [max](const std::string& text) {
          *max = cache::parse_byte_size(text);
          if (!*max) {
            throw_invalid_argument("--max-bytes", quoted_excerpt(text),
                                   "expected a byte count such as 1048576, 512M or 2G, without "
                                   "spaces");
          }
        },
        "size to shrink the writable layer to, e.g. 512M or 2G "
        "(default: NORMJIT_CACHE_MAX_BYTES, else 2G)");
    add_integer_option(*gc, "--temp-age", *temp_age, 0, std::numeric_limits<int>::max(),
                       "also remove temporary files older than this many seconds (default: "
                       "3600, so that writers still running keep theirs)");
    gc->footer("Example:\n  normjit cache gc --cache-dir ~/.cache/normjit --max-bytes 512M");
    gc->callback([flags, max, temp_age] { run_gc(*flags, *max, *temp_age); });
  }
  {
    auto flags = std::make_shared<CacheFlags>();
    CLI::App* clear = cache->add_subcommand(
        "clear", "Remove every entry of the writable layer (read-only layers are kept)");
    add_cache_dir_flag(*clear, *flags);
    clear->footer("Example:\n  normjit cache clear --cache-dir /tmp/normjit-cache");
    clear->callback([flags] { run_clear(*flags); });
  }
  {
    auto flags = std::make_shared<CacheFlags>();
    auto words = std::make_shared<std::vector<std::string>>();
    auto arch = std::make_shared<std::optional<std::string>>();
    CLI::App* explain = cache->add_subcommand(
        "explain",
        "Say whether a spec (or key) is cached and, if not, how the nearest entry differs");
    add_cache_dir_flag(*explain, *flags);
    explain
        ->add_option("request", *words,
                     "a spec in canonical form (op=rmsnorm shape=8,64,32,32 dtype=f32 ...), "
                     "as 'cache ls' and 'prewarm --check' print it too (with arch= and key= "
                     "words) or 'dump --emit plan' (after 'spec:'); or a 64-digit key")
        ->required();
    add_text_option(*explain, "--arch", *arch,
                    "target of the spec (default: the request's arch= word, else sm_90); an "
                    "error with a key, which names its target already");
    explain->footer(
        "Examples:\n"
        "  normjit cache explain op=rmsnorm shape=8,64,32,32 dtype=f32 affine=none eps=1e-05 "
        "--arch sm_90\n"
        "  normjit cache explain 2fc9f6e371f274dbc96953be3dbfbc390e804461bee426e5245d1e850bbb73fe");
    explain->callback([flags, words, arch] { run_explain(*flags, *words, *arch); });
  }
}

}  // namespace normjit::tools
