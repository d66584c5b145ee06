# strata_target_defaults(<target>): the warning set, -Werror in CI, and the sanitizers.
#
# strata_options is exported with the libraries that link it (cmake/install.cmake). Compile
# options stay $<BUILD_INTERFACE:...>: our warnings and -Werror are no business of a project that
# links the installed libraries. The sanitizer link option is exported on purpose: installed
# static libraries built with STRATA_SANITIZE call into the ASan/UBSan runtimes, so anything
# linking them needs those runtimes too.
add_library(strata_options INTERFACE)
target_compile_options(strata_options INTERFACE
  $<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wold-style-cast -Wcast-align -Wunused -Woverloaded-virtual -Wimplicit-fallthrough>>)
# Host code never contracts a * b + c into one fused multiply-add: the CUDA kernels spell out the
# host's roundings to match it bit for bit (gpu/detail/elementwise.h), and that needs the host's
# roundings to be the ones written. GCC's ISO mode already defaults to off; clang's does not.
target_compile_options(strata_options INTERFACE
  $<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>>)
if(STRATA_WERROR)
  target_compile_options(strata_options INTERFACE
    $<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:-Werror>
      $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>>)
endif()
if(STRATA_SANITIZE)
  target_compile_options(strata_options INTERFACE
    $<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined
      -fno-omit-frame-pointer -fno-sanitize-recover=undefined>>)
  target_link_options(strata_options INTERFACE -fsanitize=address,undefined)
endif()
