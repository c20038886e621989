// Includes Catch2 whether the system has v2 (single header) or v3.
#pragma once
#if defined(EMBER_CATCH_V3)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif
