// Umbrella header.
#pragma once

#include "causalconv/error.h"
#include "causalconv/ops.h"
#include "causalconv/reference.h"
#include "causalconv/tensor.h"
#include "causalconv/version.h"
