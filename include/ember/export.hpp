// Symbol visibility and deprecation macros for ember's public API.
#pragma once

#if defined(_WIN32)
#  if defined(EMBER_SHARED_LIB)
#    if defined(EMBER_BUILDING_LIB)
#      define EMBER_API __declspec(dllexport)
#    else
#      define EMBER_API __declspec(dllimport)
#    endif
#  else
#    define EMBER_API
#  endif
#else
#  define EMBER_API __attribute__((visibility("default")))
#endif

// Marks an API that will be removed in a later version; the message says what to use.
#define EMBER_DEPRECATED(msg) [[deprecated(msg)]]
