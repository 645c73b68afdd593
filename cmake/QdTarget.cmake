# Common compile flags for every qd target.
function(qd_set_flags target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter)
  # A switch over an enum without `default:` must name every enumerator, even
  # without QD_WERROR: adding a StmtKind then fails to build where it is missed.
  target_compile_options(${target} PRIVATE -Werror=switch)
  if(QD_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(QD_SANITIZE_THREAD)
    target_compile_options(${target} PRIVATE -fsanitize=thread -fno-omit-frame-pointer)
    target_link_options(${target} PUBLIC -fsanitize=thread)
  endif()
  if(QD_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                              -fno-sanitize-recover=undefined)
    # PUBLIC: whatever links a sanitized static library needs the runtimes
    # (the installed package passes them on to consumers too).
    target_link_options(${target} PUBLIC -fsanitize=address,undefined)
  endif()
  if(QD_BUILD_FUZZERS)
    # Coverage for libFuzzer plus ASan and fatal UBSan in every qd target of
    # a fuzz build (clang); the fuzz targets add -fsanitize=fuzzer (fuzz/).
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link,address,undefined
                                              -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# The export sets, in the order a consumer loads them.
set(QD_EXPORT_SETS core llvm vulkan backends c)

# qd_add_library(<name> [SHARED] [EXPORT_SET <set>] SOURCES ... DEPS ...
#                PRIVATE_DEPS ...):
# a qd library exported as qd::<name>, static unless SHARED. The export set
# groups the targets by what a consumer must find to use them
# (cmake/QdInstall.cmake): `core` (the default; absl, fmt and threads only),
# `llvm` (LLVM's shared library), `vulkan` (SPIRV-Tools), `backends` (all of
# them) or `c` (nothing: the C API's shared library links the rest in).
function(qd_add_library name)
  cmake_parse_arguments(ARG "SHARED" "EXPORT_SET" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  if(NOT ARG_EXPORT_SET)
    set(ARG_EXPORT_SET core)
  endif()
  if(NOT ARG_EXPORT_SET IN_LIST QD_EXPORT_SETS)
    message(FATAL_ERROR "qd_add_library(${name}): unknown EXPORT_SET '${ARG_EXPORT_SET}' "
                        "(one of: ${QD_EXPORT_SETS})")
  endif()
  set(type STATIC)
  if(ARG_SHARED)
    set(type SHARED)
  endif()
  add_library(qd_${name} ${type} ${ARG_SOURCES})
  add_library(qd::${name} ALIAS qd_${name})
  set_target_properties(qd_${name} PROPERTIES EXPORT_NAME ${name} OUTPUT_NAME qd_${name})
  target_include_directories(qd_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(qd_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  qd_set_flags(qd_${name})
  set_property(GLOBAL APPEND PROPERTY QD_EXPORTED_TARGETS_${ARG_EXPORT_SET} qd_${name})
endfunction()

# Links LLVM's shared library into the qd library `target`, privately: in the
# build tree LLVM's own target (through qd_llvm); in the installed package
# qd::llvm, which qdConfig.cmake creates from the library it finds on the
# consumer's machine, so that the package names no path of this one.
function(qd_link_llvm target)
  target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:qd_llvm> $<INSTALL_INTERFACE:qd::llvm>)
endfunction()

function(qd_add_tool name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  qd_set_flags(${name})
  install(TARGETS ${name} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endfunction()
