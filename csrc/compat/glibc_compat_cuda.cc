// The CUDA build's part of glibc_compat.cc (read that first): the static CUDA runtime
// (libcudart_static.a) references the dynamic loader's, threading, semaphore and shared
// memory functions, which a link on glibc 2.34 or newer binds at GLIBC_2.34, and fstat64
// (GLIBC_2.33). The same --wrap scheme sends them to the versions every x86-64 glibc has:
// libdl.so.2, libpthread.so.0 and librt.so.1 hold them before 2.34 (hence those DT_NEEDED
// entries; stubs after it), and fstat64 is __fxstat64, which sys/stat.h called before 2.33.
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#define ORTOPS_HIDDEN __attribute__((visibility("hidden")))

// __wrap_<name> calls <name> at glibc version `version`.
#define ORTOPS_OLD_GLIBC(version, result, name, parameters, arguments) \
  result ortops_glibc_##name parameters;                               \
  __asm__(".symver ortops_glibc_" #name "," #name "@" version);        \
  ORTOPS_HIDDEN result __wrap_##name parameters { return ortops_glibc_##name arguments; }

extern "C" {

ORTOPS_OLD_GLIBC("GLIBC_2.2.5", void*, dlopen, (const char* file, int mode), (file, mode))
ORTOPS_OLD_GLIBC("GLIBC_2.3.4", void*, dlmopen, (Lmid_t namespace_id, const char* file, int mode),
                 (namespace_id, file, mode))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, dlclose, (void* handle), (handle))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", char*, dlerror, (), ())
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", void*, dlsym, (void* handle, const char* name), (handle, name))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", void*, dlvsym, (void* handle, const char* name, const char* version),
                 (handle, name, version))

ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_create,
                 (pthread_t * thread, const pthread_attr_t* attr, void* (*start)(void*), void* arg),
                 (thread, attr, start, arg))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_detach, (pthread_t thread), (thread))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_join, (pthread_t thread, void** result), (thread, result))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_kill, (pthread_t thread, int signal), (thread, signal))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_condattr_setpshared, (pthread_condattr_t * attr, int shared),
                 (attr, shared))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_mutex_trylock, (pthread_mutex_t * mutex), (mutex))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_mutexattr_init, (pthread_mutexattr_t * attr), (attr))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_mutexattr_destroy, (pthread_mutexattr_t * attr), (attr))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_mutexattr_setpshared, (pthread_mutexattr_t * attr, int shared),
                 (attr, shared))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_mutexattr_settype, (pthread_mutexattr_t * attr, int type), (attr, type))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_rwlock_init, (pthread_rwlock_t * lock, const pthread_rwlockattr_t* attr),
                 (lock, attr))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_rwlock_destroy, (pthread_rwlock_t * lock), (lock))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_rwlock_tryrdlock, (pthread_rwlock_t * lock), (lock))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_rwlock_trywrlock, (pthread_rwlock_t * lock), (lock))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_rwlock_timedrdlock,
                 (pthread_rwlock_t * lock, const struct timespec* deadline), (lock, deadline))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_rwlock_timedwrlock,
                 (pthread_rwlock_t * lock, const struct timespec* deadline), (lock, deadline))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_rwlockattr_init, (pthread_rwlockattr_t * attr), (attr))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_rwlockattr_destroy, (pthread_rwlockattr_t * attr), (attr))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_rwlockattr_setpshared, (pthread_rwlockattr_t * attr, int shared),
                 (attr, shared))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_spin_init, (pthread_spinlock_t * lock, int shared), (lock, shared))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_spin_destroy, (pthread_spinlock_t * lock), (lock))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_spin_lock, (pthread_spinlock_t * lock), (lock))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_spin_trylock, (pthread_spinlock_t * lock), (lock))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, pthread_spin_unlock, (pthread_spinlock_t * lock), (lock))

ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, sem_init, (sem_t * semaphore, int shared, unsigned value),
                 (semaphore, shared, value))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, sem_destroy, (sem_t * semaphore), (semaphore))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, sem_post, (sem_t * semaphore), (semaphore))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, sem_wait, (sem_t * semaphore), (semaphore))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, sem_trywait, (sem_t * semaphore), (semaphore))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, sem_timedwait, (sem_t * semaphore, const struct timespec* deadline),
                 (semaphore, deadline))

ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, shm_open, (const char* name, int flags, mode_t mode), (name, flags, mode))
ORTOPS_OLD_GLIBC("GLIBC_2.2.5", int, shm_unlink, (const char* name), (name))

// fstat64 had no symbol of its own before 2.33: sys/stat.h called __fxstat64 with the
// structure's version, 1 on x86-64.
int ortops_glibc___fxstat64(int version, int fd, struct stat64* out);
__asm__(".symver ortops_glibc___fxstat64,__fxstat64@GLIBC_2.2.5");
ORTOPS_HIDDEN int __wrap_fstat64(int fd, struct stat64* out) { return ortops_glibc___fxstat64(1, fd, out); }

}  // extern "C"
