# Finds Kokkos and guarantees a usable imported target Kokkos::kokkos.
#
# * Kokkos 4.x (e.g. a CUDA build under Kokkos_ROOT): used as is. Its config redirects
#   compilation of targets that link Kokkos to nvcc_wrapper by itself; arch flags come
#   from the Kokkos installation, never from us.
# * Debian 12's libtrilinos-kokkos-dev (Kokkos 3.4.01, Serial only): its KokkosConfig.cmake
#   points Kokkos::kokkos at <prefix>/include, which does not exist (the headers are in
#   <prefix>/include/trilinos) and refers to the libraries by bare names. We repair the
#   target here: real include directory, full library paths, -ldl.
#
# Sets Kokkos_DEVICES (list: SERIAL;OPENMP;CUDA ...) and Kokkos_VERSION.
include_guard(GLOBAL)

find_package(Kokkos QUIET)

if(Kokkos_FOUND AND TARGET Kokkos::kokkos)
  get_target_property(_kx_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  set(_kx_broken FALSE)
  if(_kx_inc)
    foreach(_d IN LISTS _kx_inc)
      if(NOT _d MATCHES "^\\$<" AND NOT EXISTS "${_d}")
        set(_kx_broken TRUE)
      endif()
    endforeach()
  endif()
  # Kokkos 4 spreads includes over its component targets; Debian's 3.4 has one dead path.
  if(_kx_broken)
    message(STATUS "Kortex: repairing Kokkos ${Kokkos_VERSION} config (dead include dir '${_kx_inc}')")
    find_path(KORTEX_KOKKOS_INCLUDE_DIR Kokkos_Core.hpp
              HINTS ${Kokkos_INCLUDE_DIRS} PATH_SUFFIXES trilinos
              PATHS /usr/include /usr/local/include REQUIRED)
    set(_kx_libs)
    foreach(_l trilinos_kokkoscontainers trilinos_kokkoscore)
      find_library(KORTEX_${_l}_LIBRARY ${_l} HINTS ${Kokkos_LIBRARY_DIRS} REQUIRED)
      list(APPEND _kx_libs ${KORTEX_${_l}_LIBRARY})
    endforeach()
    set_target_properties(Kokkos::kokkos PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${KORTEX_KOKKOS_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${_kx_libs};${CMAKE_DL_LIBS}"
      INTERFACE_COMPILE_OPTIONS "")
  endif()
else()
  # No usable config at all: look for the Debian layout directly.
  find_path(KORTEX_KOKKOS_INCLUDE_DIR Kokkos_Core.hpp PATH_SUFFIXES trilinos)
  find_library(KORTEX_KOKKOSCORE_LIBRARY NAMES kokkoscore trilinos_kokkoscore)
  if(NOT KORTEX_KOKKOS_INCLUDE_DIR OR NOT KORTEX_KOKKOSCORE_LIBRARY)
    message(FATAL_ERROR "Kortex needs Kokkos: install libtrilinos-kokkos-dev (Debian) or "
                        "point Kokkos_ROOT at a Kokkos 4.x installation.")
  endif()
  add_library(Kokkos::kokkos INTERFACE IMPORTED)
  set_target_properties(Kokkos::kokkos PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${KORTEX_KOKKOS_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${KORTEX_KOKKOSCORE_LIBRARY};${CMAKE_DL_LIBS}")
  set(Kokkos_FOUND TRUE)
endif()

# Backends: trust the installed KokkosCore_config.h over CMake variables.
get_target_property(_kx_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
set(_kx_cfg)
foreach(_d IN LISTS _kx_inc KORTEX_KOKKOS_INCLUDE_DIR Kokkos_INCLUDE_DIRS)
  if(NOT _d MATCHES "^\\$<" AND EXISTS "${_d}/KokkosCore_config.h")
    set(_kx_cfg "${_d}/KokkosCore_config.h")
    break()
  endif()
endforeach()
if(NOT _kx_cfg AND Kokkos_DIR)
  file(GLOB_RECURSE _kx_cfg "${Kokkos_DIR}/../../../include/KokkosCore_config.h")
endif()
if(_kx_cfg)
  file(STRINGS "${_kx_cfg}" _kx_lines REGEX "^#define KOKKOS_ENABLE_(SERIAL|OPENMP|THREADS|CUDA|HIP|SYCL)$")
  set(Kokkos_DEVICES)
  foreach(_line IN LISTS _kx_lines)
    string(REGEX REPLACE "^#define KOKKOS_ENABLE_" "" _dev "${_line}")
    list(APPEND Kokkos_DEVICES ${_dev})
  endforeach()
  file(STRINGS "${_kx_cfg}" _kx_ver REGEX "^#define KOKKOS_VERSION [0-9]+")
  if(_kx_ver AND NOT Kokkos_VERSION)
    string(REGEX REPLACE ".* ([0-9]+)$" "\\1" _v "${_kx_ver}")
    math(EXPR _maj "${_v} / 10000")
    math(EXPR _min "${_v} / 100 % 100")
    math(EXPR _pat "${_v} % 100")
    set(Kokkos_VERSION "${_maj}.${_min}.${_pat}")
  endif()
endif()
if(NOT Kokkos_DEVICES)
  set(Kokkos_DEVICES SERIAL)
endif()
