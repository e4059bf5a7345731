"""Tests of the layer golden models against straightforward loop references.

The references are written independently of the implementations: explicit padding with the
zero point (or -inf for max pooling), one Python loop per output position, int64 or Python
int arithmetic.
"""

import itertools
from fractions import Fraction

import numpy as np
import pytest
from assertions import assert_exact

from models.conv import K_MAX_WRAP_FREE, conv2d, dense, depthwise_conv2d
from models.eltwise import ADD_LEFT_SHIFT, add, add_multipliers
from models.pool import avg_pool2d, avg_pool_multipliers, global_avg_pool, max_pool2d
from models.requant import INT32_MAX


def _random_int8(rng, shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


# --- references ----------------------------------------------------------------------------

def _conv_reference(x, w, bias, zx, stride, pads, dilation=(1, 1), groups=1):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    top, left, bottom, right = pads
    # Padding *is* the value z_x, in the int8 domain, before the subtraction.
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=zx)
    span_h, span_w = dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1
    oh = (h + top + bottom - span_h) // stride[0] + 1
    ow = (wd + left + right - span_w) // stride[1] + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow), dtype=np.int64)
    w64 = w.astype(np.int64)
    for b, oc, i, j in itertools.product(range(n), range(o), range(oh), range(ow)):
        g = oc // og
        y0, x0 = i * stride[0], j * stride[1]
        window = xp[b, g * cg:(g + 1) * cg, y0:y0 + span_h:dilation[0],
                    x0:x0 + span_w:dilation[1]].astype(np.int64) - zx
        out[b, oc, i, j] = (0 if bias is None else int(bias[oc])) + int((window * w64[oc]).sum())
    return out


def _pool_windows(x, kernel, stride, pads, fill):
    """Yield (n, c, i, j, window values, count of real elements) with padding = ``fill``."""
    n, c, h, w = x.shape
    top, left, bottom, right = pads
    real = np.pad(np.ones((h, w), dtype=bool), ((top, bottom), (left, right)))
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (top, bottom), (left, right)),
                constant_values=fill)
    oh = (h + top + bottom - kernel[0]) // stride[0] + 1
    ow = (w + left + right - kernel[1]) // stride[1] + 1
    for b, ch, i, j in itertools.product(range(n), range(c), range(oh), range(ow)):
        rows = slice(i * stride[0], i * stride[0] + kernel[0])
        cols = slice(j * stride[1], j * stride[1] + kernel[1])
        yield b, ch, i, j, xp[b, ch, rows, cols], int(real[rows, cols].sum()), (oh, ow)


def _round_half_even(v, m, n):
    """``v * m / 2**n`` rounded half to even with exact rationals (the contract's rounding)."""
    return round(Fraction(int(v) * int(m), 1 << int(n)))


def _requant_int(s, m, n, z, lo=-128, hi=127):
    return min(max(z + _round_half_even(s, m, n), lo), hi)


# --- conv2d --------------------------------------------------------------------------------

CONV_CASES = [(k, s, zx) for k in (1, 3, 5, 7) for s in (1, 2) for zx in (-128, 127)]


@pytest.mark.parametrize("kernel, stride, zx", CONV_CASES)
def test_conv2d_matches_loop_reference(kernel, stride, zx):
    seed = 1000 + 100 * kernel + 10 * stride + (zx > 0)
    rng = np.random.default_rng(seed)
    n, c, o = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 5))
    h = int(rng.integers(kernel, kernel + 6)) | 1  # odd sizes
    w = int(rng.integers(kernel, kernel + 6)) | 1
    pads = tuple(int(p) for p in rng.integers(0, kernel // 2 + 1, size=4))
    x = _random_int8(rng, (n, c, h, w))
    wt = _random_int8(rng, (o, c, kernel, kernel))
    bias = rng.integers(-(1 << 20), 1 << 20, size=o, dtype=np.int32)
    got = conv2d(x, wt, bias, x_zero_point=zx, stride=(stride, stride), padding=pads)
    assert got.dtype == np.int32
    what = f"seed={seed} x={x.shape} w={wt.shape} stride={stride} pads={pads} zx={zx}"
    assert_exact(got, _conv_reference(x, wt, bias, zx, (stride, stride), pads), what)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_conv2d_groups_dilation_asymmetric(seed):
    rng = np.random.default_rng(seed)
    groups = int(rng.choice([1, 2, 3]))
    c, o = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 3))
    kh, kw = (int(k) for k in rng.choice([1, 2, 3, 5], size=2))
    dilation = tuple(int(d) for d in rng.integers(1, 3, size=2))
    stride = tuple(int(s) for s in rng.integers(1, 4, size=2))
    pads = (int(rng.integers(0, kh)), int(rng.integers(0, kw)), int(rng.integers(0, kh)),
            int(rng.integers(0, kw)))
    h, w = int(rng.integers(dilation[0] * kh, 12)), int(rng.integers(dilation[1] * kw, 12))
    zx = int(rng.integers(-128, 128))
    x = _random_int8(rng, (2, c, h, w))
    wt = _random_int8(rng, (o, c // groups, kh, kw))
    got = conv2d(x, wt, None, x_zero_point=zx, stride=stride, padding=pads,
                 dilation=dilation, groups=groups)
    expected = _conv_reference(x, wt, None, zx, stride, pads, dilation, groups)
    what = (f"seed={seed} groups={groups} x={x.shape} w={wt.shape} stride={stride} "
            f"pads={pads} dilation={dilation} zx={zx}")
    assert_exact(got, expected, what)


def test_conv2d_padding_is_the_zero_point():
    """A constant input equal to z_x gives bias alone, padding included."""
    x = np.full((1, 2, 4, 4), -7, dtype=np.int8)
    wt = np.full((3, 2, 3, 3), 100, dtype=np.int8)
    bias = np.array([5, -6, 7], dtype=np.int32)
    got = conv2d(x, wt, bias, x_zero_point=-7, padding=2)
    assert_exact(got, np.broadcast_to(bias[None, :, None, None], (1, 3, 6, 6)), "z_x pad")


def test_conv2d_worst_case_magnitude_is_exact():
    """|x - z_x| = 255 against w = -128 over K = 6272 products: exact, no float error."""
    x = np.full((1, 128, 7, 7), -128, dtype=np.int8)
    wt = np.full((2, 128, 7, 7), -128, dtype=np.int8)
    wt[1, 0, 0, 0] = 127
    got = conv2d(x, wt, None, x_zero_point=127)
    k = 128 * 49
    assert int(got[0, 0, 0, 0]) == k * 255 * 128
    assert int(got[0, 1, 0, 0]) == (k - 1) * 255 * 128 - 255 * 127


def test_conv2d_overflow_is_reported():
    x = np.full((1, 1, 1, 1), 127, dtype=np.int8)
    wt = np.full((1, 1, 1, 1), 127, dtype=np.int8)
    bias = np.array([INT32_MAX - 10], dtype=np.int32)
    value = INT32_MAX - 10 + 255 * 127
    with pytest.raises(OverflowError, match=rf"accumulator at index \(0, 0, 0, 0\) is "
                                            rf"{value}, outside int32"):
        conv2d(x, wt, bias, x_zero_point=-128)


@pytest.mark.parametrize("seed, kernel, stride", [(7, 3, 1), (8, 3, 2), (9, 5, 1), (10, 1, 2),
                                                  (11, 7, 2)])
def test_depthwise_matches_loop_reference(seed, kernel, stride):
    rng = np.random.default_rng(seed)
    c = int(rng.integers(1, 7))
    h, w = int(rng.integers(kernel, kernel + 7)), int(rng.integers(kernel, kernel + 7))
    pads = tuple(int(p) for p in rng.integers(0, kernel // 2 + 1, size=4))
    zx = int(rng.choice([-128, 127, int(rng.integers(-128, 128))]))
    x = _random_int8(rng, (2, c, h, w))
    wt = _random_int8(rng, (c, 1, kernel, kernel))
    bias = rng.integers(-1000, 1000, size=c, dtype=np.int32)
    got = depthwise_conv2d(x, wt, bias, x_zero_point=zx, stride=stride, padding=pads)
    expected = _conv_reference(x, wt, bias, zx, (stride, stride), pads, groups=c)
    assert_exact(got, expected, f"seed={seed} c={c} {h}x{w} k={kernel} s={stride} "
                                 f"pads={pads} zx={zx}")


# --- dense ---------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [21, 22, 23, 24])
def test_dense_matches_reference(seed):
    rng = np.random.default_rng(seed)
    n, k, o = (int(v) for v in rng.integers(1, 40, size=3))
    zx = int(rng.integers(-128, 128))
    x, wt = _random_int8(rng, (n, k)), _random_int8(rng, (o, k))
    bias = rng.integers(-(1 << 24), 1 << 24, size=o, dtype=np.int32)
    expected = np.array([[int(bias[j]) + sum((int(x[i, q]) - zx) * int(wt[j, q])
                                             for q in range(k)) for j in range(o)]
                         for i in range(n)])
    assert_exact(dense(x, wt, bias, x_zero_point=zx), expected, f"seed={seed} N={n} K={k} "
                                                                  f"O={o} zx={zx}")


def test_dense_wrap_free_limit():
    """K_MAX_WRAP_FREE worst-case products fit int32 exactly; one more bias LSB overflows."""
    k = K_MAX_WRAP_FREE
    x = np.full((1, k), -128, dtype=np.int8)
    wt = np.full((1, k), -128, dtype=np.int8)
    top = k * 255 * 128
    assert top <= INT32_MAX < top + 255 * 128
    bias = np.array([INT32_MAX - top], dtype=np.int32)
    assert int(dense(x, wt, bias, x_zero_point=127)[0, 0]) == INT32_MAX
    with pytest.raises(OverflowError, match=r"accumulator at index \(0, 0\)"):
        dense(x, wt, bias + 1, x_zero_point=127)


# --- pooling -------------------------------------------------------------------------------

POOL_CASES = [(k, s, seed) for seed, (k, s) in enumerate(
    itertools.product((1, 2, 3, 5), (1, 2, 3)), start=300)]


@pytest.mark.parametrize("kernel, stride, seed", POOL_CASES)
def test_max_pool_matches_reference(kernel, stride, seed):
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(kernel, kernel + 6)), int(rng.integers(kernel, kernel + 6))
    pads = tuple(int(p) for p in rng.integers(0, kernel, size=4))
    x = _random_int8(rng, (2, 3, h, w))
    got = max_pool2d(x, kernel, stride, pads)
    assert got.dtype == np.int8
    expected = None
    for b, c, i, j, window, _, out_shape in _pool_windows(x, (kernel, kernel), (stride,) * 2,
                                                          pads, fill=-(1 << 40)):
        if expected is None:
            expected = np.zeros((2, 3) + out_shape, dtype=np.int64)
        expected[b, c, i, j] = window.max()
    assert_exact(got, expected, f"seed={seed} {h}x{w} k={kernel} s={stride} pads={pads}")


def test_max_pool_padding_never_wins():
    x = np.full((1, 1, 3, 3), -128, dtype=np.int8)
    assert_exact(max_pool2d(x, 3, 1, 2), np.full((1, 1, 5, 5), -128), "all -128, pad 2")


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("kernel, stride, seed", POOL_CASES)
def test_avg_pool_matches_reference(kernel, stride, seed, count_include_pad):
    seed += 1000 * count_include_pad
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(kernel, kernel + 6)), int(rng.integers(kernel, kernel + 6))
    pads = tuple(int(p) for p in rng.integers(0, kernel, size=4))
    sx, sy = (float(s) for s in rng.uniform(0.01, 0.1, size=2))
    zx, zy = (int(z) for z in rng.integers(-128, 128, size=2))
    x = _random_int8(rng, (1, 3, h, w))
    got = avg_pool2d(x, kernel, stride, pads, x_scale=sx, x_zero_point=zx, y_scale=sy,
                     y_zero_point=zy, count_include_pad=count_include_pad)
    what = (f"seed={seed} {h}x{w} k={kernel} s={stride} pads={pads} sx={sx} zx={zx} "
            f"sy={sy} zy={zy} count_include_pad={count_include_pad}")
    expected = None
    for b, c, i, j, window, real, out_shape in _pool_windows(x, (kernel, kernel),
                                                             (stride,) * 2, pads, fill=zx):
        if expected is None:
            expected = np.zeros((1, 3) + out_shape, dtype=np.int64)
        total = int((window - zx).sum())
        count = kernel * kernel if count_include_pad else real
        (m,), (n,) = avg_pool_multipliers(sx, sy, [count])
        expected[b, c, i, j] = _requant_int(total, m, n, zy)
        # And against the rational value: within 1/2 LSB plus the multiplier's error.
        ideal = Fraction(total) * Fraction(sx) / (Fraction(sy) * count) + zy
        if -128 <= ideal <= 127:
            assert abs(got[b, c, i, j] - ideal) <= Fraction(1, 2) + abs(ideal - zy) / 2**30, \
                f"{what} at {(b, c, i, j)}"
    assert_exact(got, expected, what)


@pytest.mark.parametrize("seed, h, w", [(71, 1, 1), (72, 7, 7), (73, 5, 9), (74, 14, 3)])
def test_global_avg_pool_matches_reference(seed, h, w):
    rng = np.random.default_rng(seed)
    sx, sy = (float(s) for s in rng.uniform(0.005, 0.1, size=2))
    zx, zy = (int(z) for z in rng.integers(-128, 128, size=2))
    x = _random_int8(rng, (2, 5, h, w))
    got = global_avg_pool(x, sx, zx, sy, zy)
    assert got.shape == (2, 5, 1, 1) and got.dtype == np.int8
    (m,), (n,) = avg_pool_multipliers(sx, sy, [h * w])
    expected = np.array([[[[_requant_int(int((x[b, c].astype(np.int64) - zx).sum()), m, n, zy)]]
                          for c in range(5)] for b in range(2)])
    assert_exact(got, expected, f"seed={seed} {h}x{w} sx={sx} zx={zx} sy={sy} zy={zy}")


def test_avg_pool_same_scale_is_rounded_mean():
    x = np.array([[[[1, 2], [3, 5]]]], dtype=np.int8)  # mean 2.75 -> 3
    assert avg_pool2d(x, 2, 2, x_scale=0.1, x_zero_point=0, y_scale=0.1,
                      y_zero_point=0)[0, 0, 0, 0] == 3
    x = np.array([[[[1, 2], [3, 4]]]], dtype=np.int8)  # mean 2.5: a tie, to even
    assert avg_pool2d(x, 2, 2, x_scale=0.1, x_zero_point=0, y_scale=0.1,
                      y_zero_point=0)[0, 0, 0, 0] == 2
    x = -x  # mean -2.5 -> -2
    assert avg_pool2d(x, 2, 2, x_scale=0.1, x_zero_point=0, y_scale=0.1,
                      y_zero_point=0)[0, 0, 0, 0] == -2
    x = np.array([[[[1, 2], [3, 8]]]], dtype=np.int8)  # mean 3.5 -> 4, -3.5 -> -4
    assert avg_pool2d(x, 2, 2, x_scale=0.1, x_zero_point=0, y_scale=0.1,
                      y_zero_point=0)[0, 0, 0, 0] == 4
    assert avg_pool2d(-x, 2, 2, x_scale=0.1, x_zero_point=0, y_scale=0.1,
                      y_zero_point=0)[0, 0, 0, 0] == -4


# --- eltwise add ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [81, 82, 83, 84, 85, 86])
def test_add_matches_definition_and_float(seed):
    rng = np.random.default_rng(seed)
    sa, sb, sy = (float(s) for s in rng.uniform(0.002, 0.2, size=3))
    za, zb, zy = (int(z) for z in rng.integers(-128, 128, size=3))
    a, b = _random_int8(rng, (2, 3, 4, 5)), _random_int8(rng, (2, 3, 4, 5))
    got = add(a, sa, za, b, sb, zb, sy, zy)
    what = f"seed={seed} sa={sa} za={za} sb={sb} zb={zb} sy={sy} zy={zy}"
    ma, na, mb, nb, my, ny = add_multipliers(sa, sb, sy)

    expected = np.array([
        min(max(zy + _round_half_even(
            _round_half_even((int(p) - za) << ADD_LEFT_SHIFT, ma, na)
            + _round_half_even((int(q) - zb) << ADD_LEFT_SHIFT, mb, nb), my, ny), -128), 127)
        for p, q in zip(a.ravel(), b.ravel(), strict=True)]).reshape(a.shape)
    assert_exact(got, expected, what)
    ideal = np.clip((sa * (a - float(za)) + sb * (b - float(zb))) / sy + zy, -128, 127)
    # 1/2 LSB of final rounding plus the fixed-point error, far below 1e-3 LSB here.
    error = np.abs(got - ideal)
    assert error.max() <= 0.5 + 1e-3, f"{what}: max error {error.max()} at " \
                                      f"{np.unravel_index(error.argmax(), error.shape)}"


def test_add_equal_scales_is_exact_sum():
    rng = np.random.default_rng(90)
    a, b = _random_int8(rng, (64,)), _random_int8(rng, (64,))
    got = add(a, 0.05, 0, b, 0.05, 0, 0.05, 0)
    assert_exact(got, np.clip(a.astype(int) + b.astype(int), -128, 127), "seed=90 equal scales")


def test_add_broadcasts_and_clamps():
    a = np.array([[10], [-10]], dtype=np.int8)
    b = np.array([1, 2, 3], dtype=np.int8)
    got = add(a, 1.0, 0, b, 1.0, 0, 1.0, 0, lo=0, hi=11)
    assert_exact(got, np.array([[11, 11, 11], [0, 0, 0]]), "broadcast + clamp")


# --- argument errors -----------------------------------------------------------------------

X = np.zeros((1, 2, 5, 5), dtype=np.int8)
W = np.zeros((3, 2, 3, 3), dtype=np.int8)
B = np.zeros(3, dtype=np.int32)


@pytest.mark.parametrize("call, match", [
    (lambda: conv2d(X.astype(np.float32), W, B, x_zero_point=0),
     r"x must have dtype int8 \(shape \(N, C, H, W\)\), not float32"),
    (lambda: conv2d(X[0], W, B, x_zero_point=0), r"x must have shape \(N, C, H, W\), not "
                                                 r"\(2, 5, 5\)"),
    (lambda: conv2d(list(X), W, B, x_zero_point=0), r"x must be a numpy.ndarray of int8"),
    (lambda: conv2d(X, W[:, :1], B, x_zero_point=0),
     r"w must have shape \(O, C/groups, kh, kw\) = \(3, 2, kh, kw\) for x with C=2 and "
     r"groups=1, not \(3, 1, 3, 3\)"),
    (lambda: conv2d(X, W.astype(np.int16), B, x_zero_point=0), r"w must have dtype int8"),
    (lambda: conv2d(X, W, B[:2], x_zero_point=0), r"bias must have shape \(3,\), not \(2,\)"),
    (lambda: conv2d(X, W, B.astype(np.int64), x_zero_point=0),
     r"bias must have dtype int32 \(shape \(3,\)\), not int64"),
    (lambda: conv2d(X, W, B, x_zero_point=128), r"x_zero_point must be an integer in "
                                                r"\[-128, 127\], not 128"),
    (lambda: conv2d(X, W, B, x_zero_point=0, stride=0), r"stride must be a positive int or "
                                                        r"a pair of positive ints, not 0"),
    (lambda: conv2d(X, W, B, x_zero_point=0, padding=(1, -1, 0, 0)),
     r"padding must be a non-negative int"),
    (lambda: conv2d(X, W, B, x_zero_point=0, groups=2),
     r"groups=2 must divide both the input channels of x \(2\) and the output channels of "
     r"w \(3\)"),
    (lambda: conv2d(X[:, :, :2, :2], W, B, x_zero_point=0),
     r"kernel 3x3 \(dilation \(1, 1\)\) does not fit input 2x2"),
    (lambda: depthwise_conv2d(X, W, B, x_zero_point=0),
     r"w must have shape \(C, 1, kh, kw\) = \(2, 1, kh, kw\) for depthwise"),
    (lambda: dense(X[0, 0], W[:, :, 0, 0], B, x_zero_point=0),
     r"w must have shape \(O, K\) = \(O, 5\) to match x of shape \(5, 5\), not \(3, 2\)"),
    (lambda: dense(X[0, 0, 0], W[:, :, 0, 0], B, x_zero_point=0),
     r"x must have shape \(N, K\), not \(5,\)"),
    (lambda: max_pool2d(X, 3, 1, (3, 0, 0, 0)),
     r"padding \(3, 0, 0, 0\) must be smaller than the kernel \(3, 3\)"),
    (lambda: max_pool2d(X, (0, 2)), r"kernel must be a positive int or a pair"),
    (lambda: max_pool2d(X.astype(np.uint8), 2), r"x must have dtype int8"),
    (lambda: avg_pool2d(X, 2, x_scale=0.0, x_zero_point=0, y_scale=1.0, y_zero_point=0),
     r"x_scale must be a positive finite float, not 0\.0"),
    (lambda: avg_pool2d(X, 2, x_scale=1.0, x_zero_point=0, y_scale=1e-12, y_zero_point=0),
     r"x_scale / \(y_scale \* count\) .* cannot be requantized: .* too large"),
    (lambda: global_avg_pool(X, 0.1, 0, 0.1, -129), r"y_zero_point must be an integer"),
    (lambda: add(X, 0.1, 0, X.astype(np.int32), 0.1, 0, 0.1, 0),
     r"b must be a numpy.ndarray of int8, not int32"),
    (lambda: add(X, 0.1, 0, X[:, :, :2], 0.1, 0, 0.1, 0),
     r"a of shape \(1, 2, 5, 5\) and b of shape \(1, 2, 2, 5\) must have broadcastable"),
    (lambda: add(X, 0.1, 0, X, 1e-12, 0, 0.1, 0),
     r"b_scale / \(2 \* max\(a_scale, b_scale\)\) cannot be requantized"),
])
def test_bad_arguments_are_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()
