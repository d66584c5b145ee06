#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace strata::base {

// A std::vector indexed by the `int` ids the engine and the models count with (modules, layers,
// ranks, slots): the conversion to the vector's size_t happens here once, not as a cast at every
// use. Indexing is unchecked, as std::vector::operator[]; an index must be in [0, size()).
template <class T>
class ByIndex {
 public:
  using Items = std::vector<T>;

  ByIndex() = default;
  explicit ByIndex(int count) : items_(to_size(count)) {}  // value-initialised, T may be move-only
  ByIndex(int count, const T& value) : items_(to_size(count), value) {}
  // Takes over a vector whose position i holds the item of id i.
  explicit ByIndex(Items items) : items_(std::move(items)) {}

  typename Items::reference operator[](int index) { return items_[to_size(index)]; }
  typename Items::const_reference operator[](int index) const { return items_[to_size(index)]; }

  int size() const noexcept { return static_cast<int>(items_.size()); }
  bool empty() const noexcept { return items_.empty(); }
  void resize(int count) { items_.resize(to_size(count)); }
  void assign(int count, const T& value) { items_.assign(to_size(count), value); }
  void push_back(T value) { items_.push_back(std::move(value)); }
  void clear() noexcept { items_.clear(); }

  auto begin() noexcept { return items_.begin(); }
  auto end() noexcept { return items_.end(); }
  auto begin() const noexcept { return items_.begin(); }
  auto end() const noexcept { return items_.end(); }

  // The items as a vector, for the code that takes one (a span, a std algorithm).
  Items& items() noexcept { return items_; }
  const Items& items() const noexcept { return items_; }

 private:
  static std::size_t to_size(int index) noexcept { return static_cast<std::size_t>(index); }

  Items items_;
};

}  // namespace strata::base
