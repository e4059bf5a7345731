// The energy twin's harness: the ordinary twin's C ABI (harness.cpp, included whole so the
// two never drift) plus access to Verilator's coverage counters. twin/energy.py builds
// it with --coverage-toggle (register bit toggles, each direction counted) and
// --coverage-line (the branch counts that give block-RAM reads and writes).
#include "harness.cpp"

#include "verilated_cov.h"

extern "C" {

// Write every coverage counter to `path` (Verilator's coverage.dat format); 0 on success.
int twin_coverage_write(void* handle, const char* path) {
    auto* twin = static_cast<Twin*>(handle);
    if (path == nullptr || path[0] == 0) return -1;
    twin->context->coveragep()->write(path);
    return 0;
}

// Set every coverage counter to zero (the start of a measured run).
void twin_coverage_zero(void* handle) {
    static_cast<Twin*>(handle)->context->coveragep()->zero();
}

}  // extern "C"
