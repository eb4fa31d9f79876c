"""1-D convolutions as 2-D ones of height 1, so they get the CPU pipeline's NHWC layout and its
convolution schedules.

TVM lowers ``relax.nn.conv1d`` (ONNX ``Conv`` with a 1-D kernel: audio front ends, keyword
spotters) as it is, in the model's NCW layout, where the default schedules cannot vectorise the
output channels: the zoo's audio model's 40 -> 64 channel, width-3 convolution ran at 18 GFLOP/s
and took a quarter of the model's time. As ``conv2d`` on ``[N, C, 1, W]`` it is converted to NHWC
with the other convolutions and tiled like them.
"""

from __future__ import annotations


def conv1d_as_conv2d(mod):
    """``conv1d(x, w)`` (NCW, OIW) -> ``squeeze(conv2d(expand_dims(x, 2), expand_dims(w, 2)), 2)``."""
    from tvm import relax
    from tvm.relax.dpl.pattern import is_op, wildcard

    from tvmgen.compiler.rewrites import rewrite_functions

    x, w = wildcard(), wildcard()
    pattern = is_op("relax.nn.conv1d")(x, w)

    def rewrite(expr, matches):
        a = expr.attrs
        if (str(a.data_layout), str(a.kernel_layout), str(a.out_layout or a.data_layout)) != ("NCW", "OIW", "NCW"):
            return expr
        y = relax.op.nn.conv2d(
            relax.op.expand_dims(matches[x], 2),
            relax.op.expand_dims(matches[w], 2),
            strides=[1, int(a.strides[0])],
            padding=[0, int(a.padding[0]), 0, int(a.padding[1])],
            dilation=[1, int(a.dilation[0])],
            groups=int(a.groups),
            data_layout="NCHW",
            kernel_layout="OIHW",
            out_dtype=_out_dtype(a),
        )
        return relax.op.squeeze(y, [2])

    return rewrite_functions(mod, pattern, rewrite)


def _out_dtype(attrs) -> str | None:
    """A convolution's explicit accumulation type, or None where it has none."""
    d = attrs.out_dtype
    return str(d) if d is not None and str(d) not in ("", "void") else None


def Conv1dAsConv2d():  # noqa: N802 - a pass, named like TVM's
    from tvmgen.compiler.rewrites import module_pass

    return module_pass("TvmgenConv1dAsConv2d", conv1d_as_conv2d)


LONG_WINDOW = 64  # taps past which the depthwise rule keeps a window a loop (cpu.reduction_rules)


def tile_rows(registers: int) -> int:
    """The most pixels a long window's register tile takes: one accumulator each, a few registers kept for
    the operands (cpu.reduction_rules tiles with it; pad_frames makes a tile of it divide the frames)."""
    return max(1, registers - 4)


def frames_to_compute(frames: int, budget: int) -> int:
    """The frames a framing convolution computes so its register tile divides them: ``frames`` when a tile of
    8 (or ``budget``, if smaller) to ``budget`` pixels divides it, else the fewest more frames that one does."""
    low = min(8, budget)
    padded = frames
    while not any(padded % d == 0 for d in range(low, budget + 1)):
        padded += 1
    return padded


def pad_frames(mod, budget: int):
    """A framing convolution (``[N, 1, 1, W]`` input, one input channel, a window over ``LONG_WINDOW`` taps)
    whose frame count no register tile divides computes a few more frames, on zero input (its right padding
    grown), and the model keeps the first ones: raw_audio_cnn's 898 frames (2 x 449) made tiles of 2 pixels
    (41 GFLOP/s); as 900 they are tiles of 25 on AVX-512 (129 GFLOP/s)."""
    from tvm import relax
    from tvm.relax.dpl.pattern import is_op, wildcard

    from tvmgen.compiler.rewrites import rewrite_functions, static_shape

    x, w = wildcard(), wildcard()
    pattern = is_op("relax.nn.conv2d")(x, w)

    def rewrite(expr, matches):
        a = expr.attrs
        xs, ws, ys = static_shape(matches[x]), static_shape(matches[w]), static_shape(expr)
        if (
            (str(a.data_layout), str(a.kernel_layout), str(a.out_layout or a.data_layout)) != ("NCHW", "OIHW", "NCHW")
            or int(a.groups) != 1
            or None in (xs or [None]) + (ws or [None]) + (ys or [None])
            or xs[1:3] != [1, 1]
            or ws[1:3] != [1, 1]
            or ws[3] <= LONG_WINDOW
            or int(a.dilation[1]) != 1
        ):
            return expr
        frames = ys[3]
        padded = frames_to_compute(frames, budget)
        if padded == frames:
            return expr
        pad = [int(p) for p in a.padding]
        pad[3] += (padded - frames) * int(a.strides[1])
        y = relax.op.nn.conv2d(
            matches[x],
            matches[w],
            strides=[int(s) for s in a.strides],
            padding=pad,
            dilation=[int(d) for d in a.dilation],
            groups=1,
            data_layout="NCHW",
            kernel_layout="OIHW",
            out_dtype=_out_dtype(a),
        )
        return relax.op.strided_slice(y, axes=[3], begin=[0], end=[frames])

    return rewrite_functions(mod, pattern, rewrite)


def PadFrames(target):  # noqa: N802 - a pass, named like TVM's
    from tvmgen.compiler.cpu.schedule_rules import cpu_shape
    from tvmgen.compiler.rewrites import module_pass

    budget = tile_rows(cpu_shape(target).registers)
    return module_pass("TvmgenPadFrames", lambda mod: pad_frames(mod, budget))
