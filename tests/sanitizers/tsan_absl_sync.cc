// ThreadSanitizer cannot see absl::Mutex: Debian's libabsl_synchronization is not
// built with -fsanitize=thread, so its lock hand-offs (atomics and futexes inside the
// library) create no happens-before for TSan, and every field guarded by an
// absl::Mutex would be reported as a race. Linked into every executable of the TSan
// build only (LAYERSERVE_SANITIZE=thread), this file defines the lock, unlock and wait
// members of absl::Mutex and absl::CondVar; as the executable's symbols they take
// precedence over the library's for every caller (our code, gRPC, absl itself), call
// the library's own definition (dlsym RTLD_NEXT) and tell TSan what happened:
// acquire after taking the mutex, release before giving it up (a wait gives it up
// and takes it again). This is what absl's ABSL_TSAN_MUTEX_* annotations do when
// absl itself is built with TSan. It adds synchronization TSan would otherwise miss;
// it hides no access.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

// The library's definition of the member whose mangled name is `symbol`.
template <typename F>
F Real(const char* symbol) {
  void* f = dlsym(RTLD_NEXT, symbol);
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found in libabsl_synchronization\n",
                 symbol);
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

// REAL(mangled, type): `real`, the library's function, looked up once. The mangled
// names carry abseil's inline namespace (debian3): Real() aborts if it changes.
// Member functions take `this` as their first argument (Itanium C++ ABI).
#define REAL(mangled, type)                     \
  static const auto real = Real<type>(mangled); \
  (void)0

using MutexFn = void (*)(absl::Mutex*);
using MutexBoolFn = bool (*)(absl::Mutex*);
using MutexCondFn = void (*)(absl::Mutex*, const absl::Condition&);
using MutexCondDurationFn = bool (*)(absl::Mutex*, const absl::Condition&,
                                     absl::Duration);
using MutexCondTimeFn = bool (*)(absl::Mutex*, const absl::Condition&, absl::Time);
using WaitFn = void (*)(absl::CondVar*, absl::Mutex*);
using WaitDurationFn = bool (*)(absl::CondVar*, absl::Mutex*, absl::Duration);
using WaitTimeFn = bool (*)(absl::CondVar*, absl::Mutex*, absl::Time);

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  REAL("_ZN4absl7debian35Mutex4LockEv", MutexFn);
  real(this);
  __tsan_acquire(this);
}
void Mutex::ReaderLock() {
  REAL("_ZN4absl7debian35Mutex10ReaderLockEv", MutexFn);
  real(this);
  __tsan_acquire(this);
}
bool Mutex::TryLock() {
  REAL("_ZN4absl7debian35Mutex7TryLockEv", MutexBoolFn);
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
bool Mutex::ReaderTryLock() {
  REAL("_ZN4absl7debian35Mutex13ReaderTryLockEv", MutexBoolFn);
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
void Mutex::Unlock() {
  REAL("_ZN4absl7debian35Mutex6UnlockEv", MutexFn);
  __tsan_release(this);
  real(this);
}
void Mutex::ReaderUnlock() {
  REAL("_ZN4absl7debian35Mutex12ReaderUnlockEv", MutexFn);
  __tsan_release(this);
  real(this);
}
void Mutex::LockWhen(const Condition& cond) {
  REAL("_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE", MutexCondFn);
  real(this, cond);
  __tsan_acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  REAL("_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE", MutexCondFn);
  real(this, cond);
  __tsan_acquire(this);
}
bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  REAL("_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE",
       MutexCondDurationFn);
  const bool result = real(this, cond, timeout);
  __tsan_acquire(this);  // Held on return either way.
  return result;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  REAL("_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE",
       MutexCondTimeFn);
  const bool result = real(this, cond, deadline);
  __tsan_acquire(this);
  return result;
}
void Mutex::Await(const Condition& cond) {
  REAL("_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE", MutexCondFn);
  __tsan_release(this);
  real(this, cond);
  __tsan_acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  REAL("_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE",
       MutexCondDurationFn);
  __tsan_release(this);
  const bool result = real(this, cond, timeout);
  __tsan_acquire(this);
  return result;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  REAL("_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE",
       MutexCondTimeFn);
  __tsan_release(this);
  const bool result = real(this, cond, deadline);
  __tsan_acquire(this);
  return result;
}

void CondVar::Wait(Mutex* mu) {
  REAL("_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE", WaitFn);
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  REAL("_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE",
       WaitDurationFn);
  __tsan_release(mu);
  const bool result = real(this, mu, timeout);
  __tsan_acquire(mu);
  return result;
}
bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  REAL("_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE", WaitTimeFn);
  __tsan_release(mu);
  const bool result = real(this, mu, deadline);
  __tsan_acquire(mu);
  return result;
}

ABSL_NAMESPACE_END
}  // namespace absl
