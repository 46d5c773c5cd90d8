// Keeps libortops.so loadable on old glibc (down to 2.27, the manylinux tag of the wheel)
// when it is built on a newer one. Linked into libortops.so only (x86-64 glibc builds).
//
// The library links libstdc++ statically, and objects from libstdc++.a and the kernels
// reference glibc symbols at the newest version the build machine's glibc defines: the
// threading functions at GLIBC_2.34 (when libpthread was merged into libc they got a new
// version there), exp at GLIBC_2.29, __libc_single_threaded (2.32) and arc4random (2.36),
// both with no older version at all. CMakeLists.txt links with -Wl,--wrap=<symbol> for each,
// so every reference to <symbol>, in any object, goes to __wrap_<symbol> below instead:
//   - the threading functions and exp call the same function at its original GLIBC_2.2.5
//     version, which every glibc since 2.2.5 defines (in libpthread.so.0 before 2.34, hence
//     the DT_NEEDED on it; the old exp only adds the SVID error wrapper, same results);
//   - __libc_single_threaded becomes a variable that always says "not single-threaded",
//     which only makes libstdc++ use atomic reference counts where it might have skipped them;
//   - arc4random (reached only through std::random_device, which the library never creates)
//     reads the kernel's random source with getrandom(2), as arc4random does.
// tests/python/test_wheel.py and ctest's glibc_versions check the result: no GLIBC_ version
// above the wheel's tag.
#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#define ORTOPS_HIDDEN __attribute__((visibility("hidden")))
// Makes `alias` a reference to `name` at the version every x86-64 glibc has.
#define ORTOPS_GLIBC_2_2_5(name, alias) __asm__(".symver " #alias "," #name "@GLIBC_2.2.5")

extern "C" {

int ortops_glibc_pthread_once(pthread_once_t* once, void (*init)());
int ortops_glibc_pthread_key_create(pthread_key_t* key, void (*destructor)(void*));
int ortops_glibc___pthread_key_create(pthread_key_t* key, void (*destructor)(void*));
int ortops_glibc_pthread_key_delete(pthread_key_t key);
void* ortops_glibc_pthread_getspecific(pthread_key_t key);
int ortops_glibc_pthread_setspecific(pthread_key_t key, const void* value);
int ortops_glibc_pthread_rwlock_rdlock(pthread_rwlock_t* lock);
int ortops_glibc_pthread_rwlock_wrlock(pthread_rwlock_t* lock);
int ortops_glibc_pthread_rwlock_unlock(pthread_rwlock_t* lock);
double ortops_glibc_exp(double x);

ORTOPS_GLIBC_2_2_5(pthread_once, ortops_glibc_pthread_once);
ORTOPS_GLIBC_2_2_5(pthread_key_create, ortops_glibc_pthread_key_create);
ORTOPS_GLIBC_2_2_5(__pthread_key_create, ortops_glibc___pthread_key_create);
ORTOPS_GLIBC_2_2_5(pthread_key_delete, ortops_glibc_pthread_key_delete);
ORTOPS_GLIBC_2_2_5(pthread_getspecific, ortops_glibc_pthread_getspecific);
ORTOPS_GLIBC_2_2_5(pthread_setspecific, ortops_glibc_pthread_setspecific);
ORTOPS_GLIBC_2_2_5(pthread_rwlock_rdlock, ortops_glibc_pthread_rwlock_rdlock);
ORTOPS_GLIBC_2_2_5(pthread_rwlock_wrlock, ortops_glibc_pthread_rwlock_wrlock);
ORTOPS_GLIBC_2_2_5(pthread_rwlock_unlock, ortops_glibc_pthread_rwlock_unlock);
ORTOPS_GLIBC_2_2_5(exp, ortops_glibc_exp);

ORTOPS_HIDDEN int __wrap_pthread_once(pthread_once_t* once, void (*init)()) {
  return ortops_glibc_pthread_once(once, init);
}
ORTOPS_HIDDEN int __wrap_pthread_key_create(pthread_key_t* key, void (*destructor)(void*)) {
  return ortops_glibc_pthread_key_create(key, destructor);
}
ORTOPS_HIDDEN int __wrap___pthread_key_create(pthread_key_t* key, void (*destructor)(void*)) {
  return ortops_glibc___pthread_key_create(key, destructor);
}
ORTOPS_HIDDEN int __wrap_pthread_key_delete(pthread_key_t key) { return ortops_glibc_pthread_key_delete(key); }
ORTOPS_HIDDEN void* __wrap_pthread_getspecific(pthread_key_t key) { return ortops_glibc_pthread_getspecific(key); }
ORTOPS_HIDDEN int __wrap_pthread_setspecific(pthread_key_t key, const void* value) {
  return ortops_glibc_pthread_setspecific(key, value);
}
ORTOPS_HIDDEN int __wrap_pthread_rwlock_rdlock(pthread_rwlock_t* lock) {
  return ortops_glibc_pthread_rwlock_rdlock(lock);
}
ORTOPS_HIDDEN int __wrap_pthread_rwlock_wrlock(pthread_rwlock_t* lock) {
  return ortops_glibc_pthread_rwlock_wrlock(lock);
}
ORTOPS_HIDDEN int __wrap_pthread_rwlock_unlock(pthread_rwlock_t* lock) {
  return ortops_glibc_pthread_rwlock_unlock(lock);
}
ORTOPS_HIDDEN double __wrap_exp(double x) { return ortops_glibc_exp(x); }

// 0: "other threads may exist", so libstdc++ always takes its thread-safe paths.
ORTOPS_HIDDEN char __wrap___libc_single_threaded = 0;

ORTOPS_HIDDEN std::uint32_t __wrap_arc4random() {
  std::uint32_t value = 0;
  for (;;) {
    const long got = syscall(SYS_getrandom, &value, sizeof value, 0);
    if (got == static_cast<long>(sizeof value)) return value;
    // Like arc4random, never return a value that is not random: without a working kernel
    // source (getrandom needs Linux 3.17) the process stops.
    if (got >= 0 || errno != EINTR) std::abort();
  }
}

}  // extern "C"
