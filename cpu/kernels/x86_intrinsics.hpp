// <immintrin.h> for the CPU files that call intrinsics, compiled with their level's
// ISA flags (cpu/CMakeLists.txt; x86 only).
#pragma once

#if defined(EMBER_X86)
#include <immintrin.h>
// GCC 12 reports its own _mm512_undefined_* placeholders (inside the conversion and
// reduce intrinsics) as uninitialized once they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif
