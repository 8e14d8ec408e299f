# What `cmake --install` puts in place. Included once, at the end of the
# top-level CMakeLists.txt, when every target is known; each block checks
# that its target exists, so the tree configures while parts are missing.
#
#   sbin/tiletuned                           the daemon (systemd/ points at it)
#   libexec/tiletune/tiletune-worker         its measurement worker (not a command)
#   bin/tiletune                             the CLI
#   share/man/man1/tiletune.1, man8/tiletuned.8   made from the option tables
#   share/bash-completion/completions/tiletune
#   <sysconfdir>/tiletune/tiletuned.conf     the daemon's configuration (systemd/)
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

# The worker is started by the daemon, never by people: libexec. The
# daemon finds it beside itself (a build tree) or at this path relative to
# its own directory, so the tree can be moved (a package root, a container).
set(TT_WORKER_DIR ${CMAKE_INSTALL_LIBEXECDIR}/tiletune)
if(TARGET tiletune_worker)
  install(TARGETS tiletune_worker RUNTIME DESTINATION ${TT_WORKER_DIR})
endif()
if(TARGET tiletuned AND TARGET tiletune_worker)
  file(RELATIVE_PATH tt_worker_rel ${CMAKE_INSTALL_FULL_SBINDIR}
       ${CMAKE_INSTALL_FULL_LIBEXECDIR}/tiletune/$<TARGET_FILE_NAME:tiletune_worker>)
  target_compile_definitions(tiletuned PRIVATE TT_WORKER_RELATIVE="${tt_worker_rel}")
endif()

if(TARGET tiletune_cli)
  install(TARGETS tiletune_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(FILES ${PROJECT_BINARY_DIR}/src/client/tiletune.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
  install(FILES ${PROJECT_BINARY_DIR}/src/client/tiletune.bash-completion
          DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME tiletune)
endif()
if(TARGET tiletuned)
  install(FILES ${PROJECT_BINARY_DIR}/src/tuner/daemon/tiletuned.8 DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)
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

# ---- Debian packages: cpack -G DEB ------------------------------------------
# Configure with -DCMAKE_INSTALL_PREFIX=/usr (the paths compiled into the
# daemon follow the prefix), build, then `cpack -G DEB`:
#   tiletune_<version>_<arch>.deb         daemon, worker, CLI, library, units,
#                                         configuration, man pages, completion
#   libtiletune-dev_<version>_<arch>.deb  header, CMake package, pkg-config file
# Dependencies come from dpkg-shlibdeps (libuv1, libsqlite3-0, ...).
set(CPACK_PACKAGE_NAME tiletune)
set(CPACK_PACKAGE_VENDOR tiletune)
set(CPACK_PACKAGE_CONTACT "tiletune maintainers <tiletune@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "SDPA attention kernel autotuner: daemon, CLI and client library")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL Unspecified Development)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_NAME tiletune)
set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_RECOMMENDS "systemd")
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME libtiletune-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS "tiletune (= ${PROJECT_VERSION})")
set(CPACK_COMPONENT_UNSPECIFIED_DESCRIPTION
    "SDPA attention kernel autotuner\n tiletuned tunes attention kernel schedules on the node's GPUs and serves\n the fastest config of each key over a Unix socket; tiletune is its CLI.")
set(CPACK_COMPONENT_DEVELOPMENT_DESCRIPTION
    "SDPA attention kernel autotuner: development files\n The header, CMake package and pkg-config file of libtiletune.")
# Maintainer scripts (users, directories, units) and the conffile.
set(tt_deb ${PROJECT_BINARY_DIR}/deb)
configure_file(${PROJECT_SOURCE_DIR}/cmake/deb/postinst.in ${tt_deb}/postinst @ONLY)
configure_file(${PROJECT_SOURCE_DIR}/cmake/deb/prerm.in ${tt_deb}/prerm @ONLY)
configure_file(${PROJECT_SOURCE_DIR}/cmake/deb/postrm.in ${tt_deb}/postrm @ONLY)
file(WRITE ${tt_deb}/conffiles "${CMAKE_INSTALL_FULL_SYSCONFDIR}/tiletune/tiletuned.conf\n")
set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_CONTROL_EXTRA
    ${tt_deb}/postinst ${tt_deb}/prerm ${tt_deb}/postrm ${tt_deb}/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
