// Clang's thread-safety annotations (clang.llvm.org/docs/ThreadSafetyAnalysis.html).
//
// Contract
// - Every member that a mutex protects is declared DDP_GUARDED_BY(that mutex);
//   every function that expects a mutex held on entry is DDP_REQUIRES(it).
//   The mutex is a ddp::Mutex (base/mutex.h), which clang knows as a capability.
// - clang with -Wthread-safety checks them at compile time
//   (scripts/thread-safety.sh, run by CI); on other compilers they expand to
//   nothing and cost nothing.
#pragma once

#if defined(__clang__)
#define DDP_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DDP_THREAD_ANNOTATION(x)
#endif

// A type that is a lock (ddp::Mutex).
#define DDP_CAPABILITY(name) DDP_THREAD_ANNOTATION(capability(name))
// An RAII type that holds a lock for its lifetime (ddp::MutexLock).
#define DDP_SCOPED_CAPABILITY DDP_THREAD_ANNOTATION(scoped_lockable)

// A member read or written only with `mu` held.
#define DDP_GUARDED_BY(mu) DDP_THREAD_ANNOTATION(guarded_by(mu))
// A pointer member whose pointee is read or written only with `mu` held.
#define DDP_PT_GUARDED_BY(mu) DDP_THREAD_ANNOTATION(pt_guarded_by(mu))

// Lock order: this mutex is taken before (after) the ones named.
#define DDP_ACQUIRED_BEFORE(...) DDP_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define DDP_ACQUIRED_AFTER(...) DDP_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))

// The caller holds the mutexes named, and still holds them on return.
#define DDP_REQUIRES(...) DDP_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// The caller must not hold the mutexes named (the function takes them).
#define DDP_EXCLUDES(...) DDP_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// Not analysed: for a scope guard's destructor, which runs where its
// creator held the mutex (the analysis cannot follow it there).
#define DDP_NO_THREAD_SAFETY_ANALYSIS DDP_THREAD_ANNOTATION(no_thread_safety_analysis)

// The function takes (gives back) the mutex: its object's when none is named.
#define DDP_ACQUIRE(...) DDP_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define DDP_RELEASE(...) DDP_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define DDP_TRY_ACQUIRE(...) DDP_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))

// The function returns a reference to the mutex named.
#define DDP_RETURN_CAPABILITY(mu) DDP_THREAD_ANNOTATION(lock_returned(mu))

// The analysis skips this function; say why beside every use.
#define DDP_NO_THREAD_SAFETY_ANALYSIS DDP_THREAD_ANNOTATION(no_thread_safety_analysis)
