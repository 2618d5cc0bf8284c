// One call in flight per key: threads that ask for a key whose value is being made wait for
// that call's value (or its exception) instead of making it again.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace normjit::detail {

template <class Key, class Value, class Hash = std::hash<Key>>
class SingleFlight {
 public:
  // make()'s value for key: made here, or the value of the call for key in flight when this
  // one came (its exception rethrown). The flight ends when make() returns: a later call for
  // the same key makes the value again (callers cache values themselves).
  template <class Make>
  Value run(const Key& key, Make&& make) {
    std::promise<Value> promise;
    std::shared_future<Value> theirs;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = flights_.find(key);
      if (it != flights_.end()) {
        it->second.waiting++;
        theirs = it->second.value;
      } else {
        flights_.emplace(key, Flight{promise.get_future().share(), 0});
      }
    }
    if (theirs.valid()) return theirs.get();
    try {
      Value value = std::forward<Make>(make)();
      promise.set_value(value);
      end(key);
      return value;
    } catch (...) {
      promise.set_exception(std::current_exception());
      end(key);
      throw;
    }
  }

  // Callers waiting for the call for key in flight (0 when none is): for tests.
  size_t waiting(const Key& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = flights_.find(key);
    return it == flights_.end() ? 0 : it->second.waiting;
  }

 private:
  struct Flight {
    std::shared_future<Value> value;
    size_t waiting;
  };

  void end(const Key& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    flights_.erase(key);
  }

  mutable std::mutex mutex_;
  std::unordered_map<Key, Flight, Hash> flights_;
};

}  // namespace normjit::detail
