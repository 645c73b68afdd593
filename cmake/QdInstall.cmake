# Installs headers, libraries and the relocatable CMake package qd: one
# targets file per export set (QdTarget.cmake), loaded by qdConfig.cmake
# only for the components a consumer asks for, after finding what that set
# needs. No file of the package names a path of this machine: qd's own files
# are found relative to the config, LLVM and SPIRV-Tools anew by the config.
include(CMakePackageConfigHelpers)
set(qd_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/qd)
foreach(set IN LISTS QD_EXPORT_SETS)
  get_property(targets GLOBAL PROPERTY QD_EXPORTED_TARGETS_${set})
  if(NOT targets)
    continue() # vulkan without QD_ENABLE_VULKAN
  endif()
  # core -> qdTargets.cmake, llvm -> qdLlvmTargets.cmake, ...
  set(name "")
  if(NOT set STREQUAL "core")
    string(SUBSTRING ${set} 0 1 first)
    string(SUBSTRING ${set} 1 -1 rest)
    string(TOUPPER ${first} first)
    set(name ${first}${rest})
  endif()
  install(TARGETS ${targets} EXPORT qd${name}Targets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(EXPORT qd${name}Targets NAMESPACE qd:: DESTINATION ${qd_cmake_dir})
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/qd ${PROJECT_SOURCE_DIR}/include/qd-c
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The components: core, one per backend besides the interpreter (which is in
# core), backends (qd::backends, every backend of the build) and c (qd::c,
# the C API's shared library).
set(QD_PACKAGE_COMPONENTS core ${QD_BACKENDS} backends c)
list(REMOVE_ITEM QD_PACKAGE_COMPONENTS interp)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/qdConfig.cmake.in
  ${PROJECT_BINARY_DIR}/qdConfig.cmake INSTALL_DESTINATION ${qd_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/qdConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/qdConfig.cmake ${PROJECT_BINARY_DIR}/qdConfigVersion.cmake
  DESTINATION ${qd_cmake_dir})

# The front-end example, built by a consumer against the installed package
# (docs/getting-started.md, "Embedding qd in a front-end").
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/frontend
  DESTINATION ${CMAKE_INSTALL_DATADIR}/qd/examples)
