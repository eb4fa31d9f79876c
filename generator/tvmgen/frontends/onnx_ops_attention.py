"""ONNX ``Attention`` (opsets 23-25, the ``ai.onnx`` operator), expanded into operators TVM 0.27's Relax
importer has (a ``custom_ops`` registry entry, registered when this module is imported). Its own module
because it is the largest of the neural-network expansions (with the composition of its mask and bias,
``_attention_bias``); it builds on the graph helpers of ``onnx_ops_nn``.

TVM maps the name to its ``com.microsoft`` Attention converter, which fails (``num_heads``). Expanded
into MatMul / Softmax / MatMul with 3-D and 4-D Q/K/V, ``q_num_heads`` / ``kv_num_heads`` (grouped-query:
a KV head shared by its group of query heads, K and V not copied), ``scale``, ``softcap``, ``is_causal``
(offset-aware: past length or ``nonpad_kv_seqlen``), ``attn_mask`` (bool or float, broadcast, shorter
than the keys), ``past_key`` / ``past_value`` (``present_*`` = the concat), ``nonpad_kv_seqlen``,
``left_window_size`` / ``right_window_size``, ``softmax_precision``, every ``qk_matmul_output_mode``, and
fully-masked query rows giving zeros (not NaN). float16 and bfloat16 compute in float32 (products and
softmax, as ``--precision fp16`` does).
"""

from __future__ import annotations

import math

import numpy as np

from tvmgen.core.errors import ModelError
from tvmgen.frontends.onnx_ops import Context, _attrs, _Emit, _input
from tvmgen.frontends.onnx_ops_nn import FLOAT, _cast, _elem, _ints, _label, _np, _reduce, _register, _reshape, _shape

BOOL = 9  # onnx.TensorProto.BOOL
HALF_TYPES = (10, 16)  # float16, bfloat16
SOFTMAX_PRECISIONS = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}


@_register("Attention")
def attention(node, ctx: Context):
    """ONNX Attention (opsets 23-25) as onnx's reference implementation and onnxruntime compute it:
    Q and K scaled by sqrt(scale) each, softcap before the mask, the mask a bias (0 / -inf for a boolean
    or a causal / window / padding constraint, added as is for a float mask), softmax, a query row with
    no key allowed giving zeros. ``qk_matmul_output`` mode 0 is the raw product (onnxruntime and the
    specification; onnx 1.23's reference evaluator gives the soft-capped one where ``softcap`` is set)."""
    a = _attrs(node)
    label = _label(node)
    q, k, v = node.input[0], node.input[1], node.input[2]
    mask, past_k, past_v, nonpad = (_input(node, i) for i in (3, 4, 5, 6))
    outs = list(node.output) + [""] * 4
    qs, ks, vs = (_shape(ctx, node, n, w) for n, w in ((q, "Q"), (k, "K"), (v, "V")))
    rank = len(qs)
    if rank not in (3, 4) or len(ks) != rank or len(vs) != rank:
        raise ModelError(
            f"{label}: Q, K and V have ranks {len(qs)}, {len(ks)}, {len(vs)}; Attention takes all 3-D or all 4-D",
            "export the attention with 3-D (batch, sequence, hidden) or 4-D (batch, heads, sequence, head size) inputs",
        )
    if bool(past_k) != bool(past_v):
        raise ModelError(
            f"{label} has {'past_key' if past_k else 'past_value'} without {'past_value' if past_k else 'past_key'}",
            "give both past_key and past_value, or neither",
        )
    if nonpad and past_k:
        raise ModelError(
            f"{label} has both nonpad_kv_seqlen and past_key / past_value, which ONNX does not allow together",
            "export it with one kind of KV cache",
        )
    t1 = _elem(ctx, node, q)
    for name, what in ((k, "K"), (v, "V"), (past_k, "past_key"), (past_v, "past_value")):
        if name and _elem(ctx, node, name) != t1:
            raise ModelError(
                f"{label}: its {what} {name!r} has another element type than Q; tvmgen expands Attention for one type",
                "export the attention with Q, K and V (and the caches) of one type",
            )
    e = _Emit(ctx, node.name or "attention")
    B = qs[0]

    if rank == 3:
        if "q_num_heads" not in a or "kv_num_heads" not in a:
            raise ModelError(
                f"{label}: 3-D Q/K/V need the attributes q_num_heads and kv_num_heads, and the node lacks "
                f"{' and '.join(n for n in ('q_num_heads', 'kv_num_heads') if n not in a)}",
                "export the attention with q_num_heads and kv_num_heads (or with 4-D inputs)",
            )
        qh, kvh = int(a["q_num_heads"]), int(a["kv_num_heads"])
        for n, size, heads, what in ((q, qs[2], qh, "q_num_heads"), (k, ks[2], kvh, "kv_num_heads")):
            if heads <= 0 or size % heads:
                raise ModelError(
                    f"{label}: the hidden size {size} of {n!r} does not divide into {what}={heads} heads",
                    f"fix {what} in the model",
                )
        if vs[2] % kvh:
            raise ModelError(
                f"{label}: the hidden size {vs[2]} of V {v!r} does not divide into kv_num_heads={kvh} heads",
                "fix kv_num_heads in the model",
            )

        def heads4(x, seq, heads, size):  # [B, S, heads * size] -> [B, heads, S, size]
            return e("Transpose", [_reshape(e, x, (B, seq, heads, size))], perm=[0, 2, 1, 3])

        sq, dq = qs[1], qs[2] // qh
        q4, k4, v4 = heads4(q, sq, qh, dq), heads4(k, ks[1], kvh, ks[2] // kvh), heads4(v, vs[1], kvh, vs[2] // kvh)
        dk, dv, skv_new = ks[2] // kvh, vs[2] // kvh, ks[1]
    else:
        qh, kvh, sq, dq = qs[1], ks[1], qs[2], qs[3]
        q4, k4, v4 = q, k, v
        dk, dv, skv_new = ks[3], vs[3], ks[2]
        if vs[1] != kvh:
            raise ModelError(f"{label}: K has {kvh} heads and V {vs[1]}", "export K and V with the same heads")
    if dk != dq:
        raise ModelError(
            f"{label}: the head size of Q ({dq}) and of K ({dk}) differ", "fix the model's Q or K projection"
        )

    past_len = 0
    if past_k:
        pks = _shape(ctx, node, past_k, "past_key")
        pvs = _shape(ctx, node, past_v, "past_value")
        if len(pks) != 4 or len(pvs) != 4 or pks[2] != pvs[2]:
            raise ModelError(
                f"{label}: past_key {pks} and past_value {pvs} are not 4-D caches of one length",
                "export the caches as (batch, kv heads, past length, head size)",
            )
        past_len = pks[2]
        k4 = e("Concat", [past_k, k4], axis=2)
        v4 = e("Concat", [past_v, v4], axis=2)
    for i, x in ((1, k4), (2, v4)):
        if outs[i]:
            e("Identity", [x], outs[i])
    skv = past_len + skv_new
    # float16 / bfloat16: computed in float32 (products and softmax, as --precision fp16 does; in float16
    # TVM's products missed onnx's float16 cases by 2-3 ulp); Y and qk_matmul_output stored in the input type
    tc = FLOAT if t1 in HALF_TYPES else t1
    dt = _np(tc)
    q4, k4, v4 = (_cast(e, x, t1, tc) for x in (q4, k4, v4))

    rep = 1
    if qh != kvh:
        if kvh <= 0 or qh % kvh:
            raise ModelError(
                f"{label}: {qh} query heads do not group over {kvh} key/value heads",
                "fix q_num_heads / kv_num_heads (the query heads must be a multiple of the key/value heads)",
            )
        rep = qh // kvh

    scale = float(a["scale"]) if "scale" in a else 1.0 / math.sqrt(dq)
    root = e.const(np.asarray(math.sqrt(scale), dt), "scale")
    kt = e("Transpose", [e("Mul", [k4, root])], perm=[0, 1, 3, 2])
    qg = e("Mul", [q4, root])
    # grouped-query: query heads g * rep .. g * rep + rep - 1 share KV head g (onnx repeats each KV head,
    # [h0, h0, h1, h1, ...]); their rows are stacked, [B, kvh, rep * Sq, D], so K and V are not repeated
    if rep > 1:
        qg = _reshape(e, qg, (B, kvh, rep * sq, dq))
    qk = e("MatMul", [qg, kt])
    if rep > 1:
        qk = _reshape(e, qk, (B, qh, sq, skv))
    softcap = float(a.get("softcap", 0.0))
    capped = qk
    if softcap > 0:
        c = e.const(np.asarray(softcap, dt), "softcap")
        capped = e("Mul", [e("Tanh", [e("Div", [qk, c])]), c])

    bias, guard = _attention_bias(e, node, a, dt, tc, mask, nonpad, B, sq, skv, past_len)
    scores = e("Add", [capped, bias]) if bias else capped
    precision = a.get("softmax_precision")
    t_soft = tc
    if precision is not None:
        if int(precision) not in SOFTMAX_PRECISIONS:
            raise ModelError(
                f"{label}: softmax_precision={precision} is none of {sorted(SOFTMAX_PRECISIONS)}",
                "fix softmax_precision in the model (1 float, 10 float16, 11 double, 16 bfloat16)",
            )
        t_soft = int(precision)
    probs = e("Softmax", [_cast(e, scores, t1, t_soft)], axis=-1)
    if guard:  # a query row with no key allowed: zeros, not the NaN of a softmax over -inf
        probs = e("Where", [guard, e.const(np.zeros((), _np(t_soft)), "zero"), probs])
    probs = _cast(e, probs, t_soft, tc)

    mode = int(a.get("qk_matmul_output_mode", 0))
    if outs[3]:
        if mode not in (0, 1, 2, 3):
            raise ModelError(
                f"{label}: qk_matmul_output_mode={mode} is none of 0, 1, 2, 3",
                "fix qk_matmul_output_mode in the model",
            )
        _store(e, {0: qk, 1: capped, 2: scores, 3: probs}[mode], tc, t1, outs[3])

    y = e("MatMul", [_reshape(e, probs, (B, kvh, rep * sq, skv)) if rep > 1 else probs, v4])
    if rep > 1:
        y = _reshape(e, y, (B, qh, sq, dv))
    if rank == 3:
        y = _reshape(e, e("Transpose", [y], perm=[0, 2, 1, 3]), (B, sq, qh * dv))
    _store(e, y, tc, t1, outs[0])
    return e.nodes


def _store(e: _Emit, x: str, src: int, dst: int, out: str) -> None:
    """``x`` as the node output ``out``, cast from ``src`` to ``dst``."""
    e("Cast", [x], out, to=dst) if src != dst else e("Identity", [x], out)


def _attention_bias(e: _Emit, node, a: dict, dt, t1: int, mask: str, nonpad: str, B, sq, skv, past_len):
    """(the additive bias for the scores, [.., Sq, Skv] broadcasting to [B, H, Sq, Skv], or None; the
    boolean [.., Sq, 1] of the query rows with no key allowed, or None where no row can be).

    The constraints that are known when compiling (causal, windows, a constant nonpad_kv_seqlen, the
    padding of a short mask) are folded into one constant; a mask or nonpad_kv_seqlen given at run time
    is composed in the graph."""
    ctx, label = e.ctx, _label(node)
    causal = bool(a.get("is_causal", 0))
    left, right = int(a.get("left_window_size", -1)), int(a.get("right_window_size", -1))
    if left < -1 or right < -1:
        raise ModelError(
            f"{label}: left_window_size={left}, right_window_size={right}; each is -1 (unbounded) or >= 0",
            "fix the window sizes in the model",
        )
    i = np.arange(sq, dtype=np.int64).reshape(sq, 1)
    j = np.arange(skv, dtype=np.int64).reshape(1, skv)
    allowed = np.ones((1, skv), bool)  # folded: broadcasts to [.., Sq, Skv]
    dynamic: list[str] = []  # boolean tensors computed in the graph
    floats: list[str] = []  # float biases given at run time

    lens = None
    if nonpad:
        lens = ctx.value(nonpad)
        if lens is None:
            nb = _reshape(e, nonpad, (B, 1, 1, 1))
            jc = e.const(j, "j")
            dynamic.append(e("Less", [jc, nb]))  # padding: j < nonpad_kv_seqlen[b]
            if causal or left >= 0 or right >= 0:
                pos = e("Add", [e("Sub", [nb, e.const(_ints(sq), "sq")]), e.const(i, "i")])  # [B, 1, Sq, 1]
                if causal:
                    dynamic.append(e("LessOrEqual", [jc, pos]))
                if left >= 0:
                    dynamic.append(e("LessOrEqual", [e("Sub", [pos, jc]), e.const(_ints(left), "left")]))
                if right >= 0:
                    dynamic.append(e("LessOrEqual", [e("Sub", [jc, pos]), e.const(_ints(right), "right")]))
        else:
            lens = np.asarray(lens, np.int64).reshape(-1, 1, 1, 1)
    if not (nonpad and lens is None):
        offset = (lens - sq) if lens is not None else past_len  # a query's absolute position: offset + i
        pos = i + offset
        if causal:
            allowed = allowed & (j <= pos)
        if left >= 0:
            allowed = allowed & (pos - j <= left)
        if right >= 0:
            allowed = allowed & (j - pos <= right)
        if lens is not None:
            allowed = allowed & (j < lens)

    if mask:
        m_type = _elem(ctx, node, mask)
        m_shape = _shape(ctx, node, mask, "attn_mask")
        if m_shape[-1] > skv:
            raise ModelError(
                f"{label}: attn_mask {mask!r} covers {m_shape[-1]} keys, more than the {skv} of K",
                "fix the mask's last dimension (at most the keys, past ones included)",
            )
        if m_shape[-1] < skv:  # the keys past the mask's end are masked out
            fill = np.zeros((*m_shape[:-1], skv - m_shape[-1]), bool if m_type == BOOL else _np(m_type))
            if m_type != BOOL:
                fill[...] = -np.inf
            mask = e("Concat", [mask, e.const(fill, "mask_pad")], axis=-1)
        if m_type == BOOL:
            dynamic.append(mask)
        else:
            floats.append(_cast(e, mask, m_type, t1))

    neg = np.asarray(-np.inf, dt)
    terms = []
    if not allowed.all():
        terms.append(e.const(np.where(allowed, np.zeros((), dt), neg), "bias"))
    if dynamic:
        both = dynamic[0]
        for x in dynamic[1:]:
            both = e("And", [both, x])
        terms.append(e("Where", [both, e.const(np.zeros((), dt), "zero"), e.const(neg, "neginf")]))
    terms += floats
    if not terms:
        return None, None
    bias = terms[0]
    for x in terms[1:]:
        bias = e("Add", [bias, x])
    if not dynamic and not floats:
        empty = ~np.broadcast_to(allowed, (*allowed.shape[:-2], sq, skv)).any(axis=-1, keepdims=True)
        return bias, (e.const(empty, "empty_rows") if empty.any() else None)
    # TVM's ReduceMax starts from the lowest finite value, so a row of -inf has a finite maximum: a row is
    # told by whether any of its keys has a finite bias instead
    finite = e("Cast", [e("Not", [e("IsInf", [bias], detect_positive=0)])], to=FLOAT)
    keys = _reduce(e, "ReduceMax", finite, [-1])
    return bias, e("Equal", [keys, e.const(np.zeros((), np.float32), "zero")])
