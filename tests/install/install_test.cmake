# cmake -P script run by CTest (tests/install/CMakeLists.txt passes every -D below). Installs the
# build at STRATA_BUILD_DIR into STRATA_PREFIX, checks the layout, then configures, builds and
# runs consumer/ against the installed tree alone and checks what it prints.
foreach(variable STRATA_SOURCE_DIR STRATA_BUILD_DIR STRATA_PREFIX STRATA_BINDIR STRATA_LIBDIR
    STRATA_INCLUDEDIR CONSUMER_SOURCE_DIR CONSUMER_BINARY_DIR CONSUMER_GENERATOR
    CONSUMER_CXX_COMPILER)
  if(NOT DEFINED ${variable} OR "${${variable}}" STREQUAL "")
    message(FATAL_ERROR "install_test.cmake needs -D ${variable}=...")
  endif()
endforeach()

# run(<what> <command...>): runs the command, output captured, and fails the test with the output
# when it exits non-zero. Leaves the output in run_output for the caller to check.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output
    ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${what} failed (${result}):\n${ARGN}\n${output}")
  endif()
  set(run_output "${output}" PARENT_SCOPE)
endfunction()

# A fresh prefix and consumer build each run: files left by an earlier install must not make a
# missing install rule pass.
file(REMOVE_RECURSE ${STRATA_PREFIX} ${CONSUMER_BINARY_DIR})

run("cmake --install" ${CMAKE_COMMAND} --install ${STRATA_BUILD_DIR} --prefix ${STRATA_PREFIX})

set(package_dir ${STRATA_PREFIX}/${STRATA_LIBDIR}/cmake/strata)
foreach(file
    ${STRATA_BINDIR}/strata
    ${STRATA_LIBDIR}/libstrata_engine.a
    ${STRATA_LIBDIR}/libstrata_base.a
    ${STRATA_INCLUDEDIR}/engine/config/config.h
    ${STRATA_INCLUDEDIR}/base/assert.h
    ${STRATA_LIBDIR}/cmake/strata/strataConfig.cmake
    ${STRATA_LIBDIR}/cmake/strata/strataConfigVersion.cmake
    ${STRATA_LIBDIR}/cmake/strata/strataTargets.cmake)
  if(NOT EXISTS ${STRATA_PREFIX}/${file})
    message(FATAL_ERROR "cmake --install did not install ${file}")
  endif()
endforeach()

# The command is the only program installed: no test suite, gtest or fuzzer.
file(GLOB programs RELATIVE ${STRATA_PREFIX}/${STRATA_BINDIR} ${STRATA_PREFIX}/${STRATA_BINDIR}/*)
if(NOT programs STREQUAL "strata")
  message(FATAL_ERROR "expected bin/ to hold strata alone, found: ${programs}")
endif()
file(GLOB_RECURSE strays ${STRATA_PREFIX}/*gtest* ${STRATA_PREFIX}/*gmock* ${STRATA_PREFIX}/*_tests
  ${STRATA_PREFIX}/*fuzzer*)
if(strays)
  message(FATAL_ERROR "test files were installed: ${strays}")
endif()

# The package must be relocatable: no path into the source or build tree, which a user's machine
# does not have.
file(GLOB package_files ${package_dir}/*.cmake)
foreach(file IN LISTS package_files)
  file(READ ${file} text)
  foreach(tree ${STRATA_SOURCE_DIR} ${STRATA_BUILD_DIR})
    string(FIND "${text}" "${tree}/" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${file} names ${tree}, which an installed package must not")
    endif()
  endforeach()
endforeach()

# The same compiler as the build: an ASan build's libraries need that compiler's sanitizer
# runtime, which the exported link option (-fsanitize=...) asks the driver for.
set(configure ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${CONSUMER_BINARY_DIR}
  -G ${CONSUMER_GENERATOR} -DCMAKE_CXX_COMPILER=${CONSUMER_CXX_COMPILER}
  -DCMAKE_PREFIX_PATH=${STRATA_PREFIX} -DCMAKE_BUILD_TYPE=${CONSUMER_BUILD_TYPE}
  -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
if(CONSUMER_MAKE_PROGRAM)
  list(APPEND configure -DCMAKE_MAKE_PROGRAM=${CONSUMER_MAKE_PROGRAM})
endif()
run("configuring the consumer" ${configure})

# find_package(strata) must have read the installed package, not some other strata.
file(STRINGS ${CONSUMER_BINARY_DIR}/CMakeCache.txt strata_dir REGEX "^strata_DIR:")
file(REAL_PATH ${package_dir} expected_dir)
string(REGEX REPLACE "^strata_DIR:[A-Z]+=" "" found_dir "${strata_dir}")
file(REAL_PATH "${found_dir}" found_dir)
if(NOT found_dir STREQUAL expected_dir)
  message(FATAL_ERROR "the consumer found strata in '${found_dir}', not in ${expected_dir}")
endif()

run("building the consumer" ${CMAKE_COMMAND} --build ${CONSUMER_BINARY_DIR})

run("running the consumer" ${CONSUMER_BINARY_DIR}/consumer)
if(NOT run_output MATCHES "steps_per_print=10 train_batch_size=1\n")
  message(FATAL_ERROR "the consumer printed an unexpected line:\n${run_output}")
endif()
message(STATUS "consumer built against ${STRATA_PREFIX}: ${run_output}")
