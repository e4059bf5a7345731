// The second clock of a design whose array runs on its own (a double-pumped array,
// hw/double_pumped.py; built with -DTWIN_ARRAY_CLOCK, twin/top.py's `array_clock` port).
// Its frequency is TWIN_ARRAY_CLOCK_NUM / TWIN_ARRAY_CLOCK_DEN times the design clock's
// (twin/dma.py's clock_flags define both): in time units where
// a design cycle lasts NUM and an array cycle DEN, the array's rising edges fall at the
// multiples of DEN. One that falls on a design clock edge rises with it; the others rise
// between the design clock's edges. The crossings are asynchronous FIFOs, so only the
// ratio matters, not the phase.
#pragma once

#include <cstdint>

// Where a twin is in the array clock's time: the start of its current design cycle.
struct ArrayClockTime {
    uint64_t now = 0;
};

#ifdef TWIN_ARRAY_CLOCK
#if !defined(TWIN_ARRAY_CLOCK_NUM) || !defined(TWIN_ARRAY_CLOCK_DEN)
#error "TWIN_ARRAY_CLOCK needs TWIN_ARRAY_CLOCK_NUM and TWIN_ARRAY_CLOCK_DEN (twin/dma.py)"
#endif
#define TWIN_ARRAY_CLOCK_LOW(top, time) ((top)->array_clock = 0)
#define TWIN_ARRAY_CLOCK_MIDCYCLE(top, time)                                              \
    do {                                                                                  \
        const uint64_t end_ = (time).now + TWIN_ARRAY_CLOCK_NUM;                          \
        for (uint64_t edge_ = ((time).now / TWIN_ARRAY_CLOCK_DEN + 1) * TWIN_ARRAY_CLOCK_DEN; \
             edge_ < end_; edge_ += TWIN_ARRAY_CLOCK_DEN) {                               \
            (top)->array_clock = 1;                                                       \
            (top)->eval();                                                                \
            (top)->array_clock = 0;                                                       \
            (top)->eval();                                                                \
        }                                                                                 \
    } while (0)
#define TWIN_ARRAY_CLOCK_HIGH(top, time)                                                  \
    do {                                                                                  \
        (time).now += TWIN_ARRAY_CLOCK_NUM;                                               \
        if ((time).now % TWIN_ARRAY_CLOCK_DEN == 0) (top)->array_clock = 1;              \
    } while (0)
#else
#define TWIN_ARRAY_CLOCK_LOW(top, time) ((void)0)
#define TWIN_ARRAY_CLOCK_MIDCYCLE(top, time) ((void)0)
#define TWIN_ARRAY_CLOCK_HIGH(top, time) ((void)0)
#endif
