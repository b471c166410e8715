# torch as the python3 that configures the build has it (`pip install --no-build-isolation .`, or
# scripts/test.sh where torch is installed): its headers, its library folder and its C++ ABI, for
# the PyTorch operators (python/) and the torchrun store plugin (src/torchrun/).
find_package(Python3 REQUIRED COMPONENTS Interpreter)
execute_process(
  COMMAND "${Python3_EXECUTABLE}" -c
          "import torch, torch.utils.cpp_extension as e; print(','.join(e.include_paths())); print(e.library_paths()[0]); print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(torch.__version__)"
  OUTPUT_VARIABLE _torch_out ERROR_VARIABLE _torch_err RESULT_VARIABLE _torch_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _torch_rc EQUAL 0)
  message(FATAL_ERROR "TILELINK_BUILD_PYTHON: torch is not importable by ${Python3_EXECUTABLE} (pip install "
                      "torch==2.11.0, then build with --no-build-isolation): ${_torch_err}")
endif()
string(REPLACE "\n" ";" _torch_lines "${_torch_out}")
list(GET _torch_lines 0 _torch_includes_joined)
list(GET _torch_lines 1 TILELINK_TORCH_LIB)
list(GET _torch_lines 2 TILELINK_TORCH_ABI)
list(GET _torch_lines 3 _torch_version)
string(REPLACE "," ";" TILELINK_TORCH_INCLUDES "${_torch_includes_joined}")
message(STATUS "torch ${_torch_version}: ${TILELINK_TORCH_LIB}")
