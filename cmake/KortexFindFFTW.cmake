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
# Optional: FFTW's OpenMP threads (libfftw3_omp, in Debian's libfftw3-dev), for the CPU reference's
# spectral solve (reference_cpu/Fluid.cpp); without it those transforms run on one thread.
find_library(KORTEX_FFTW_OMP_LIBRARY NAMES fftw3_omp HINTS ${FFTW_ROOT} ENV FFTW_ROOT PATH_SUFFIXES lib lib64)
if(KORTEX_FFTW_OMP_LIBRARY AND NOT TARGET Kortex::fftw3_omp)
  add_library(Kortex::fftw3_omp UNKNOWN IMPORTED)
  set_target_properties(Kortex::fftw3_omp PROPERTIES
    IMPORTED_LOCATION ${KORTEX_FFTW_OMP_LIBRARY}
    INTERFACE_COMPILE_DEFINITIONS KORTEX_HAVE_FFTW_OMP=1)
endif()
message(STATUS "Kortex: FFTW ${KORTEX_FFTW_LIBRARY}, ${KORTEX_FFTWF_LIBRARY}, OpenMP threads: "
               "${KORTEX_FFTW_OMP_LIBRARY}")
