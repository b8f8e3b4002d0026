# `cpack -G DEB` in the build directory: a .deb of the installed tree (configure with
# -DCMAKE_INSTALL_PREFIX=/usr so that the CRIU plugin also lands in /usr/lib/criu, and with
# -DCRCUDA_CRIU_DEFAULT= or a criu path of the target machine: the default names the build's .deps).
set(CPACK_PACKAGE_NAME crcuda)
set(CPACK_PACKAGE_VENDOR "crcuda")
set(CPACK_PACKAGE_CONTACT "crcuda developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Transparent checkpoint/restart for unmodified CUDA programs")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
# The tree as configured: the unit names crcudad by CMAKE_INSTALL_PREFIX.
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
# Library dependencies from the binaries (dpkg-shlibdeps); CRIU >= 4.1 is needed for checkpoint and
# restore but is not a Debian 12 package: recommended, not required.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "criu (>= 4.1)")
# GnuTLS is loaded at run time (common/tls.c), which dpkg-shlibdeps cannot see: TLS of remote sessions.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libgnutls30 (>= 3.6.13)")
include(CPack)
