// The file that carries the tests' precompiled header (tests/CMakeLists.txt,
// ddp_test_headers): libtorch's and GoogleTest's headers, compiled once for
// every GoogleTest program of the suite.
