// The Verilator twin: the accelerator top behind a small C ABI, loaded by twin/dma.py.
// Python calls in for whole operations (a CSR access, a DMA transfer, a run of many
// cycles); every per-cycle step, including both DMA streams, happens here in C++.
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "Vtessera_top.h"
#include "array_clock.h"
#include "verilated.h"
#ifdef TWIN_TRACE
#include "verilated_fst_c.h"
#else
// Without tracing support the trace object is never created.
struct VerilatedFstC {
    void dump(uint64_t) {}
    void close() {}
    void open(const char*) {}
    bool isOpen() { return false; }
};
#endif

// Verilator escapes "__" in port names as "___05F" (csr__addr is csr___05Faddr).

namespace {

enum Fault : int { FAULT_NONE = 0, FAULT_DROP_WORD = 1, FAULT_STUCK_BUSY = 2, FAULT_ERROR = 3 };

struct Twin {
    std::unique_ptr<VerilatedContext> context;
    std::unique_ptr<Vtessera_top> top;
    std::unique_ptr<VerilatedFstC> trace;
    uint64_t cycle = 0;
    ArrayClockTime array_time;  // the array clock's (harness/array_clock.h)
    std::deque<uint64_t> to_device;  // word | last << 32
    std::vector<uint32_t> from_device;
    int fault = FAULT_NONE;
    bool last_seen = false;  // a device-to-host word with `last` arrived
    bool raise_error = false;  // FAULT_ERROR fires once the layer has taken data

    void dump() {
        if (trace) trace->dump(context->time());
        context->timeInc(1);
    }

    // One clock cycle: drive the streams, sample handshakes before the edge, clock.
    void tick() {
        bool sending = !to_device.empty();
        if (sending && fault == FAULT_DROP_WORD) {  // a beat lost on the way in
            to_device.pop_front();
            fault = FAULT_NONE;
            sending = !to_device.empty();
        }
        top->h2c___05Fvalid = sending;
        if (sending) top->h2c___05Fpayload = to_device.front();
        top->c2h___05Fready = fault != FAULT_STUCK_BUSY;
        top->dbg_force_error = raise_error;
        raise_error = false;
        top->clock = 0;
        TWIN_ARRAY_CLOCK_LOW(top, array_time);
        top->eval();
        const bool h2c_fire = sending && top->h2c___05Fready;
        const bool c2h_fire = top->c2h___05Fvalid;  // already qualified by the twin's ready
        const uint64_t c2h_word = top->c2h___05Fpayload;
        dump();
        TWIN_ARRAY_CLOCK_MIDCYCLE(top, array_time);
        top->clock = 1;
        TWIN_ARRAY_CLOCK_HIGH(top, array_time);
        top->eval();
        dump();
        if (h2c_fire) {
            to_device.pop_front();
            if (fault == FAULT_ERROR) {  // fail mid-layer, as a real error would
                raise_error = true;
                fault = FAULT_NONE;
            }
        }
        if (c2h_fire) {
            from_device.push_back(static_cast<uint32_t>(c2h_word));
            if (c2h_word >> 32) last_seen = true;
        }
        ++cycle;
    }
};

}  // namespace

extern "C" {

void* twin_new() {
    auto* twin = new Twin();
    twin->context = std::make_unique<VerilatedContext>();
#ifdef TWIN_TRACE
    twin->context->traceEverOn(true);
#endif
    twin->top = std::make_unique<Vtessera_top>(twin->context.get());
    return twin;
}

void twin_free(void* handle) {
    auto* twin = static_cast<Twin*>(handle);
    if (twin->trace) twin->trace->close();
    twin->top->final();
    delete twin;
}

int twin_trace(void* handle, const char* path) {
    auto* twin = static_cast<Twin*>(handle);
    if (twin->trace) {
        twin->trace->close();
        twin->trace.reset();
    }
    if (path == nullptr || path[0] == 0) return 0;
#ifdef TWIN_TRACE
    twin->trace = std::make_unique<VerilatedFstC>();
    twin->top->trace(twin->trace.get(), 99);
    twin->trace->open(path);
    return twin->trace->isOpen() ? 0 : -1;
#else
    return -2;  // built without waveform support
#endif
}

void twin_reset(void* handle, int cycles) {
    auto* twin = static_cast<Twin*>(handle);
    twin->to_device.clear();
    twin->from_device.clear();
    twin->fault = FAULT_NONE;
    twin->last_seen = false;
    twin->top->reset = 1;
    twin->top->flush = 0;
    twin->top->csr___05Fw_en = 0;
    twin->top->csr___05Fr_en = 0;
    for (int i = 0; i < cycles; ++i) twin->tick();
    twin->top->reset = 0;
    twin->tick();  // the design registers its reset (twin/top.py)
}

void twin_csr_write(void* handle, uint32_t offset, uint32_t value) {
    auto* twin = static_cast<Twin*>(handle);
    twin->top->csr___05Faddr = offset;
    twin->top->csr___05Fw_data = value;
    twin->top->csr___05Fw_en = 1;
    twin->tick();  // into the twin's input register
    twin->top->csr___05Fw_en = 0;
    twin->tick();  // into the core
}

uint32_t twin_csr_read(void* handle, uint32_t offset) {
    auto* twin = static_cast<Twin*>(handle);
    twin->top->csr___05Faddr = offset;
    twin->top->csr___05Fr_en = 1;
    twin->tick();  // into the twin's input register
    twin->top->csr___05Fr_en = 0;
    twin->tick();  // the core answers
    return twin->top->csr___05Fr_data;
}

// Queue words for the host-to-device stream; `last` goes on the final one.
void twin_dma_write(void* handle, const uint32_t* words, uint64_t count) {
    auto* twin = static_cast<Twin*>(handle);
    for (uint64_t i = 0; i < count; ++i) {
        const uint64_t last = (i + 1 == count) ? 1 : 0;
        twin->to_device.push_back(words[i] | (last << 32));
    }
}

// Move up to `max_words` received device-to-host words into `out`; returns how many.
uint64_t twin_dma_take(void* handle, uint32_t* out, uint64_t max_words) {
    auto* twin = static_cast<Twin*>(handle);
    const uint64_t n = std::min<uint64_t>(max_words, twin->from_device.size());
    std::memcpy(out, twin->from_device.data(), n * sizeof(uint32_t));
    twin->from_device.erase(twin->from_device.begin(), twin->from_device.begin() + n);
    return n;
}

// Drop every word still queued in either direction (a transfer aborted after a timeout).
void twin_dma_flush(void* handle) {
    auto* twin = static_cast<Twin*>(handle);
    twin->to_device.clear();
    twin->from_device.clear();
    twin->top->flush = 1;  // and the word in the twin's input register (twin/top.py)
    twin->tick();
    twin->top->flush = 0;
}

uint64_t twin_dma_available(void* handle) {
    return static_cast<Twin*>(handle)->from_device.size();
}

// Run until `words` device-to-host words are waiting, or the interrupt line rises (the
// layer ended, possibly in error), or `budget` cycles have passed. Returns the cycles run.
uint64_t twin_run(void* handle, uint64_t budget, uint64_t words) {
    auto* twin = static_cast<Twin*>(handle);
    const uint64_t start = twin->cycle;
    while (twin->cycle - start < budget) {
        if ((words && twin->from_device.size() >= words) || twin->top->irq) break;
        twin->tick();
    }
    return twin->cycle - start;
}

uint64_t twin_cycles(void* handle) { return static_cast<Twin*>(handle)->cycle; }

int twin_irq(void* handle) { return static_cast<Twin*>(handle)->top->irq; }

void twin_inject_fault(void* handle, int fault) { static_cast<Twin*>(handle)->fault = fault; }

}  // extern "C"
