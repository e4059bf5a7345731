"""OpenCL kernels against the golden models in ``models/``: bit-exact, seeded.

Skipped as a whole when no OpenCL platform is present. The program is built once per
session (``rt`` fixture, and the per-device cache in ``sw_driver.opencl.program``).
"""

import os
import subprocess
import sys
import tempfile
import types

import numpy as np
import pytest

from models import conv, eltwise, pool, requant
from sw_driver.opencl import (
    DeviceNotFoundError,
    DeviceOutOfMemoryError,
    KernelBuildError,
    NoPlatformError,
    OpenCLRuntime,
    UnsupportedDeviceError,
    list_devices,
)
from sw_driver.opencl.device import check_device
from sw_driver.opencl.program import build_program, device_context

try:
    list_devices()
except NoPlatformError as _exc:
    pytest.skip(f"no OpenCL platform with a device: {_exc}", allow_module_level=True)


@pytest.fixture(scope="module")
def rt():
    return OpenCLRuntime()


def assert_same(got, want, seed, what):
    """Exact equality; on failure name the seed, the case and the first differing index."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"seed {seed}, {what}: shape {got.shape} != {want.shape}"
    if not np.array_equal(got, want):
        index = tuple(int(i) for i in np.argwhere(got != want)[0])
        count = int((got != want).sum())
        pytest.fail(f"seed {seed}, {what}: {count} elements differ; first at {index}: "
                    f"OpenCL {int(got[index])}, golden {int(want[index])}")


def random_requant(rng, channels):
    multiplier = rng.integers(1 << 30, 1 << 31, channels)
    shift = rng.integers(14, 22, channels)  # lands int32 sums in and beyond the int8 range
    return multiplier, shift


# (kernel, stride, dilation, groups, pool): every kernel size, both strides, the fused pool.
CONV_CASES = [
    (1, 1, 1, 1, False), (1, 2, 1, 1, False), (3, 1, 1, 1, False), (3, 2, 1, 1, True),
    (5, 1, 1, 1, True), (5, 2, 1, 1, False), (7, 1, 1, 1, False), (7, 2, 1, 1, False),
    (3, 1, 2, 1, False), (3, 1, 1, 3, False), ((3, 1), (2, 1), 1, 1, True),
]


@pytest.mark.parametrize("kernel,stride,dilation,groups,fused_pool", CONV_CASES)
@pytest.mark.parametrize("batch", [1, 3])
def test_conv2d_requant(rt, rng, seed, kernel, stride, dilation, groups, fused_pool, batch):
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    c = groups * int(rng.choice([1, 3, 5, 16, 33]))
    o = groups * int(rng.choice([1, 7, 32, 37]))
    pads = tuple(int(p) for p in rng.integers(0, max(kh, kw), 4))
    span_h, span_w = dilation * (kh - 1) + 1, dilation * (kw - 1) + 1
    h = int(rng.integers(max(1, span_h - pads[0] - pads[2]) + 3, 20)) | 1  # odd sizes
    w = int(rng.integers(max(1, span_w - pads[1] - pads[3]) + 3, 20)) | 1
    x = rng.integers(-128, 128, (batch, c, h, w), dtype=np.int8)
    wts = rng.integers(-128, 128, (o, c // groups, kh, kw), dtype=np.int8)
    bias = rng.integers(-20000, 20000, o, dtype=np.int32)
    m, n = random_requant(rng, o)
    zx, zy = (int(v) for v in rng.integers(-128, 128, 2))
    lo, hi = sorted(int(v) for v in rng.integers(-128, 128, 2))
    handle = rt.upload_conv_weights(wts, bias, m, n, groups=groups)
    got = rt.conv2d_requant(x, handle, x_zero_point=zx, y_zero_point=zy, stride=stride,
                            padding=pads, dilation=dilation, lo=lo, hi=hi, pool=fused_pool)
    acc = conv.conv2d(x, wts, bias, x_zero_point=zx, stride=stride, padding=pads,
                      dilation=dilation, groups=groups)
    want = requant.requantize(acc, m, n, zy, lo, hi)
    if fused_pool:
        want = pool.max_pool2d(want, 2, 2)
    assert_same(got, want, seed, f"conv x{x.shape} w{wts.shape} stride {stride} pads {pads} "
                                 f"dilation {dilation} groups {groups} pool {fused_pool}")


# Every tile variant of conv.cl: the 16- and 32-channel output tiles (16 for at most 16
# channels per group), each with one output per work-item (1x1, fused pool, rows narrower
# than 8) and with eight horizontal neighbours per work-item (the _row8 kernels: kernel
# wider than 1, rows of 8 or more, the last group of a row partial when the width is not a
# multiple of 8).
TILE_CASES = [
    # (out channels, groups, kernel, stride, pool, width)
    (16, 1, 3, 1, False, 32), (9, 1, 3, 1, False, 13), (16, 1, 3, 2, False, 21),
    (12, 1, 1, 1, False, 12), (16, 1, 3, 1, True, 15), (7, 1, 3, 1, False, 6),
    (32, 2, 3, 1, False, 11), (17, 1, 3, 1, False, 19), (32, 1, 5, 2, False, 27),
    (48, 1, (1, 3), 1, False, 9), (64, 1, 3, 1, False, 8),
]


@pytest.mark.parametrize("o,groups,kernel,stride,fused_pool,width", TILE_CASES)
def test_conv2d_requant_tile_variants(rt, rng, seed, o, groups, kernel, stride, fused_pool,
                                      width):
    from sw_driver.opencl.runtime import _row_neighbours, _tile_out
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    batch, c = 2, groups * int(rng.choice([3, 16]))
    pads = (kh // 2, kw // 2, kh // 2, kw // 2)
    x = rng.integers(-128, 128, (batch, c, int(rng.integers(5, 12)), width), dtype=np.int8)
    wts = rng.integers(-128, 128, (o, c // groups, kh, kw), dtype=np.int8)
    bias = rng.integers(-20000, 20000, o, dtype=np.int32)
    m, n = random_requant(rng, o)
    zx, zy = (int(v) for v in rng.integers(-128, 128, 2))
    handle = rt.upload_conv_weights(wts, bias, m, n, groups=groups)
    assert handle.tile_out == _tile_out(o // groups) == (16 if o // groups <= 16 else 32)
    got = rt.conv2d_requant(x, handle, x_zero_point=zx, y_zero_point=zy, stride=stride,
                            padding=pads, pool=fused_pool)
    want = requant.requantize(conv.conv2d(x, wts, bias, x_zero_point=zx, stride=stride,
                                          padding=pads, groups=groups), m, n, zy)
    if fused_pool:
        want = pool.max_pool2d(want, 2, 2)
    out_w = (width + 2 * (kw // 2) - kw) // stride + 1
    assert_same(got, want, seed, f"tile {handle.tile_out}, "
                                 f"{_row_neighbours(fused_pool, (kh, kw), out_w)} per "
                                 f"work-item: x{x.shape} w{wts.shape} stride {stride} "
                                 f"groups {groups} pool {fused_pool}")


@pytest.mark.parametrize("kernel,stride,fused_pool", [(1, 1, False), (3, 1, True),
                                                      (3, 2, False), (5, 1, False),
                                                      (7, 2, False)])
@pytest.mark.parametrize("batch", [1, 3])
def test_depthwise_conv2d_requant(rt, rng, seed, kernel, stride, fused_pool, batch):
    c = int(rng.choice([1, 5, 33]))
    pads = tuple(int(p) for p in rng.integers(0, kernel, 4))
    h, w = (int(v) | 1 for v in rng.integers(kernel + 2, 24, 2))
    x = rng.integers(-128, 128, (batch, c, h, w), dtype=np.int8)
    wts = rng.integers(-128, 128, (c, 1, kernel, kernel), dtype=np.int8)
    bias = rng.integers(-3000, 3000, c, dtype=np.int32)
    m, n = random_requant(rng, c)
    zx, zy = (int(v) for v in rng.integers(-128, 128, 2))
    handle = rt.upload_depthwise_weights(wts, bias, m, n - 6)
    got = rt.depthwise_conv2d_requant(x, handle, x_zero_point=zx, y_zero_point=zy,
                                      stride=stride, padding=pads, pool=fused_pool)
    acc = conv.depthwise_conv2d(x, wts, bias, x_zero_point=zx, stride=stride, padding=pads)
    want = requant.requantize(acc, m, n - 6, zy)
    if fused_pool:
        want = pool.max_pool2d(want, 2, 2)
    assert_same(got, want, seed, f"depthwise x{x.shape} k{kernel} stride {stride} pads {pads}")


@pytest.mark.parametrize("batch,k,o", [(1, 1, 1), (3, 100, 33), (3, 300, 10), (1, 64, 70)])
def test_dense_requant(rt, rng, seed, batch, k, o):
    x = rng.integers(-128, 128, (batch, k), dtype=np.int8)
    wts = rng.integers(-128, 128, (o, k), dtype=np.int8)
    bias = rng.integers(-50000, 50000, o, dtype=np.int32)
    m, n = random_requant(rng, o)
    zx, zy = (int(v) for v in rng.integers(-128, 128, 2))
    got = rt.dense_requant(x, rt.upload_dense_weights(wts, bias, m, n), x_zero_point=zx,
                           y_zero_point=zy)
    want = requant.requantize(conv.dense(x, wts, bias, x_zero_point=zx), m, n, zy)
    assert_same(got, want, seed, f"dense x{x.shape} w{wts.shape}")


EXTREME_SHIFTS = [1, 2, 20, 31, 40, 47, 62]


@pytest.mark.parametrize("shift", EXTREME_SHIFTS)
@pytest.mark.parametrize("multiplier", [1 << 30, (1 << 30) + 1, (1 << 31) - 1])
def test_requantization_extremes(rt, seed, shift, multiplier):
    """Accumulators at and next to +-2**31 through the dense kernel, every zero point edge.

    acc = bias + (x - zx) * w with one product of +-32640 (the largest int8 products).
    """
    top, bottom = (1 << 31) - 1, -(1 << 31)
    cases = [  # (x, x_zero_point, w, bias): acc
        (-128, 127, -128, top - 32640),     # 2**31 - 1
        (127, -128, -128, bottom + 32640),  # -2**31
        (127, -128, 127, bottom + 32640),   # -2**31 + 65025 + ...
        (-128, 127, -128, -32640),          # 0
        (-128, 127, 127, 0),                # -32385
        (0, 0, 0, -1), (0, 0, 0, 1), (0, 0, 0, top), (0, 0, 0, bottom),
    ]
    for zy in (-128, 0, 127):
        for lo, hi in ((-128, 127), (zy, 127), (-5, 5)):
            lo, hi = min(lo, hi), max(lo, hi)
            for xv, zx, wv, b in cases:
                x = np.array([[xv]], dtype=np.int8)
                wts = np.array([[wv]], dtype=np.int8)
                bias = np.array([b], dtype=np.int32)
                handle = rt.upload_dense_weights(wts, bias, multiplier, shift)
                got = rt.dense_requant(x, handle, x_zero_point=zx, y_zero_point=zy, lo=lo,
                                       hi=hi)
                acc = conv.dense(x, wts, bias, x_zero_point=zx)
                want = requant.requantize(acc, multiplier, shift, zy, lo, hi)
                assert_same(got, want, seed, f"acc {int(acc[0, 0])} M {multiplier} n {shift} "
                                             f"zy {zy} clamp [{lo}, {hi}]")


def test_requantization_reference_points(rt):
    """The points quoted in docs/semantics.md, through the convolution kernel."""
    x = np.full((1, 1, 1, 1), 127, dtype=np.int8)
    wts = np.zeros((3, 1, 1, 1), dtype=np.int8)
    bias = np.array([-(1 << 31), -(1 << 31), (1 << 31) - 1], dtype=np.int32)
    handle = rt.upload_conv_weights(wts, bias, [1 << 30, (1 << 31) - 1, (1 << 31) - 1], 62)
    got = rt.conv2d_requant(x, handle, x_zero_point=0, y_zero_point=0)
    assert got.ravel().tolist() == [0, -1, 1]


def test_accumulator_overflow_raises_like_golden(rt):
    x = np.full((1, 1), -128, dtype=np.int8)
    wts = np.full((1, 1), -128, dtype=np.int8)
    bias = np.array([(1 << 31) - 1], dtype=np.int32)
    with pytest.raises(OverflowError):
        conv.dense(x, wts, bias, x_zero_point=127)
    handle = rt.upload_dense_weights(wts, bias, 1 << 30, 40)
    with pytest.raises(OverflowError, match="int32 accumulator"):
        rt.dense_requant(x, handle, x_zero_point=127, y_zero_point=0)
    # The flag is cleared by the report: the next layer is fine.
    assert rt.dense_requant(x, handle, x_zero_point=-128, y_zero_point=0).shape == (1, 1)


def test_saturation_and_zero_point_extremes(rt, rng, seed):
    for zx, zy in ((-128, 127), (127, -128), (-128, -128), (127, 127)):
        x = rng.integers(-128, 128, (3, 33, 9, 7), dtype=np.int8)
        x[0] = zx  # a whole image of padding-valued pixels
        wts = rng.integers(-128, 128, (5, 33, 3, 3), dtype=np.int8)
        handle = rt.upload_conv_weights(wts, None, (1 << 31) - 1, 1)  # everything saturates
        got = rt.conv2d_requant(x, handle, x_zero_point=zx, y_zero_point=zy, padding=1)
        want = requant.requantize(conv.conv2d(x, wts, x_zero_point=zx, padding=1),
                                  (1 << 31) - 1, 1, zy)
        assert_same(got, want, seed, f"saturating conv zx {zx} zy {zy}")


@pytest.mark.parametrize("kernel,stride", [(2, 2), (3, 1), (3, 2), (5, 3), ((1, 3), (1, 2))])
@pytest.mark.parametrize("batch", [1, 3])
def test_max_pool2d(rt, rng, seed, kernel, stride, batch):
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    pads = (int(rng.integers(0, kh)), int(rng.integers(0, kw)),
            int(rng.integers(0, kh)), int(rng.integers(0, kw)))
    x = rng.integers(-128, 128, (batch, int(rng.choice([1, 6])), 13, 11), dtype=np.int8)
    x[..., 0, :] = -128  # padding must never beat a real -128
    got = rt.max_pool2d(x, kernel, stride, pads)
    assert_same(got, pool.max_pool2d(x, kernel, stride, pads), seed,
                f"max_pool x{x.shape} k{kernel} s{stride} pads {pads}")


@pytest.mark.parametrize("kernel,stride", [(2, 2), (3, 1), (3, 2), (5, 2), ((2, 3), (1, 2))])
@pytest.mark.parametrize("include_pad", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_avg_pool2d(rt, rng, seed, kernel, stride, include_pad, batch):
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    pads = (int(rng.integers(0, kh)), int(rng.integers(0, kw)),
            int(rng.integers(0, kh)), int(rng.integers(0, kw)))
    x = rng.integers(-128, 128, (batch, int(rng.choice([1, 5])), 12, 9), dtype=np.int8)
    # Equal scales make exact ties common (the hard case); otherwise random scales.
    x_scale = float(rng.uniform(0.01, 0.1))
    y_scale = x_scale if rng.random() < 0.5 else float(rng.uniform(0.005, 0.2))
    zx, zy = (int(v) for v in rng.choice([-128, 127, 3], 2))
    kwargs = dict(x_scale=x_scale, x_zero_point=zx, y_scale=y_scale, y_zero_point=zy,
                  count_include_pad=include_pad, lo=-100, hi=127)
    got = rt.avg_pool2d(x, kernel, stride, pads, **kwargs)
    assert_same(got, pool.avg_pool2d(x, kernel, stride, pads, **kwargs), seed,
                f"avg_pool x{x.shape} k{kernel} s{stride} pads {pads} {kwargs}")


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (3, 7, 7, 7), (1, 33, 13, 17), (2, 3, 64, 65)])
def test_global_avg_pool(rt, rng, seed, shape):
    x = rng.integers(-128, 128, shape, dtype=np.int8)
    for zx, zy in ((-128, 127), (127, -128), (5, -3)):
        args = (float(rng.uniform(0.01, 0.1)), zx, float(rng.uniform(0.01, 0.1)), zy)
        got = rt.global_avg_pool(x, *args, lo=-120, hi=120)
        assert_same(got, pool.global_avg_pool(x, *args, lo=-120, hi=120), seed,
                    f"global_avg_pool x{shape} args {args}")


@pytest.mark.parametrize("shapes", [((3, 5, 7, 9), (3, 5, 7, 9)), ((1, 1, 1, 1), (1, 1, 1, 1)),
                                    ((2, 33, 4, 4), (1, 33, 1, 1)), ((300,), (300,))])
def test_add(rt, rng, seed, shapes):
    a = rng.integers(-128, 128, shapes[0], dtype=np.int8)
    b = rng.integers(-128, 128, shapes[1], dtype=np.int8)
    scales = [(0.05, 0.05, 0.05), (0.02, 0.07, 0.04), (1e-3, 0.5, 0.01), (0.1, 0.1, 0.3)]
    for sa, sb, sy in scales:
        for za, zb, zy in ((-128, 127, 0), (127, -128, -128), (0, 0, 127)):
            args = (a, sa, za, b, sb, zb, sy, zy)
            got = rt.add(*args, lo=-128, hi=100)
            assert_same(got, eltwise.add(*args, lo=-128, hi=100), seed,
                        f"add {shapes} scales {(sa, sb, sy)} zero points {(za, zb, zy)}")


def test_add_equal_scales_is_plain_saturating_sum(rt, rng):
    a = rng.integers(-128, 128, (4, 100), dtype=np.int8)
    b = rng.integers(-128, 128, (4, 100), dtype=np.int8)
    got = rt.add(a, 0.1, 0, b, 0.1, 0, 0.1, 0)
    assert np.array_equal(got, np.clip(a.astype(int) + b, -128, 127))


def test_layers_chain_on_device(rt, rng, seed):
    """DeviceTensor in, DeviceTensor out: conv -> pool -> add -> gap, one read at the end."""
    x = rng.integers(-128, 128, (3, 8, 16, 16), dtype=np.int8)
    wts = rng.integers(-128, 128, (8, 8, 3, 3), dtype=np.int8)
    m, n = random_requant(rng, 8)
    handle = rt.upload_conv_weights(wts, None, m, n)
    xd = rt.to_device(x)
    y1 = rt.conv2d_requant(xd, handle, x_zero_point=-3, y_zero_point=4, padding=1)
    y2 = rt.max_pool2d(y1, 2, 2)
    y3 = rt.add(y2, 0.05, 4, y2, 0.05, 4, 0.08, -1)
    y4 = rt.global_avg_pool(y3, 0.08, -1, 0.02, 0)
    assert type(y4).__name__ == "DeviceTensor" and y4.shape == (3, 8, 1, 1)
    g1 = requant.requantize(conv.conv2d(x, wts, x_zero_point=-3, padding=1), m, n, 4)
    g2 = pool.max_pool2d(g1, 2, 2)
    g3 = eltwise.add(g2, 0.05, 4, g2, 0.05, 4, 0.08, -1)
    assert_same(y4.get(), pool.global_avg_pool(g3, 0.08, -1, 0.02, 0), seed, "chain")
    assert_same(np.asarray(y2), g2, seed, "chain, intermediate")


def test_bad_arguments_name_themselves(rt):
    x = np.zeros((1, 4, 5, 5), dtype=np.int8)
    handle = rt.upload_conv_weights(np.zeros((2, 4, 3, 3), dtype=np.int8))
    with pytest.raises(ValueError, match="x_zero_point"):
        rt.conv2d_requant(x, handle, x_zero_point=200, y_zero_point=0)
    with pytest.raises(ValueError, match="dtype int8"):
        rt.conv2d_requant(x.astype(np.int16), handle, x_zero_point=0, y_zero_point=0)
    with pytest.raises(ValueError, match="channels"):
        rt.conv2d_requant(x[:, :3], handle, x_zero_point=0, y_zero_point=0)
    with pytest.raises(ValueError, match="shift"):
        rt.upload_conv_weights(np.zeros((2, 4, 3, 3), dtype=np.int8), shift=63)
    with pytest.raises(ValueError, match="multiplier"):
        rt.upload_conv_weights(np.zeros((2, 4, 3, 3), dtype=np.int8), multiplier=1 << 31)


# ------------------------------------------------------------------ environment errors

def test_program_is_built_once_per_device(rt):
    assert device_context(rt.device) is device_context(rt.device)
    assert OpenCLRuntime(rt.device).program is rt.program


def test_unknown_device_lists_the_available_ones(monkeypatch):
    with pytest.raises(DeviceNotFoundError) as info:
        OpenCLRuntime("no-such-device")
    assert "no-such-device" in str(info.value) and "0:0" in str(info.value)
    with pytest.raises(DeviceNotFoundError, match="from the device argument") as info:
        OpenCLRuntime("7:9")
    assert "Available" in str(info.value)
    # The runtime reads no environment: the variable is the providers' fallback only.
    monkeypatch.setenv("TESSERA_OPENCL_DEVICE", "7:9")
    assert OpenCLRuntime().device_name  # "7:9" would raise DeviceNotFoundError


def test_device_selection_by_index_and_name(rt, monkeypatch):
    assert OpenCLRuntime("0:0").device == list_devices()[0][1]
    assert OpenCLRuntime(rt.device_name[:6].upper()).device_name


def test_broken_kernel_shows_build_log(rt):
    source = "__kernel void broken(__global int *y) { y[0] = undeclared_thing; }"
    with pytest.raises(KernelBuildError, match="undeclared_thing") as info:
        build_program(rt.context, source)
    assert "build log" in str(info.value) and info.value.log
    assert isinstance(info.value, RuntimeError)


def test_device_without_int64_is_rejected():
    fake = types.SimpleNamespace(name="tiny", profile="EMBEDDED_PROFILE", version="OpenCL 1.2",
                                 extensions="cl_khr_fp16", max_work_group_size=32,
                                 local_mem_size=1024)
    with pytest.raises(UnsupportedDeviceError, match="64-bit integer") as info:
        check_device(fake)
    assert "work-groups of at most 32" in str(info.value)
    assert "TESSERA_OPENCL_DEVICE" in str(info.value)


def test_too_large_buffer_is_out_of_memory(rt):
    with pytest.raises(DeviceOutOfMemoryError, match="smaller batch"):
        rt.empty((rt.device.max_mem_alloc_size + 1,))


def test_no_platform_is_a_clear_error():
    # An empty vendor folder makes the ICD loader find no platform at all.
    with tempfile.TemporaryDirectory() as empty:
        env = dict(os.environ, OCL_ICD_VENDORS=empty, OPENCL_VENDOR_PATH=empty)
        code = ("from sw_driver.opencl import OpenCLRuntime, NoPlatformError\n"
                "try:\n    OpenCLRuntime()\nexcept NoPlatformError as e:\n    print('NP', e)\n")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
    assert out.stdout.startswith("NP "), out.stdout + out.stderr
    assert "install an OpenCL driver" in out.stdout
