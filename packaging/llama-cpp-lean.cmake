# Included by llama.cpp's own CMakeLists right after its project() call when
# llama-cpp-python is built with
#   CMAKE_ARGS="-DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=<absolute path of this file>"
# (the README's first command and .ci/run do). llama-cpp-python forces llama.cpp's
# "common" library on, but what boundctx loads (libllama and the ggml libraries) does not
# link it; a normal variable set here shadows that cached ON for llama.cpp's directory
# only. Together with LLAVA_BUILD=OFF (no multimodal library) the from-source build takes
# about 40 % of the CPU time of the default one, and the libraries boundctx loads come out
# byte-identical (docs/decisions/0042-a-lean-llama-cpp-build.md).
set(LLAMA_BUILD_COMMON OFF)
# Without common nothing uses llama.cpp's HTTPS download support.
set(LLAMA_OPENSSL OFF)
