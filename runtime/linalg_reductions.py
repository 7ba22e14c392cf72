"""Kernels of the orthogonal reductions numpy lacks: the Schur decomposition (``schur``), the
Hessenberg (``hessenberg``) and tridiagonal (``tridiagonal``) reductions and the
column-pivoted QR decomposition (``geqp3``), on numpy arrays whose last two dimensions are
matrices (leading dimensions are a batch).

Each follows LAPACK's algorithm step for step (gees: gehrd, orghr and lahqr's Francis
double-shift QR for real matrices, single-shift for complex; gehd2; sytd2/hetd2; laqp2), with
its reflector conventions (larfg: ``H = I - tau v v^H``, ``v[0] = 1``, the diagonal entry
made ``-sign(Re alpha) * norm``), so the reductions' reflectors, taus and pivots are LAPACK's
and the Schur form is the one its iteration converges to. Where rounding decides (the phase
a complex Schur vector is left with, read from a converged subdiagonal entry of rounding
size; an iteration's count, and so the signs and the standardised 2x2 blocks of a real
Schur form), a Schur decomposition may differ from a given LAPACK build's by a unitary
diagonal or block-diagonal factor. They compute in double precision and round to the
operand's dtype. As JAX's, a factorisation that fails (a matrix holding an
infinity or NaN, or a QR iteration that does not converge) gives NaNs for that matrix.
"""
from __future__ import annotations

import math

import numpy as np

from ir.dtypes import real_dtype


def _wide(dtype):
    return np.dtype(np.complex128 if np.issubdtype(dtype, np.complexfloating)
                    else np.float64)


def _larfg(x: np.ndarray):
    """``(beta, tau, v)``: the elementary reflector ``H`` (``I - tau v v^H``, ``v[0] = 1``)
    with ``H^H x = [beta, 0, ...]``, beta real, as LAPACK's larfg."""
    alpha = x[0]
    rest = x[1:]
    xnorm = np.sqrt(np.sum(np.abs(rest) ** 2)) if rest.size else 0.0
    v = np.zeros_like(x)
    v[0] = 1
    if xnorm == 0 and np.imag(alpha) == 0:
        return alpha, x.dtype.type(0), v
    size = math.sqrt(abs(alpha) ** 2 + xnorm ** 2)
    beta = -math.copysign(size, np.real(alpha))
    tau = (beta - alpha) / beta
    v[1:] = rest / (alpha - beta)
    return x.dtype.type(beta), x.dtype.type(tau), v


def _per_matrix(fn, a: np.ndarray, outs):
    """Run ``fn`` (one wide-precision matrix -> a tuple of arrays) on each matrix of ``a``,
    writing into the preallocated ``outs``; a matrix holding a non-finite value, or one
    ``fn`` reports failed (None), gives NaNs."""
    for index in np.ndindex(*a.shape[:-2]):
        matrix = a[index].astype(_wide(a.dtype))
        result = fn(matrix) if np.isfinite(matrix).all() else None
        for k, out in enumerate(outs):
            if result is None:
                if np.issubdtype(out.dtype, np.inexact):
                    out[index] = np.nan
                continue
            out[index] = result[k]
    return outs


# --- Hessenberg reduction (gehd2) -----------------------------------------------------------

def _hessenberg_one(a: np.ndarray):
    """``(a, taus)``: ``a`` reduced to upper Hessenberg form by reflectors ``H_i`` chosen from
    its columns, the reflectors' vectors stored below the first subdiagonal (LAPACK's gehd2)."""
    n = a.shape[0]
    a = a.copy()
    taus = np.zeros(max(n - 1, 0), a.dtype)
    for i in range(n - 1):
        beta, tau, v = _larfg(a[i + 1:, i])
        taus[i] = tau
        if tau != 0:
            # from the right: A[:, i+1:] H, then from the left: H^H A[i+1:, i+1:]
            block = a[:, i + 1:]
            block -= tau * np.outer(block @ v, np.conj(v))
            rows = a[i + 1:, i + 1:]
            rows -= np.conj(tau) * np.outer(v, np.conj(v) @ rows)
        a[i + 1, i] = beta
        a[i + 2:, i] = v[1:]
    return a, taus


def hessenberg(a):
    a = np.asarray(a)
    n = a.shape[-1]
    outs = [np.empty(a.shape, a.dtype), np.empty(a.shape[:-2] + (max(n - 1, 0),), a.dtype)]
    return _per_matrix(_hessenberg_one, a, outs)


def _orghr(h: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """The unitary ``Q = H_1 ... H_{n-2}`` of a Hessenberg reduction (LAPACK's orghr)."""
    n = h.shape[0]
    q = np.eye(n, dtype=h.dtype)
    for i in reversed(range(n - 1)):
        tau = taus[i]
        if tau == 0:
            continue
        v = np.concatenate([[1], h[i + 2:, i]]).astype(h.dtype)
        block = q[i + 1:, i + 1:]
        block -= tau * np.outer(v, np.conj(v) @ block)
    return q


# --- real Schur form: lahqr's Francis double-shift QR iteration -----------------------------

_EXCEPTIONAL_EVERY = 10        # lahqr's KEXSH
_DAT1, _DAT2 = 0.75, -0.4375


def _sign(x, y):
    return math.copysign(abs(x), y)


def _lanv2(a, b, c, d):
    """LAPACK's lanv2: the standardised Schur factorisation of a real 2x2 block:
    ``(a, b, c, d, cs, sn)``, ``c == 0`` (real eigenvalues) or ``a == d`` and ``b c < 0``."""
    eps = np.finfo(np.float64).eps                # dlamch('P')
    if c == 0:
        cs, sn = 1.0, 0.0
    elif b == 0:
        cs, sn = 0.0, 1.0
        a, d = d, a
        b, c = -c, 0.0
    elif a - d == 0 and math.copysign(1, b) != math.copysign(1, c):
        cs, sn = 1.0, 0.0
    else:
        temp = a - d
        p = 0.5 * temp
        bcmax = max(abs(b), abs(c))
        bcmis = min(abs(b), abs(c)) * math.copysign(1, b) * math.copysign(1, c)
        scale = max(abs(p), bcmax)
        z = (p / scale) * p + (bcmax / scale) * bcmis
        if z >= 4 * eps:
            z = p + _sign(math.sqrt(scale) * math.sqrt(z), p)
            a = d + z
            d = d - (bcmax / z) * bcmis
            tau = math.hypot(c, z)
            cs = z / tau
            sn = c / tau
            b = b - c
            c = 0.0
        else:
            sigma = b + c
            p = 0.5 * temp
            tau = math.hypot(sigma, temp)
            cs = math.sqrt(0.5 * (1 + abs(sigma) / tau))
            sn = -(p / (tau * cs)) * math.copysign(1, sigma)
            aa, bb = a * cs + b * sn, -a * sn + b * cs
            cc, dd = c * cs + d * sn, -c * sn + d * cs
            a, b = aa * cs + cc * sn, bb * cs + dd * sn
            c, d = -aa * sn + cc * cs, -bb * sn + dd * cs
            temp = 0.5 * (a + d)
            a = d = temp
            if c != 0:
                if b != 0:
                    if math.copysign(1, b) == math.copysign(1, c):
                        sab, sac = math.sqrt(abs(b)), math.sqrt(abs(c))
                        p = _sign(sab * sac, c)
                        tau = 1 / math.sqrt(abs(b + c))
                        a, d = temp + p, temp - p
                        b, c = b - c, 0.0
                        cs1, sn1 = sab * tau, sac * tau
                        cs, sn = cs * cs1 - sn * sn1, cs * sn1 + sn * cs1
                else:
                    b, c = -c, 0.0
                    cs, sn = -sn, cs
    return a, b, c, d, cs, sn


def _rot_rows(h, i, j, cols, cs, sn):
    x, y = h[i, cols].copy(), h[j, cols].copy()
    h[i, cols] = cs * x + sn * y
    h[j, cols] = cs * y - sn * x


def _rot_cols(h, i, j, rows, cs, sn):
    x, y = h[rows, i].copy(), h[rows, j].copy()
    h[rows, i] = cs * x + sn * y
    h[rows, j] = cs * y - sn * x


def _iteration_limits(n: int) -> tuple:
    """LAPACK's QR iteration constants for an ``n x n`` matrix: the unit roundoff, the size
    below which a subdiagonal entry counts as zero, and the iterations allowed per
    eigenvalue."""
    ulp = np.finfo(np.float64).eps
    return ulp, np.finfo(np.float64).tiny * (n / ulp), 30 * max(10, n)


def _small_subdiagonal(h, k, ilo, ihi, cabs, ulp, smlnum):
    """lahqr's deflation test of ``h[k, k-1]`` (Ahues and Tisseur's criterion)."""
    sub = cabs(h[k, k - 1])
    if sub <= smlnum:
        return True
    tst = cabs(h[k - 1, k - 1]) + cabs(h[k, k])
    if tst == 0:
        if k - 2 >= ilo:
            tst += abs(np.real(h[k - 1, k - 2]))
        if k + 1 <= ihi:
            tst += abs(np.real(h[k + 1, k]))
    if abs(np.real(h[k, k - 1])) <= ulp * tst:
        ab = max(sub, cabs(h[k - 1, k]))
        ba = min(sub, cabs(h[k - 1, k]))
        aa = max(cabs(h[k, k]), cabs(h[k - 1, k - 1] - h[k, k]))
        bb = min(cabs(h[k, k]), cabs(h[k - 1, k - 1] - h[k, k]))
        s = aa + ab
        if ba * (ab / s) <= max(smlnum, ulp * (bb * (aa / s))):
            return True
    return False


def _clear_below_subdiagonal(h: np.ndarray) -> None:
    """Zero what lies below a Hessenberg matrix's subdiagonal (lahqr's first step)."""
    n = h.shape[0]
    for j in range(n - 3):
        h[j + 2, j] = 0
        h[j + 3, j] = 0
    if n >= 3:
        h[n - 1, n - 3] = 0


def _deflation_start(h, i, l, ilo, ihi, cabs, ulp, smlnum) -> int:
    """The first row of the active block ending at ``i``: the lowest ``k > l`` whose
    subdiagonal entry is negligible (set to zero), else ``l``."""
    k = i
    while k > l:
        if _small_subdiagonal(h, k, ilo, ihi, cabs, ulp, smlnum):
            break
        k -= 1
    if k > ilo:
        h[k, k - 1] = 0
    return k


def _lahqr_real(h: np.ndarray, z: np.ndarray) -> bool:
    """The real Schur form of the Hessenberg ``h`` and the Schur vectors (``z`` updated),
    in place, as LAPACK's dlahqr (wantt, wantz); False where the iteration fails."""
    n = h.shape[0]
    if n == 0:
        return True
    _clear_below_subdiagonal(h)
    ilo, ihi = 0, n - 1
    ulp, smlnum, itmax = _iteration_limits(n)
    kdefl = 0
    i = ihi
    while i >= ilo:
        l = ilo
        converged = False
        for _ in range(itmax + 1):
            l = _deflation_start(h, i, l, ilo, ihi, abs, ulp, smlnum)
            if l >= i - 1:
                converged = True
                break
            kdefl += 1
            shifts = _real_shifts(h, i, l, kdefl)
            m, v = _real_sweep_start(h, i, l, shifts, ulp)
            _real_sweep(h, z, i, l, m, v)
        if not converged:
            return False
        if l == i - 1:
            _standardize_block(h, z, i)
        kdefl = 0
        i = l - 1
    return True


def _real_shifts(h, i, l, kdefl) -> tuple:
    """The double shift of the block ending at ``i`` (real and imaginary parts of the two
    eigenvalues of its last 2x2 block, or an exceptional shift every so many iterations)."""
    if kdefl % (2 * _EXCEPTIONAL_EVERY) == 0:
        s = abs(h[i, i - 1]) + abs(h[i - 1, i - 2])
        h11 = _DAT1 * s + h[i, i]
        h12, h21, h22 = _DAT2 * s, s, h11
    elif kdefl % _EXCEPTIONAL_EVERY == 0:
        s = abs(h[l + 1, l]) + abs(h[l + 2, l + 1])
        h11 = _DAT1 * s + h[l, l]
        h12, h21, h22 = _DAT2 * s, s, h11
    else:
        h11, h21, h12, h22 = h[i - 1, i - 1], h[i, i - 1], h[i - 1, i], h[i, i]
    s = abs(h11) + abs(h12) + abs(h21) + abs(h22)
    if s == 0:
        return 0.0, 0.0, 0.0, 0.0
    h11, h21, h12, h22 = h11 / s, h21 / s, h12 / s, h22 / s
    tr = (h11 + h22) / 2
    det = (h11 - tr) * (h22 - tr) - h12 * h21
    rtdisc = math.sqrt(abs(det))
    if det >= 0:
        return tr * s, rtdisc * s, tr * s, -rtdisc * s
    rt1r, rt2r = tr + rtdisc, tr - rtdisc
    real = rt1r * s if abs(rt1r - h22) <= abs(rt2r - h22) else rt2r * s
    return real, 0.0, real, 0.0


def _real_sweep_start(h, i, l, shifts, ulp) -> tuple:
    """Where the double-shift sweep starts (two consecutive small subdiagonal elements), and
    the first column of the shifted product there."""
    rt1r, rt1i, rt2r, rt2i = shifts
    for m in range(i - 2, l - 1, -1):
        h21s = h[m + 1, m]
        s = abs(h[m, m] - rt2r) + abs(rt2i) + abs(h21s)
        h21s = h[m + 1, m] / s
        v1 = (h21s * h[m, m + 1] + (h[m, m] - rt1r) * ((h[m, m] - rt2r) / s)
              - rt1i * (rt2i / s))
        v2 = h21s * (h[m, m] + h[m + 1, m + 1] - rt1r - rt2r)
        v3 = h21s * h[m + 2, m + 1]
        s = abs(v1) + abs(v2) + abs(v3)
        v1, v2, v3 = v1 / s, v2 / s, v3 / s
        if m == l:
            break
        h00 = abs(h[m, m - 1]) * (abs(v2) + abs(v3))
        h01 = abs(v1) * (abs(h[m - 1, m - 1]) + abs(h[m, m]) + abs(h[m + 1, m + 1]))
        if h00 <= ulp * h01:
            break
    return m, np.array([v1, v2, v3])


def _real_sweep(h, z, i, l, m, v) -> None:
    """The double-shift QR sweep from ``m`` to ``i``: 3x3 reflectors chase the bulge down,
    applied to ``h`` and the Schur vectors ``z``."""
    for k in range(m, i):
        nr = min(3, i - k + 1)
        if k > m:
            v = h[k:k + nr, k - 1].copy()
        beta, t1, vv = _larfg(v[:nr])
        if k > m:
            h[k, k - 1] = beta
            h[k + 1, k - 1] = 0
            if k < i - 1:
                h[k + 2, k - 1] = 0
        elif m > l:
            h[k, k - 1] = h[k, k - 1] * (1 - t1)
        rows = slice(k, k + nr)
        tv = t1 * vv
        block = h[rows, k:]
        block -= np.outer(tv, vv @ block)
        top = min(k + 3, i) + 1
        cols = h[:top, rows]
        cols -= np.outer(cols @ vv, tv)
        zc = z[:, rows]
        zc -= np.outer(zc @ vv, tv)


def _standardize_block(h, z, i) -> None:
    """A converged 2x2 block ending at ``i`` in standard form (lanv2), its rotation applied
    to the rest of ``h`` and to ``z``."""
    n = h.shape[0]
    a, b, c, d, cs, sn = _lanv2(h[i - 1, i - 1], h[i - 1, i], h[i, i - 1], h[i, i])
    h[i - 1, i - 1], h[i - 1, i], h[i, i - 1], h[i, i] = a, b, c, d
    if n - 1 > i:
        _rot_rows(h, i - 1, i, slice(i + 1, n), cs, sn)
    _rot_cols(h, i - 1, i, slice(0, i - 1), cs, sn)
    _rot_cols(z, i - 1, i, slice(0, n), cs, sn)


# --- complex Schur form: lahqr's single-shift QR iteration ----------------------------------

def _cabs1(x):
    return abs(x.real) + abs(x.imag)


def _lahqr_complex(h: np.ndarray, z: np.ndarray) -> bool:
    """The (triangular) complex Schur form of the Hessenberg ``h`` and the Schur vectors
    (``z`` updated), in place, as LAPACK's zlahqr (wantt, wantz); False where it fails."""
    n = h.shape[0]
    if n == 0:
        return True
    _clear_below_subdiagonal(h)
    ilo, ihi = 0, n - 1
    for i in range(ilo + 1, ihi + 1):         # make the subdiagonal real
        if h[i, i - 1].imag != 0:
            sc = h[i, i - 1] / _cabs1(h[i, i - 1])
            sc = np.conj(sc) / abs(sc)
            h[i, i - 1] = abs(h[i, i - 1])
            h[i, i:] *= sc
            h[:min(n - 1, i + 1) + 1, i] *= np.conj(sc)
            z[:, i] *= np.conj(sc)
    ulp, smlnum, itmax = _iteration_limits(n)
    kdefl = 0
    i = ihi
    while i >= ilo:
        l = ilo
        converged = False
        for _ in range(itmax + 1):
            l = _deflation_start(h, i, l, ilo, ihi, _cabs1, ulp, smlnum)
            if l >= i:
                converged = True
                break
            kdefl += 1
            t = _complex_shift(h, i, l, kdefl)
            m, v = _complex_sweep_start(h, i, l, t, ulp)
            _complex_sweep(h, z, i, l, m, v)
            _real_last_subdiagonal(h, z, i)
        if not converged:
            return False
        kdefl = 0
        i = l - 1
    return True


def _complex_shift(h, i, l, kdefl):
    """The single shift of the block ending at ``i``: Wilkinson's, or an exceptional one
    every so many iterations."""
    if kdefl % (2 * _EXCEPTIONAL_EVERY) == 0:
        return _DAT1 * abs(h[i, i - 1].real) + h[i, i]
    if kdefl % _EXCEPTIONAL_EVERY == 0:
        return _DAT1 * abs(h[l + 1, l].real) + h[l, l]
    t = h[i, i]
    u = np.sqrt(h[i - 1, i]) * np.sqrt(h[i, i - 1])
    s = _cabs1(u)
    if s != 0:
        x = 0.5 * (h[i - 1, i - 1] - t)
        sx = _cabs1(x)
        s = max(s, sx)
        y = s * np.sqrt((x / s) ** 2 + (u / s) ** 2)
        if sx > 0:
            if (x / sx).real * y.real + (x / sx).imag * y.imag < 0:
                y = -y
        t = t - u * (u / (x + y))
    return t


def _complex_sweep_start(h, i, l, t, ulp) -> tuple:
    """Where the single-shift sweep starts (two consecutive small subdiagonal elements, else
    ``l``), and the first column of the shifted matrix there."""
    for m in range(i - 1, l, -1):
        h11, h22 = h[m, m], h[m + 1, m + 1]
        h11s = h11 - t
        h21 = h[m + 1, m].real
        s = _cabs1(h11s) + abs(h21)
        h11s, h21 = h11s / s, h21 / s
        h10 = h[m, m - 1].real
        if abs(h10) * abs(h21) <= ulp * (_cabs1(h11s) * (_cabs1(h11) + _cabs1(h22))):
            return m, np.array([h11s, h21], dtype=h.dtype)
    h11s = h[l, l] - t
    h21 = h[l + 1, l].real
    s = _cabs1(h11s) + abs(h21)
    return l, np.array([h11s / s, h21 / s], dtype=h.dtype)


def _complex_sweep(h, z, i, l, m, v) -> None:
    """The single-shift QR sweep from ``m`` to ``i``: 2x2 reflectors chase the bulge down,
    applied to ``h`` and the Schur vectors ``z``, the subdiagonal kept real."""
    n = h.shape[0]
    for k in range(m, i):
        if k > m:
            v = h[k:k + 2, k - 1].copy()
        beta, t1, vv = _larfg(v)
        if k > m:
            h[k, k - 1] = beta
            h[k + 1, k - 1] = 0
        v2 = vv[1]
        t2 = (t1 * v2).real
        rows = h[k:k + 2, k:]
        total = np.conj(t1) * rows[0] + t2 * rows[1]
        rows[0] -= total
        rows[1] -= total * v2
        top = min(k + 2, i) + 1
        cols = h[:top, k:k + 2]
        total = t1 * cols[:, 0] + t2 * cols[:, 1]
        cols[:, 0] -= total
        cols[:, 1] -= total * np.conj(v2)
        zc = z[:, k:k + 2]
        total = t1 * zc[:, 0] + t2 * zc[:, 1]
        zc[:, 0] -= total
        zc[:, 1] -= total * np.conj(v2)
        if k == m and m > l:
            temp = 1 - t1
            temp = temp / abs(temp)
            h[m + 1, m] *= np.conj(temp)
            if m + 2 <= i:
                h[m + 2, m + 1] *= temp
            for j in range(m, i + 1):
                if j != m + 1:
                    if n - 1 > j:
                        h[j, j + 1:] *= temp
                    h[:j, j] *= np.conj(temp)
                    z[:, j] *= np.conj(temp)


def _real_last_subdiagonal(h, z, i) -> None:
    """``h[i, i-1]`` made real after a sweep, its phase moved into row ``i`` and column
    ``i`` of ``h`` and ``z``."""
    n = h.shape[0]
    temp = h[i, i - 1]
    if temp.imag != 0:
        rtemp = abs(temp)
        h[i, i - 1] = rtemp
        temp = temp / rtemp
        if n - 1 > i:
            h[i, i + 1:] *= np.conj(temp)
        h[:i, i] *= temp
        z[:, i] *= temp


def _schur_one(a: np.ndarray):
    """``(t, z)`` with ``a = z t z^H`` (LAPACK's gees without balancing or sorting: the
    Hessenberg reduction, its ``Q``, then lahqr)."""
    h, taus = _hessenberg_one(a)
    z = _orghr(h, taus)
    h = np.triu(h, -1)
    ok = (_lahqr_complex if np.iscomplexobj(h) else _lahqr_real)(h, z)
    if not ok:
        return None
    return h, z


def schur(a, *, compute_vectors):
    a = np.asarray(a)
    outs = [np.empty(a.shape, a.dtype), np.empty(a.shape, a.dtype)]
    _per_matrix(_schur_one, a, outs)
    return outs if compute_vectors else outs[:1]


# --- symmetric/Hermitian tridiagonal reduction (sytd2 / hetd2) -------------------------------

def _tridiagonal_one(a: np.ndarray, lower: bool):
    """``(a, d, e, taus)`` as LAPACK's sytd2/hetd2: the triangle ``lower`` names holds the
    tridiagonal form and the reflectors, the other triangle is ``a``'s as given."""
    n = a.shape[0]
    out = a.copy()
    # the Hermitian matrix the named triangle describes (the diagonal's real part)
    tri = np.tril(a, -1) if lower else np.triu(a, 1)
    work = tri + np.conj(tri.T) + np.diag(np.real(np.diagonal(a))).astype(a.dtype)
    d = np.zeros(n, real_dtype(a.dtype))
    e = np.zeros(max(n - 1, 0), real_dtype(a.dtype))
    taus = np.zeros(max(n - 1, 0), a.dtype)
    steps = range(n - 1) if lower else reversed(range(n - 1))
    for i in steps:
        if lower:
            x = work[i + 1:, i]
            span = slice(i + 1, n)
        else:
            # the reflector annihilates work[:i, i + 1] with alpha at work[i, i + 1]
            x = work[i::-1, i + 1]
            span = slice(i, None, -1)
        beta, tau, v = _larfg(x.copy())
        if tau != 0:
            sub = work[span, span]
            w = tau * (sub @ v)
            alpha = -0.5 * tau * np.vdot(w, v)
            w = w + alpha * v
            sub -= np.outer(v, np.conj(w)) + np.outer(w, np.conj(v))
            work[span, span] = sub
        if lower:
            work[i + 1:, i] = 0
            work[i + 1, i] = beta
            out[i + 2:, i] = v[1:]
            out[i + 1, i] = beta
            e[i] = np.real(beta)
        else:
            work[:i + 1, i + 1] = 0
            work[i, i + 1] = beta
            out[:i, i + 1] = v[:0:-1]
            out[i, i + 1] = beta
            e[i] = np.real(beta)
        taus[i] = tau
    d[:] = np.real(np.diagonal(work))
    out[np.diag_indices(n)] = d
    return out, d, e, taus


def tridiagonal(a, *, lower):
    a = np.asarray(a)
    n = a.shape[-1]
    batch = a.shape[:-2]
    real = real_dtype(a.dtype)
    outs = [np.empty(a.shape, a.dtype), np.empty(batch + (n,), real),
            np.empty(batch + (max(n - 1, 0),), real),
            np.empty(batch + (max(n - 1, 0),), a.dtype)]
    return _per_matrix(lambda m: _tridiagonal_one(m, lower), a, outs)


# --- column-pivoted QR (geqp3) ---------------------------------------------------------------

def _geqp3_one(a: np.ndarray, jpvt: np.ndarray):
    """``(a, jpvt, taus)`` as LAPACK's geqp3: columns with a nonzero ``jpvt`` entry are moved
    to the front and factored first, the rest pivoted by largest remaining norm (laqp2);
    ``jpvt`` (1-based) names the column of the input each column of the result came from."""
    m, n = a.shape
    a = a.copy()
    jpvt = np.asarray(jpvt).copy()
    perm = np.zeros(n, np.int64)
    nfxd = 0
    for j in range(n):
        if jpvt[j] != 0:
            if j != nfxd:
                a[:, [j, nfxd]] = a[:, [nfxd, j]]
                perm[j] = perm[nfxd]
            perm[nfxd] = j + 1
            nfxd += 1
        else:
            perm[j] = j + 1
    k = min(m, n)
    taus = np.zeros(k, a.dtype)
    tol3z = math.sqrt(np.finfo(np.float64).eps)

    def reflect(i):
        beta, tau, v = _larfg(a[i:, i].copy())
        taus[i] = tau
        if i + 1 < n and tau != 0:
            rest = a[i:, i + 1:]
            rest -= np.conj(tau) * np.outer(v, np.conj(v) @ rest)
        a[i, i] = beta
        a[i + 1:, i] = v[1:]

    for i in range(min(nfxd, k)):
        reflect(i)
    start = min(nfxd, k)
    vn1 = np.zeros(n)
    vn2 = np.zeros(n)
    for j in range(start, n):
        vn1[j] = vn2[j] = np.linalg.norm(a[start:, j])
    for i in range(start, k):
        pvt = i + int(np.argmax(vn1[i:]))
        if pvt != i:
            a[:, [pvt, i]] = a[:, [i, pvt]]
            perm[[pvt, i]] = perm[[i, pvt]]
            vn1[pvt], vn2[pvt] = vn1[i], vn2[i]
        reflect(i)
        for j in range(i + 1, n):
            if vn1[j] != 0:
                temp = max(1 - (abs(a[i, j]) / vn1[j]) ** 2, 0.0)
                temp2 = temp * (vn1[j] / vn2[j]) ** 2
                if temp2 <= tol3z:
                    if i + 1 < m:
                        vn1[j] = vn2[j] = np.linalg.norm(a[i + 1:, j])
                    else:
                        vn1[j] = vn2[j] = 0.0
                else:
                    vn1[j] *= math.sqrt(temp)
    return a, perm, taus


def geqp3(a, jpvt):
    a, jpvt = np.asarray(a), np.asarray(jpvt)
    m, n = a.shape[-2:]
    batch = a.shape[:-2]
    outs = [np.empty(a.shape, a.dtype), np.empty(jpvt.shape, jpvt.dtype),
            np.empty(batch + (min(m, n),), a.dtype)]
    for index in np.ndindex(*batch):
        matrix = a[index].astype(_wide(a.dtype))
        if not np.isfinite(matrix).all():
            outs[0][index] = np.nan
            outs[1][index] = jpvt[index]
            outs[2][index] = np.nan
            continue
        result = _geqp3_one(matrix, jpvt[index])
        for out, value in zip(outs, result):
            out[index] = value
    return outs
