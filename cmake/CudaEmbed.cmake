# crc_embed_cuda: build a .cu file's kernels with nvcc and embed the images in a C target. Used by the
# driver-API test programs and the benchmarks.
set(CRC_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/embed.cmake)
set(CRC_CUDA_ARCH_FLAGS -gencode "arch=compute_90,code=[sm_90,compute_90]")

# crc_embed_cuda(<target> <kernel source> [CUBIN] [PTX] [ARCH nvcc-flags...]): nvcc builds the fatbin (for
# sm_90, or the ARCH flags; and, if asked, an sm_90 cubin and the PTX) of <kernel source>, embedded in
# <target> as <name>_fatbin[, _cubin, _ptx].
function(crc_embed_cuda target cu)
  cmake_parse_arguments(E "CUBIN;PTX" "" "ARCH" ${ARGN})
  set(arch_flags ${CRC_CUDA_ARCH_FLAGS})
  if(E_ARCH)
    set(arch_flags ${E_ARCH})
  endif()
  get_filename_component(name ${cu} NAME_WE)
  set(kinds fatbin)
  if(E_CUBIN)
    list(APPEND kinds cubin)
  endif()
  if(E_PTX)
    list(APPEND kinds ptx)
  endif()
  # Each target its own images: two targets embedding one .cu would otherwise both generate the same
  # files, which a parallel build races on.
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/embed/${target})
  file(MAKE_DIRECTORY ${dir})
  foreach(kind ${kinds})
    set(image ${dir}/${name}.${kind})
    if(kind STREQUAL "fatbin")
      set(nvcc_args -fatbin ${arch_flags})
    elseif(kind STREQUAL "cubin")
      set(nvcc_args -cubin -arch=sm_90)
    else()
      set(nvcc_args -ptx -arch=compute_90)
    endif()
    add_custom_command(
      OUTPUT ${image}
      COMMAND ${NVCC_EXECUTABLE} ${nvcc_args} -o ${image} ${CMAKE_CURRENT_SOURCE_DIR}/${cu}
      DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${cu}
      COMMENT "nvcc: ${cu} -> ${name}.${kind}"
      VERBATIM)
    add_custom_command(
      OUTPUT ${image}.c
      COMMAND ${CMAKE_COMMAND} -DINPUT=${image} -DOUTPUT=${image}.c -DNAME=${name}_${kind}
              -P ${CRC_EMBED_SCRIPT}
      DEPENDS ${image} ${CRC_EMBED_SCRIPT}
      VERBATIM)
    target_sources(${target} PRIVATE ${image}.c)
  endforeach()
endfunction()

