# `cmake --install build/release --prefix DIR` lays out
#   bin/strata                      the command
#   lib/libstrata_*.a               the static libraries
#   include/strata/<folder>/*.h     the headers, included as "engine/engine.h" (see
#                                   STRATA_INSTALL_INCLUDEDIR in the top-level CMakeLists.txt)
#   lib/cmake/strata/               the package: find_package(strata) gives strata::engine
# Tests, GoogleTest and the fuzzer are never named here, so they are not installed.
# tests/install/ installs a build and builds a small project against it.
include(CMakePackageConfigHelpers)

# Every library of ours that strata_engine links, since a static library's link interface names
# them all, and strata_models (with the strata_chat it links), whose headers are installed with
# the rest. strata_options carries the sanitizer link flag of an instrumented build
# (cmake/warnings.cmake). Installed names drop the prefix the namespace replaces: strata_gpu is
# strata::gpu (engine/CMakeLists.txt also names strata::engine, with its in-tree alias).
set(strata_install_libraries
  strata_options strata_base strata_aio strata_cpu_adam strata_gpu strata_engine strata_chat
  strata_models)
foreach(library IN LISTS strata_install_libraries)
  string(REGEX REPLACE "^strata_" "" export_name ${library})
  set_target_properties(${library} PROPERTIES EXPORT_NAME ${export_name})
endforeach()

install(TARGETS strata RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ${strata_install_libraries} EXPORT strataTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# Every header, detail/ ones too, so code written against the source tree builds against an
# installed one.
install(DIRECTORY base aio cpu_adam gpu engine models
  DESTINATION ${STRATA_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")

set(strata_package_dir ${CMAKE_INSTALL_LIBDIR}/cmake/strata)
install(EXPORT strataTargets NAMESPACE strata:: DESTINATION ${strata_package_dir})
configure_package_config_file(cmake/strataConfig.cmake.in
  ${PROJECT_BINARY_DIR}/strataConfig.cmake
  INSTALL_DESTINATION ${strata_package_dir})
# Before 1.0 a minor version may break the API, so 0.1 accepts 0.1.x only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/strataConfig.cmake ${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
  DESTINATION ${strata_package_dir})
