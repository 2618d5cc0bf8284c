// A map that only grows, read without locks: find() from any thread beside insert()s (which
// callers serialize, as the engine's publish does under its mutex).
//
// Entries are never removed or replaced, and nothing a reader may be looking at is freed before
// the map dies (or clear()s): an entry is a node made once, reached through an open-addressing
// array of atomic pointers. An array is never more than half full, so every probe ends at an
// empty slot; one that would be is replaced by one of twice the size (the old one kept, for the
// readers still probing it), so the arrays together hold under twice the last one's slots and an
// insert costs O(1) amortized.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace normjit::detail {

template <class Key, class Value, class Hash>
class InsertOnlyMap {
 public:
  InsertOnlyMap() { grow(kFirstSlots); }
  InsertOnlyMap(const InsertOnlyMap&) = delete;
  InsertOnlyMap& operator=(const InsertOnlyMap&) = delete;

  // The value of key, or nullptr. Lock-free; finds every insert that happened before it, and
  // maybe later ones (a node's fields are published by its slot's release store). The pointer
  // stays valid until the map dies or clear()s.
  const Value* find(const Key& key) const {
    const size_t hash = spread(Hash{}(key));
    const Slots* slots = current_.load(std::memory_order_acquire);
    for (size_t i = hash & slots->mask;; i = (i + 1) & slots->mask) {
      const Node* node = slots->at[i].load(std::memory_order_acquire);
      if (!node) return nullptr;
      if (node->hash == hash && node->key == key) return &node->value;
    }
  }

  // Adds key's value and returns it; key's value if it has one already (value dropped). Callers
  // serialize insert()s; find()s may run beside them.
  const Value& insert(const Key& key, Value value) {
    if (const Value* found = find(key)) return *found;
    if (2 * (size_ + 1) > current_.load(std::memory_order_relaxed)->mask + 1) {
      grow(2 * (current_.load(std::memory_order_relaxed)->mask + 1));
    }
    nodes_.push_back(std::make_unique<Node>(Node{key, std::move(value), spread(Hash{}(key))}));
    place(*current_.load(std::memory_order_relaxed), nodes_.back().get());
    ++size_;
    return nodes_.back()->value;
  }

  // Drops every entry (their values destroyed here); allocates nothing (for destructors). Not
  // lock-free: no find() or insert() may run beside it or hold a pointer it returned.
  void clear() noexcept {
    for (size_t i = 0; i < kFirstSlots; ++i) arrays_[0]->at[i].store(nullptr);
    current_.store(arrays_[0].get(), std::memory_order_release);  // the first, of kFirstSlots
    arrays_.erase(arrays_.begin() + 1, arrays_.end());
    nodes_.clear();
    size_ = 0;
  }

  // The writer's side, as insert(): callers serialize these with their insert()s.
  size_t size() const { return size_; }
  // The slots of every array made (the memory the map holds beside its nodes).
  size_t slots_allocated() const {
    size_t n = 0;
    for (const auto& slots : arrays_) n += slots->mask + 1;
    return n;
  }

 private:
  static constexpr size_t kFirstSlots = 16;  // a power of two

  struct Node {
    Key key;
    Value value;
    size_t hash;
  };
  struct Slots {
    explicit Slots(size_t n) : mask(n - 1), at(std::make_unique<std::atomic<const Node*>[]>(n)) {}
    size_t mask;
    std::unique_ptr<std::atomic<const Node*>[]> at;  // value-initialized: nullptr
  };

  // The hash with every bit of it in the low bits that pick a slot (MurmurHash3's 64-bit
  // finalizer): a hash such as FNV-1a leaves its words' high bits out of the low ones.
  static size_t spread(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return size_t(h);
  }

  // The node in its probe sequence's first empty slot; the release publishes the node's fields.
  static void place(const Slots& slots, const Node* node) {
    size_t i = node->hash & slots.mask;
    while (slots.at[i].load(std::memory_order_relaxed)) i = (i + 1) & slots.mask;
    slots.at[i].store(node, std::memory_order_release);
  }

  // A new array of n slots with every node, made whole and owned before readers can see it (a
  // throw leaves the map as it was).
  void grow(size_t n) {
    auto next = std::make_unique<Slots>(n);
    for (const auto& node : nodes_) place(*next, node.get());
    arrays_.push_back(std::move(next));
    current_.store(arrays_.back().get(), std::memory_order_release);
  }

  std::atomic<const Slots*> current_{nullptr};
  std::vector<std::unique_ptr<Slots>> arrays_;  // every array made: readers may hold any
  std::vector<std::unique_ptr<Node>> nodes_;
  size_t size_ = 0;
};

}  // namespace normjit::detail
