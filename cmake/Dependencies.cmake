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
find_program(NVCC_EXECUTABLE nvcc HINTS ${CUDA_HOME}/bin NO_DEFAULT_PATH)
if(NOT NVCC_EXECUTABLE)
  message(FATAL_ERROR "nvcc not found under ${CUDA_HOME}/bin")
endif()
set(CUDA_STUB_LIBCUDA ${CUDA_HOME}/lib64/stubs/libcuda.so)

find_path(LMDB_INCLUDE_DIR lmdb.h)
find_library(LMDB_LIBRARY lmdb)
if(NOT LMDB_INCLUDE_DIR OR NOT LMDB_LIBRARY)
  message(FATAL_ERROR "LMDB not found: run scripts/setup.sh (Debian package liblmdb-dev)")
endif()
add_library(lmdb::lmdb UNKNOWN IMPORTED)
set_target_properties(lmdb::lmdb PROPERTIES IMPORTED_LOCATION ${LMDB_LIBRARY}
                                            INTERFACE_INCLUDE_DIRECTORIES ${LMDB_INCLUDE_DIR})

# xxHash (Debian libxxhash-dev): XXH3-128 content addresses of the store's chunks.
find_path(XXHASH_INCLUDE_DIR xxhash.h)
find_library(XXHASH_LIBRARY xxhash)
if(NOT XXHASH_INCLUDE_DIR OR NOT XXHASH_LIBRARY)
  message(FATAL_ERROR "xxHash not found: run scripts/setup.sh (Debian package libxxhash-dev)")
endif()
add_library(xxhash::xxhash UNKNOWN IMPORTED)
set_target_properties(xxhash::xxhash PROPERTIES IMPORTED_LOCATION ${XXHASH_LIBRARY}
                                                INTERFACE_INCLUDE_DIRECTORIES ${XXHASH_INCLUDE_DIR})

# Jansson (Debian libjansson-dev): crcudactl's --json output.
find_path(JANSSON_INCLUDE_DIR jansson.h)
find_library(JANSSON_LIBRARY jansson)
if(NOT JANSSON_INCLUDE_DIR OR NOT JANSSON_LIBRARY)
  message(FATAL_ERROR "Jansson not found: run scripts/setup.sh (Debian package libjansson-dev)")
endif()
add_library(jansson::jansson UNKNOWN IMPORTED)
set_target_properties(jansson::jansson PROPERTIES IMPORTED_LOCATION ${JANSSON_LIBRARY}
                                                  INTERFACE_INCLUDE_DIRECTORIES ${JANSSON_INCLUDE_DIR})

find_package(Python3 REQUIRED COMPONENTS Interpreter)
find_package(Threads REQUIRED)

# Where scripts/setup.sh builds CRIU (project-local prefix).
set(CRCUDA_DEPS_DIR ${PROJECT_SOURCE_DIR}/.deps CACHE PATH "project-local dependency prefix")

# LZ4 and zstd: fatbin entries are compressed with one of them (common/modimage.c).
find_path(LZ4_INCLUDE_DIR lz4.h)
find_library(LZ4_LIBRARY lz4)
find_path(ZSTD_INCLUDE_DIR zstd.h)
find_library(ZSTD_LIBRARY zstd)
if(NOT LZ4_INCLUDE_DIR OR NOT LZ4_LIBRARY OR NOT ZSTD_INCLUDE_DIR OR NOT ZSTD_LIBRARY)
  message(FATAL_ERROR "LZ4 or zstd not found: run scripts/setup.sh (Debian packages liblz4-dev, libzstd-dev)")
endif()
add_library(crc::lz4 UNKNOWN IMPORTED)
set_target_properties(crc::lz4 PROPERTIES IMPORTED_LOCATION ${LZ4_LIBRARY} INTERFACE_INCLUDE_DIRECTORIES ${LZ4_INCLUDE_DIR})
add_library(crc::zstd UNKNOWN IMPORTED)
set_target_properties(crc::zstd PROPERTIES IMPORTED_LOCATION ${ZSTD_LIBRARY} INTERFACE_INCLUDE_DIRECTORIES ${ZSTD_INCLUDE_DIR})
