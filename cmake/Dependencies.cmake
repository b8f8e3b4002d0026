# External dependencies: the CUDA toolkit headers (no GPU needed to build), LMDB, Python for the
# table generator. Every one of them is installed by scripts/setup.sh.
set(CUDA_HOME "$ENV{CUDA_HOME}" CACHE PATH "CUDA toolkit root")
if(NOT CUDA_HOME)
  set(CUDA_HOME /usr/local/cuda CACHE PATH "CUDA toolkit root" FORCE)
endif()
find_path(CUDA_INCLUDE_DIR cudaTypedefs.h HINTS ${CUDA_HOME}/include NO_DEFAULT_PATH)
if(NOT CUDA_INCLUDE_DIR)
  message(FATAL_ERROR "CUDA toolkit headers (cuda.h, cudaTypedefs.h) not found under ${CUDA_HOME}/include; "
                      "install the CUDA 13 toolkit or set CUDA_HOME")
endif()
if(CRCUDA_BUILD_TESTS)
  find_program(NVCC_EXECUTABLE nvcc HINTS ${CUDA_HOME}/bin NO_DEFAULT_PATH)
  if(NOT NVCC_EXECUTABLE)
    message(FATAL_ERROR "nvcc not found under ${CUDA_HOME}/bin: the tests and benchmarks need it "
                        "(configure with -DCRCUDA_BUILD_TESTS=OFF to build and install crcuda without them)")
  endif()
  set(CUDA_STUB_LIBCUDA ${CUDA_HOME}/lib64/stubs/libcuda.so)
endif()

# crc_debian_library(<target> <header> <library> <what> <Debian package>): an imported target for a
# library that scripts/setup.sh installs, or a clear error naming the package.
function(crc_debian_library target header library what package)
  string(MAKE_C_IDENTIFIER "${target}" var)
  find_path(${var}_INCLUDE_DIR ${header})
  find_library(${var}_LIBRARY ${library})
  if(NOT ${var}_INCLUDE_DIR OR NOT ${var}_LIBRARY)
    message(FATAL_ERROR "${what} not found: run scripts/setup.sh (Debian package ${package})")
  endif()
  add_library(${target} UNKNOWN IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES IMPORTED_LOCATION ${${var}_LIBRARY}
                                             INTERFACE_INCLUDE_DIRECTORIES ${${var}_INCLUDE_DIR})
endfunction()

crc_debian_library(lmdb::lmdb lmdb.h lmdb LMDB liblmdb-dev)
# XXH3-128 content addresses of the store's chunks.
crc_debian_library(xxhash::xxhash xxhash.h xxhash xxHash libxxhash-dev)
# crcudactl's --json output.
crc_debian_library(jansson::jansson jansson.h jansson Jansson libjansson-dev)
# Fatbin entries are compressed with LZ4 or zstd (common/modimage.c).
crc_debian_library(crc::lz4 lz4.h lz4 LZ4 liblz4-dev)
crc_debian_library(crc::zstd zstd.h zstd zstd libzstd-dev)
# TLS of remote sessions (common/tls.c): the headers here; libgnutls.so.30 is loaded at run time. Only
# bench/tls_loopback links it (one core's AES-GCM through GnuTLS's cipher API).
find_path(GNUTLS_INCLUDE_DIR gnutls/gnutls.h)
# Without the -dev package's libgnutls.so (the GPU machine has only the run-time .so.30) link that.
find_library(GNUTLS_LIBRARY NAMES gnutls libgnutls.so.30)
if(NOT GNUTLS_INCLUDE_DIR OR NOT GNUTLS_LIBRARY)
  message(FATAL_ERROR "GnuTLS headers not found: run scripts/setup.sh (Debian package libgnutls28-dev)")
endif()

find_package(Python3 REQUIRED COMPONENTS Interpreter)
find_package(Threads REQUIRED)

# Where scripts/setup.sh builds CRIU (project-local prefix).
set(CRCUDA_DEPS_DIR ${PROJECT_SOURCE_DIR}/.deps CACHE PATH "project-local dependency prefix")
# CRIU's plugin headers (criu-plugin.h): the project's CRIU build, else a system copy.
find_path(CRCUDA_CRIU_INCLUDE_DIR criu-plugin.h HINTS ${CRCUDA_DEPS_DIR}/criu/include
          PATH_SUFFIXES criu DOC "directory of CRIU's criu-plugin.h (the CRIU plugin is built only where found)")
# The criu crcudactl runs when $CRCUDA_CRIU is unset and no criu >= 4.1 is on $PATH. Empty: none.
set(CRCUDA_CRIU_DEFAULT ${CRCUDA_DEPS_DIR}/criu/bin/criu CACHE FILEPATH
    "criu used when CRCUDA_CRIU is unset and $PATH has no criu >= 4.1 (empty: none)")
