// The second clock of a design whose array runs on its own (a double-pumped array,
// hw/double_pumped.py; built with -DTWIN_ARRAY_CLOCK, twin/top.py's `array_clock` port):
// twice the design clock, one rising edge halfway through each cycle and one with the
// design clock's. The crossings are asynchronous FIFOs, so only the ratio matters.
#pragma once

#ifdef TWIN_ARRAY_CLOCK
#define TWIN_ARRAY_CLOCK_LOW(top) ((top)->array_clock = 0)
#define TWIN_ARRAY_CLOCK_MIDCYCLE(top) \
    do {                               \
        (top)->array_clock = 1;        \
        (top)->eval();                 \
        (top)->array_clock = 0;        \
        (top)->eval();                 \
    } while (0)
#define TWIN_ARRAY_CLOCK_HIGH(top) ((top)->array_clock = 1)
#else
#define TWIN_ARRAY_CLOCK_LOW(top) ((void)0)
#define TWIN_ARRAY_CLOCK_MIDCYCLE(top) ((void)0)
#define TWIN_ARRAY_CLOCK_HIGH(top) ((void)0)
#endif
