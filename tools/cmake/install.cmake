# Installing clformer as a library (included from the top-level CMakeLists.txt after the targets):
#   <libdir>/libclformer.so.0.1.0 (SONAME libclformer.so.0) and its links,
#   <includedir>/clformer/*.h (the public API; #include <clformer/clformer.h>),
#   <libdir>/pkgconfig/clformer.pc                     (pkg-config --cflags --libs clformer),
#   <libdir>/cmake/clformer/clformer{Config,ConfigVersion,Targets}*.cmake
#                                                      (find_package(clformer): target clformer::clformer).
# The paths are relative to the prefix, so `cmake --install BUILD --prefix DIR` relocates all of them.
include(CMakePackageConfigHelpers)
set(CLFORMER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/clformer)

install(TARGETS clformer_shared EXPORT clformerTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include/clformer DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")

install(EXPORT clformerTargets NAMESPACE clformer:: DESTINATION ${CLFORMER_CMAKE_DIR} FILE clformerTargets.cmake)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/clformerConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/clformerConfig.cmake
                              INSTALL_DESTINATION ${CLFORMER_CMAKE_DIR})
# 0.x: a minor release may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/clformerConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/clformerConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/clformerConfigVersion.cmake
        DESTINATION ${CLFORMER_CMAKE_DIR})

# pkg-config: the prefix is found from the .pc file's own place (${pcfiledir}) unless a directory
# was given as an absolute path, which then stays as written.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(CLFORMER_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _clformer_up "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" _clformer_up "${_clformer_up}")
  set(CLFORMER_PC_PREFIX "\${pcfiledir}/${_clformer_up}")
endif()
foreach(_clformer_dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_clformer_dir}}")
    set(CLFORMER_PC_${_clformer_dir} "${CMAKE_INSTALL_${_clformer_dir}}")
  else()
    set(CLFORMER_PC_${_clformer_dir} "\${prefix}/${CMAKE_INSTALL_${_clformer_dir}}")
  endif()
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/clformer.pc.in ${CMAKE_CURRENT_BINARY_DIR}/clformer.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/clformer.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
