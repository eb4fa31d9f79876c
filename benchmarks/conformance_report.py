"""The conformance report: failures grouped by cause, per-operator results, the text, Markdown and JSON
written from them, and the record the tests compare with."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import benchlib

# ----------------------------------------------------------------------------------- the report


def normalise(text: str) -> str:
    """An error line with what differs from case to case taken out (paths, quoted names, numbers,
    shapes), so that failures of one cause group together."""
    text = re.sub(r" \(inputs: [^)]*\)", "", text)  # the importer's list of a node's inputs
    text = re.sub(r"(?<![\w.])/(?:[\w.+-]+/)*[\w.+-]+", "<path>", text)
    text = re.sub(r"(?<!\w)'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"(?<![\w.])[\d?]+(?:x[\d?]+)+(?![\w.])", "…", text)  # shapes as tvmgen writes them
    text = re.sub(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w.])", "N", text)
    text = re.sub(r"[\(\[](?:\s*(?:N|\?|None)\s*,?)+[\)\]]", "(…)", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text[:300]


def shorten(error: str) -> str:
    """An error line with the model's path in the work directory cut to the case's name."""
    return re.sub(r"/\S*/(test_\w+)/model\.onnx", r"\1/model.onnx", error)


def summarise(results: list[dict]) -> dict:
    def count(rows: list[dict]) -> dict:
        return {
            "cases": len(rows),
            "onnxruntime": sum(r["ort"]["pass"] for r in rows),
            "tvmgen": sum(r["tvmgen"]["pass"] for r in rows),
            "both": sum(r["ort"]["pass"] and r["tvmgen"]["pass"] for r in rows),
            "onnxruntime_only": sum(r["ort"]["pass"] and not r["tvmgen"]["pass"] for r in rows),
            "tvmgen_only": sum(r["tvmgen"]["pass"] and not r["ort"]["pass"] for r in rows),
        }

    return {
        "mobile": count([r for r in results if r["subset"] == "mobile"]),
        "other": count([r for r in results if r["subset"] == "other"]),
        "all": count(results),
    }


def by_operator(results: list[dict]) -> list[dict]:
    ops: dict[str, dict] = {}
    for r in results:
        row = ops.setdefault(r["op"], {"op": r["op"], "cases": 0, "mobile": 0, "onnxruntime": 0, "tvmgen": 0})
        row["cases"] += 1
        row["mobile"] += r["subset"] == "mobile"
        row["onnxruntime"] += bool(r["ort"]["pass"])
        row["tvmgen"] += bool(r["tvmgen"]["pass"])
    return [ops[k] for k in sorted(ops)]


def failure_groups(results: list[dict], subset: str) -> list[dict]:
    """Cases of ``subset`` onnxruntime passes and tvmgen fails, grouped by the normalised reason
    (with the stage it failed in), largest group first."""
    groups: dict[str, dict] = {}
    for r in results:
        if r["subset"] != subset or not r["ort"]["pass"] or r["tvmgen"]["pass"]:
            continue
        t = r["tvmgen"]
        key = f"{t.get('stage', '?')}: {normalise(t.get('error', ''))}"
        g = groups.setdefault(key, {"reason": key, "example": shorten(t.get("error", "")), "cases": []})
        g["cases"].append(r["name"])
    return sorted(groups.values(), key=lambda g: (-len(g["cases"]), g["reason"]))


def text_report(results: list[dict], skipped: int, complete: bool) -> str:
    lines = []
    rows = [
        [o["op"], str(o["cases"]), str(o["mobile"]), str(o["onnxruntime"]), str(o["tvmgen"])]
        for o in by_operator(results)
    ]
    lines.append(benchlib.table(["operator", "cases", "mobile", "onnxruntime", "tvmgen"], rows, {1, 2, 3, 4}))
    lines.append("")
    lines.append(totals_table(results, skipped, markdown=False))
    if not complete:
        lines.append("(partial run: the run was stopped before every case ran)")
    for subset in ("mobile", "other"):
        groups = failure_groups(results, subset)
        n = sum(len(g["cases"]) for g in groups)
        lines.append("")
        lines.append(f"{subset} subset: {n} case(s) pass in onnxruntime and fail in tvmgen, by reason:")
        for g in groups:
            names = ", ".join(g["cases"][:8]) + (f", +{len(g['cases']) - 8} more" if len(g["cases"]) > 8 else "")
            lines.append(f"  {len(g['cases']):4d}  {g['reason']}")
            lines.append(f"        e.g. {g['example'][:200]}")
            lines.append(f"        {names}")
    return "\n".join(lines)


def totals_table(results: list[dict], skipped: int, markdown: bool) -> str:
    s = summarise(results)
    header = ["subset", "cases", "onnxruntime pass", "tvmgen pass", "both pass", "onnxruntime only", "tvmgen only"]
    body = []
    for key, label in (("mobile", "mobile subset"), ("other", "the rest"), ("all", "all run")):
        c = s[key]
        body.append(
            [label] + [str(c[k]) for k in ("cases", "onnxruntime", "tvmgen", "both", "onnxruntime_only", "tvmgen_only")]
        )
    body.append(["skipped (training-only)", str(skipped), "", "", "", "", ""])
    if markdown:
        return md_table(header, body)
    return benchlib.table(header, body, {1, 2, 3, 4, 5, 6})


def md_table(header: list[str], body: list[list[str]]) -> str:
    out = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
    ]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
    return "\n".join(out)


def markdown_report(results: list[dict], skipped: int, complete: bool, settings: dict) -> str:
    out = [
        "### Totals",
        "",
        f"onnx {settings['versions'].get('onnx')}, onnxruntime {settings['versions'].get('onnxruntime')}, "
        f"apache-tvm {settings['versions'].get('apache-tvm')}; tvmgen host/cpu"
        + ("" if complete else "; **partial run**: not every case ran")
        + ".",
        "",
        totals_table(results, skipped, markdown=True),
        "",
    ]
    for subset, title in (("mobile", "mobile subset"), ("other", "the rest")):
        groups = failure_groups(results, subset)
        n = sum(len(g["cases"]) for g in groups)
        out += [f"### Pass in onnxruntime, fail in tvmgen: {title} ({n} cases)", ""]
        if groups:
            out += ["| cases | stage: reason (normalised) | example | which |", "|---:|---|---|---|"]
            for g in groups:
                cells = [
                    str(len(g["cases"])),
                    f"`{g['reason']}`",
                    "`" + g["example"][:300].replace("`", "'") + "`",
                    ", ".join(c.removeprefix("test_") for c in g["cases"]),
                ]
                out.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
        out.append("")
    out += ["### By operator", ""]
    rows = [
        [o["op"], str(o["cases"]), str(o["mobile"]), str(o["onnxruntime"]), str(o["tvmgen"])]
        for o in by_operator(results)
    ]
    out.append(md_table(["operator", "cases", "mobile subset", "onnxruntime pass", "tvmgen pass"], rows))
    return "\n".join(out) + "\n"


def write_json(
    path: Path,
    results: list[dict],
    skipped: list[dict],
    settings: dict,
    complete: bool,
    elapsed: float,
    batches: list[dict] | None = None,
) -> None:
    doc = {
        "benchmark": "conformance",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "complete": complete,
        "elapsed_s": round(elapsed, 1),
        "settings": settings,
        "summary": {**summarise(results), "skipped": len(skipped)},
        "failure_groups": {s: failure_groups(results, s) for s in ("mobile", "other")},
        "results": results,
        "skipped": skipped,
        **({"batches": batches} if batches is not None else {}),
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def write_record(path: Path, results: list[dict], settings: dict) -> None:
    """--record: tvmgen's result of each case by operator, {"pass": true} or {"pass": false, "stage": ...}
    ("other_path": true where tvmgen took one, see OTHER_PATH), with the versions it holds for; one operator
    a line."""
    ops: dict[str, dict] = {}
    for r in sorted(results, key=lambda r: (r["op"], r["name"])):
        t = r["tvmgen"]
        entry = {"pass": True} if t["pass"] else {"pass": False, "stage": t.get("stage")}
        ops.setdefault(r["op"], {})[r["name"]] = {**entry, **({"other_path": True} if t.get("other_path") else {})}
    head = {
        "about": "tvmgen's host/cpu result of each ONNX node test case run, by operator: conformance.py --record",
        "selection": {k: settings[k] for k in ("ops", "one_per_op", "subset")},
        "versions": {k: settings["versions"].get(k) for k in ("onnx", "apache-tvm")},
    }
    body = ",\n".join(f"  {json.dumps(op)}: {json.dumps(cases)}" for op, cases in ops.items())
    text = json.dumps(head, indent=1)[:-2] + ',\n "ops": {\n' + body + "\n }\n}\n"
    json.loads(text)  # the layout above is still JSON
    path.write_text(text)


def read_record(path: Path) -> dict[str, dict]:
    """A --record file: case name -> {"pass": ..., "stage": ..., "other_path": ...}."""
    doc = json.loads(path.read_text())
    return {name: entry for cases in doc["ops"].values() for name, entry in cases.items()}
