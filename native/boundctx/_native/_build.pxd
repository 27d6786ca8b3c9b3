# How the native modules were built, for the ones that report it (BUILT_WITH_CHECKS).
# Declarations only: cimporting this adds the one constant below to a module.

cdef extern from *:
    """
    #ifndef BOUNDCTX_CHECKS
    #define BOUNDCTX_CHECKS 0
    #endif
    """
    # 1 when CMake's BOUNDCTX_CYTHON_CHECKS is on (it defines BOUNDCTX_CHECKS=1 for every
    # module, beside turning Cython's bounds/wraparound/initialized checks on), else 0.
    int BOUNDCTX_CHECKS
