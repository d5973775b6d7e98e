// Ref<T>: an intrusive, thread-safe reference-counted pointer. T provides
// ref_inc(T*) and ref_dec(T*) (the latter deletes at zero).
#pragma once
#include <atomic>
#include <cstdint>
#include <utility>

namespace reel {

// Base for intrusively counted objects.
struct RefCounted {
  std::atomic<int32_t> refs{0};
};

template <typename T>
class Ref {
 public:
  Ref() = default;
  Ref(std::nullptr_t) {}
  explicit Ref(T* p) : p_(p) { if (p_) ref_inc(p_); }
  Ref(const Ref& o) : p_(o.p_) { if (p_) ref_inc(p_); }
  Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  ~Ref() { if (p_) ref_dec(p_); }
  Ref& operator=(const Ref& o) {
    if (o.p_) ref_inc(o.p_);
    T* old = std::exchange(p_, o.p_);
    if (old) ref_dec(old);
    return *this;
  }
  Ref& operator=(Ref&& o) noexcept {
    if (this != &o) {
      T* old = std::exchange(p_, std::exchange(o.p_, nullptr));
      if (old) ref_dec(old);
    }
    return *this;
  }
  void reset() { if (T* old = std::exchange(p_, nullptr)) ref_dec(old); }
  T* get() const { return p_; }
  T* operator->() const { return p_; }
  T& operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }
  friend bool operator==(const Ref& a, const Ref& b) { return a.p_ == b.p_; }

 private:
  T* p_ = nullptr;
};

template <typename T, typename... Args>
Ref<T> make_ref(Args&&... args) { return Ref<T>(new T(std::forward<Args>(args)...)); }

}  // namespace reel
