# FindCUDNN: cuDNN 8 or 9, headers and the main library (libcudnn.so loads its
# sub-libraries itself). cuDNN often lives outside the CUDA toolkit, for example
# inside a pip-installed nvidia-cudnn package:
#   -DCUDNN_ROOT=/path/to/nvidia/cudnn   (or the CUDNN_ROOT environment variable)
# The folder may hold include/ and lib/ (pip, tarball) or be a system prefix.
#
# Defines CUDNN_FOUND, CUDNN_VERSION, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY,
# CUDNN_LIBRARY_DIR and the imported target CUDNN::cudnn.
set(_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
if(CUDAToolkit_INCLUDE_DIRS)
  list(APPEND _cudnn_hints ${CUDAToolkit_INCLUDE_DIRS}/..)
endif()

find_path(CUDNN_INCLUDE_DIR cudnn_version.h
  HINTS ${_cudnn_hints}
  PATH_SUFFIXES include include/x86_64-linux-gnu)
# pip packages ship only the versioned file (libcudnn.so.9), hence the extra names, tried
# per folder so that the root hint wins over a toolkit that has its own cuDNN.
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 libcudnn.so.8 NAMES_PER_DIR
  HINTS ${_cudnn_hints}
  PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)

if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_defs REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
  foreach(part MAJOR MINOR PATCHLEVEL)
    string(REGEX MATCH "CUDNN_${part} +([0-9]+)" _m "${_cudnn_defs}")
    set(_cudnn_${part} "${CMAKE_MATCH_1}")
  endforeach()
  set(CUDNN_VERSION "${_cudnn_MAJOR}.${_cudnn_MINOR}.${_cudnn_PATCHLEVEL}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN
  REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR
  VERSION_VAR CUDNN_VERSION)

if(CUDNN_FOUND)
  get_filename_component(CUDNN_LIBRARY_DIR "${CUDNN_LIBRARY}" DIRECTORY)
  if(NOT TARGET CUDNN::cudnn)
    add_library(CUDNN::cudnn SHARED IMPORTED)
    set_target_properties(CUDNN::cudnn PROPERTIES
      IMPORTED_LOCATION "${CUDNN_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
  endif()
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
