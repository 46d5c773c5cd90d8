// ortops: custom operators for ONNX Runtime (https://onnxruntime.ai), C and C++ interface.
//
// The library has one entry point, RegisterCustomOps, with the signature ONNX Runtime expects
// of a custom-op library. It adds the domains "ortops", "mmcv", "mmdeploy" and "TRT" to a
// session's options (each once: options that already hold one of them, from ortops or from
// mmcv's or mmdeploy's library, make ONNX Runtime fail the session with "Domain already set
// in registry"). It needs ONNX Runtime 1.17 or newer at run time (C API version 17); bring
// your own ONNX Runtime headers (onnxruntime_c_api.h must be on the include path).
//
// Three ways to use it (CMake: find_package(ortops CONFIG REQUIRED)):
//
// 1. Load the shared library (target ortops::ortops) by its full path; no linking needed and
//    this header is not needed either:
//
//      Ort::SessionOptions options;
//      options.RegisterCustomOpsLibrary("/opt/ortops/lib/libortops.so");  // the installed path
//
//    Pass a path that the dynamic loader can open: the absolute path of libortops.so (CMake:
//    the variable ORTOPS_LIBRARY_PATH, or $<TARGET_FILE:ortops::ortops>). A bare
//    "libortops.so" only works when its folder is on the loader's search path. On Windows the
//    library is ortops.dll and the path a wide string (ORTCHAR_T is wchar_t there):
//    options.RegisterCustomOpsLibrary(L"C:\\ortops\\lib\\ortops.dll").
//
// 2. Link the static library (target ortops::ortops_static) into the application and let ONNX
//    Runtime find the function by name in the executable:
//
//      options.RegisterCustomOpsUsingFunction("RegisterCustomOps");
//
//    ONNX Runtime looks the name up with dlsym in the process's global scope, so the
//    executable must define RegisterCustomOps and export it in its dynamic symbol table.
//    The CMake target ortops::ortops_static adds both link options that takes:
//      -Wl,--undefined=RegisterCustomOps            (pull the entry point out of the archive)
//      -Wl,--export-dynamic-symbol=RegisterCustomOps (export it; -rdynamic also works but
//                                                     exports every global symbol)
//    Other build systems must pass them by hand. On Windows ONNX Runtime uses GetProcAddress
//    on the executable, which exports RegisterCustomOps because it is declared
//    __declspec(dllexport) below; the target then adds only the first option.
//
// 3. Link the static library and call the function yourself (no export needed):
//
//      Ort::ThrowOnError(RegisterCustomOps(options, OrtGetApiBase()));
//
// In every case ONNX Runtime must keep the registered ops alive as long as a session uses
// them; ortops builds its domains once per process and never frees them before exit.
#ifndef ORTOPS_ORTOPS_H_
#define ORTOPS_ORTOPS_H_

#include <onnxruntime_c_api.h>

// The entry point is the one symbol the library exports: by default visibility in an ELF
// shared library, as a DLL export on Windows (also from an executable that links the static
// library, so that ONNX Runtime's RegisterCustomOpsUsingFunction finds it there).
#if defined(_WIN32)
#define ORTOPS_EXPORT __declspec(dllexport)
#else
#define ORTOPS_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

// Adds every ortops domain to options. api_base is OrtGetApiBase() of the runtime that will
// run the session. Returns null on success, or an OrtStatus (release it with
// OrtApi::ReleaseStatus) that says why, e.g. a runtime older than ONNX Runtime 1.17.
// Safe to call from several threads and for any number of session options.
ORTOPS_EXPORT OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base);

#ifdef __cplusplus
}
#endif

#endif  // ORTOPS_ORTOPS_H_
