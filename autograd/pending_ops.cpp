// TEMPORARY during development: ops being written in other files.
#include "op_support.h"
#include "ops.h"
namespace reel {
#define PENDING(name) throw Error(#name ": pending")
}
