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

#if defined(_MSC_VER)
#define SPECDEC_FORCEINLINE __forceinline
#else
#define SPECDEC_FORCEINLINE inline __attribute__((always_inline))
#endif

#define SPECDEC_VERSION_MAJOR 0
#define SPECDEC_VERSION_MINOR 1
#define SPECDEC_VERSION_PATCH 0
