#include <catch2/catch.hpp>

#include <reel/reel.h>
