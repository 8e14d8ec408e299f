# What `cmake --install` puts in place. Included once, at the end of the
# top-level CMakeLists.txt, when every target is known; each block checks
# that its target exists, so the tree configures while parts are missing.
#
#   sbin/tiletuned                           the daemon (systemd/ points at it)
#   sbin/tiletune-worker                     its measurement worker, beside it
#   bin/tiletune                             the CLI
#   lib/libtiletune.so.<soversion>           the client library
#   include/tiletune.h
#   lib/cmake/tiletune/                      find_package(tiletune) -> tiletune::tiletune
#   lib/pkgconfig/tiletune.pc
#   share/tiletune/schema.sql                the database schema (reference copy:
#                                            the binaries carry it embedded)
#   share/tiletune/python/tiletune/          the Python package
#   share/doc/tiletune/                      docs/*.md, README.md
#   lib/systemd/system, lib/sysusers.d, lib/tmpfiles.d   (systemd/CMakeLists.txt)
include(CMakePackageConfigHelpers)

set(TT_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tiletune)

if(TARGET tiletuned)
  install(TARGETS tiletuned RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR})
endif()

# The daemon starts its measurement worker from its own directory.
if(TARGET tiletune_worker)
  install(TARGETS tiletune_worker RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR})
endif()

if(TARGET tiletune_cli)
  install(TARGETS tiletune_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

if(TARGET libtiletune)
  # The target is libtiletune (the CLI took "tiletune"); importers see
  # tiletune::tiletune.
  set_target_properties(libtiletune PROPERTIES EXPORT_NAME tiletune)
  install(TARGETS libtiletune EXPORT tiletuneTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
                  NAMELINK_COMPONENT Development
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(FILES ${PROJECT_SOURCE_DIR}/include/tiletune.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT Development)

  install(EXPORT tiletuneTargets NAMESPACE tiletune::
          DESTINATION ${TT_CMAKE_PACKAGE_DIR} COMPONENT Development)
  configure_package_config_file(
    ${PROJECT_SOURCE_DIR}/cmake/tiletuneConfig.cmake.in
    ${PROJECT_BINARY_DIR}/tiletuneConfig.cmake
    INSTALL_DESTINATION ${TT_CMAKE_PACKAGE_DIR})
  # 0.x: every minor release may change the ABI (the soname says so too).
  write_basic_package_version_file(
    ${PROJECT_BINARY_DIR}/tiletuneConfigVersion.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/tiletuneConfig.cmake
                ${PROJECT_BINARY_DIR}/tiletuneConfigVersion.cmake
          DESTINATION ${TT_CMAKE_PACKAGE_DIR} COMPONENT Development)

  # pkg-config: every path relative to the .pc file's own directory.
  foreach(dir LIBDIR INCLUDEDIR)
    if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
      set(TT_PC_${dir}_EXPR "${CMAKE_INSTALL_${dir}}")
    else()
      set(TT_PC_${dir}_EXPR "\${prefix}/${CMAKE_INSTALL_${dir}}")
    endif()
  endforeach()
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    set(TT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  else()
    file(RELATIVE_PATH up /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
    string(REGEX REPLACE "/$" "" up "${up}")
    set(TT_PC_PREFIX "\${pcfiledir}/${up}")
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/tiletune.pc.in
                 ${PROJECT_BINARY_DIR}/tiletune.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/tiletune.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT Development)
endif()

install(FILES ${PROJECT_SOURCE_DIR}/db/schema.sql DESTINATION ${CMAKE_INSTALL_DATADIR}/tiletune)

if(EXISTS ${PROJECT_SOURCE_DIR}/python/tiletune)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/tiletune
          DESTINATION ${CMAKE_INSTALL_DATADIR}/tiletune/python
          PATTERN __pycache__ EXCLUDE PATTERN "*.pyc" EXCLUDE)
endif()

install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} OPTIONAL)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}
        FILES_MATCHING PATTERN "*.md")
