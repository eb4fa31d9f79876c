"""LSTM and GRU layers as one kernel each: the whole sequence in one call.

An unrolled layer costs several kernels and VM instructions per time step (about 10 us a step on a
CPU, most of it dispatch); a keyword-spotting model with 50 frames spent 0.58 ms where onnxruntime's
own recurrent kernels take 0.13. Here each direction of a layer is one PrimFunc: the input side of
every step first (one matrix product over the sequence, with the bias), then per step the recurrent
product into the gates and the cell update, its state kept in the kernel. sigmoid and tanh use a
rational approximation of tanh (max error 3e-7 in float32) that vectorises, where libm's would be
called lane by lane.

The importer (frontends/recurrent_calls.py) leaves each layer as a call to an external function
named after its shape; ``lower`` turns those calls into calls of this module's kernels for the target:
the CPU variant (loops LLVM vectorises; `tirx.is_scheduled`), or the GPU one (a work-group per sequence,
a thread per gate, barriers between the phases), with its operands staged for Vulkan. Each PrimFunc
carries its shape in ``tvmgen.recurrent``.

Signatures (one direction; ONNX gate orders, weights transposed):
  LSTM: X[S,B,I], Wt[I,4H], Rt[H,4H], bias[4H] (Wb + Rb), h0[B,H], c0[B,H] -> Y[S,B,H], C[B,H]
  GRU:  X[S,B,I], Wt[I,3H], Rt[H,3H], wb[3H], rb[3H], h0[B,H]            -> Y[S,B,H]
"""

from __future__ import annotations

import json

# tanh(x) ~ x P(x^2) / Q(x^2) on [-9, 9] (beyond: +-1 to float32 precision); fitted for tvmgen by
# iteratively reweighted least squares
_P = (9.99999923e-01, 1.33847699e-01, 3.50027121e-03, 2.06950499e-05, 1.34898458e-08)
_Q = (1.0, 4.67180729e-01, 2.58941974e-02, 3.29368303e-04, 7.82852043e-07)


def _tanh(x):
    from tvm.script import tirx as T

    c = T.max(T.min(x, T.float32(9)), T.float32(-9))
    z = c * c
    p = (((T.float32(_P[4]) * z + T.float32(_P[3])) * z + T.float32(_P[2])) * z + T.float32(_P[1])) * z + T.float32(
        _P[0]
    )
    q = (((T.float32(_Q[4]) * z + T.float32(_Q[3])) * z + T.float32(_Q[2])) * z + T.float32(_Q[1])) * z + T.float32(
        _Q[0]
    )
    return c * p / q


def _sigmoid(x):
    from tvm.script import tirx as T

    return T.float32(0.5) + T.float32(0.5) * _tanh(T.float32(0.5) * x)


def kernel(sp: dict, gpu: bool = False, staged: bool = False):
    """The PrimFunc for ``sp`` (see ``spec``); ``staged`` (with ``gpu``): the GPU kernel's operands staged
    in registers and shared memory (``_lstm_gpu``, ``_gru_gpu``)."""
    build = {("lstm", False): _lstm_cpu, ("lstm", True): _lstm_gpu, ("gru", False): _gru_cpu, ("gru", True): _gru_gpu}[
        (sp["kind"], gpu)
    ]
    S, B, I, H = sp["S"], sp["B"], sp["I"], sp["H"]
    G = {"lstm": 4, "gru": 3}[sp["kind"]] * H  # the gates' rows: i, o, f, c (LSTM) or z, r, h (GRU)
    extra = {"staged": True} if gpu and staged else {}
    func = build(S, B, I, H, G, _buffers(S, B, I, H, G), bool(sp["reverse"]), bool(sp["lbr"]), **extra)
    # op_pattern 8 (opaque): never fused with its neighbours, whose loops would join this kernel's
    return func.with_attrs({"tvmgen.recurrent": json.dumps(sp, sort_keys=True), "op_pattern": 8})


def lower(mod, gpu: bool = False, staged: bool = False):
    """``mod`` with every recurrent layer the importer left as an external call (``recurrent_calls``) made a
    call of its kernel: the CPU variant, or with ``gpu`` the GPU one (``staged``: its operands staged in
    registers and shared memory, for Vulkan: see ``_lstm_gpu``). A module without such calls is returned
    as it is; otherwise a new one (the imported module may be built for other targets too: `tvmgen app`)."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from tvmgen.frontends.recurrent_calls import PREFIX

    dps_packed = tvm.ir.Op.get("relax.call_dps_packed")

    def layer(call) -> dict | None:
        if not (isinstance(call, relax.Call) and call.op.same_as(dps_packed)):
            return None
        callee = call.args[0]
        name = str(callee.global_symbol) if isinstance(callee, relax.ExternFunc) else ""
        return json.loads(name[len(PREFIX) :]) if name.startswith(PREFIX) else None

    @mutator
    class Lowering(PyExprMutator):
        def __init__(self, module):
            super().__init__(module)
            self.kernels: dict = {}
            self.count = 0

        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            sp = layer(call)
            if sp is None:
                return call
            key = json.dumps(sp, sort_keys=True)
            if key not in self.kernels:
                self.kernels[key] = self.builder_.add_func(kernel(sp, gpu=gpu, staged=staged), f"tvmgen_{sp['kind']}")
            self.count += 1
            out = call.ty_args[0]  # an LSTM's (Y, C) as a tuple type; call_tir takes its fields
            return relax.call_tir(self.kernels[key], call.args[1], list(out.fields) if hasattr(out, "fields") else out)

    lowering = Lowering(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            lowering.builder_.update_func(gv, lowering.visit_expr(func))
    return lowering.builder_.get() if lowering.count else mod


def _buffers(S, B, I, H, G):
    """``F``, the builders' (``_lstm_cpu``...) last size argument: ``F(name)`` is a new float32 buffer of
    the kernels' signatures (see the module's docstring), for their parameters' annotations, which
    TVMScript reads as buffer declarations."""
    from tvm.script import tirx as T

    shapes = {
        "X": (S, B, I),
        "Wt": (I, G),
        "Rt": (H, G),
        "bias": (G,),
        "wb": (G,),
        "rb": (G,),
        "h0": (B, H),
        "c0": (B, H),
        "Y": (S, B, H),
        "C": (B, H),
    }
    # int64 sizes, as Relax gives its tensors': SpecializePrimFuncBasedOnCallSite (the Adreno pipeline)
    # matches each call's shapes against these, and an int32 50 is not the int64 50 to it
    return lambda name: T.Buffer(tuple(T.int64(d) for d in shapes[name]), "float32")


# =========================================================================== CPU


def _block(gates: int) -> int:
    """Columns per block of the input side's matrix product (``_input_side``): the block's sums
    stay in registers over the reduction (4 AVX-512 vectors, 8 AVX2, 16 NEON), its columns of Wt
    in L1 over the steps."""
    return next((v for v in (64, 32, 16, 8) if gates % v == 0), 1)


def _input_side(S, B, I, G):
    """The input side of every step, ``xg[t] = bias + X[t] Wt``, before the recurrence: it does not
    depend on the state, so it is one matrix product, a block of V of Wt's columns (16 KB for 64
    inputs) kept in L1 over all the steps. Inside the recurrence, each step read all of Wt and Rt
    (86 KB for the zoo's 64 -> 48 LSTM, more than L1): the LSTM's step took 0.66 us, now 0.28."""
    from tvm.script import tirx as T

    V = _block(G)

    @T.macro
    def input_side(X, Wt, bias, xg):
        for b, j0, t in T.grid(B, G // V, S):
            for j1 in T.vectorized(V):
                xg[t, b, j0 * V + j1] = bias[j0 * V + j1]
            for k in range(I):
                for j1 in T.vectorized(V):
                    xg[t, b, j0 * V + j1] = xg[t, b, j0 * V + j1] + X[t, b, k] * Wt[k, j0 * V + j1]

    return input_side


def _lstm_cpu(S, B, I, H, G, F, reverse, _lbr):
    from tvm.script import tirx as T

    input_side = _input_side(S, B, I, G)

    @T.prim_func(private=True, s_tir=True)
    def lstm(X: F("X"), Wt: F("Wt"), Rt: F("Rt"), bias: F("bias"), h0: F("h0"), c0: F("c0"), Y: F("Y"), C: F("C")):
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        with T.sblock("root"):
            # one opaque block under the root (TVM's CPU passes expect that): the whole sequence
            with T.sblock("recurrence"):
                T.reads(X[0:S, 0:B, 0:I], Wt[0:I, 0:G], Rt[0:H, 0:G], bias[0:G], h0[0:B, 0:H], c0[0:B, 0:H])
                T.writes(Y[0:S, 0:B, 0:H], C[0:B, 0:H])
                gates = T.alloc_buffer((G,), "float32")
                h = T.alloc_buffer((B, H), "float32")
                xg = T.alloc_buffer((S, B, G), "float32")  # the input side of every step, with the bias
                input_side(X, Wt, bias, xg)
                for b, j in T.grid(B, H):
                    C[b, j] = c0[b, j]
                    h[b, j] = h0[b, j]
                for s in range(S):
                    for b in range(B):
                        for j in range(G):
                            gates[j] = xg[S - 1 - s if reverse else s, b, j]
                        for k in range(H):
                            for j in range(G):
                                gates[j] = gates[j] + h[b, k] * Rt[k, j]
                        for j in range(H):  # gates i, o, f, c
                            C[b, j] = _sigmoid(gates[2 * H + j]) * C[b, j] + _sigmoid(gates[j]) * _tanh(
                                gates[3 * H + j]
                            )
                            h[b, j] = _sigmoid(gates[H + j]) * _tanh(C[b, j])
                            Y[S - 1 - s if reverse else s, b, j] = h[b, j]

    return lstm


def _gru_cpu(S, B, I, H, G, F, reverse, lbr):
    from tvm.script import tirx as T

    input_side = _input_side(S, B, I, G)

    @T.prim_func(private=True, s_tir=True)
    def gru(X: F("X"), Wt: F("Wt"), Rt: F("Rt"), wb: F("wb"), rb: F("rb"), h0: F("h0"), Y: F("Y")):
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        with T.sblock("root"):
            # one opaque block under the root (TVM's CPU passes expect that): the whole sequence
            with T.sblock("recurrence"):
                T.reads(X[0:S, 0:B, 0:I], Wt[0:I, 0:G], Rt[0:H, 0:G], wb[0:G], rb[0:G], h0[0:B, 0:H])
                T.writes(Y[0:S, 0:B, 0:H])
                gx = T.alloc_buffer((G,), "float32")  # input side, all gates, with its bias
                gh = T.alloc_buffer((G,), "float32")  # recurrent side, with its bias
                rh = T.alloc_buffer((H,), "float32")  # r * h (linear_before_reset 0)
                h = T.alloc_buffer((B, H), "float32")
                nv = T.alloc_buffer((H,), "float32")
                xg = T.alloc_buffer((S, B, G), "float32")
                input_side(X, Wt, wb, xg)
                for b, j in T.grid(B, H):
                    h[b, j] = h0[b, j]
                for s in range(S):
                    for b in range(B):
                        for j in range(G):
                            gx[j] = xg[S - 1 - s if reverse else s, b, j]
                            gh[j] = rb[j]
                        for k in range(H):
                            for j in range(G if lbr else 2 * H):
                                gh[j] = gh[j] + h[b, k] * Rt[k, j]
                        if not lbr:
                            for j in range(H):  # the candidate's recurrent product takes r * h
                                rh[j] = _sigmoid(gx[H + j] + gh[H + j]) * h[b, j]
                            for k in range(H):
                                for j in range(H):
                                    gh[2 * H + j] = gh[2 * H + j] + rh[k] * Rt[k, 2 * H + j]
                        for j in range(H):  # gates z, r, h; h = n + z (h - n), n kept in nv
                            nv[j] = (
                                _tanh(gx[2 * H + j] + _sigmoid(gx[H + j] + gh[H + j]) * gh[2 * H + j])
                                if lbr
                                else _tanh(gx[2 * H + j] + gh[2 * H + j])
                            )
                            h[b, j] = nv[j] + _sigmoid(gx[j] + gh[j]) * (h[b, j] - nv[j])
                            Y[S - 1 - s if reverse else s, b, j] = h[b, j]

    return gru


# =========================================================================== GPU

_GPU_THREADS = 256


# The staged kernels' register arrays (a thread's weight columns) hold at most this many floats per thread.
_STAGED_REGISTERS = 128


def _lstm_gpu(S, B, I, H, G, F, reverse, _lbr, staged=False):
    """One work-group per sequence, a thread per gate row. ``staged`` (Vulkan; when every gate row has its
    thread and the row's I + H weights fit ``_STAGED_REGISTERS``): each thread keeps its columns of Wt and
    Rt and its cell state in registers over the whole sequence (the loops over them unrolled), and the
    step's input row X[t] is staged in shared memory. NVIDIA's Vulkan compiler left the unstaged kernel's
    global loads inside the dot products serialised (100 us against OpenCL's 43 us for the zoo's LSTM;
    staged: 43 us); NVIDIA's OpenCL compiler does well without, so OpenCL keeps the plain kernel."""
    from tvm.script import tirx as T

    NT = min(G, _GPU_THREADS)
    if staged and G <= NT and I + H <= _STAGED_REGISTERS:
        return _lstm_gpu_staged(S, B, I, H, G, F, reverse)

    @T.prim_func(private=True)
    def lstm(X: F("X"), Wt: F("Wt"), Rt: F("Rt"), bias: F("bias"), h0: F("h0"), c0: F("c0"), Y: F("Y"), C: F("C")):
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        b = T.launch_thread("blockIdx.x", B)  # one work-group per sequence of the batch
        tx = T.launch_thread("threadIdx.x", NT)
        gates = T.decl_buffer((G,), "float32", scope="shared")
        h = T.decl_buffer((H,), "float32", scope="shared")
        for jj in range((H + NT - 1) // NT):
            if jj * NT + tx < H:
                C[b, jj * NT + tx] = c0[b, jj * NT + tx]
                h[jj * NT + tx] = h0[b, jj * NT + tx]
        T.tvm_storage_sync("shared")
        for s in range(S):
            for jj in range((G + NT - 1) // NT):
                if jj * NT + tx < G:
                    acc = T.decl_buffer((1,), "float32", scope="local")
                    acc[0] = bias[jj * NT + tx]
                    for k in range(I):
                        acc[0] = acc[0] + X[S - 1 - s if reverse else s, b, k] * Wt[k, jj * NT + tx]
                    for k in range(H):
                        acc[0] = acc[0] + h[k] * Rt[k, jj * NT + tx]
                    gates[jj * NT + tx] = acc[0]
            T.tvm_storage_sync("shared")
            for jj in range((H + NT - 1) // NT):
                if jj * NT + tx < H:
                    c = _sigmoid(gates[2 * H + jj * NT + tx]) * C[b, jj * NT + tx] + _sigmoid(
                        gates[jj * NT + tx]
                    ) * _tanh(gates[3 * H + jj * NT + tx])
                    C[b, jj * NT + tx] = c
                    h[jj * NT + tx] = _sigmoid(gates[H + jj * NT + tx]) * _tanh(c)
                    Y[S - 1 - s if reverse else s, b, jj * NT + tx] = h[jj * NT + tx]
            T.tvm_storage_sync("shared")

    return lstm


def _lstm_gpu_staged(S, B, I, H, G, F, reverse):
    from tvm.script import tirx as T

    NT = G  # a thread per gate row

    @T.prim_func(private=True)
    def lstm(X: F("X"), Wt: F("Wt"), Rt: F("Rt"), bias: F("bias"), h0: F("h0"), c0: F("c0"), Y: F("Y"), C: F("C")):
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        b = T.launch_thread("blockIdx.x", B)  # one work-group per sequence of the batch
        tx = T.launch_thread("threadIdx.x", NT)
        gates = T.decl_buffer((G,), "float32", scope="shared")
        h = T.decl_buffer((H,), "float32", scope="shared")
        xs = T.decl_buffer((I,), "float32", scope="shared")  # the step's input row
        wx = T.decl_buffer((I,), "float32", scope="local")  # this thread's column of Wt
        wr = T.decl_buffer((H,), "float32", scope="local")  # and of Rt
        cr = T.decl_buffer((1,), "float32", scope="local")  # its cell state (threads < H)
        acc = T.decl_buffer((1,), "float32", scope="local")
        for k in T.unroll(I):
            wx[k] = Wt[k, tx]
        for k in T.unroll(H):
            wr[k] = Rt[k, tx]
        cr[0] = T.float32(0)
        for jj in range((H + NT - 1) // NT):
            if jj * NT + tx < H:
                cr[0] = c0[b, jj * NT + tx]
                C[b, jj * NT + tx] = cr[0]
                h[jj * NT + tx] = h0[b, jj * NT + tx]
        for s in range(S):
            for jj in range((I + NT - 1) // NT):
                if jj * NT + tx < I:
                    xs[jj * NT + tx] = X[S - 1 - s if reverse else s, b, jj * NT + tx]
            T.tvm_storage_sync("shared")
            acc[0] = bias[tx]
            for k in T.unroll(I):
                acc[0] = acc[0] + xs[k] * wx[k]
            for k in T.unroll(H):
                acc[0] = acc[0] + h[k] * wr[k]
            gates[tx] = acc[0]
            T.tvm_storage_sync("shared")
            if tx < H:
                c = _sigmoid(gates[2 * H + tx]) * cr[0] + _sigmoid(gates[tx]) * _tanh(gates[3 * H + tx])
                cr[0] = c
                C[b, tx] = c
                h[tx] = _sigmoid(gates[H + tx]) * _tanh(c)
                Y[S - 1 - s if reverse else s, b, tx] = h[tx]
            T.tvm_storage_sync("shared")

    return lstm


def _gru_gpu(S, B, I, H, G, F, reverse, lbr, staged=False):
    """One work-group per sequence, a thread per gate row; ``staged`` (Vulkan) as ``_lstm_gpu``'s, under
    the same conditions: ``_gru_gpu_staged``."""
    from tvm.script import tirx as T

    NT = min(G, _GPU_THREADS)
    if staged and G <= NT and I + H <= _STAGED_REGISTERS:
        return _gru_gpu_staged(S, B, I, H, G, F, reverse, lbr)

    @T.prim_func(private=True)
    def gru(X: F("X"), Wt: F("Wt"), Rt: F("Rt"), wb: F("wb"), rb: F("rb"), h0: F("h0"), Y: F("Y")):
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        b = T.launch_thread("blockIdx.x", B)  # one work-group per sequence of the batch
        tx = T.launch_thread("threadIdx.x", NT)
        gx = T.decl_buffer((G,), "float32", scope="shared")
        gh = T.decl_buffer((G,), "float32", scope="shared")
        rh = T.decl_buffer((H,), "float32", scope="shared")
        gn = T.decl_buffer((H,), "float32", scope="shared")  # the candidate's recurrent side
        h = T.decl_buffer((H,), "float32", scope="shared")
        for jj in range((H + NT - 1) // NT):
            if jj * NT + tx < H:
                h[jj * NT + tx] = h0[b, jj * NT + tx]
        T.tvm_storage_sync("shared")
        for s in range(S):
            for jj in range((G + NT - 1) // NT):
                if jj * NT + tx < G:
                    acc = T.decl_buffer((2,), "float32", scope="local")
                    acc[0] = wb[jj * NT + tx]
                    acc[1] = rb[jj * NT + tx]
                    for k in range(I):
                        acc[0] = acc[0] + X[S - 1 - s if reverse else s, b, k] * Wt[k, jj * NT + tx]
                    if lbr or jj * NT + tx < 2 * H:
                        for k in range(H):
                            acc[1] = acc[1] + h[k] * Rt[k, jj * NT + tx]
                    gx[jj * NT + tx] = acc[0]
                    gh[jj * NT + tx] = acc[1]
            T.tvm_storage_sync("shared")
            if not lbr:  # the candidate's recurrent product takes r * h: two more phases
                for jj in range((H + NT - 1) // NT):
                    if jj * NT + tx < H:
                        rh[jj * NT + tx] = _sigmoid(gx[H + jj * NT + tx] + gh[H + jj * NT + tx]) * h[jj * NT + tx]
            T.tvm_storage_sync("shared")  # (barriers outside the ifs: TVM cannot put one inside)
            if not lbr:
                for jj in range((H + NT - 1) // NT):
                    if jj * NT + tx < H:
                        acc2 = T.decl_buffer((1,), "float32", scope="local")
                        acc2[0] = gh[2 * H + jj * NT + tx]
                        for k in range(H):
                            acc2[0] = acc2[0] + rh[k] * Rt[k, 2 * H + jj * NT + tx]
                        gn[jj * NT + tx] = acc2[0]
            T.tvm_storage_sync("shared")
            for jj in range((H + NT - 1) // NT):
                if jj * NT + tx < H:
                    z = _sigmoid(gx[jj * NT + tx] + gh[jj * NT + tx])
                    r = _sigmoid(gx[H + jj * NT + tx] + gh[H + jj * NT + tx])
                    n = (
                        _tanh(gx[2 * H + jj * NT + tx] + r * gh[2 * H + jj * NT + tx])
                        if lbr
                        else _tanh(gx[2 * H + jj * NT + tx] + gn[jj * NT + tx])
                    )
                    h[jj * NT + tx] = (T.float32(1) - z) * n + z * h[jj * NT + tx]
                    Y[S - 1 - s if reverse else s, b, jj * NT + tx] = h[jj * NT + tx]
            T.tvm_storage_sync("shared")

    return gru


def _gru_gpu_staged(S, B, I, H, G, F, reverse, lbr):
    """The GRU staged: thread ``g`` keeps its columns of Wt and Rt in registers (``wx``, ``wr``) over the
    sequence, the step's input row is in shared memory (``xs``), two phases a step. Phase 1: every
    thread's input-side product (``ax``) and, for the update and reset rows (and the candidate rows with
    ``lbr``), its recurrent one (``ah``); the update row's thread writes z, the reset row's r (``lbr``) or
    r * h (not: the candidate's recurrent product takes r * h). Phase 2: the candidate row's thread
    (2H + j) finishes its gate from its own registers (h[j] too) and writes h[j] and Y; meanwhile the next step's
    input row is staged, so two barriers a step."""
    from tvm.script import tirx as T

    NT = G  # a thread per gate row: z (0..H-1), r (H..2H-1), the candidate n (2H..3H-1)
    first = S - 1 if reverse else 0

    @T.prim_func(private=True)
    def gru(X: F("X"), Wt: F("Wt"), Rt: F("Rt"), wb: F("wb"), rb: F("rb"), h0: F("h0"), Y: F("Y")):
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        b = T.launch_thread("blockIdx.x", B)  # one work-group per sequence of the batch
        tx = T.launch_thread("threadIdx.x", NT)
        h = T.decl_buffer((H,), "float32", scope="shared")
        zr = T.decl_buffer((2 * H,), "float32", scope="shared")  # z, then r (lbr) or r * h
        xs = T.decl_buffer((I,), "float32", scope="shared")  # the step's input row
        wx = T.decl_buffer((I,), "float32", scope="local")  # this thread's column of Wt
        wr = T.decl_buffer((H,), "float32", scope="local")  # and of Rt
        ax = T.decl_buffer((1,), "float32", scope="local")
        ah = T.decl_buffer((1,), "float32", scope="local")
        # h[j] in the candidate row's thread (2H + j); read from and written to shared h[j] in one phase,
        # TVM's barrier planner would want a barrier inside the condition
        hr = T.decl_buffer((1,), "float32", scope="local")
        for k in T.unroll(I):
            wx[k] = Wt[k, tx]
        for k in T.unroll(H):
            wr[k] = Rt[k, tx]
        hr[0] = T.float32(0)
        if tx >= 2 * H:
            hr[0] = h0[b, tx - 2 * H]
            h[tx - 2 * H] = hr[0]
        for jj in range((I + NT - 1) // NT):
            if jj * NT + tx < I:
                xs[jj * NT + tx] = X[first, b, jj * NT + tx]
        T.tvm_storage_sync("shared")
        for s in range(S):
            ax[0] = wb[tx]
            for k in T.unroll(I):
                ax[0] = ax[0] + xs[k] * wx[k]
            ah[0] = rb[tx]
            if lbr or tx < 2 * H:
                for k in T.unroll(H):
                    ah[0] = ah[0] + h[k] * wr[k]
            if tx < H:
                zr[tx] = _sigmoid(ax[0] + ah[0])
            elif tx < 2 * H:
                zr[tx] = _sigmoid(ax[0] + ah[0]) if lbr else _sigmoid(ax[0] + ah[0]) * h[tx - H]
            T.tvm_storage_sync("shared")
            if tx >= 2 * H:
                if not lbr:
                    for k in T.unroll(H):
                        ah[0] = ah[0] + zr[H + k] * wr[k]
                n = _tanh(ax[0] + zr[tx - H] * ah[0]) if lbr else _tanh(ax[0] + ah[0])
                z = zr[tx - 2 * H]
                hr[0] = (T.float32(1) - z) * n + z * hr[0]
                h[tx - 2 * H] = hr[0]
                Y[S - 1 - s if reverse else s, b, tx - 2 * H] = hr[0]
            if s + 1 < S:
                for jj in range((I + NT - 1) // NT):
                    if jj * NT + tx < I:
                        xs[jj * NT + tx] = X[S - 2 - s if reverse else s + 1, b, jj * NT + tx]
            T.tvm_storage_sync("shared")

    return gru
