# FFTW 3 (double for the CPU reference, single for the Kokkos host spectral solver), as imported
# targets Kortex::fftw3 and Kortex::fftw3f. Debian's libfftw3-dev ships pkg-config files but no
# CMake config, so the headers and libraries are looked up directly; FFTW_ROOT (or
# CMAKE_PREFIX_PATH) points at another prefix, e.g. a carried one on the GPU machine.
if(TARGET Kortex::fftw3 AND TARGET Kortex::fftw3f)
  return()
endif()
find_path(KORTEX_FFTW_INCLUDE_DIR fftw3.h HINTS ${FFTW_ROOT} ENV FFTW_ROOT PATH_SUFFIXES include)
find_library(KORTEX_FFTW_LIBRARY NAMES fftw3 HINTS ${FFTW_ROOT} ENV FFTW_ROOT PATH_SUFFIXES lib lib64)
find_library(KORTEX_FFTWF_LIBRARY NAMES fftw3f HINTS ${FFTW_ROOT} ENV FFTW_ROOT PATH_SUFFIXES lib lib64)
if(NOT KORTEX_FFTW_INCLUDE_DIR OR NOT KORTEX_FFTW_LIBRARY OR NOT KORTEX_FFTWF_LIBRARY)
  message(FATAL_ERROR "FFTW 3 (double and single precision) not found: install libfftw3-dev or set FFTW_ROOT "
                      "(fftw3.h: '${KORTEX_FFTW_INCLUDE_DIR}', fftw3: '${KORTEX_FFTW_LIBRARY}', "
                      "fftw3f: '${KORTEX_FFTWF_LIBRARY}')")
endif()
foreach(_kortex_fftw fftw3 fftw3f)
  if(_kortex_fftw STREQUAL "fftw3")
    set(_kortex_fftw_lib ${KORTEX_FFTW_LIBRARY})
  else()
    set(_kortex_fftw_lib ${KORTEX_FFTWF_LIBRARY})
  endif()
  add_library(Kortex::${_kortex_fftw} UNKNOWN IMPORTED)
  set_target_properties(Kortex::${_kortex_fftw} PROPERTIES
    IMPORTED_LOCATION ${_kortex_fftw_lib}
    INTERFACE_INCLUDE_DIRECTORIES ${KORTEX_FFTW_INCLUDE_DIR})
endforeach()
message(STATUS "Kortex: FFTW ${KORTEX_FFTW_LIBRARY}, ${KORTEX_FFTWF_LIBRARY}")
