include(CMakePackageConfigHelpers)
get_property(qd_targets GLOBAL PROPERTY QD_EXPORTED_TARGETS)
install(TARGETS ${qd_targets} EXPORT qdTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/qd DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(qd_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/qd)
install(EXPORT qdTargets NAMESPACE qd:: DESTINATION ${qd_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/qdConfig.cmake.in
  ${PROJECT_BINARY_DIR}/qdConfig.cmake INSTALL_DESTINATION ${qd_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/qdConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/qdConfig.cmake ${PROJECT_BINARY_DIR}/qdConfigVersion.cmake
  DESTINATION ${qd_cmake_dir})
