# Sanitizer and fuzzing builds (the asan and tsan presets; docs/reliability.md says what runs where).
#   KILN_SANITIZE=address  AddressSanitizer + UndefinedBehaviorSanitizer, UB is fatal
#   KILN_SANITIZE=thread   ThreadSanitizer
#   KILN_FUZZ=ON           clang's coverage instrumentation on everything, so libFuzzer harnesses
#                          (fuzz/) see which branches of the readers an input reached
if(KILN_SANITIZE STREQUAL "ON")  # the old boolean spelling
  set(KILN_SANITIZE address)
endif()
if(KILN_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(KILN_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(KILN_SANITIZE AND NOT KILN_SANITIZE STREQUAL "OFF")
  message(FATAL_ERROR "KILN_SANITIZE must be address, thread or empty, not '${KILN_SANITIZE}'")
endif()

if(KILN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "KILN_FUZZ needs clang (libFuzzer); configure with the asan preset")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
