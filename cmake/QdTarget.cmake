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

# qd_add_library(<name> SOURCES ... DEPS ...): a qd library exported as qd::<name>.
function(qd_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(qd_${name} ${ARG_SOURCES})
  add_library(qd::${name} ALIAS qd_${name})
  set_target_properties(qd_${name} PROPERTIES EXPORT_NAME ${name} OUTPUT_NAME qd_${name})
  target_include_directories(qd_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(qd_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  qd_set_flags(qd_${name})
  set_property(GLOBAL APPEND PROPERTY QD_EXPORTED_TARGETS qd_${name})
endfunction()

function(qd_add_tool name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  qd_set_flags(${name})
  install(TARGETS ${name} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endfunction()
