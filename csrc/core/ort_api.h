// The one place that holds the ONNX Runtime C API table.
//
// The library asks the runtime for API version kMinOrtApiVersion, never for the version of
// the headers it was compiled with, and calls only functions that exist in that version.
// That is what lets one binary load in every runtime from 1.17 on.
#pragma once

#include <onnxruntime_c_api.h>

#include <cstdint>

#ifndef ORTOPS_MIN_ORT_API
#define ORTOPS_MIN_ORT_API 17
#endif

namespace ortops {

inline constexpr uint32_t kMinOrtApiVersion = ORTOPS_MIN_ORT_API;
static_assert(kMinOrtApiVersion <= ORT_API_VERSION, "headers older than the minimum API version");

// Fetches the API table from the runtime once; later calls return the same table.
// Returns null when the runtime is older than kMinOrtApiVersion.
const OrtApi* InitApi(const OrtApiBase* base);

// The API table; valid after a successful InitApi.
const OrtApi& Api();

// The table of API `version` (newer than kMinOrtApiVersion) where the runtime has it, else null:
// for a newer function used only where present. Decided from the runtime's version string
// (API N came with 1.N), so an older runtime is not asked and prints nothing.
const OrtApi* ApiIfAvailable(uint32_t version);

// Throws ortops::Error carrying the status message when status is an error (and releases it).
void ThrowOnError(OrtStatus* status);

}  // namespace ortops
