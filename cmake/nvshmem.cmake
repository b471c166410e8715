# NVSHMEM (nvidia-nvshmem-cu13==3.4.5, the version torch 2.11 installs; they must match): the host
# library behind process-per-GPU Worlds. The wheel has no CMake config, so it is found here, in order:
#   1. -DTILELINK_NVSHMEM_ROOT=<folder with include/nvshmem.h and lib/libnvshmem_host.so.3>
#   2. ${TILELINK_DEPS_DIR}/nvshmem (scripts/install_deps.sh unpacks the wheel there when Python
#      does not have it)
#   3. the nvidia.nvshmem package of the python3 on PATH (torch's environment)
# and its version must be the pinned one. Defines the imported target tilelink::nvshmem_host.
set(TILELINK_NVSHMEM_VERSION 3.4.5)
set(TILELINK_NVSHMEM_ROOT "" CACHE PATH "NVSHMEM ${TILELINK_NVSHMEM_VERSION} (include/, lib/); empty: search")

set(_nvshmem_candidates)
if(TILELINK_NVSHMEM_ROOT)
  list(APPEND _nvshmem_candidates "${TILELINK_NVSHMEM_ROOT}")
else()
  list(APPEND _nvshmem_candidates "${TILELINK_DEPS_DIR}/nvshmem")
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c "import nvidia.nvshmem as m; print(list(m.__path__)[0])"
      OUTPUT_VARIABLE _nvshmem_py OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _nvshmem_py_rc)
    if(_nvshmem_py_rc EQUAL 0 AND _nvshmem_py)
      list(APPEND _nvshmem_candidates "${_nvshmem_py}")
    endif()
  endif()
endif()

set(_nvshmem_found "")
foreach(_root IN LISTS _nvshmem_candidates)
  if(EXISTS "${_root}/include/nvshmem.h" AND EXISTS "${_root}/lib/libnvshmem_host.so.3")
    set(_nvshmem_found "${_root}")
    break()
  endif()
endforeach()
if(NOT _nvshmem_found)
  string(REPLACE ";" ", " _tried "${_nvshmem_candidates}")
  message(FATAL_ERROR "NVSHMEM ${TILELINK_NVSHMEM_VERSION} not found (looked in: ${_tried}). Run "
                      "scripts/install_deps.sh, or pip install nvidia-nvshmem-cu13==${TILELINK_NVSHMEM_VERSION} "
                      "(nvidia-nvshmem-cu12 with a CUDA 12 torch), "
                      "or pass -DTILELINK_NVSHMEM_ROOT=<folder with include/ and lib/>.")
endif()

file(STRINGS "${_nvshmem_found}/include/non_abi/nvshmem_version.h" _nvshmem_version_lines
     REGEX "#define NVSHMEM_VENDOR_(MAJOR|MINOR|PATCH)_VERSION ")
set(_v)
foreach(_part MAJOR MINOR PATCH)
  string(REGEX MATCH "NVSHMEM_VENDOR_${_part}_VERSION ([0-9]+)" _m "${_nvshmem_version_lines}")
  list(APPEND _v "${CMAKE_MATCH_1}")
endforeach()
string(JOIN "." _nvshmem_version ${_v})
if(NOT _nvshmem_version STREQUAL TILELINK_NVSHMEM_VERSION)
  message(FATAL_ERROR "NVSHMEM in ${_nvshmem_found} is ${_nvshmem_version}; TileLink pins "
                      "${TILELINK_NVSHMEM_VERSION} (torch 2.11's: the two must match in one process).")
endif()
message(STATUS "NVSHMEM ${_nvshmem_version}: ${_nvshmem_found}")

# nvshmem.h includes CCCL (<cuda/std/tuple>), which CUDA 13 keeps in include/cccl.
set(_nvshmem_includes "${_nvshmem_found}/include")
foreach(_dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
  if(EXISTS "${_dir}/cccl/cuda/std/tuple")
    list(APPEND _nvshmem_includes "${_dir}/cccl")
  endif()
endforeach()
add_library(tilelink::nvshmem_host SHARED IMPORTED)
set_target_properties(tilelink::nvshmem_host PROPERTIES
  IMPORTED_LOCATION "${_nvshmem_found}/lib/libnvshmem_host.so.3"
  INTERFACE_INCLUDE_DIRECTORIES "${_nvshmem_includes}")
set(TILELINK_NVSHMEM_LIB_DIR "${_nvshmem_found}/lib")
