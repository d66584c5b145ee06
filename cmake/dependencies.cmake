# Every dependency is found the way its Debian package exports it: a CMake config package where
# there is one, pkg-config otherwise. scripts/setup.sh installs them all.
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
pkg_check_modules(ISAL REQUIRED IMPORTED_TARGET libisal)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
# The tokenizer's regexes (with the JIT) and Unicode normalization.
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
find_package(TBB REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(GTest REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_package(Threads REQUIRED)
# The Python package (python/): Debian's interpreter, the one python3-torch is installed for,
# before any other python3 on PATH; pybind11 finds it through CMake's FindPython.
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3)
endif()
find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)
set(PYBIND11_FINDPYTHON ON)
find_package(pybind11 CONFIG REQUIRED)

if(STRATA_CUDA)
  find_package(CUDAToolkit REQUIRED)
  # NCCL ships inside the CUDA toolkit folder on this machine kind, not as a Debian package.
  find_library(STRATA_NCCL_LIBRARY nccl
    HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib ${CUDAToolkit_LIBRARY_ROOT}/lib64
    REQUIRED)
  find_path(STRATA_NCCL_INCLUDE nccl.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include REQUIRED)
  add_library(strata_nccl UNKNOWN IMPORTED)
  set_target_properties(strata_nccl PROPERTIES
    IMPORTED_LOCATION ${STRATA_NCCL_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${STRATA_NCCL_INCLUDE})
  message(STATUS "strata: CUDA ${CUDAToolkit_VERSION}, NCCL ${STRATA_NCCL_LIBRARY}")
else()
  message(STATUS "strata: CUDA backend off (host backend only)")
endif()
