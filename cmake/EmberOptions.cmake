# Common settings for ember's internal components.
#
# Every layer (lib/gguf, lib/quant, cpu, ...) is an OBJECT library made with
# ember_add_component(); the installed `ember` library and the `ember_testing`
# static library used by the unit tests are both assembled from these objects.

include(GNUInstallDirs)

# Usage requirements shared by every component: include paths, private
# dependencies (header-only fmt and Eigen never leak to the host), warnings.
add_library(ember_internal_objs INTERFACE)
target_include_directories(ember_internal_objs INTERFACE
  ${PROJECT_SOURCE_DIR}/include
  ${PROJECT_BINARY_DIR}/include
  ${PROJECT_SOURCE_DIR}/lib
  ${PROJECT_SOURCE_DIR})
target_link_libraries(ember_internal_objs INTERFACE fmt::fmt-header-only Eigen3::Eigen Threads::Threads)
target_compile_definitions(ember_internal_objs INTERFACE EMBER_BUILDING_LIB)
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  # -Wno-missing-field-initializers: ember's option structs are meant to be filled with
  # designated initializers that name only what differs from the defaults
  # ({.threads = 2}); GCC 12 warned on each of them (some 200 lines per build).
  target_compile_options(ember_internal_objs INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>)
  if(EMBER_NATIVE)
    target_compile_options(ember_internal_objs INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
endif()

if(EMBER_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

set_property(GLOBAL PROPERTY EMBER_COMPONENTS_PROP "")

# ember_add_component(<name> SOURCES <files...>)
function(ember_add_component name)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  add_library(${name} OBJECT ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ember_internal_objs)
  if(EMBER_HAVE_CUDA)
    target_compile_definitions(${name} PRIVATE EMBER_HAVE_CUDA=1)
  endif()
  set_property(GLOBAL APPEND PROPERTY EMBER_COMPONENTS_PROP ${name})
endfunction()

# Collects the component list once every subdirectory has been added.
macro(ember_collect_components)
  get_property(EMBER_COMPONENTS GLOBAL PROPERTY EMBER_COMPONENTS_PROP)
endmacro()
