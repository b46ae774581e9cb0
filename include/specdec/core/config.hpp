#pragma once
//! \file config.hpp
//! Portability macros shared by host-only and CUDA translation units.

#if defined(__CUDACC__)
#define SPECDEC_HOST_DEVICE __host__ __device__
#define SPECDEC_DEVICE __device__
#else
#define SPECDEC_HOST_DEVICE
#define SPECDEC_DEVICE
#endif

#if defined(__CUDA_ARCH__)
#define SPECDEC_IN_DEVICE_CODE 1
#else
#define SPECDEC_IN_DEVICE_CODE 0
#endif

//! SPECDEC_FORCEINLINE: the hot kernels' helpers (vector layer, tile and merge steps) are inlined
//! whatever the compiler's heuristics say. Not in unoptimized host builds (GCC/Clang -O0, where
//! __OPTIMIZE__ is undefined): there it would only paste every helper into its callers, and register
//! allocation over the resulting functions made up most of the compile time of CI's -O0 sanitizer
//! build. CUDA compiles keep the attribute on both sides.
#if defined(_MSC_VER)
#define SPECDEC_FORCEINLINE __forceinline
#elif defined(__OPTIMIZE__) || defined(__CUDACC__)
#define SPECDEC_FORCEINLINE inline __attribute__((always_inline))
#else
#define SPECDEC_FORCEINLINE inline
#endif

#define SPECDEC_VERSION_MAJOR 0
#define SPECDEC_VERSION_MINOR 1
#define SPECDEC_VERSION_PATCH 0
