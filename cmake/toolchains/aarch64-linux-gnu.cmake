# Cross build for 64-bit ARM Linux with Debian's cross compiler (g++-aarch64-linux-gnu),
# tests run under qemu-user (qemu-aarch64, package qemu-user):
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake -DEMBER_CUDA=OFF
# scripts/test-arm.sh does this and runs the kernel, op, KV-format and golden tests at
# every ARM level.
#
# Dependencies: ember uses fmt header-only (fmt::fmt-header-only), Eigen is header-only
# and Debian's Catch2 2.13 is a single header, so the host's -dev packages serve the
# cross build and no arm64 (multiarch) package is needed. Their headers live in
# /usr/include, which must not come before the cross C library's headers
# (/usr/aarch64-linux-gnu/include): it is searched last (-idirafter) and CMake is
# told not to add it as -isystem.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# The arm64 C library and loader of Debian's cross packages; QEMU_CPU (environment)
# picks the emulated CPU's features per run (scripts/test-arm.sh).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)

set(CMAKE_C_FLAGS_INIT "-idirafter /usr/include")
set(CMAKE_CXX_FLAGS_INIT "-idirafter /usr/include")
set(CMAKE_C_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)
set(CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)

# Programs and libraries of the target come from the cross sysroot; header-only
# packages (CMake config files) are found in the host's prefixes too, fmt's in the
# host's multiarch folder.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
if(NOT DEFINED fmt_DIR)
  file(GLOB _ember_host_fmt_dirs /usr/lib/*-linux-gnu*/cmake/fmt)
  list(FILTER _ember_host_fmt_dirs EXCLUDE REGEX "aarch64")
  if(_ember_host_fmt_dirs)
    list(GET _ember_host_fmt_dirs 0 _ember_host_fmt_dir)
    set(fmt_DIR ${_ember_host_fmt_dir} CACHE PATH "fmt's CMake package (header-only use)")
  endif()
endif()
