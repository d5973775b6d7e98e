// TEMPORARY during development: methods whose kernels are being written in other files.
#include "cpu_backend.h"
namespace reel::cpu {
#define PENDING(name) throw Error(#name ": pending")
}
