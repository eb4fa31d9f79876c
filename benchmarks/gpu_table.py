"""gpu.py's table: the machine, the columns and the report printed from the run phase's results (python3
and numpy only, as the run phase)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

import benchlib

WIDTH = 100  # the status column: longer errors are printed in full below the table


def label(v: dict) -> str:
    return v["device"] + (f" ({v['family']})" if v.get("family") and v["family"] != "generic" else "")


def machine() -> dict:
    import platform

    cpu = None
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    gpu = None
    if shutil.which("nvidia-smi"):
        p = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True
        )
        gpu = p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else None
    return {"host": platform.node(), "cpu": cpu, "cpus": os.cpu_count(), "nvidia_smi": gpu}


def med(xs):
    xs = [x for x in xs if x is not None]
    return benchlib.median(xs) if xs else None


def _fmt_cold_warm(r) -> str:
    """cold / warm first run: one decimal, two below 1 (a CPU row's, about 1, can be 0.04 on a loaded
    machine: 0.0x would read as nothing)."""
    return benchlib.fmt_ratio(r, 1 if r is None or r >= 1 else 2)


def fmt(x) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if x >= 1000 else f"{x:.1f}" if x >= 10 else f"{x:.3f}"


COLUMNS = [  # the table's
    "model",
    "device",
    "precision",
    "cold first run ms",
    "warm first run ms",
    "cold/warm",
    "init ms",
    "kernels built / hits",
    "steady ms",
    "copy-in ms",
    "copy-out ms",
    "steady x cpu",
    "max abs err",
    "work-group KB / threads (limits)",
    "status",
]


def _fmt_work_groups(w: dict | None) -> str:
    """The build's largest work-group (shared memory KB / threads) and its family's limits: 6.8 / 256 (48 / 1024)."""
    if not w:
        return "-"
    text = f"{w['shared_bytes'] / 1024:.1f} / {w['threads']}"
    lim = w.get("limits")
    return text + (f" ({lim['shared_bytes'] // 1024} / {lim['threads']})" if lim else "")


def report(plan: dict, results: list[dict], args) -> str:
    steady = {(r["model"], r["id"]): r["steady"]["run_ms"]["median"] for r in results if "steady" in r}
    body, notes = [], []
    for r in results:
        cells = [r["model"], label(r), r["precision"]]
        if "error" in r:
            short = r["error"] if len(r["error"]) <= WIDTH else r["error"][: WIDTH - 6] + f" ... [{len(notes) + 1}]"
            if len(r["error"]) > WIDTH:
                notes.append(f"[{len(notes) + 1}] {r['model']} {r['id']}: {r['error']}")
            body.append(cells + ["-"] * 11 + [short])
            continue
        cold = med(s["first_run_ms"] for s in r["cold"])
        warm = med(s["first_run_ms"] for s in r["warm"])
        init = med(s["init_ms"] for s in r["cold"] + r["warm"])
        kern = "-"
        if r["cold"][0].get("cache") and r["warm"][0].get("cache"):
            c, w = r["cold"][0]["cache"], r["warm"][0]["cache"]
            built = (c["source_builds"] or c["misses"]) + c.get("helper_builds", 0)  # helpers': loaded as hits
            kern = f"{built} / {w.get('pipelines_cached', w['hits'])}"
        st = r["steady"]
        run = st["run_ms"]["median"]
        cpu = steady.get((r["model"], "cpu"))
        err = r["max_abs_error"]
        body.append(
            cells
            + [
                fmt(cold),
                fmt(warm),
                _fmt_cold_warm(benchlib.ratio(cold, warm)),
                fmt(init),
                kern,
                fmt(run),
                fmt(st["copy_in_ms"]["median"]),
                fmt(st["copy_out_ms"]["median"]),
                "-" if r["id"] == "cpu" else benchlib.fmt_ratio(benchlib.ratio(run, cpu)),
                "-" if err is None else f"{err:.1e}",
                _fmt_work_groups(r.get("work_groups")),
                "ok",
            ]
        )
    lines = [
        f"GPU benchmark: tvmgen-run, fresh process per start; cold/warm: median of {args.repeat} starts each "
        f"(first inference); steady: median of {args.runs} runs after 1 warm-up; max abs err vs the CPU build"
    ]
    platforms = sorted({s["platform_line"] for r in results for s in r.get("cold", []) if s.get("platform_line")})
    for p in platforms:
        lines.append(f"OpenCL: {p}")
    for d in sorted({s["vulkan_device"] for r in results for s in r.get("cold", []) if s.get("vulkan_device")}):
        lines.append(f"Vulkan: {d}")
    m = machine()
    if m["nvidia_smi"] or plan.get("cuda_arch"):
        lines.append(f"CUDA: kernels built for {plan.get('cuda_arch')}; nvidia-smi: {m['nvidia_smi'] or 'not found'}")
    lines.append(
        f"host: {m['cpu']} ({m['cpus']} CPUs); work directory built {plan.get('created')}, "
        f"{plan.get('size_mb', '?')} MB"
    )
    lines.append(benchlib.table(COLUMNS, body, set(range(3, 14))))
    extra = []
    for model in plan["models"]:
        for p in ("fp32", "fp16"):
            sfx = "" if p == "fp32" else f"-{p}"
            o, c = steady.get((model["name"], "opencl" + sfx)), steady.get((model["name"], "cuda" + sfx))
            v = steady.get((model["name"], "vulkan" + sfx))
            if o and c:
                extra.append(f"{model['name']} {p}: opencl / cuda steady = {o / c:.2f}x")
            if v and o:
                extra.append(f"{model['name']} {p}: vulkan / opencl steady = {v / o:.2f}x")
            if v and c:
                extra.append(f"{model['name']} {p}: vulkan / cuda steady = {v / c:.2f}x")
            vk = next((r for r in results if r["model"] == model["name"] and r["id"] == "vulkan" + sfx), None)
            if v and vk and vk.get("steady_vm"):
                vm = vk["steady_vm"]["run_ms"]["median"]
                rec = (vk["steady"].get("vulkan_commands") or {}).get("recorded_runs") or {}
                how = (
                    f"{rec['replays']} runs replayed"
                    if rec.get("replays")
                    else f"not recorded: {rec.get('last_failure') or 'no recorded runs in this runtime'}"
                )
                extra.append(
                    f"{model['name']} {p}: vulkan steady {fmt(v)} ms ({how}); the VM every run "
                    f"(TVMGEN_VULKAN_REPLAY=0) {fmt(vm)} ms: recorded / VM = {v / vm:.2f}x"
                )
    lines += extra + notes
    return "\n".join(lines)
