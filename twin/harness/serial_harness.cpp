// The serial twin: the accelerator behind the UART host bridge (hw/uart_top.py, byte
// port), driven through a byte-level C ABI by twin/serial.py. Bytes are paced: the
// harness offers one host-to-device byte, and takes one device-to-host byte, at most every
// `pace` cycles, as a UART at clock/pace*10 baud would.
#include <cstdint>
#include <deque>
#include <memory>

#include "Vtessera_top.h"
#include "array_clock.h"
#include "verilated.h"

namespace {

struct SerialTwin {
    std::unique_ptr<VerilatedContext> context;
    std::unique_ptr<Vtessera_top> top;
    uint64_t cycle = 0;
    uint64_t pace = 1;
    ArrayClockTime array_time;  // the array clock's (harness/array_clock.h)
    uint64_t rx_wait = 0;  // cycles until the next host-to-device byte may be offered
    uint64_t tx_wait = 0;
    std::deque<uint8_t> to_device;
    std::deque<uint8_t> from_device;

    void tick() {
        const bool sending = !to_device.empty() && rx_wait == 0;
        top->rx___05Fvalid = sending;
        if (sending) top->rx___05Fpayload = to_device.front();
        top->tx___05Fready = tx_wait == 0;
        top->clock = 0;
        TWIN_ARRAY_CLOCK_LOW(top, array_time);
        top->eval();
        const bool rx_fire = sending && top->rx___05Fready;
        const bool tx_fire = top->tx___05Fvalid;  // qualified by the registered ready
        const uint8_t tx_byte = top->tx___05Fpayload;
        TWIN_ARRAY_CLOCK_MIDCYCLE(top, array_time);
        top->clock = 1;
        TWIN_ARRAY_CLOCK_HIGH(top, array_time);
        top->eval();
        if (rx_wait) --rx_wait;
        if (tx_wait) --tx_wait;
        if (rx_fire) {
            to_device.pop_front();
            rx_wait = pace - 1;
        }
        if (tx_fire) {
            from_device.push_back(tx_byte);
            tx_wait = pace - 1;
        }
        ++cycle;
    }
};

}  // namespace

extern "C" {

void* serial_new() {
    auto* twin = new SerialTwin();
    twin->context = std::make_unique<VerilatedContext>();
    twin->top = std::make_unique<Vtessera_top>(twin->context.get());
    return twin;
}

void serial_free(void* handle) {
    auto* twin = static_cast<SerialTwin*>(handle);
    twin->top->final();
    delete twin;
}

void serial_reset(void* handle, int cycles) {
    auto* twin = static_cast<SerialTwin*>(handle);
    twin->to_device.clear();
    twin->from_device.clear();
    twin->rx_wait = twin->tx_wait = 0;
    twin->top->reset = 1;
    for (int i = 0; i < cycles; ++i) twin->tick();
    twin->top->reset = 0;
    twin->tick();  // the top registers its reset
}

void serial_set_pace(void* handle, uint64_t pace) {
    static_cast<SerialTwin*>(handle)->pace = pace ? pace : 1;
}

void serial_push(void* handle, const uint8_t* bytes, uint64_t count) {
    auto* twin = static_cast<SerialTwin*>(handle);
    twin->to_device.insert(twin->to_device.end(), bytes, bytes + count);
}

uint64_t serial_take(void* handle, uint8_t* out, uint64_t max_bytes) {
    auto* twin = static_cast<SerialTwin*>(handle);
    uint64_t n = 0;
    while (n < max_bytes && !twin->from_device.empty()) {
        out[n++] = twin->from_device.front();
        twin->from_device.pop_front();
    }
    return n;
}

uint64_t serial_available(void* handle) {
    return static_cast<SerialTwin*>(handle)->from_device.size();
}

uint64_t serial_pending(void* handle) {
    return static_cast<SerialTwin*>(handle)->to_device.size();
}

void serial_flush_input(void* handle) { static_cast<SerialTwin*>(handle)->to_device.clear(); }

// Run until `bytes` device-to-host bytes wait or `budget` cycles pass; returns cycles run.
uint64_t serial_run(void* handle, uint64_t budget, uint64_t bytes) {
    auto* twin = static_cast<SerialTwin*>(handle);
    const uint64_t start = twin->cycle;
    while (twin->cycle - start < budget) {
        if (bytes && twin->from_device.size() >= bytes) break;
        twin->tick();
    }
    return twin->cycle - start;
}

uint64_t serial_cycles(void* handle) { return static_cast<SerialTwin*>(handle)->cycle; }

int serial_irq(void* handle) { return static_cast<SerialTwin*>(handle)->top->irq; }

}  // extern "C"
