# Installation: headers, the library, the CLI (examples/), and a relocatable
# package config so that hosts can `find_package(ember)`.
include(CMakePackageConfigHelpers)

install(TARGETS ember EXPORT emberTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ember DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/ember/version.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember)

install(EXPORT emberTargets NAMESPACE ember:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ember)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/emberConfig.cmake.in
  ${PROJECT_BINARY_DIR}/emberConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ember)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/emberConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/emberConfig.cmake ${PROJECT_BINARY_DIR}/emberConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ember)

# pkg-config: ember.pc, relocatable through ${pcfiledir}. A static library also
# needs the C++ runtime (and CUDA's libraries when built with them) in the host's
# link: Libs.private, used by `pkg-config --static`.
set(_pc_dir "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
file(RELATIVE_PATH EMBER_PC_TO_PREFIX "/prefix/${_pc_dir}" "/prefix")
string(REGEX REPLACE "/$" "" EMBER_PC_TO_PREFIX "${EMBER_PC_TO_PREFIX}")
set(EMBER_PC_PRIVATE_LIBS "-lstdc++ -lpthread -lm")
if(EMBER_HAVE_CUDA)
  string(APPEND EMBER_PC_PRIVATE_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -lcublasLt -lcublas -lcudart")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/ember.pc.in ${PROJECT_BINARY_DIR}/ember.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/ember.pc DESTINATION ${_pc_dir})
