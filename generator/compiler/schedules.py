"""tvmgen's default CPU schedules (work in progress)."""

from __future__ import annotations


def layout_passes(target) -> list:
    return []


def DefaultSchedules(target):  # noqa: N802 - a pass, named like TVM's
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="TvmgenDefaultSchedules")
    def _schedules(mod, _ctx):
        return mod

    return _schedules
