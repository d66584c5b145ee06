# strata_target_defaults(<target>): the warning set, -Werror in CI, and the sanitizers.
add_library(strata_options INTERFACE)
target_compile_options(strata_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
    -Wcast-align -Wunused -Woverloaded-virtual -Wimplicit-fallthrough>)
if(STRATA_WERROR)
  target_compile_options(strata_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
endif()
if(STRATA_SANITIZE)
  target_compile_options(strata_options INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer
      -fno-sanitize-recover=undefined>)
  target_link_options(strata_options INTERFACE -fsanitize=address,undefined)
endif()
