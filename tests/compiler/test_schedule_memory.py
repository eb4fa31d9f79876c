"""Where tvmgen's CPU kernels keep their data: constant weights packed at compile time,
concatenations written in place, pooling without a padded copy, the next weights prefetched, and
small buffers on the stack. Results as onnxruntime's.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import onnx_model, save_onnx
from helpers import CPU_TARGETS, assert_close, compile_and_run, prepared_and_scheduled
from schedule_models import conv_params
from schedule_models import one_conv as _one_conv
from schedule_models import stationary_3x3_model as _stationary_3x3_model
from tvmgen import frontends
from tvmgen.compiler import cpu
from tvmgen.compiler.targets.platforms import PLATFORMS, make_target

# ------------------------------------------------------------------ weights packed at compile time


def _compiled_module(path, bind=True, target_spec=None):
    """The module as `compile` hands it to TVM's lowering: prepared, scheduled, weights folded."""
    import tvm
    from tvm import relax

    imported = frontends.load(path, [])
    mod = imported.mod
    if bind:
        weights = mod["main"].params[len(imported.inputs) :]
        mod = relax.transform.BindParams("main", dict(zip(weights, imported.params)))(mod)
    target = make_target(target_spec or PLATFORMS["host"].cpu_target())
    with target:
        return tvm.transform.Sequential(cpu.prepare_passes(target) + cpu.schedule_passes(target))(mod)


def _param_shapes(mod) -> dict:
    import tvm

    return {
        gv.name_hint: [tuple(int(d) for d in p.shape) for p in f.params]
        for gv, f in mod.functions.items()
        if isinstance(f, tvm.tirx.PrimFunc)
    }


@pytest.mark.parametrize("cpu", ["avx512", "avx2"])
def test_constant_weights_are_packed_at_compile_time(builtin_onnx, cpu):
    spec, (lanes, _), dense_tile = CPU_TARGETS[cpu]
    mod = _compiled_module(builtin_onnx, target_spec=spec)
    shapes = _param_shapes(mod)
    # the classifier (512 -> 1000, one row): each of its tasks streams one contiguous block
    (dense,) = [n for n in shapes if n.startswith("fused_matmul")]
    w = shapes[dense][1]  # (tasks, 512, vectors per tile, vector): (5, 512, 25, 8) with AVX-512
    assert dense.endswith("_prepacked") and w == (dense_tile["tasks"], 512, dense_tile["vectors"], 8), w
    # 1x1 convolutions: [Cout / tile width, Cin, tile width] instead of HWIO's [1, 1, Cin, Cout]
    # the 1x1 512 -> 512 at 7 x 7 (with AVX2 over its 49 pixels as one row: flatten_stationary_pixels)
    (conv,) = [
        v
        for n, v in shapes.items()
        if n.startswith("fused_conv2d") and v[0][-3:] in ((7, 7, 512), (1, 49, 512)) and np.prod(v[1]) == 512 * 512
    ]
    width = 2 * lanes  # two vectors of output channels per tile
    # weight-stationary: a block of 512 x width weights over 16 KB runs in chunks that fit half of L1 (a task
    # of 49 pixels: reduction_rules._FEW_PIXELS; 128 input channels with AVX-512, 256 with AVX2):
    # [Cout / width, Cin / chunk, chunk, width]
    chunk = 512 if 512 * width * 4 <= 16 * 1024 else 16 * 1024 // (width * 4)
    blocks = (512 // width, 512, width) if chunk == 512 else (512 // width, 512 // chunk, chunk, width)
    assert conv[1] == blocks and conv[2] == (512 // width, width), conv
    # the copies that pack them were folded: nothing left to run at inference
    assert not [n for n in shapes if n.endswith("_weight_prepack")], sorted(shapes)
    assert "_weight_prepack" not in mod["main"].script(show_meta=False)


def test_weights_passed_at_run_time_are_not_repacked(builtin_onnx):
    """--separate-params: packing would cost a copy per inference, so the weights keep their layout."""
    mod = _compiled_module(builtin_onnx, bind=False)
    names = list(_param_shapes(mod))
    assert not [n for n in names if "prepack" in n], names


# ------------------------------------------------------------------ concatenations, pooling


def _fire_and_pool_models() -> dict:
    """SqueezeNet's fire module (convolutions concatenated, then a ceil_mode max pool) on awkward
    shapes, a concatenation whose input is read elsewhere too, and poolings with padding."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)

    def vi(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    node = helper.make_node
    fire = [
        node("Conv", ["x", "Ws", "Bs"], ["s0"]),
        node("Relu", ["s0"], ["s"]),  # squeeze: 6 -> 5
        node("Conv", ["s", "Wa", "Ba"], ["a0"]),
        node("Relu", ["a0"], ["a"]),  # expand 1x1: 7
        node("Conv", ["s", "Wb", "Bb"], ["b0"], pads=[1, 1, 1, 1]),
        node("Relu", ["b0"], ["b"]),  # 3x3: 9
        node("Conv", ["s", "Wc", "Bc"], ["c"], pads=[1, 1, 1, 1]),  # 3x3: 9 more, no activation
        node("Concat", ["a", "b", "c"], ["cat"], axis=1),  # 25 channels, made in place
        node("MaxPool", ["cat"], ["y1"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),  # 9x10 -> 4x5
        node("Conv", ["s", "Wd"], ["d"]),
        node("Concat", ["d", "s"], ["y2"], axis=1),  # s is read by the convolutions too: a copy
    ]
    pools = [  # NHWC after the convolution, padded windows
        node("Conv", ["x", "Wp", "Bp"], ["p"], pads=[1, 1, 1, 1]),
        node("MaxPool", ["p"], ["y1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        node("AveragePool", ["p"], ["y2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        node("AveragePool", ["p"], ["y3"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1, count_include_pad=1),
    ]
    return {
        "fire": onnx_model(
            fire,
            [vi("x", [1, 6, 9, 10])],
            [vi("y1", [1, 25, 4, 5]), vi("y2", [1, 9, 9, 10])],
            [
                *conv_params(w, "s", 5, 6, 1),
                *conv_params(w, "a", 7, 5, 1),
                *conv_params(w, "b", 9, 5, 3),
                *conv_params(w, "c", 9, 5, 3),
                w("Wd", 4, 5, 1, 1),
            ],
        ),
        "pools": onnx_model(
            pools,
            [vi("x", [1, 6, 13, 10])],
            [vi("y1", [1, 20, 7, 5]), vi("y2", [1, 20, 7, 5]), vi("y3", [1, 20, 7, 5])],
            [w("Wp", 20, 6, 3, 3), w("Bp", 20)],
        ),
    }


def test_concatenated_kernels_write_their_slices_in_place(tmp_path):
    """A concatenation of kernels' outputs that nothing else reads is no copy: one kernel runs the
    producers, each writing its channels of the concatenation (memory_rewrites.concat_in_place); a
    concatenation of a value read elsewhere keeps its copy. Results as onnxruntime's."""
    path = save_onnx(_fire_and_pool_models()["fire"], tmp_path / "fire.onnx")
    mod = _compiled_module(path)
    names = list(_param_shapes(mod))
    merged = [n for n in names if n.startswith("fused_conv") and "concatenate" in n]
    assert len(merged) == 1 and merged[0].count("conv2d") == 3, names
    assert [int(d) for d in mod[merged[0]].params[-1].shape] == [1, 9, 10, 25]  # NHWC, all 25 channels
    copies = [n for n in names if "concatenate" in n and n not in merged]
    assert len(copies) == 1, names  # concat(d, s) (with the transpose to NCHW): s has other readers
    main = mod["main"].script(show_meta=False)
    assert f"{merged[0]}," in main and f"{copies[0]}," in main
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_pooling_reads_its_input_without_a_padded_copy(tmp_path):
    """Max and average pooling with padded windows (and a ceil_mode window past the edge) compute
    their padding in the window loop: no padded copy of the input (reduction_rules._is_pool)."""
    path = save_onnx(_fire_and_pool_models()["pools"], tmp_path / "pools.onnx")
    mod, done, left = prepared_and_scheduled(path)
    pools = [f for f in done if "pool" in f]
    assert len(pools) == 3 and not [f for f in left if "pool" in f], (done, left)
    for f in pools:
        assert "pad_temp" not in mod[f].script(), f
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------ prefetches, the stack and the workspace


def _prefetching_conv(path, arch: str, kind: str = "conv2d") -> str:
    """The script of the model's convolution (``kind``) after the schedules and ``PrefetchNextWeights``."""
    import tvm
    from tvm import relax

    imported = frontends.load(path, [])
    weights = imported.mod["main"].params[len(imported.inputs) :]
    mod = relax.transform.BindParams("main", dict(zip(weights, imported.params)))(imported.mod)
    target = make_target(CPU_TARGETS[arch][0])
    with target:
        mod = tvm.transform.Sequential(cpu.prepare_passes(target) + cpu.schedule_passes(target))(mod)
    (script,) = [
        f.script() for gv, f in mod.functions.items() if kind in gv.name_hint and isinstance(f, tvm.tirx.PrimFunc)
    ]
    return script


def _prefetched_lines(script: str, rows: int, block: int) -> str:
    """The one prefetch of ``script``, checked to cover a ``block`` of floats in the rows after the
    first of ``rows``, a share each, clamped inside it."""
    loop = re.search(
        r"for (\w+) in T\.serial\(T\.int64\((\d+)\), annotations=\{\"tvmgen\.prefetch_next_weights\"", script
    )
    assert loop and int(loop[2]) == rows, script
    lines = re.search(r"for line in range\(T\.int64\((\d+)\)\)", script)
    assert lines, script
    per_line = 64 // 4
    assert int(lines[1]) * (rows - 1) * per_line >= block > (int(lines[1]) - 1) * (rows - 1) * per_line
    (hint,) = [ln for ln in script.splitlines() if "T.prefetch" in ln]
    assert f"T.min((({loop[1]} - T.int64(1)) * T.int64({lines[1]}) + line) * T.int64(16), T.int64({block - 1}))" in hint
    return hint


@pytest.mark.parametrize("arch", ["avx512", "avx2", "neon"])
def test_weight_stationary_rows_prefetch_the_next_block_of_weights(arch, tmp_path):
    """A weight-stationary 1x1 convolution (7 x 7 pixels, 128 -> 1152: 590 KB of weights) runs a
    task per block of output channels (at most 16 KB: not chunked). Its rows (of tiles) after the first
    prefetch the next task's block into L2, a share each: together every cache line of it, at addresses
    inside the packed weights."""
    model = _one_conv([1, 128, 7, 7], [1, 1152, 7, 7], (1152, 128, 1, 1), seed=3, relu=True)
    path = save_onnx(model, tmp_path / "late.onnx")
    script = _prefetching_conv(path, arch)
    lanes = CPU_TARGETS[arch][1][0]
    block = 128 * 2 * lanes  # a task: two vectors of channels by the 128 input channels
    tasks = 1152 // (2 * lanes)
    task = re.search(rf"(\w+) in T\.parallel\(T\.int64\({tasks}\)\)", script)
    assert task, script
    # its rows of tiles: 7 (AVX2: 10 tiles of 5 over the 49 pixels as one row, padded to 50)
    hint = _prefetched_lines(script, 10 if arch == "avx2" else 7, block)
    t = task[1]
    assert f"param_0_global_flat[({t} + T.int64(1)) * T.int64({block}) + " in hint, hint
    assert hint.endswith(", 0, 2, 1)"), hint  # locality 2: L2
    assert re.search(rf"if \w+ >= T\.int64\(1\) and {t} \+ T\.int64\(1\) < T\.int64\({tasks}\)", script), script
    if arch == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ["avx512", "avx2", "neon"])
def test_a_stationary_task_of_few_tiles_runs_chunks_of_half_l1(arch, tmp_path):
    """Weight-stationary 3x3 convolutions, 256 -> 512 channels over 7 x 7 pixels and 256 -> 256 over 14 x 14
    (ResNet-18's last two stages): a task's chunk of weights fits 32 KB, the next chunk prefetched into L1 by
    the tiles after the chunk's first. A pass over 7 x 7 pixels is short: the next chunk arrived while the
    current one was still in use and took its lines; its chunks are half as deep (16 KB,
    ``reduction_rules._FEW_PIXELS``). ResNet-18's 7 x 7 stage on a Zen 2 core 16-18% faster, the model 5%; the
    14 x 14 stage 7% slower with half chunks: left at 32 KB. Results as onnxruntime's."""
    lanes = CPU_TARGETS[arch][1][0]
    counts = {}
    for size, out in ((7, 512), (14, 256)):
        model = _one_conv([1, 256, size, size], [1, out, size, size], (out, 256, 3, 3), seed=5, pads=[1, 1, 1, 1])
        path = save_onnx(model, tmp_path / f"stage{size}.onnx")
        script = _prefetching_conv(path, arch)
        (chunks,) = re.findall(r"in T\.serial\(T\.int64\((\d+)\), annotations=\{\"tvmgen\.weight_chunks\"", script)
        counts[size] = int(chunks)
    per_channel = 9 * 2 * lanes * 4  # a task's weights per input channel: 3x3 x two vectors
    full = 1 << ((32 * 1024 // per_channel).bit_length() - 1)  # the deepest power of two in 32 KB
    assert counts == {7: 256 // (full // 2), 14: 256 // full}, counts
    if arch == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(tmp_path / "stage7.onnx", tmp_path)
        assert_close(actual, expected, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("arch", ["avx512", "avx2", "neon"])
def test_weight_chunks_prefetch_the_next_chunk(arch, tmp_path):
    """A weight-stationary 3x3 convolution in chunks of input channels (5 x 6 pixels, 264 -> 512:
    33 chunks of 8 channels per task): the rows after a chunk's first prefetch the next chunk
    into L1, a share each, the next task's first chunk after a task's last (the packed weights'
    blocks in order), none after the last task's last. Results as onnxruntime's."""
    path = save_onnx(_stationary_3x3_model(), tmp_path / "late.onnx")
    script = _prefetching_conv(path, arch)
    lanes = CPU_TARGETS[arch][1][0]
    tasks, block = 512 // (2 * lanes), 9 * 8 * 2 * lanes  # a chunk: 3x3 x 8 channels x 2 vectors
    task = re.search(rf"(\w+) in T\.parallel\(T\.int64\({tasks}\)\)", script)
    assert task, script
    hint = _prefetched_lines(script, 5, block)
    following = f"{task[1]} * T.int64(33) + rc_0 + T.int64(1)"
    assert f"param_0_global_flat[({following}) * T.int64({block}) + " in hint, hint
    assert hint.endswith(", 0, 3, 1)"), hint  # locality 3: L1
    assert re.search(rf"if \w+ >= T\.int64\(1\) and {re.escape(following)} < T\.int64\({tasks * 33}\)", script)
    if arch == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def _head_model(rows: int, features: int, classes: int):
    """A recognizer's classifier head: [1, rows, features] x [features, classes] + bias, constant weights."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    w = numpy_helper.from_array((rng.standard_normal((features, classes)) * 0.1).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(classes).astype(np.float32), "b")
    return onnx_model(
        [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, rows, classes])],
        [w, b],
    )


@pytest.mark.parametrize("arch", ["avx512", "avx2", "neon"])
def test_a_head_over_tiles_of_rows_prefetches_the_next_block_and_its_output_lines(arch, tmp_path):
    """A product with constant weights over several tiles of rows (a CTC head: 40 rows) runs a task per
    block of columns, its tiles of rows a serial loop. Each tile after the first prefetches a share of the
    next block's weights; every tile prefetches for writing (rw 1, into L1) each output line the next
    block's same tile will write: one per row of the tile and cache line of the block's columns, inside
    the output, none after the last block. Beyond the caches both streams waited on memory (see
    reduction_rules). Results as onnxruntime's."""
    path = save_onnx(_head_model(40, 120, 640), tmp_path / "head.onnx")
    script = _prefetching_conv(path, arch, "matmul")
    packed = re.search(r"param_0_global: T\.Buffer\(\(T\.int64\((\d+)\), T\.int64\(120\), T\.int64\((\d+)\)\)", script)
    assert packed, script
    tasks, columns = int(packed[1]), int(packed[2])  # a task: a block of columns, its weights packed together
    assert tasks * columns == 640 and columns % CPU_TARGETS[arch][1][0] == 0, (tasks, columns)
    task = re.search(rf"(\w+) in T\.parallel\(T\.int64\({tasks}\)\)", script)
    rows = re.search(
        r"for (\w+) in T\.serial\(T\.int64\((\d+)\), annotations=\{\"tvmgen\.prefetch_next_output\": "
        rf"{columns}, \"tvmgen\.prefetch_next_weights\": 1\}}",
        script,
    )
    assert task and rows, script
    grid = re.search(r"for (\w+), line in T\.grid\(T\.int64\((\d+)\), T\.int64\((\d+)\)\):", script)
    assert grid, script
    tile, lines = int(grid[2]), int(grid[3])
    assert tile * int(rows[2]) == 40 and lines == -(-columns * 4 // 64), (tile, lines)
    t, r, i = task[1], rows[1], grid[1]
    assert f"if {t} + T.int64(1) < T.int64({tasks}):\n" in script, script  # none after the last block
    (hint,) = [ln.strip() for ln in script.splitlines() if "T.prefetch" in ln and "_next_flat" in ln]
    assert hint == (
        f"T.prefetch(T.address_of(T_add_intermediate_next_flat[T.min({r} * T.int64({tile * 640}) + {i} * "
        f"T.int64(640) + {t} * T.int64({columns}) + line * T.int64(16) + T.int64({columns}), T.int64({40 * 640 - 1}))]), "
        "1, 3, 1)"
    ), hint
    if arch == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ["avx512", "avx2", "neon"])
def test_a_short_reduction_over_a_large_output_prefetches_the_next_tile_of_pixels_for_writing(arch, tmp_path):
    """A 1x1 convolution of 16 channels to 96 over 112 x 112 pixels (a MobileNetV2 expansion: 16
    multiply-adds per output, a 4.8 MB output) stores faster than memory gives it the lines. Each
    register tile (rows of pixels x a block of channels) prefetches for writing (rw 1, into L1) each line
    its block of channels has in the next tile of pixels: one tile's pixels x 96 channels further on in the
    flat output, clamped inside it. The same convolution over 56 x 56 pixels (1.2 MB, whose lines were
    still in cache) gets none. Results as onnxruntime's."""
    large = _one_conv([1, 16, 112, 112], [1, 96, 112, 112], (96, 16, 1, 1), seed=3, relu=True)
    path = save_onnx(large, tmp_path / "expand.onnx")
    script = _prefetching_conv(path, arch)
    lanes = CPU_TARGETS[arch][1][0]
    tile = re.search(
        r"for (\w+) in T\.serial\(T\.int64\((\d+)\), annotations=\{\"tvmgen\.prefetch_ahead_output\": (\d+)\}", script
    )
    assert tile and int(tile[3]) == 2 * lanes and int(tile[2]) == 96 // (2 * lanes), script  # two vectors a tile
    rows = re.search(r"for (\w+)_next, line in T\.grid\(T\.int64\((\d+)\), T\.int64\((\d+)\)\):", script)
    assert rows and int(rows[3]) == -(-2 * lanes * 4 // 64), script  # a line per 16 floats of the block
    pixels = int(rows[2])
    assert pixels == (6 if arch == "avx2" else 8), script  # the tile's rows: pixels of one image row
    (hint,) = [ln.strip() for ln in script.splitlines() if "T.prefetch" in ln]
    assert f"{rows[1]}_next * T.int64(96)" in hint and f"{tile[1]} * T.int64({2 * lanes})" in hint, hint
    assert hint.endswith(f" + T.int64({pixels * 96}), T.int64({112 * 112 * 96 - 1}))]), 1, 3, 1)"), hint
    small = _one_conv([1, 16, 56, 56], [1, 96, 56, 56], (96, 16, 1, 1), seed=3, relu=True)
    assert "prefetch" not in _prefetching_conv(save_onnx(small, tmp_path / "small.onnx"), arch)
    if arch == "avx512":  # once: compile_and_run builds for this host, whatever the parameter
        _, _, actual, expected = compile_and_run(path, tmp_path)
        assert_close(actual, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["avx512", "neon"])
def test_small_buffers_are_on_the_stack_and_large_ones_in_the_workspace(arch, tmp_path):
    """tvmgen's TIR pipeline puts a kernel's allocations of up to 4 KB (its register tile) on the
    stack, where LLVM keeps a tile in registers; TVM's own lowering calls the workspace allocator
    for every buffer but a "global" one under 1 KB. Larger buffers (a band's padded input rows)
    stay in the workspace."""
    import tvm
    from tvm import s_tir, tirx

    from tvmgen.compiler.cpu import stack_tiles

    model = _one_conv([1, 16, 20, 20], [1, 32, 20, 20], (32, 16, 3, 3), seed=3, relu=True, pads=[1, 1, 1, 1])
    mod, done, _ = prepared_and_scheduled(save_onnx(model, tmp_path / "c.onnx"), target_spec=CPU_TARGETS[arch][0])
    (conv,) = [f for f in done if "conv2d" in f]
    kernel = tvm.IRModule({"main": mod[conv].with_attr("global_symbol", "main")})
    lowered = kernel
    for p in [
        s_tir.transform.LowerInitBlock(),
        s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.CompactBufferAllocation(),
        s_tir.transform.LowerOpaqueBlock(),
        tirx.transform.FlattenBuffer(),
    ]:
        lowered = p(lowered)
    sizes = {}  # bytes of each allocation, by whether TVM 0.27 would put it on the stack itself
    for line in lowered["main"].script().splitlines():
        m = re.search(r"= T\.alloc_(buffer|local)\(\(T\.int64\((\d+)\),\)", line)
        if m:
            sizes.setdefault("global" if m[1] == "buffer" else "local", []).append(int(m[2]) * 4)
    tiles = [b for b in sizes.get("local", []) if b <= stack_tiles.STACK_BYTES]
    large = [b for kind in sizes.values() for b in kind if b > stack_tiles.STACK_BYTES]
    small_global = [b for b in sizes.get("global", []) if b < 1024]
    assert tiles and large, sizes  # the tile, and the band's padded input rows (4 KB and more)

    def workspace_calls(pipeline):
        ll = tvm.tirx.build(kernel, target=make_target(CPU_TARGETS[arch][0]), pipeline=pipeline).inspect_source("ll")
        return len(re.findall(r"= load ptr, ptr @__TVMBackendAllocWorkspace", ll))

    assert workspace_calls(stack_tiles.register_tir_pipeline()) == len(large), sizes
    assert workspace_calls("s_tir") == sum(len(v) for v in sizes.values()) - len(small_global), sizes
