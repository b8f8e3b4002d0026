# The installed layout (GNUInstallDirs; docs/install.md):
#   <bindir>/crcudactl, <bindir>/crcudad
#   <libexecdir>/crcuda/crcudad-worker
#   <libdir>/crcuda/libcuda.so.1, libnvidia-ml.so.1   libcrcuda and crcuda's NVML (private: never on
#                                                      the loader's path; `crcudactl run` puts it first)
#   <libdir>/crcuda/sim/libcuda.so.1                   the simulated device
#   <libdir>/crcuda/criu/crcuda_plugin.so              the CRIU plugin crcudactl passes to criu --libdir
#   CRCUDA_CRIU_PLUGINDIR/crcuda_plugin.so             the same, for a plain `criu dump/restore`
#   man pages, bash and zsh completion, a systemd unit
# The programs find each other relative to their own executable (/proc/self/exe): the relative paths
# from <bindir> below are compiled in (CRCUDA_LAYOUT_DEFS), so an installed tree can be moved as a
# whole, and the build tree's own layout is tried first.
include(GNUInstallDirs)

set(CRCUDA_INSTALL_PKGLIBDIR ${CMAKE_INSTALL_LIBDIR}/crcuda)
set(CRCUDA_INSTALL_PKGLIBEXECDIR ${CMAKE_INSTALL_LIBEXECDIR}/crcuda)
# CRIU loads plugins from /usr/lib/criu by default (criu --libdir otherwise). Relative: under the
# install prefix, which is /usr/lib/criu for a /usr install; give /usr/lib/criu for another prefix,
# or an empty value for no copy there.
set(CRCUDA_CRIU_PLUGINDIR lib/criu CACHE STRING
    "where the CRIU plugin is also installed for plain criu (relative: under the prefix; empty: nowhere)")
set(CRCUDA_SYSTEMD_UNITDIR lib/systemd/system CACHE STRING
    "systemd system unit directory (relative: under the prefix; empty: no unit)")
set(CRCUDA_BASH_COMPLETIONDIR ${CMAKE_INSTALL_DATADIR}/bash-completion/completions CACHE STRING
    "bash completion directory (relative: under the prefix)")
set(CRCUDA_ZSH_COMPLETIONDIR ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions CACHE STRING
    "zsh completion directory (relative: under the prefix)")

# Relative paths from <bindir>, computed on the full paths (the same for any prefix given to
# `cmake --install --prefix` as long as the directories are relative).
function(crc_rel_from_bindir var dir)
  if(IS_ABSOLUTE "${dir}")
    set(full "${dir}")
  else()
    set(full "${CMAKE_INSTALL_PREFIX}/${dir}")
  endif()
  file(RELATIVE_PATH rel "${CMAKE_INSTALL_FULL_BINDIR}" "${full}")
  if(rel STREQUAL "")
    set(rel .)
  endif()
  set(${var} "${rel}" PARENT_SCOPE)
endfunction()
crc_rel_from_bindir(crc_rel_pkglib ${CRCUDA_INSTALL_PKGLIBDIR})
crc_rel_from_bindir(crc_rel_pkglibexec ${CRCUDA_INSTALL_PKGLIBEXECDIR})
set(CRCUDA_LAYOUT_DEFS CRCUDA_REL_PKGLIBDIR="${crc_rel_pkglib}"
                       CRCUDA_REL_PKGLIBEXECDIR="${crc_rel_pkglibexec}")
message(STATUS "crcuda install layout: <bindir>/${crc_rel_pkglib} (libraries), "
               "<bindir>/${crc_rel_pkglibexec} (worker)")
