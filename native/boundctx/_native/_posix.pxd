# The POSIX calls behind filescan's file scan, in one place. Declarations only: no
# code, so cimporting this adds nothing to a module but the prototypes. Where Cython
# ships a declaration it is re-exported (pread takes an off_t there, the C type), and
# only what Cython lacks is declared here.

from posix.mman cimport MADV_HUGEPAGE, madvise
from posix.stdlib cimport posix_memalign
from posix.unistd cimport pread

# pread: the bytes read, 0 at end of file, or -1 with errno set (EINTR: retry).
# posix_memalign: 0, or an errno value (errno itself is left alone).
# madvise: 0, or -1 with errno set; filescan only hints, and ignores it.

cdef extern from "<pthread.h>" nogil:
    # Every pthread_* call returns 0 or an errno value; none sets errno.
    ctypedef struct pthread_t:
        pass
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_create(pthread_t *thread, const void *attr,
                       void *(*start)(void *) noexcept nogil, void *arg)
    int pthread_join(pthread_t thread, void **retval)
    int pthread_mutex_init(pthread_mutex_t *mu, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *mu)
    int pthread_mutex_lock(pthread_mutex_t *mu)
    int pthread_mutex_unlock(pthread_mutex_t *mu)
    int pthread_cond_init(pthread_cond_t *cv, const void *attr)
    int pthread_cond_destroy(pthread_cond_t *cv)
    int pthread_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu)
    int pthread_cond_broadcast(pthread_cond_t *cv)
