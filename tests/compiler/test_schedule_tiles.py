"""tvmgen's CPU register tiles and L1 chunks: a convolution's tile has as many rows as the target's
registers hold (whole tiles on awkward widths), large weights run in chunks that fit L1, and
transposes to NCHW run in blocks. Results as onnxruntime's.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import onnx_model, save_onnx
from helpers import CPU_TARGETS, assert_close, compile_and_run, prepared_and_scheduled, run_as_haswell
from schedule_models import one_conv as _one_conv
from schedule_models import stationary_3x3_model as _stationary_3x3_model


def _scheduled_conv(path, cpu: str) -> str:
    """The script of the model's one scheduled convolution kernel, for ``CPU_TARGETS[cpu]``."""
    mod, done, _ = prepared_and_scheduled(path, target_spec=CPU_TARGETS[cpu][0])
    (conv,) = [f for f in done if "conv2d" in f]
    return mod[conv].script()


@pytest.mark.parametrize("cpu", ["avx512", "avx2"])
def test_large_weights_tiles_have_as_many_rows_as_registers_hold(cpu, tmp_path):
    """A weight-stationary convolution (13 x 13 pixels, 1x1 256 -> 512: 512 KB of weights) reads its
    block of weights once per tile: 13 rows per tile with AVX-512's 32 registers (2 vectors each:
    26 accumulators), at most 6 with AVX2's 16."""
    model = _one_conv([1, 256, 13, 13], [1, 512, 13, 13], (512, 256, 1, 1), seed=9, scale=0.05)
    path = save_onnx(model, tmp_path / "wide.onnx")
    script = _scheduled_conv(path, cpu)
    unrolled = [int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script)]
    assert unrolled and max(unrolled) == (13 if cpu == "avx512" else 5), unrolled
    lanes = CPU_TARGETS[cpu][1][0]  # channel blocks of two vectors are the tasks
    assert re.search(rf"\w+_0 in T\.parallel\(T\.int64\({512 // (2 * lanes)}\)\)", script), script
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------ L1 chunks, wider band tiles


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_large_weights_reduction_runs_in_chunks_that_fit_l1(cpu, tmp_path):
    """A weight-stationary convolution whose block of weights is larger than L1 runs its input
    channels in chunks (a power of two dividing them, window x chunk x tile channels <= 32 KB),
    each over all the task's pixels, with the accumulators' init before the first chunk. The tile
    is 2 vectors of channels on every target (4 with 7 rows spilled accumulators out of 32
    registers). 264 input channels: chunks of a power of two dividing them whose weights fit
    32 KB: 8 (264 = 33 x 8). Results as onnxruntime's."""
    path = save_onnx(_stationary_3x3_model(), tmp_path / "late.onnx")
    spec, (lanes, _), _ = CPU_TARGETS[cpu]
    mod, done, _ = prepared_and_scheduled(path, target_spec=spec)
    (conv,) = [f for f in done if "conv2d" in f]
    script = mod[conv].script()
    tile = lanes * 2
    assert re.search(rf"\w+_0 in T\.parallel\(T\.int64\({512 // tile}\)\)", script), script
    window_bytes = 9 * tile * 4
    chunk = max(c for c in (1, 2, 4, 8, 16, 32, 64) if c * window_bytes <= 32 * 1024 and 264 % c == 0)
    assert chunk == 8, chunk  # 264 = 33 x 8 on each target
    # the chunks outside the rows: for rc_0 in 33 chunks: (n, y: the rows): for xx_0, ry, rx, rc_1 (8)
    assert re.search(r"for rc_0 in T\.serial\(T\.int64\(33\), annotations=\{\"tvmgen\.weight_chunks\"", script), script
    assert re.search(r"for \w+, ry, rx, rc_1 in T\.grid\(.*T\.int64\(8\)\)", script.split("for rc_0")[1]), script
    assert re.search(r"T\.sblock\(\"\w+_init\"\)", script.split("for rc_0")[0])  # accumulators zeroed once
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_large_1x1_weights_run_in_chunks_that_fit_l1(cpu, tmp_path):
    """A weight-stationary 1x1 convolution whose task's block of weights is larger than L1 (7 x 7
    pixels, 1152 -> 320, MnasNet's and EfficientNet-B0's last stage: 1152 x 2 vectors of weights
    per task, 147 KB with AVX-512) runs its input channels in chunks that fit 32 KB, as a 3x3 one
    does: a power of two dividing 1152 (128 on each target: 1152 = 9 x 128), each over all the
    task's tiles (7 rows of 7 pixels; AVX2: 10 of 5), the accumulators zeroed once. Results as onnxruntime's."""
    model = _one_conv([1, 1152, 7, 7], [1, 320, 7, 7], (320, 1152, 1, 1), seed=15, scale=0.03)
    path = save_onnx(model, tmp_path / "project.onnx")
    _, (lanes, registers), _ = CPU_TARGETS[cpu]
    script = _scheduled_conv(path, cpu)
    tile = lanes * 2
    assert re.search(rf"\w+_0 in T\.parallel\(T\.int64\({320 // tile}\)\)", script), script
    chunk = max(c for c in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if c * tile * 4 <= 32 * 1024 and 1152 % c == 0)
    assert chunk == 128, chunk
    assert re.search(r"for rc_0 in T\.serial\(T\.int64\(9\), annotations=\{\"tvmgen\.weight_chunks\"", script), script
    assert re.search(r"for (\w+, )?ry, rx, rc_1 in T\.grid\(.*T\.int64\(128\)\)", script.split("for rc_0")[1]), script
    assert re.search(r"T\.sblock\(\"\w+_init\"\)", script.split("for rc_0")[0])  # accumulators zeroed once
    unrolled = [int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script)]
    # 7 x 2 vectors; AVX2's 16 registers: 5, over the 49 pixels as one row padded to 50 (flatten_stationary_pixels)
    assert max(unrolled) == (7 if registers >= 32 else 5), unrolled
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_1x1_projections_whose_tile_weights_overflow_l1_are_weight_stationary(cpu, tmp_path):
    """MobileNetV2's and MnasNet's last-stage projections (7 x 7 pixels, 1x1 576 -> 192: 442 KB of weights,
    6 channel blocks of 2 AVX-512 vectors) ran in bands of rows, each tile of 7 rows re-reading its 74 KB
    block of weights from L2. Where a tile's block overflows L1 (AVX-512, AVX2: 576 x 2 vectors x 4 bytes,
    74 and 37 KB) and there are at least 4 channel blocks, a task is a block of channels over every pixel,
    the reduction in chunks that fit 32 KB (a power of two dividing 576: 64). NEON's tile (2 x 4
    lanes: 18 KB over the reduction) fits L1: its bands stay. Results as onnxruntime's."""
    model = _one_conv([1, 576, 7, 7], [1, 192, 7, 7], (192, 576, 1, 1), seed=21, scale=0.04)
    path = save_onnx(model, tmp_path / "projection.onnx")
    _, (lanes, _), _ = CPU_TARGETS[cpu]
    script = _scheduled_conv(path, cpu)
    tile = lanes * 2
    chunks = re.findall(r"for rc_0 in T\.serial\(T\.int64\((\d+)\), annotations=\{\"tvmgen\.weight_chunks\"", script)
    if 576 * tile * 4 <= 32 * 1024:
        assert not chunks and not re.search(rf"\w+_0 in T\.parallel\(T\.int64\({192 // tile}\)\)", script), script
        return
    assert re.search(rf"\w+_0 in T\.parallel\(T\.int64\({192 // tile}\)\)", script), script
    chunk = max(c for c in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if c * tile * 4 <= 32 * 1024 and 576 % c == 0)
    assert chunk == 64 and chunks == ["9"], chunks  # 576 = 9 x 64 on both
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_short_1x1_band_tiles_reduce_in_l1_chunks(cpu, tmp_path):
    """MnasNet's 14 x 14 1x1 480 -> 80 with a residual add: AVX-512's tile is 2 rows x 5 vectors (80 channels;
    7 rows would need 35 accumulators), and each re-read the 154 KB block of weights from L2. Its band tasks
    (one row of 14 pixels) now run the reduction in chunks that fit L1 (32 channels: 32 x 80 x 4 = 10 KB; a
    power of two dividing 480) over the band's 7 tiles, the next chunk prefetched. NEON's tile has 7 rows: its
    bands stay unchunked. AVX2's tiles are guarded tiles of 5 over each row of 14
    (``test_rows_of_14_get_guarded_tiles_of_5_with_16_registers``). Results as onnxruntime's."""
    model = _one_conv([1, 480, 14, 14], [1, 80, 14, 14], (80, 480, 1, 1), seed=23, scale=0.04)
    path = save_onnx(model, tmp_path / "narrow.onnx")
    script = _scheduled_conv(path, cpu)
    chunks = re.findall(r"for rc_0 in T\.serial\(T\.int64\((\d+)\), annotations=\{\"tvmgen\.weight_chunks\"", script)
    unrolled = [int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script)]
    if cpu != "avx512":
        assert not chunks and max(unrolled) == (7 if cpu == "neon" else 5), (chunks, unrolled)
        return
    assert chunks == ["15"] and max(unrolled) == 5 and 2 in unrolled, (chunks, unrolled)
    assert re.search(r"T\.parallel\(T\.int64\(14\)\)", script), script  # a row of 14 pixels a task
    assert '"tvmgen.prefetch_next_weights": 2' in script
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_rows_of_14_get_guarded_tiles_of_5_with_16_registers(cpu, tmp_path):
    """A 1x1 convolution 14 pixels wide: with 16 vector registers (AVX2) a tile of two vectors holds 6 rows,
    and 14 has no divisor from 4 to 6 but 2 (4 accumulators, too few for the multiply-adds in flight: 42
    GFLOP/s on a Zen 2 core). Its tiles are 5 rows (3 a row, the last one guarded: 15 computed for 14), not
    4 of the 196 pixels as one loop (77 GFLOP/s; in guarded tiles of 5, 96-98), in bands of rows. With 32
    registers the tile is 7 of a row's 14 pixels. The AVX2 build's results as onnxruntime's, run on this CPU
    where it has AVX2, else under qemu-x86_64."""
    model = _one_conv([1, 80, 14, 14], [1, 480, 14, 14], (480, 80, 1, 1), seed=29, relu=True)
    path = save_onnx(model, tmp_path / "pointwise_14.onnx")
    script = _scheduled_conv(path, cpu)
    unrolled = [int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script)]
    assert "xx_fused" not in script, script  # each row's pixels in tiles of their own
    if CPU_TARGETS[cpu][1][1] >= 32:
        assert max(unrolled) == 7 and "T.where" not in script, unrolled
        return
    assert max(unrolled) == 5, unrolled
    assert re.search(r"T\.where\(xx_0 \* T\.int64\(5\) \+ xx_1 < T\.int64\(14\)\)", script), script
    run_as_haswell(path, tmp_path)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
@pytest.mark.parametrize("side, channels", [(7, 128), (14, 256)])
def test_stationary_3x3_tiles_cover_all_pixels_with_16_registers(cpu, side, channels, tmp_path):
    """A weight-stationary 3x3 convolution (7 x 7 pixels, 128 -> 128, 576 KB of weights; 14 x 14, 256 -> 256: a
    task is a block of channels over the whole image): with 16 registers its tiles are 5 of the pixels as one
    loop, the last guarded: 50 computed for 49, not 4 of each row of 7 (56; ResNet-18's last stage 3.62 -> 2.74
    ms a convolution on a Zen 2 core); 200 for 196, not whole tiles of 4 (ResNet-18's 14 x 14 stage: 79 -> 93
    GFLOP/s). The results are written back once per task. With 32 registers a row of 7 (14) is one tile. The
    AVX2 build's results as onnxruntime's."""
    shape = [1, channels, side, side]
    model = _one_conv(shape, shape, (channels, channels, 3, 3), seed=41, relu=True, pads=[1, 1, 1, 1], scale=0.03)
    path = save_onnx(model, tmp_path / f"late_{side}.onnx")
    script = _scheduled_conv(path, cpu)
    unrolled = [int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script)]
    if CPU_TARGETS[cpu][1][1] >= 32:
        assert max(unrolled) in (7, 14) and "xx_fused" not in script and "T.where" not in script, unrolled
        return
    assert re.search(rf"\w+_0 in T\.parallel\(T\.int64\({channels // 16}\)\)", script), script  # blocks of 16 channels
    assert max(unrolled) == 5 and "y_xx_fused" in script, unrolled
    where = rf"T\.where\(\w+_fused_0 \* T\.int64\(5\) \+ \w+_fused_1 < T\.int64\({side * side}\)\)"
    assert re.search(where, script), script
    run_as_haswell(path, tmp_path)


@pytest.mark.parametrize("cpu", ["avx512", "avx2"])
def test_stationary_convolutions_of_an_odd_vector_count_are_padded_to_pairs(cpu, tmp_path):
    """A weight-stationary 1x1 convolution (7 x 7 pixels, 1024 -> 136 channels, 557 KB of weights) of 17 AVX2
    vectors: padded to 144 channels (two vectors a tile) and sliced back in its kernel (SqueezeNet's 1000-class
    convolution: 2.90 -> 2.26 ms on a Zen 2 core); AVX-512 pads 136 to whole vectors anyway. A band's odd
    count (14 x 14, 16 -> 72: 9 AVX2 vectors) stays unpadded: its tile is 3 vectors wide. The AVX2 build's
    results as onnxruntime's."""
    model = _one_conv([1, 1024, 7, 7], [1, 136, 7, 7], (136, 1024, 1, 1), seed=43, relu=True, scale=0.03)
    path = save_onnx(model, tmp_path / "odd_stationary.onnx")
    mod, done, _ = prepared_and_scheduled(path, target_spec=CPU_TARGETS[cpu][0])
    (conv,) = [f for f in done if "conv2d" in f]
    assert int(mod[conv].params[1].shape[3]) == 144 and "strided_slice" in conv, conv
    band = _one_conv([1, 16, 14, 14], [1, 72, 14, 14], (72, 16, 1, 1), seed=47, relu=True)
    band_path = save_onnx(band, tmp_path / "odd_band.onnx")
    mod, done, _ = prepared_and_scheduled(band_path, target_spec=CPU_TARGETS[cpu][0])
    (conv,) = [f for f in done if "conv2d" in f]
    assert int(mod[conv].params[1].shape[3]) == (72 if cpu == "avx2" else 80), conv
    if cpu == "avx2":
        run_as_haswell(path, tmp_path)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_widths_without_a_six_row_tile_are_computed_wider_with_16_registers(cpu, tmp_path):
    """A 3x3 convolution of 32 channels (two AVX2 vectors) 28 pixels wide: with 16 registers its tile holds 6
    rows, which 28 has not (tiles of 4: 8 accumulators, 76 GFLOP/s where 6 rows ran at 91-96 on a Zen 2 core).
    It is computed 30 wide (two zero input columns more on the right) in tiles of 6 rows and sliced back to 28
    in its kernel (7 x 28 pixels have no tile of 6 as one loop either). With 32 registers 28 has a divisor the
    registers hold (7 or 14): nothing changes. The
    AVX2 build's results as onnxruntime's."""
    model = _one_conv([1, 16, 7, 28], [1, 32, 7, 28], (32, 16, 3, 3), seed=37, relu=True, pads=[1, 1, 1, 1])
    path = save_onnx(model, tmp_path / "w28.onnx")
    script = _scheduled_conv(path, cpu)
    unrolled = [int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script)]
    if CPU_TARGETS[cpu][1][1] >= 32:
        assert "strided_slice" not in script and max(unrolled) in (7, 14), unrolled
        return
    assert max(unrolled) == 6 and "T.where" in script, unrolled  # 5 tiles of 6 over 30, written up to 28
    assert "T.Buffer((T.int64(1), T.int64(7), T.int64(28), T.int64(32))" in script  # the output: 28 wide
    assert re.search(r"T\.axis\.spatial\(T\.int64\(30\)", script), script  # computed: 30 wide
    run_as_haswell(path, tmp_path)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_partial_tiles_write_only_inside_the_output(cpu, tmp_path):
    """A row of 17 pixels (no divisor the registers hold: the last tile partial, guarded) and 12 output
    channels (padded to whole vectors, sliced back on the way out). TVM's reverse_compute_inline gave the
    write-back the slice's predicate in place of the partial tile's, and the last tile wrote pixels past
    the row's end (on an AVX2 host the heap was corrupted, and onnxruntime aborted after it). The block
    that writes the output keeps both bounds: the pixel's, and 12 channels (on NEON too, in tiles of 3
    vectors). With AVX-512 (vectors of 4 channels, no slice) the row is one tile. The AVX2 build's results
    as onnxruntime's."""
    model = _one_conv([1, 8, 3, 17], [1, 12, 3, 17], (12, 8, 3, 3), seed=31, relu=True, pads=[1, 1, 1, 1])
    path = save_onnx(model, tmp_path / "partial.onnx")
    script = _scheduled_conv(path, cpu)
    if cpu == "avx512":  # 32 registers: the row of 17 x 3 vectors of 4 channels is one tile
        assert "T.where" not in script and "T.unroll(T.int64(17))" in script, script
        return
    assert "T.where" in script, script  # a partial tile
    (out,) = re.findall(r"(\w+): T\.Buffer\(\(T\.int64\(1\), T\.int64\(3\), T\.int64\(17\), T\.int64\(12\)\)", script)
    writers = [b for b in script.split("with T.sblock(") if re.search(rf"\n\s*{out}\[[^\n]*\] = ", b)]
    assert writers, script
    for block in writers:
        assert re.search(r"T\.where\([^\n]*< T\.int64\(17\)", block), block  # the partial tile's pixels
        assert "T.axis.spatial(T.int64(12)" in block or re.search(r"T\.where\([^\n]*< T\.int64\(12\)", block), block
    if cpu == "avx2":
        run_as_haswell(path, tmp_path)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_band_tiles_have_up_to_14_rows(cpu, tmp_path):
    """A convolution in bands of rows: tiles of up to 14 rows x 2 vectors with 32 registers (28
    accumulators: a weight vector feeds 14 multiply-adds, not 8), 6 with AVX2's 16. On an awkward
    width of 30 (no divisor from 4 to 14 but 5, 6, 10): the largest divisor. Matches onnxruntime."""
    model = _one_conv([1, 20, 9, 30], [1, 64, 9, 30], (64, 20, 3, 3), seed=12, pads=[1, 1, 1, 1])
    path = save_onnx(model, tmp_path / "band.onnx")
    registers = CPU_TARGETS[cpu][1][1]
    script = _scheduled_conv(path, cpu)
    unrolled = [int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script)]
    assert unrolled and max(unrolled) == (10 if registers >= 32 else 6), unrolled
    assert re.search(r"_fused in T\.parallel", script)  # still bands of rows
    if cpu == "avx512":
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def _ragged_models() -> dict:
    """Output widths whose register tile would end part-full: a first convolution (3 -> 64, 3x3
    stride 2, no padding: 103 -> 51 = 3 x 17 pixels) and a 1x1 convolution on 13 x 13 pixels."""
    return {
        "first_conv_51": _one_conv([1, 3, 5, 103], [1, 64, 2, 51], (64, 3, 3, 3), seed=13, relu=True, strides=[2, 2]),
        "pointwise_13": _one_conv([1, 16, 13, 13], [1, 64, 13, 13], (64, 16, 1, 1), seed=13, relu=True),
    }


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
@pytest.mark.parametrize("name", ["first_conv_51", "pointwise_13"])
def test_ragged_widths_get_whole_register_tiles(cpu, name, tmp_path):
    """A width with no divisor from 4 to the preferred rows gets a divisor up to what the registers
    hold (13 rows of 2 vectors with 32 registers), else 3 or 2 rows, before a tile whose last one
    is partial: that one is guarded by a condition on every row inside the reduction loop
    (SqueezeNet's first convolution: 52 GFLOP/s in guarded tiles of 14, 129 in tiles of 3). With
    AVX2's 16 registers (6 rows) a prime 13 still ends part-full. Results as onnxruntime's."""
    path = save_onnx(_ragged_models()[name], tmp_path / f"{name}.onnx")
    registers = CPU_TARGETS[cpu][1][1]
    script = _scheduled_conv(path, cpu)
    rows = max(int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script))
    budget = (registers - 4) // 2  # rows of two vectors of channels (64 = 2 x 32, 2 x 16, 2 x 8 values)
    if name == "first_conv_51" and registers < 32:  # AVX2: its 2 rows of 51 pixels are 17 tiles of 6 (not 54 wide)
        assert rows == 6 and "T.where" not in script and "xx_fused" in script, script
    elif name == "first_conv_51":  # 51 = 3 x 17: no divisor from 4 to 14
        assert rows == 3 and "T.where" not in script, script
    elif budget >= 13:  # 13 rows fit the registers
        assert rows == 13 and "T.where" not in script, script
    else:  # AVX2: 13 is prime and more than 6 rows: the tile that wastes least, guarded
        assert rows == 5 and "T.where" in script, script
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_transposes_to_nchw_run_in_blocks(cpu, tmp_path):
    """An output transpose NHWC -> NCHW (a feature-map output: 64 channels, 6 x 45 pixels) is
    scheduled in blocks: a loop of one vector's worth of channels around the vectorised pixels, so
    each input cache line read serves a block of output rows. 45 pixels divide by no power of two:
    the pixels in vectors of a divisor of 45 (15). Row by row, a task read the whole input once per channel: 4.8 ms
    for 64 x 111 x 111, 0.5 in blocks. Results as onnxruntime's."""
    from onnx import TensorProto, helper

    model = onnx_model(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]), helper.make_node("Relu", ["t"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 45, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 6, 45])],
    )
    path = save_onnx(model, tmp_path / "to_nchw.onnx")
    spec, (lanes, _), _ = CPU_TARGETS[cpu]
    mod, done, _ = prepared_and_scheduled(path, target_spec=spec)
    (kernel,) = [f for f in done if "transpose" in f]
    script = mod[kernel].script()
    # for ..., ax1_1 in T.grid(..., T.int64(lanes)): for ax3_1 in T.vectorized(T.int64(15))
    block = re.search(rf"T\.int64\({lanes}\)\):\s+for \w+ in T\.vectorized\(T\.int64\((\d+)\)\)", script)
    assert block and 45 % int(block.group(1)) == 0 and int(block.group(1)) >= 4, script
    tasks = int(re.search(r"T\.parallel\(T\.int64\((\d+)\)\)", script).group(1))
    assert tasks >= 64 // lanes * 6, script  # channel blocks x rows at least
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=0, rtol=0)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_odd_vector_counts_tile_three_vectors_of_channels(cpu, tmp_path):
    """48 output channels are 3 vectors with AVX-512: the tile is rows x 3 vectors, the vectors an
    unrolled loop of their own around one vectorised vector (a single vector of 48 floats LLVM
    scalarised), so each input value loaded feeds 3 multiply-adds; AVX2 and NEON tile 2 vectors
    (6 and 12 of them). Results as onnxruntime's."""
    model = _one_conv([1, 16, 14, 14], [1, 48, 14, 14], (48, 16, 1, 1), seed=14, relu=True)
    path = save_onnx(model, tmp_path / "pointwise48.onnx")
    lanes = CPU_TARGETS[cpu][1][0]
    script = _scheduled_conv(path, cpu)
    unrolled = [int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script)]
    vectorized = {int(n) for n in re.findall(r"in T\.vectorized\(T\.int64\((\d+)\)\)", script)}
    if (48 // lanes) % 2:  # an odd number of vectors: rows (7 of 14) x 3 vectors of `lanes`
        assert sorted(set(unrolled)) == [3, 7] and lanes in vectorized, script
    else:  # two vectors in one vectorised loop, rows only unrolled
        assert 3 not in unrolled and 2 * lanes in vectorized, script
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def _classifier_head(
    path, classes: int = 53, rows: int = 8, softmax: bool = False, bias_add: bool = True, features: int = 24
):
    """A CTC recognizer's head in small: [1, rows, features] x [features, classes] + a bias, classes not whole
    vectors; ``softmax``: the probabilities over the classes (without ``bias_add``: of the product alone)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array(rng.standard_normal((features, classes)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(classes).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m" if bias_add else "logits"])]
    if bias_add:
        nodes.append(helper.make_node("Add", ["m", "b"], ["logits"]))
    nodes.append(
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1)
        if softmax
        else helper.make_node("Identity", ["logits"], ["y"])
    )
    graph = helper.make_graph(
        nodes,
        "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, rows, classes])],
        initializer=[weights, bias] if bias_add else [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime reads
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("cpu", sorted(CPU_TARGETS))
def test_matmul_columns_are_padded_to_whole_vectors(cpu, tmp_path):
    """A classifier whose class count is no multiple of the vector width (53 here; 6,625 or 18,385 in CTC text
    recognizers, whose heads ran as scalar code): its constant weights and bias get zero columns up to whole
    vectors and the kernel slices them off with the add in its epilogue (matmul_layout.pad_matmul_columns), so
    the product runs in vector tiles; the outputs are onnxruntime's."""
    spec, (lanes, _), _ = CPU_TARGETS[cpu]
    path = _classifier_head(tmp_path / "head.onnx")
    mod, done, left = prepared_and_scheduled(path, target_spec=spec)
    assert not left, left
    (head,) = [f for f in done if "matmul" in f]
    shapes = [tuple(int(d) for d in p.shape) for p in mod[head].params]
    padded = -(-53 // lanes) * lanes
    assert "add" in head and "strided_slice" in head, head
    assert (24, padded) in shapes and (padded,) in shapes and shapes[-1][-1] == 53, shapes
    assert "T.vectorized" in mod[head].script()
    if cpu == "avx2":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cpu", sorted(CPU_TARGETS))
@pytest.mark.parametrize("bias_add", [True, False])
def test_softmax_over_padded_columns_runs_over_whole_vectors(cpu, bias_add, tmp_path):
    """The probabilities over 53 classes: the padded product's slice moves after the softmax, the padded columns
    masked to -1e30 (matmul_layout.softmax_over_padded_columns), so the softmax reduces rows of whole vectors
    (a CTC head's 18,385 classes were reduced in partials of 5: 0.92 -> 0.58 ms at one thread) and slices its
    own output; the probabilities are onnxruntime's."""
    spec, (lanes, _), _ = CPU_TARGETS[cpu]
    path = _classifier_head(tmp_path / "head.onnx", softmax=True, bias_add=bias_add)
    mod, done, left = prepared_and_scheduled(path, target_spec=spec)
    assert not left, left
    padded = -(-53 // lanes) * lanes
    (probabilities,) = [f for f in done if "softmax" in f]
    assert "strided_slice" in probabilities, done
    shapes = [tuple(int(d) for d in p.shape) for p in mod[probabilities].params]
    assert shapes[0][-1] == padded and shapes[-1][-1] == 53, shapes
    (head,) = [f for f in done if "matmul" in f]
    assert "strided_slice" not in head and "add" in head, head  # the mask (and the bias) in its epilogue
    if cpu == "avx2" and bias_add:  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-6, rtol=1e-5)
        assert abs(float(actual[0].sum()) - 8.0) < 1e-4  # each of the 8 rows sums to 1 over its 53 classes


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_product_rows_are_padded_to_tiles_of_6_with_16_registers(cpu, tmp_path):
    """A head of 64 rows (a CTC recognizer's time steps) x 24 features x 61 classes, a bias and a softmax: with
    16 registers a tile of two vectors holds 6 rows, 64 has tiles of 4 (8 accumulators: a 64 x 1,024 x 8,224 head
    ran at 63 GFLOP/s on a Zen 2 core, over 66 rows in tiles of 6 at 78). Its input gets 2 zero rows (the pad
    fused into the kernel that makes it), the product 66 rows, and the softmax runs over them and slices off
    the padded rows and columns (matmul_layout.pad_matmul_columns). 32 rows would need 4 more (more than a
    twelfth): left; so would 53 classes (7 AVX2 vectors: tiles of one row). With 32 registers nothing is padded.
    The AVX2 build's probabilities are onnxruntime's."""
    spec, (lanes, registers), _ = CPU_TARGETS[cpu]
    path = _classifier_head(tmp_path / "head64.onnx", rows=64, softmax=True, classes=61)
    mod, done, left = prepared_and_scheduled(path, target_spec=spec)
    assert not left, left
    (head,) = [f for f in done if "matmul" in f]
    (probabilities,) = [f for f in done if "softmax" in f]
    head_rows = int(mod[head].params[0].shape[-2])
    soft_in, soft_out = (
        tuple(int(d) for d in p.shape) for p in (mod[probabilities].params[0], mod[probabilities].params[-1])
    )
    assert soft_out == (1, 64, 61), soft_out
    if registers >= 32:
        assert head_rows == 64 and soft_in[1] == 64, (head_rows, soft_in)
        return
    assert head_rows == 66 and soft_in[1] == 66 and "pad" in " ".join(done), (head_rows, soft_in, done)
    assert re.search(r"in T\.unroll\(T\.int64\(6\)\)", mod[head].script())  # tiles of 6 rows
    for rows, classes in ((32, 61), (64, 53)):
        other = _classifier_head(tmp_path / f"head{rows}_{classes}.onnx", rows=rows, softmax=True, classes=classes)
        mod, done, _ = prepared_and_scheduled(other, target_spec=spec)
        (head,) = [f for f in done if "matmul" in f]
        assert int(mod[head].params[0].shape[-2]) == rows, done
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-6, rtol=1e-5)
    assert abs(float(actual[0].sum()) - 64.0) < 1e-3  # each of the 64 rows sums to 1 over its 61 classes


@pytest.mark.parametrize("cpu", sorted(CPU_TARGETS))
def test_constant_weights_are_read_once_across_tiles_of_rows(cpu, tmp_path):
    """A head over 40 rows (5 tiles of 8): a parallel task is a block of columns, its tiles of rows a serial loop
    inside, so each thread reads a block of weights from memory once and from cache for the other tiles of rows;
    rows first read every weight once per tile of rows (a 34 MB head over 64 rows: 68 -> 101 GFLOP/s at one
    thread). The row loop carries the prefetches of the next block (test_schedule_memory checks them)."""
    import re

    spec, _, _ = CPU_TARGETS[cpu]
    path = _classifier_head(tmp_path / "head.onnx", classes=512, rows=40)
    mod, done, left = prepared_and_scheduled(path, target_spec=spec)
    assert not left, left
    (head,) = [f for f in done if "matmul" in f]
    script = mod[head].script()
    (task,) = re.findall(r"for (\w+) in T\.parallel\(", script)
    (cols,) = [c for c in re.findall(r"for (\w+)_1 in T\.vectorized", script) if not c.startswith("ax")][-1:]
    (rows,) = re.findall(r"for (\w+)_1 in T\.unroll", script)[-1:]  # the tile's rows (the write-back's: ax*)
    assert task == f"{cols}_0", (task, cols, rows)
    assert re.search(
        rf"for {task} in T\.parallel\(T\.int64\(\d+\)\):\n\s+for {rows}_0 in T\.serial\(T\.int64\(\d+\), "
        r"annotations=\{\"tvmgen\.prefetch_next_output\"",
        script,
    ), script


@pytest.mark.parametrize("cpu", sorted(CPU_TARGETS))
def test_wide_heads_tile_four_vectors_of_columns(cpu, tmp_path):
    """A classifier head over many columns and few rows (a CTC recognizer's 18,385 classes over 40 steps): with
    32 vector registers (AVX-512, NEON) its columns are padded to whole tiles of 4 vectors and its tile is 4
    vectors by 5 rows (reduction_rules._wide_head: 40 x 120 x 18,400 at 88.7 -> 104.2 GFLOP/s); with AVX2's 16
    registers, 2 vectors by the 5 rows they hold, over columns padded to whole pairs of vectors. Results as
    onnxruntime's."""
    import re

    spec, (lanes, registers), _ = CPU_TARGETS[cpu]
    path = _classifier_head(tmp_path / "head.onnx", classes=1101, rows=40)
    mod, done, left = prepared_and_scheduled(path, target_spec=spec)
    assert not left, left
    (head,) = [f for f in done if "matmul" in f]
    script = mod[head].script()
    shapes = [tuple(int(d) for d in p.shape) for p in mod[head].params]
    wide = registers >= 32
    unit = 4 * lanes if wide else 2 * lanes
    assert (24, -(-1101 // unit) * unit) in shapes, shapes
    update = script[script.index("for k in") :]  # the product's loops after its init's (the write-back: ax*)
    (columns,) = re.findall(r"for i\w* in T\.vectorized\(T\.int64\((\d+)\)\)", update)  # the tile's columns
    (rows,) = re.findall(r"for i\w* in T\.unroll\(T\.int64\((\d+)\)\)", update)  # the tile's rows
    assert (int(columns), int(rows)) == (4 * lanes if wide else 2 * lanes, 5), (columns, rows)
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cpu", sorted(CPU_TARGETS))
def test_wide_heads_over_many_features_reduce_in_chunks_that_fit_l1(cpu, tmp_path):
    """A wide head over 1,024 features (a CTC recognizer's 8,210 classes over a 1,024-wide sequence model): a
    tile's weights over the whole reduction (1,024 x 4 vectors: 256 KB with AVX-512) overflow L1, so a parallel
    task is one block of columns over every row, the reduction in chunks whose weights fit 32 KB, the next chunk
    prefetched by the rows after the first (64 x 1,024 x 8,256: 72-82 -> 93-111 GFLOP/s at one thread). The
    chunks are at most 128 features deep: the tiles of 16 columns of AVX2 and NEON would fit 512 in 32 KB, and
    on AVX2 lost their weights from L1 to the tiles' inputs (a CTC recognizer with such a head 9-10% slower
    with 512). Results as onnxruntime's."""
    import re

    spec, (lanes, registers), _ = CPU_TARGETS[cpu]
    path = _classifier_head(tmp_path / "head.onnx", classes=1101, rows=40, features=1024)
    mod, done, left = prepared_and_scheduled(path, target_spec=spec)
    assert not left, left
    (head,) = [f for f in done if "matmul" in f]
    script = mod[head].script()
    chunks = re.findall(r"for (\w+) in T\.serial\(T\.int64\((\d+)\), annotations=\{\"tvmgen\.weight_chunks\"", script)
    (task,) = re.findall(r"for (\w+) in T\.parallel\(", script)
    vectors = 4 if registers >= 32 else 2
    # features whose weights for a tile of columns fill 32 KB (AVX-512: 128; AVX2, NEON: 512), at most 128
    chunk = min(32 * 1024 // (vectors * lanes * 4), 128)
    assert chunks == [("k_0", str(1024 // chunk))] == [("k_0", "8")], chunks
    assert "_fused" not in task, task  # columns only: each task runs every row
    assert '"tvmgen.prefetch_next_weights": 2' in script
    if cpu == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-3, rtol=1e-4)


def _constant_product(rows: int, k: int, n: int, seed: int, path):
    """``y = x @ W``: x [rows, k], W a constant [k, n] of seeded random values; saved to ``path``."""
    from onnx import TensorProto, helper, numpy_helper

    weights = np.random.default_rng(seed).standard_normal((k, n)).astype(np.float32)
    model = onnx_model(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])],
        [numpy_helper.from_array(weights, "W")],
    )
    return save_onnx(model, path)


@pytest.mark.parametrize("cpu", ["avx512", "avx2", "neon"])
def test_a_product_of_few_rows_per_tile_is_scheduled(cpu, tmp_path):
    """A mel-spectrogram front end's filter bank: 25 frames x 201 bins x 40 mel bands, constant weights. With
    AVX2 the 40 columns are 5 vectors, a tile 5 vectors wide holds 2 rows, and 25 has no divisor up to 2: the
    tile that wastes least was picked from an empty range of sizes, the schedule failed and TVM's lowering ran
    it at 1.5 GFLOP/s. It is scheduled for every target (2 rows guarded with AVX2). Results as onnxruntime's."""
    path = _constant_product(25, 201, 40, 53, tmp_path / "mel_bank.onnx")
    mod, done, left = prepared_and_scheduled(path, target_spec=CPU_TARGETS[cpu][0])
    assert not [f for f in left if "matmul" in f] and [f for f in done if "matmul" in f], (done, left)
    if cpu == "avx2":
        (kernel,) = [f for f in done if "matmul" in f]
        assert re.search(r"T\.where\(\w+ \* T\.int64\(2\) \+ \w+ < T\.int64\(25\)\)", mod[kernel].script())
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cpu", sorted(CPU_TARGETS))
def test_matrix_vector_tiles_hold_enough_chains_of_multiply_adds(cpu, tmp_path):
    """A dense layer at batch 1 (1 x 624 x 64, a keyword spotter's): each accumulator is one chain of
    multiply-adds, one link per step of the reduction. A tile of one pair of vectors had 2 chains, paced by
    the multiply-add's latency (AVX2: 4.3 us); the tile is now as many pairs as the registers hold that divide
    the columns: AVX2 all 64 columns (4 x 2 vectors: 8 chains), AVX-512 and NEON alike in their widths.
    Results as onnxruntime's."""
    spec, (lanes, _), _ = CPU_TARGETS[cpu]
    path = _constant_product(1, 624, 64, 7, tmp_path / "dense.onnx")
    mod, done, _ = prepared_and_scheduled(path, target_spec=spec)
    (kernel,) = [f for f in done if "matmul" in f]
    script = mod[kernel].script()
    pairs = 64 // (2 * lanes)  # every column in one task: 4 pairs (AVX2), 2 (AVX-512), 8 (NEON)
    assert "T.parallel(T.int64(1))" in script, script
    assert f"T.unroll(T.int64({pairs}))" in script and f"T.vectorized(T.int64({2 * lanes}))" in script, script
    if cpu == "avx2":
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def _late_1x1_block(tail: str):
    """A late stage's 1x1 convolutions on 7 x 7 pixels (weights 1.6 MB each, weight-stationary), after a ReLU:
    ``tail`` "block": 320 -> 1280, clip to [0, 6], 1280 -> 320 plus the ReLU's output (a residual);
    "slice": 320 -> 1280, then the first 1000 channels; "split": then channels 280 to 1280."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(17)
    node = helper.make_node
    inits = [numpy_helper.from_array((rng.standard_normal((1280, 320, 1, 1)) * 0.05).astype(np.float32), "W1")]
    inits.append(numpy_helper.from_array(rng.standard_normal(1280).astype(np.float32), "B1"))
    nodes = [node("Relu", ["x"], ["a"]), node("Conv", ["a", "W1", "B1"], ["c1"])]
    if tail == "block":
        inits += [
            numpy_helper.from_array((rng.standard_normal((320, 1280, 1, 1)) * 0.03).astype(np.float32), "W2"),
            numpy_helper.from_array(rng.standard_normal(320).astype(np.float32), "B2"),
            numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
            numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
        ]
        nodes += [
            node("Clip", ["c1", "lo", "hi"], ["h"]),
            node("Conv", ["h", "W2", "B2"], ["c2"]),
            node("Add", ["c2", "a"], ["y"]),
        ]
        out = [1, 320, 7, 7]
    else:  # (a first convolution, 3x3: the 1x1 one reads an NHWC image, not the model's NCHW input)
        inits += [
            numpy_helper.from_array(np.array(v, np.int64), n)
            for v, n in [
                ([280 if tail == "split" else 0], "s"),
                ([1280 if tail == "split" else 1000], "e"),
                ([1], "ax"),
            ]
        ]
        inits.append(numpy_helper.from_array((rng.standard_normal((320, 320, 3, 3)) * 0.02).astype(np.float32), "W0"))
        nodes[0] = node("Conv", ["x", "W0"], ["a"], pads=[1, 1, 1, 1])
        nodes.append(node("Slice", ["c1", "s", "e", "ax"], ["y"]))
        out = [1, 1000, 7, 7]
    return onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 320, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        inits,
    )


@pytest.mark.parametrize("cpu", ["avx2", "avx512"])
def test_stationary_1x1_convolutions_over_an_awkward_width_run_over_one_row_of_pixels(cpu, tmp_path):
    """With 16 registers (AVX2) a 7-wide row has no tile of 5 or 6 pixels: a weight-stationary 1x1
    convolution ran in tiles of 4 + 3 rows (8 and 6 accumulators). Its 49 pixels are made one row, padded to
    50 (``conv_layout.flatten_stationary_pixels``): tiles of 5 rows, the multiply-adds unguarded, the slice
    back to 49 pixels in the write-back. Bias, clip and the residual stay in each convolution's kernel (the
    regrouping into 7 x 7 moved after them: ``sink_pixel_reshapes``). 32 registers (AVX-512) have tiles of 7
    already: left as they are. The AVX2 build's results as onnxruntime's."""
    path = save_onnx(_late_1x1_block("block"), tmp_path / "late.onnx")
    mod, done, left = prepared_and_scheduled(path, target_spec=CPU_TARGETS[cpu][0])
    convs = sorted(f for f in done if "conv2d" in f)
    assert len(convs) == 2 and not left, (done, left)
    if cpu == "avx512":
        for f in convs:
            assert "strided_slice" not in f and "T.int64(1), T.int64(7), T.int64(7)" in mod[f].script(), f
        return
    assert all("strided_slice" in f for f in convs), convs
    (expand,) = [f for f in convs if ("maximum" in f and "minimum" in f) or "clip" in f]  # bias and clip in its kernel
    (project,) = [f for f in convs if f != expand]
    assert project.count("add") == 2, project  # bias and residual in its kernel
    assert [f for f in done if f not in convs and ("add" in f or "clip" in f or "maximum" in f)] == [], done
    for f in convs:
        script = mod[f].script()
        assert "T.int64(1), T.int64(1), T.int64(50)" in script, script  # one row of 49 pixels, padded to 50
        assert max(int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script)) == 5, script
        update = script.split('with T.sblock("conv2d_nhwc_update")')[1].split("with T.sblock(")[0]
        assert "T.where" not in update, update  # whole tiles: no guarded multiply-adds
    run_as_haswell(path, tmp_path)


def test_a_slice_of_the_first_channels_stays_in_a_flattened_convolutions_kernel(tmp_path):
    """A stationary 1x1 convolution over 7 x 7 pixels whose output's first channels are kept (a classifier's
    1,000 classes of channels padded to whole vectors: SqueezeNet's last convolution, 512 -> 1,000 over 13 x 13,
    ran tiles of 5 + 5 + 3 pixels, 15% of its work on padding): the slice moves before the regrouping into
    7 x 7 like the bias, and the convolution runs over one row of 49 pixels padded to 50 with the slice in its
    write-back (AVX2). Results as onnxruntime's."""
    path = save_onnx(_late_1x1_block("slice"), tmp_path / "sliced.onnx")
    mod, done, _ = prepared_and_scheduled(path, target_spec=CPU_TARGETS["avx2"][0])
    (name,) = [f for f in done if "conv2d" in f and "T.int64(1000)" in mod[f].script()]
    script = mod[name].script()
    assert "T.int64(1), T.int64(1), T.int64(50)" in script, script  # one row of pixels, padded
    assert re.search(
        r"T_strided_slice\w*: T\.Buffer\(\(T\.int64\(1\), T\.int64\(1\), T\.int64\(49\), T\.int64\(1000\)\)", script
    ), script
    assert [f for f in done if "strided_slice" in f and "conv2d" not in f] == [], done  # no slice kernel
    run_as_haswell(path, tmp_path)


def test_a_regrouped_output_a_kernel_would_read_leaves_the_convolution_as_it_was(tmp_path):
    """A stationary 1x1 convolution over 7 x 7 pixels whose output is split along its channels (channels 280
    on): the split is not one of the slices that move before the regrouping into 7 x 7, so flattening the
    pixels would make it a kernel of its own; the convolution keeps its image's rows (AVX2)."""
    path = save_onnx(_late_1x1_block("split"), tmp_path / "split.onnx")
    mod, done, _ = prepared_and_scheduled(path, target_spec=CPU_TARGETS["avx2"][0])
    (script,) = [mod[f].script() for f in done if "conv2d" in f and "T.int64(1280)" in mod[f].script()]
    assert "lv: T.Buffer((T.int64(1), T.int64(7), T.int64(7), T.int64(320))" in script, script  # NHWC, 7 x 7
    assert "T.int64(50)" not in script and "T.int64(49)" not in script, script
