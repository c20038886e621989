# Installs ember into a fresh prefix and builds hosts against it the ways a user
# would: examples/consumer (C++, find_package), examples/c-consumer (C99, with
# find_package and with pkg-config), and, for the shared library, a Python program
# through ctypes. Arguments (-D):
#   VARIANT   static: install BUILD_DIR (the main build, EMBER_SHARED=OFF)
#             shared: first configure and build ember with EMBER_SHARED=ON in SHARED_BUILD_DIR
#   BUILD_DIR (ember's main build tree), SOURCE_DIR, WORK_DIR (hosts and the install prefix),
#   CUDA (ON/OFF, as the main build), C_LAUNCHER, CXX_LAUNCHER, CUDA_LAUNCHER (the main
#   build's compiler launchers, empty or ccache, passed on to the shared build)
# The model is found at test time like the C++ tests do: $EMBER_MODEL, else
# $EMBER_CACHE_DIR, $XDG_CACHE_HOME/ember or ~/.cache/ember, under models/.
# Exits with code 4 (skipped) when the model is absent.
if(DEFINED ENV{EMBER_MODEL})
  set(MODEL "$ENV{EMBER_MODEL}")
else()
  if(DEFINED ENV{EMBER_CACHE_DIR})
    set(cache "$ENV{EMBER_CACHE_DIR}")
  elseif(DEFINED ENV{XDG_CACHE_HOME})
    set(cache "$ENV{XDG_CACHE_HOME}/ember")
  else()
    set(cache "$ENV{HOME}/.cache/ember")
  endif()
  set(MODEL "${cache}/models/gemma-3-270m-q4_k_m.gguf")
endif()
if(NOT EXISTS "${MODEL}")
  message("SKIPPED: the real model is not at ${MODEL}; run scripts/fetch-model.sh")
  cmake_language(EXIT 4)
endif()

# run(<what> COMMAND ...): runs a command, fails the test with its output on error;
# the output is left in RUN_OUT.
function(run what)
  cmake_parse_arguments(ARG "" "" "COMMAND" ${ARGN})
  execute_process(COMMAND ${ARG_COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(RUN_OUT "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
set(ember_build "${BUILD_DIR}")
if(VARIANT STREQUAL "shared")
  set(ember_build "${SHARED_BUILD_DIR}")
  file(REMOVE_RECURSE "${ember_build}")
  set(launch "")
  foreach(lang C CXX CUDA)
    if(${lang}_LAUNCHER)
      list(APPEND launch "-DCMAKE_${lang}_COMPILER_LAUNCHER=${${lang}_LAUNCHER}")
    endif()
  endforeach()
  run("configuring ember with EMBER_SHARED=ON" COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${ember_build}"
      -DCMAKE_BUILD_TYPE=Release -DEMBER_SHARED=ON -DEMBER_CUDA=${CUDA} -DEMBER_BUILD_TESTS=OFF
      -DEMBER_BUILD_BENCH=OFF -DEMBER_BUILD_EXAMPLES=ON ${launch})
  cmake_host_system_information(RESULT jobs QUERY NUMBER_OF_LOGICAL_CORES)
  run("building the shared library" COMMAND ${CMAKE_COMMAND} --build "${ember_build}" -j ${jobs})
endif()
run("cmake --install" COMMAND ${CMAKE_COMMAND} --install "${ember_build}" --prefix "${prefix}")

# The install tree: headers, the package config, pkg-config, the CLI, the library.
include(GNUInstallDirs)
foreach(f include/ember/ember.hpp include/ember/ember.h include/ember/version.hpp bin/ember)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "install is missing ${f}")
  endif()
endforeach()
file(GLOB_RECURSE configs "${prefix}/*/emberConfig.cmake")
file(GLOB_RECURSE pcs "${prefix}/*/pkgconfig/ember.pc")
if(NOT configs OR NOT pcs)
  message(FATAL_ERROR "install is missing emberConfig.cmake or ember.pc")
endif()
list(GET pcs 0 pc)
get_filename_component(pc_dir "${pc}" DIRECTORY)
get_filename_component(libdir "${pc_dir}" DIRECTORY)

set(libs_dir "${libdir}")
if(VARIANT STREQUAL "shared")
  # SONAME = the major version; only ember's symbols are exported.
  file(GLOB sonames "${libdir}/libember.so.*")
  run("readelf" COMMAND readelf -d "${libdir}/libember.so")
  if(NOT RUN_OUT MATCHES "SONAME[^\n]*\\[libember\\.so\\.${MAJOR}\\]")
    message(FATAL_ERROR "libember.so has no SONAME libember.so.${MAJOR}:\n${RUN_OUT}")
  endif()
  run("nm" COMMAND nm -D --defined-only -C "${libdir}/libember.so")
  string(REPLACE "\n" ";" lines "${RUN_OUT}")
  set(foreign "")
  set(n_ember 0)
  foreach(line IN LISTS lines)
    if(line STREQUAL "")
      continue()
    endif()
    string(REGEX REPLACE "^[0-9a-fA-F]* *[A-Za-z] " "" name "${line}")
    if(name MATCHES "^(ember_|ember::|typeinfo for ember::|typeinfo name for ember::|vtable for ember::)")
      math(EXPR n_ember "${n_ember} + 1")
    elseif(NOT name MATCHES "^EMBER_")  # the version node
      list(APPEND foreign "${name}")
    endif()
  endforeach()
  if(foreign)
    list(JOIN foreign "\n  " foreign)
    message(FATAL_ERROR "libember.so exports symbols outside ember:\n  ${foreign}")
  endif()
  if(n_ember LESS 50)
    message(FATAL_ERROR "libember.so exports only ${n_ember} ember symbols")
  endif()
  message("libember.so: SONAME libember.so.${MAJOR}, ${n_ember} symbols, all ember's")
endif()

# The C++ host and the C host, with find_package.
foreach(host consumer c-consumer)
  run("configuring ${host}" COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}/examples/${host}" -B "${WORK_DIR}/${host}"
      -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
  run("building ${host}" COMMAND ${CMAKE_COMMAND} --build "${WORK_DIR}/${host}")
  run("running ${host}" COMMAND "${WORK_DIR}/${host}/${host}" "${MODEL}" "The capital of France is")
  message("${host}: ${RUN_OUT}")
  if(NOT RUN_OUT MATCHES "\\[8 tokens\\]")
    message(FATAL_ERROR "${host} did not generate 8 tokens")
  endif()
endforeach()

# The C host with pkg-config and the C compiler alone.
set(static_flag "")
if(VARIANT STREQUAL "static")
  set(static_flag "--static")
endif()
set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
run("pkg-config" COMMAND pkg-config --modversion ember)
string(STRIP "${RUN_OUT}" pc_version)
if(NOT pc_version STREQUAL "${VERSION}")
  message(FATAL_ERROR "pkg-config reports ember ${pc_version}, expected ${VERSION}")
endif()
run("pkg-config flags" COMMAND pkg-config --cflags --libs ${static_flag} ember)
string(STRIP "${RUN_OUT}" pc_flags)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
run("cc with pkg-config" COMMAND cc -std=c99 -Wall -pedantic-errors "${SOURCE_DIR}/examples/c-consumer/main.c"
    -o "${WORK_DIR}/c-consumer-pc" ${pc_flags})
run("running the pkg-config build" COMMAND ${CMAKE_COMMAND} -E env "LD_LIBRARY_PATH=${libdir}"
    "${WORK_DIR}/c-consumer-pc" "${MODEL}" "The capital of France is")
if(NOT RUN_OUT MATCHES "\\[8 tokens\\]")
  message(FATAL_ERROR "the pkg-config build did not generate 8 tokens:\n${RUN_OUT}")
endif()
message("c-consumer (pkg-config ${static_flag}): ok")

# Another language: Python's ctypes on the shared library, no extra dependency.
if(VARIANT STREQUAL "shared")
  find_program(PYTHON3 python3 REQUIRED)
  run("python ctypes host" COMMAND "${PYTHON3}" "${SOURCE_DIR}/tests/install/ctypes_host.py"
      "${libdir}/libember.so" "${MODEL}")
  message("${RUN_OUT}")
endif()
