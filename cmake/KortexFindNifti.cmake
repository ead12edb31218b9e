# nifti_clib's NIfTI-2 library (nifti2_io, which reads and writes NIfTI-1 too) and znzlib, as the
# imported target Kortex::nifti2. Debian's libnifti2-dev ships a CMake config that names
# /usr/lib/libznz.so.3.0.0, a file the package installs under /usr/lib/<multiarch>, so that
# config cannot be loaded; the headers and libraries are looked up directly instead. NIFTI_ROOT
# (or CMAKE_PREFIX_PATH) points at another prefix, e.g. a carried build on the GPU machine.
if(TARGET Kortex::nifti2)
  return()
endif()
find_package(ZLIB REQUIRED)
find_path(KORTEX_NIFTI_INCLUDE_DIR nifti2_io.h HINTS ${NIFTI_ROOT} ENV NIFTI_ROOT
          PATH_SUFFIXES include/nifti nifti include)
find_library(KORTEX_NIFTI2_LIBRARY NAMES nifti2 HINTS ${NIFTI_ROOT} ENV NIFTI_ROOT PATH_SUFFIXES lib lib64)
find_library(KORTEX_ZNZ_LIBRARY NAMES znz HINTS ${NIFTI_ROOT} ENV NIFTI_ROOT PATH_SUFFIXES lib lib64)
if(NOT KORTEX_NIFTI_INCLUDE_DIR OR NOT KORTEX_NIFTI2_LIBRARY OR NOT KORTEX_ZNZ_LIBRARY)
  message(FATAL_ERROR "nifti_clib (nifti2 and znz) not found: install libnifti2-dev or set NIFTI_ROOT "
                      "(nifti2_io.h: '${KORTEX_NIFTI_INCLUDE_DIR}', nifti2: '${KORTEX_NIFTI2_LIBRARY}', "
                      "znz: '${KORTEX_ZNZ_LIBRARY}')")
endif()
add_library(Kortex::znz UNKNOWN IMPORTED)
set_target_properties(Kortex::znz PROPERTIES
  IMPORTED_LOCATION ${KORTEX_ZNZ_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${KORTEX_NIFTI_INCLUDE_DIR}
  INTERFACE_COMPILE_DEFINITIONS HAVE_ZLIB
  INTERFACE_LINK_LIBRARIES ZLIB::ZLIB)
add_library(Kortex::nifti2 UNKNOWN IMPORTED)
set_target_properties(Kortex::nifti2 PROPERTIES
  IMPORTED_LOCATION ${KORTEX_NIFTI2_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${KORTEX_NIFTI_INCLUDE_DIR}
  INTERFACE_LINK_LIBRARIES "Kortex::znz;m")
message(STATUS "Kortex: nifti_clib ${KORTEX_NIFTI2_LIBRARY}")
