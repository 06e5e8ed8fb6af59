# One CMake target per layer of src/, so that the layering in docs/design.md is enforced by the
# compiler rather than by review.
#
# Each layer is an OBJECT library over src/<layer>/**.cpp. It sees, on its include path, only its
# own headers and those of the layers it names in DEPS (and theirs, transitively): its public
# headers from include/kiln/ and its private ones from src/<layer>/, through a per-layer tree of
# symbolic links under build/layers/<layer>/. An #include of a header of a higher layer (or of a
# layer not named) therefore fails with "No such file or directory". The include spellings stay the
# ones users and the sources already use: "kiln/tensor.h", "runtime/memory_plan.h".
#
#   kiln_layer(runtime DEPS kernels HEADERS session.h LIBS OpenMP::OpenMP_CXX)
#
# HEADERS are paths under include/kiln/ (globs allowed); every header there must belong to exactly
# one layer, which kiln_check_layer_headers() verifies at configure time.

set(KILN_LAYERS_DIR ${CMAKE_BINARY_DIR}/layers)
set_property(GLOBAL PROPERTY KILN_LAYERS "")
set_property(GLOBAL PROPERTY KILN_LAYER_HEADERS "")

# A symbolic link `link` -> `target`, replacing whatever is there.
function(kiln_link target link)
  get_filename_component(dir ${link} DIRECTORY)
  file(MAKE_DIRECTORY ${dir})
  file(REMOVE_RECURSE ${link})
  file(CREATE_LINK ${target} ${link} SYMBOLIC)
endfunction()

function(kiln_layer name)
  cmake_parse_arguments(L "" "" "DEPS;HEADERS;LIBS" ${ARGN})
  set(root ${KILN_LAYERS_DIR}/${name})
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root}/include/kiln ${root}/src)
  set(owned "")
  foreach(pattern ${L_HEADERS})
    file(GLOB matches RELATIVE ${CMAKE_SOURCE_DIR}/include/kiln CONFIGURE_DEPENDS
         ${CMAKE_SOURCE_DIR}/include/kiln/${pattern})
    if(NOT matches)
      message(FATAL_ERROR "layer ${name}: no header include/kiln/${pattern}")
    endif()
    foreach(h ${matches})
      kiln_link(${CMAKE_SOURCE_DIR}/include/kiln/${h} ${root}/include/kiln/${h})
      list(APPEND owned ${h})
    endforeach()
  endforeach()
  set_property(GLOBAL APPEND PROPERTY KILN_LAYER_HEADERS ${owned})

  set(target kiln_${name})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${name}/*.cpp)
  if(sources)
    kiln_link(${CMAKE_SOURCE_DIR}/src/${name} ${root}/src/${name})
    add_library(${target} OBJECT ${sources})
    set(scope PUBLIC)
    target_compile_options(${target} PRIVATE ${KILN_WARNINGS})
    target_compile_definitions(${target} PRIVATE KILN_VERSION="${PROJECT_VERSION}")
    target_link_libraries(${target} PRIVATE ${L_LIBS})
    set_property(GLOBAL APPEND PROPERTY KILN_LAYERS ${target})
  else()
    add_library(${target} INTERFACE)  # headers only
    set(scope INTERFACE)
  endif()
  target_include_directories(${target} ${scope} ${root}/include ${root}/src)
  foreach(dep ${L_DEPS})
    target_link_libraries(${target} ${scope} kiln_${dep})
  endforeach()
endfunction()

# Every public header belongs to exactly one layer.
function(kiln_check_layer_headers)
  get_property(owned GLOBAL PROPERTY KILN_LAYER_HEADERS)
  file(GLOB_RECURSE all RELATIVE ${CMAKE_SOURCE_DIR}/include/kiln CONFIGURE_DEPENDS
       ${CMAKE_SOURCE_DIR}/include/kiln/*.h)
  foreach(h ${all})
    list(FIND owned ${h} at)
    if(at EQUAL -1)
      message(FATAL_ERROR "include/kiln/${h} belongs to no layer: add it to the HEADERS of its layer's "
                          "kiln_layer() in CMakeLists.txt")
    endif()
  endforeach()
  set(seen "")
  foreach(h ${owned})
    list(FIND seen ${h} at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "include/kiln/${h} is listed in two layers")
    endif()
    list(APPEND seen ${h})
  endforeach()
endfunction()

# A test that the build refuses an include across the layering: a probe source in `layer` that
# includes `header` must fail to compile with "No such file or directory" (GCC) or "file not found"
# (clang) (ALLOWED: must compile).
# The probes are not part of `all`; ctest builds each one.
function(kiln_layering_probe layer header)
  cmake_parse_arguments(P "ALLOWED" "" "" ${ARGN})
  string(MAKE_C_IDENTIFIER "${layer}_${header}" id)
  set(source ${CMAKE_BINARY_DIR}/layering_probes/${id}.cpp)
  file(WRITE ${source} "#include \"${header}\"\nint kiln_layering_probe_${id} = 0;\n")
  add_library(layering_probe_${id} OBJECT EXCLUDE_FROM_ALL ${source})
  target_link_libraries(layering_probe_${id} PRIVATE kiln_${layer})
  target_include_directories(layering_probe_${id} PRIVATE ${DNNL_INCLUDE_DIR})
  if(P_ALLOWED)
    set(name layering.${layer}_may_include_${header})
  else()
    set(name layering.${layer}_cannot_include_${header})
  endif()
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target layering_probe_${id})
  # One build tool at a time in the build tree.
  set_tests_properties(${name} PROPERTIES RESOURCE_LOCK kiln_build_tree)
  if(NOT P_ALLOWED)
    set_tests_properties(${name} PROPERTIES PASS_REGULAR_EXPRESSION "No such file or directory|'${header}' file not found")
  endif()
endfunction()
