"""Remote runs over TVM RPC: every server is started and stopped here, all on 127.0.0.1."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TVMGEN, require_tool
from helpers import device_behind, environment, run_tvmgen
from tvmgen.remote import rpc

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.slow]  # servers, qemu, tuning runs


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    d = tmp_path_factory.mktemp("rpc-state")
    with environment(TVMGEN_STATE_DIR=d):
        yield d


@pytest.fixture(scope="module")
def servers(state):
    """A tracker and a proxy, with a host device on each."""
    require_tool("cmake")
    with (
        device_behind("tracker", "host", "host-t", state / "w1", 19190, 19290) as (tracker, _),
        device_behind("proxy", "host", "host-p", state / "w2", 19300, 19400) as (proxy, _),
    ):
        yield {"tracker": tracker, "proxy": proxy, "state": state}


def state_env(state) -> dict:
    return {"TVMGEN_STATE_DIR": str(state), "TVMGEN_LOG_DIR": str(state / "logs")}


def bench(*args, state, timeout=300):
    return run_tvmgen("bench", *args, env=state_env(state), timeout=timeout, cwd=state)


def bench_in_background(*args, state) -> subprocess.Popen:
    """`tvmgen bench ARGS` started, not waited for (stdout and stderr piped)."""
    return subprocess.Popen(
        [*TVMGEN, "bench", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, **state_env(state)),
    )


def wait_for_log(device, text: str, timeout: float = 120) -> None:
    """Until the device server's log holds ``text`` (at most ``timeout`` seconds)."""
    deadline = time.time() + timeout
    while text not in Path(device.log).read_text() and time.time() < deadline:
        time.sleep(0.1)


def bench_json(servers, via: str, key: str, *args, out: Path):
    """`tvmgen bench ARGS --json OUT` on device ``key`` through the servers' tracker or proxy (``via``),
    which must succeed: (the process, the JSON it wrote)."""
    r = bench(*args, "--key", key, f"--{via}", servers[via].address, "--json", out, state=servers["state"])
    assert r.returncode == 0, r.stderr
    return r, json.loads(out.read_text())


@pytest.fixture(scope="module")
def small_onnx(tmp_path_factory):
    from conftest import save_onnx, single_op_models

    return save_onnx(single_op_models()["conv3x3"], tmp_path_factory.mktemp("m") / "conv.onnx")


@pytest.fixture(scope="module")
def mobilenet(compiled, builtin_onnx) -> Path:
    """The session's host build of the built-in model: benches of an artifact compile nothing."""
    return compiled(builtin_onnx)


@pytest.mark.parametrize("via", ["tracker", "proxy"])
def test_host_device(servers, via, tmp_path, mobilenet):
    """Through the tracker, bench compiles a model itself (builtin:tiny); through the proxy, it benches an
    artifact (the session's build of the built-in model, checked against the model its manifest names)."""
    key = "host-t" if via == "tracker" else "host-p"
    model = "builtin:tiny" if via == "tracker" else mobilenet
    plot = tmp_path / "r.png"
    r, res = bench_json(servers, via, key, model, "--repeat", "4", "--plot", plot, out=tmp_path / "r.json")
    assert res["device"]["arch"] == "x86_64" and res["device"]["platform"] == "host"
    assert res["device"]["emulator"] is None and "runs under" not in r.stderr  # the CPU itself
    assert res["warm_ms"]["count"] == 4 and 0 < res["warm_ms"]["min"] <= res["warm_ms"]["p50"] <= res["warm_ms"]["max"]
    for k in ("load", "init", "first_run", "copy_in", "copy_out", "upload", "total"):
        assert res["cold_ms"][k] >= 0
    assert res["copy_in_ms"]["count"] == 4 and res["copy_out_ms"]["count"] == 4
    assert res["reference"].startswith("onnxruntime") and res["check"][0]["max_abs"] < 1e-5
    assert "outputs vs onnxruntime" in r.stderr and "p90" in r.stderr
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tracker_lists_devices(servers):
    keys = rpc.tracker_summary(servers["tracker"].address)
    assert keys["host-t"]["total"] == 1


@pytest.fixture(scope="module")
def arm_devices(servers):
    for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64"):
        require_tool(tool)
    started = [
        rpc.start_device(
            "linux-aarch64", "arm-t", tracker=servers["tracker"].address, work_dir=servers["state"] / "a1"
        ),
        rpc.start_device("linux-aarch64", "arm-p", proxy=servers["proxy"].address, work_dir=servers["state"] / "a2"),
    ]
    yield
    for s in started:
        s.stop()


@pytest.mark.parametrize("via", ["tracker", "proxy"])
def test_emulated_aarch64_device(servers, arm_devices, via, tmp_path, torch_onnx):
    """The emulated phone CPU: a MobileNet-like model compiled for linux-aarch64, run under qemu."""
    key = "arm-t" if via == "tracker" else "arm-p"
    model = [torch_onnx, "--input", "image:1x3x64x64"]
    r, res = bench_json(servers, via, key, *model, "--repeat", "2", out=tmp_path / "r.json")
    assert res["device"]["arch"] == "aarch64" and res["platform"] == "linux-aarch64"
    # the server knows its launcher ran it under qemu, and says so: its times are not an aarch64 CPU's
    assert res["device"]["emulator"] == "qemu-aarch64"
    assert f"device {key!r} runs under qemu-aarch64: its times are the emulator's" in r.stderr
    assert res["check"][0]["max_abs"] < 1e-4  # vs onnxruntime on the host, same seeded inputs
    assert "Compiling for linux-aarch64/cpu" in r.stderr


@pytest.fixture(scope="module")
def two_output_onnx(tmp_path_factory):
    """Outputs y [1, 8] (x @ w) and s, a 0-d scalar (ReduceMean of y, keepdims=0)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from conftest import save_onnx

    w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("ReduceMean", ["y"], ["s"], keepdims=0)],
        "two_outputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
        ],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return save_onnx(model, tmp_path_factory.mktemp("two") / "two.onnx")


@pytest.mark.parametrize("key", ["host-p", "arm-p"])
def test_several_outputs(servers, key, two_output_onnx, tmp_path, request):
    """A tuple output over RPC comes back as a handle to the device's array: every output is
    copied and checked, the 0-d one included (this failed with 'RPCObjectRef' object is not iterable)."""
    if key == "arm-p":
        request.getfixturevalue("arm_devices")
    r, res = bench_json(servers, "proxy", key, two_output_onnx, "--repeat", "2", out=tmp_path / "r.json")
    assert res["device"]["arch"] == ("aarch64" if key == "arm-p" else "x86_64")
    assert [c["name"] for c in res["check"]] == ["y", "s"]
    assert [c["shape"] for c in res["check"]] == [[1, 8], []]
    for c in res["check"]:
        assert c["ref_max"] > 1e-3 and c["max_abs"] < 1e-5, c  # vs onnxruntime, same seeded inputs
    assert res["copy_out_ms"]["count"] == 2
    assert "y max abs error" in r.stderr and "s max abs error" in r.stderr


def test_nested_tuple_outputs(servers, arm_devices, tmp_path):
    """The VM's (y, (s, z)) on the emulated aarch64 device: flattened in order, each copied with its
    shape and dtype; a manifest listing fewer outputs is refused."""
    import numpy as np
    import tvm
    import tvm.support.cc as cc
    from tvm import relax
    from tvm.script import ir as I
    from tvm.script import relax as R

    from tvmgen.compiler.targets import export
    from tvmgen.compiler.targets.platforms import get_platform, make_target, target_dict
    from tvmgen.core.errors import CheckError
    from tvmgen.core.model import TensorSpec
    from tvmgen.remote import bench as benching

    @I.ir_module
    class Nested:
        @R.function
        def main(self: R.Tensor((1, 4), "float32")):
            with R.dataflow():
                y = R.add(self, self)
                s = R.mean(self)
                z = R.astype(R.multiply(self, self), "int32")
                out = (y, (s, z))
                R.output(out)
            return out

    plat = get_platform("linux-aarch64")
    lib = tmp_path / "nested.so"
    tvm.compile(Nested, make_target(target_dict(plat, "cpu"))).export_library(
        str(lib), fcompile=cc.cross_compiler(str(export.linker(plat, objects_only=False)))
    )
    x = np.array([[1.0, -2.0, 3.5, 4.0]], np.float32)
    specs = [TensorSpec("y", (1, 4), "float32"), TensorSpec("s", (), "float32"), TensorSpec("z", (1, 4), "int32")]

    def on_the_device():
        """In a function of its own: the session, module and tensors are freed when it returns, which ends the
        session at once (instead of holding the device until its 60 s timeout, which the next test would wait
        out)."""
        remote = session(servers, "arm-t")
        remote.upload(str(lib), target="nested.so")
        dev = remote.cpu(0)
        vm = relax.VirtualMachine(remote.load_module("nested.so"), dev)
        out = vm["main"](tvm.runtime.tensor(x, dev))
        got = [t.numpy() for t in benching.device_outputs(remote, out, specs)]
        with pytest.raises(CheckError, match=r"the device returned 3 output\(s\), the artifact's manifest lists 2"):
            benching.device_outputs(remote, out, specs[:2])
        return got

    got = on_the_device()
    # pytest.raises keeps the error, its traceback keeps the frames that hold the session: a reference cycle,
    # freed only by the garbage collector (the next test waited 60 s for the device without this)
    gc.collect()
    want = [x + x, np.array(x.mean(), np.float32), (x * x).astype(np.int32)]
    assert [(g.shape, g.dtype) for g in got] == [(w.shape, w.dtype) for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_remote_gemm(servers, arm_devices, tmp_path):
    r, res = bench_json(servers, "tracker", "arm-t", "--gemm", "128", "--repeat", "2", out=tmp_path / "g.json")
    assert res["gflops"] > 0 and res["check"][0]["max_abs"] < 1e-3 and res["model"] == "gemm128"


def test_two_benches_share_one_device(servers, state, small_onnx, tmp_path):
    """Through one tracker with one device: the second waits for the first, both finish. The first
    compiles the built-in model while it holds the device, which keeps the device busy however loaded
    the machine is (a fixed number of runs may end before the second bench has started)."""
    with device_behind("tracker", "host", "solo", state / "solo", 19500, 19590) as (tracker, device):
        first = bench_in_background(
            "builtin:mobilenet",
            "--key",
            "solo",
            "--tracker",
            tracker.address,
            "--repeat",
            "30",
            state=state,
        )
        wait_for_log(device, "session 1:")
        second = bench(small_onnx, "--key", "solo", "--tracker", tracker.address, "--repeat", "2", state=state)
        out1, err1 = first.communicate(timeout=300)
        assert first.returncode == 0, err1
        assert second.returncode == 0, second.stderr
        assert "busy: waiting for it" in second.stderr
        log = Path(device.log).read_text()
        assert log.index("session 1 done") < log.index("session 2:")  # served one after the other


def test_device_killed_mid_bench(servers, state, mobilenet):
    with device_behind("tracker", "host", "doomed", state / "doomed", 19600, 19690) as (tracker, device):
        via = ["--key", "doomed", "--tracker", tracker.address]
        proc = bench_in_background(mobilenet, *via, "--repeat", "100", "--min-repeat-ms", "200", state=state)
        wait_for_log(device, "load module")
        time.sleep(1.0)  # well inside the timed runs (100 x 200 ms)
        os.killpg(device.pid, signal.SIGKILL)
        start = time.time()
        _, err = proc.communicate(timeout=60)  # nothing hangs
        assert time.time() - start < 30
        assert proc.returncode == 6, err
        assert "the device failed while timing the model" in err and "fix:" in err and "Traceback" not in err


def test_tracker_unreachable(state, mobilenet):
    r = bench(mobilenet, "--key", "x", "--tracker", "127.0.0.1:1", state=state)
    assert r.returncode == 6 and "cannot reach the RPC tracker at 127.0.0.1:1" in r.stderr and "fix:" in r.stderr


def test_unknown_key_on_tracker(servers, mobilenet):
    r = bench(mobilenet, "--key", "nosuch", "--tracker", servers["tracker"].address, state=servers["state"])
    assert r.returncode == 6 and "no device with key 'nosuch'" in r.stderr and "host-t" in r.stderr


def test_wrong_architecture_refused_before_upload(servers, tmp_path, small_onnx, compiled):
    require_tool("aarch64-linux-gnu-g++")
    art = compiled(small_onnx, "linux-aarch64")
    log = Path(servers["state"] / "device-host-t.log")
    uploads_before = log.read_text().count("upload ")
    r = bench(art, "--key", "host-t", "--tracker", servers["tracker"].address, state=servers["state"])
    assert r.returncode == 2, r.stderr
    assert "built for linux-aarch64 (aarch64), device 'host-t' is host (x86_64): nothing was uploaded" in r.stderr
    assert log.read_text().count("upload ") == uploads_before


def session(servers, key="host-t", timeout=60):
    from tvm import rpc as tvm_rpc

    host, port = rpc.parse_address(servers["tracker"].address, "tracker")
    return tvm_rpc.connect_tracker(host, port).request(key, priority=1, session_timeout=timeout)


def test_uploads_confined_to_the_work_dir(servers, tmp_path):
    remote = session(servers)
    f = tmp_path / "payload.bin"
    f.write_bytes(b"x" * 10)
    for name in ("../x", "sub/x", "/tmp/x", "..", "a..b"):
        with pytest.raises(Exception, match="uploads are plain file names"):
            remote.upload(str(f), target=name)
    remote.upload(str(f), target="fine.bin")  # a plain name is accepted
    assert not (servers["state"] / "x").exists() and not (servers["state"] / "w1" / "x").exists()


def test_upload_size_and_session_length_limits(servers, state, tmp_path):
    tracker = servers["tracker"].address
    dev = rpc.start_device(
        "host", "tight", tracker=tracker, work_dir=state / "tight", max_upload_mb=1, session_timeout=3
    )
    try:
        remote = session(servers, "tight")
        big = tmp_path / "big.bin"
        big.write_bytes(b"\0" * (2 << 20))
        with pytest.raises(Exception, match="refused: the limit is 1048576 bytes"):
            remote.upload(str(big), target="big.bin")
        time.sleep(4)  # past the session limit: the device ends the session
        with pytest.raises(Exception):  # noqa: B017 - the closed session fails as TVM's RPC layer reports it
            remote.upload(str(big), target="small.bin")
        assert "ran past its 3 s limit" in Path(dev.log).read_text()
    finally:
        dev.stop()


def test_duplicate_key_on_proxy(servers, state):
    with pytest.raises(rpc.RpcError, match='the key "host-p" is already in use on the proxy'):
        rpc.start_device("host", "host-p", proxy=servers["proxy"].address, work_dir=state / "dup")


def test_tvms_servers_run_without_pytorch():
    """The tracker is TVM's own (it answers the tracker protocol) and loads TVM but not PyTorch, which
    tvm_ffi would otherwise import on the way (more than half of the server's start)."""
    tracker = rpc.start_tracker(port=19700, port_end=19790)
    try:
        assert rpc.tracker_summary(tracker.address) == {}
        libraries = Path(f"/proc/{tracker.pid}/maps").read_text()
        assert "libtvm_ffi" in libraries and "libtorch" not in libraries
    finally:
        tracker.stop()


def test_device_server_reconnects_after_the_tracker_returns(state):
    """Network loss: the tracker goes away and comes back on the same port; the device re-registers."""
    tracker = rpc.start_tracker(port=19700, port_end=19790)
    dev = rpc.start_device("host", "phoenix", tracker=tracker.address, work_dir=state / "phoenix")
    try:
        port = tracker.port
        tracker.stop()
        time.sleep(1.5)
        tracker = rpc.start_tracker(port=port, port_end=port)
        deadline = time.time() + 30
        while time.time() < deadline:
            if rpc.tracker_summary(tracker.address).get("phoenix", {}).get("total"):
                break
            time.sleep(0.5)
        assert rpc.tracker_summary(tracker.address)["phoenix"]["total"] == 1
        assert "retrying in" in Path(dev.log).read_text()
    finally:
        dev.stop()
        tracker.stop()


def test_cli_detached_servers(state, tmp_path):
    env = dict(os.environ, TVMGEN_STATE_DIR=str(tmp_path), TVMGEN_LOG_DIR=str(tmp_path / "logs"))

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "tvmgen", *args], capture_output=True, text=True, env=env, timeout=120
        )

    r = cli("rpc", "tracker", "--detach", "--port", "19800")
    assert r.returncode == 0, r.stderr
    address = r.stdout.strip()
    assert address.startswith("127.0.0.1:198")
    r = cli("rpc", "proxy", "--detach", "--port", "19850")
    assert r.returncode == 0 and "--web-port" not in r.stderr
    assert "tracker" in cli("rpc", "list").stdout
    r = cli("devices", "--tracker", address)
    assert r.returncode == 0 and f"tracker {address}:" in r.stdout
    r = cli("rpc", "stop", "--all")
    assert r.returncode == 0 and "stopped the tracker" in r.stderr and "stopped the proxy" in r.stderr
    assert cli("rpc", "list").stdout.strip() == ""
    assert not rpc.accepts("127.0.0.1", int(address.rsplit(":", 1)[1]))
