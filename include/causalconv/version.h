#pragma once

#define CAUSALCONV_VERSION "0.1.0"

namespace causalconv {
inline const char* version() { return CAUSALCONV_VERSION; }
}  // namespace causalconv
