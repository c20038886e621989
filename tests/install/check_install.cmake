# Installs ember into a fresh prefix, builds examples/consumer against it with
# find_package(ember), and runs it on the real model. Arguments (-D):
#   BUILD_DIR (ember's build tree), SOURCE_DIR, WORK_DIR
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
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}"
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
foreach(f include/ember/ember.hpp include/ember/version.hpp lib/cmake/ember/emberConfig.cmake
          lib/cmake/ember/emberConfigVersion.cmake bin/ember)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "install is missing ${f}")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}/examples/consumer" -B "${WORK_DIR}/build"
                        -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${WORK_DIR}/build" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed:\n${out}\n${err}")
endif()
execute_process(COMMAND "${WORK_DIR}/build/consumer" "${MODEL}" "The capital of France is"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer failed (${rc}):\n${err}")
endif()
if(NOT out MATCHES "\\[8 tokens\\]")
  message(FATAL_ERROR "the consumer did not generate 8 tokens")
endif()
