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
