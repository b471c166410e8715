"""The operators on the GPU, one process per rank under torchrun: world 1, and 2 and 4 processes on
one GPU under a private MPS control daemon (its own pipe and log folders, each rank
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / N; asked to quit at the end; the GPU's settings are not
touched). Without MPS several processes on one GPU time-slice (about 4.5 ms per hand-off), so the
multi-process cases need it and are skipped where nvidia-cuda-mps-control is missing."""
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest
import torch

from conftest import requires_gpu

WORKER = pathlib.Path(__file__).with_name("mp_worker.py")


def mps_daemon(nproc):
    """Starts a private MPS control daemon; returns (environment for the ranks, stop function)."""
    folder = tempfile.mkdtemp(prefix="tilelink-mps-")
    env = {"CUDA_MPS_PIPE_DIRECTORY": os.path.join(folder, "pipe"), "CUDA_MPS_LOG_DIRECTORY": os.path.join(folder, "log")}
    for d in env.values():
        os.makedirs(d)
    full = {**os.environ, **env}
    subprocess.run(["nvidia-cuda-mps-control", "-d"], env=full, check=True)

    def stop():
        subprocess.run(["nvidia-cuda-mps-control"], input=b"quit\n", env=full, timeout=30, check=False)
        shutil.rmtree(folder, ignore_errors=True)

    # Each rank a share of the SMs, and 3 hardware queues (a process world's streams; MPS clients
    # share the server's queues, and more each fail context creation at 4 clients).
    env.update(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(100 // nproc), CUDA_DEVICE_MAX_CONNECTIONS="3")
    return env, stop


def torchrun(nproc, env, timeout=600, command=(sys.executable, str(WORKER))):
    """Runs `command` (default: the worker) under torchrun, under a private MPS daemon when the ranks
    share a GPU; returns the CompletedProcess."""
    stop = None
    if nproc > torch.cuda.device_count():
        if shutil.which("nvidia-cuda-mps-control") is None:
            pytest.skip("several ranks on one GPU need MPS (nvidia-cuda-mps-control not found)")
        extra, stop = mps_daemon(nproc)
        env.update(extra)
    # torchrun and its workers in a session of their own, so that a timeout stops all of them
    # (not only torchrun) before the MPS daemon is asked to quit.
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "--no-python",
         *command],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
    finally:
        if stop is not None:
            stop()
    proc = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    print(proc.stdout[-4000:], proc.stderr[:3000], "\n...\n", proc.stderr[-6000:])
    return proc


@requires_gpu
@pytest.mark.parametrize("nproc", [2, 3])
def test_put_signal_transport_under_torchrun(nproc):
    """TILELINK_TRANSPORT=put_signal: every operator (ag_gemm, sp_attention, gemm_rs, mlp, gemm_ar, moe, the
    FP8 ops) through NVSHMEM's put-with-signal (their copy-engine paths and the staged MoE combine), no
    peer's memory mapped (as on another node); then a step and the mlp captured in CUDA graphs and
    replayed."""
    proc = torchrun(nproc, {**os.environ, "TILELINK_WAIT_TIMEOUT_MS": "20000", "TILELINK_TRANSPORT": "put_signal"})
    assert proc.returncode == 0, f"torchrun --nproc-per-node {nproc} exited {proc.returncode}"
    assert proc.stdout.count("ag_gemm, sp_attention, gemm_rs, mlp, gemm_ar, moe and FP8 match torch over put_signal") == nproc
    assert proc.stdout.count("captured steps match torch over put_signal") == nproc


@requires_gpu
@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_ops_match_torch_under_torchrun(nproc):
    proc = torchrun(nproc, {**os.environ, "TILELINK_WAIT_TIMEOUT_MS": "20000", "TILELINK_TRANSPORT": "load_store"})
    assert proc.returncode == 0, f"torchrun --nproc-per-node {nproc} exited {proc.returncode}"
    assert proc.stdout.count("ag_gemm, gemm_rs, mlp and sp_attention match torch over 4 calls") == nproc
    assert proc.stdout.count("moe matches torch over 4 calls (own and every token's routing)") == nproc
    assert proc.stdout.count("quantize_weight, ag_gemm_fp8 and gemm_rs_fp8 match torch in every scaling mode") == nproc
    assert proc.stdout.count("gemm_ar and gemm_ar_rmsnorm match torch at m = 1, 7, 129, 500") == nproc
    assert proc.stdout.count("a captured step matches torch over 3 replays") == nproc
    assert proc.stdout.count("a captured mlp matches torch over 3 back-to-back replays") == nproc


@requires_gpu
@pytest.mark.parametrize("fault", ["call", "build"])
def test_a_rank_that_stops_calling_is_named(fault):
    """Three ranks; the last stops calling. The other two must raise a TimeoutError naming it: from
    an op's wait (tilelink.synchronize) or from building an op (World::barrier), not hang."""
    nproc = 3
    proc = torchrun(nproc, {**os.environ, "TILELINK_TEST_FAULT": fault, "TILELINK_TRANSPORT": "load_store",
                            "TILELINK_WAIT_TIMEOUT_MS": "3000",
                            "TILELINK_BARRIER_TIMEOUT_MS": "3000"}, timeout=180)
    # The ranks' lines may interleave on the shared pipe: split at each rank's report.
    reports = re.split(r"(?=rank \d+: (?:NOT )?NAMED)", proc.stdout)
    named = [r for r in reports if f"NAMED ({fault})" in r]
    assert len(named) == nproc - 1, f"expected {nproc - 1} ranks to name the absent rank, got: {named}"
    # The build names the rank at World::barrier; a call's wait names it directly (a tile of rank
    # 2's shard) or, when the tile waited for was held up by the entry barrier, as the rank that had
    # not entered the call.
    needles = (["rank 2 never arrived at World::barrier"] if fault == "build"
               else ["rank 2's", "rank 2 had not entered this call"])
    for line in named:
        assert "TimeoutError" in line and any(n in line for n in needles), line


@requires_gpu
@pytest.mark.parametrize("nproc", [2, 3])
def test_cpp_ranks_under_plain_torchrun(nproc):
    """C++ ranks started by torchrun itself (no `tilelink launch`): World::from_launcher takes the
    NVSHMEM unique id over torchrun's store (libtilelink_torchrun.so), and the process suite's world,
    heap, AG+GEMM and GEMM+RS tests pass on every rank."""
    binary = os.environ.get("TILELINK_PROCESS_TESTS")
    if not binary or not os.path.exists(binary):
        pytest.skip("TILELINK_PROCESS_TESTS (the built tilelink_process_tests) is not set: scripts/test.sh sets it")
    env = {**os.environ, "TILELINK_WAIT_TIMEOUT_MS": "20000"}
    env.pop("TILELINK_UNIQUE_ID", None)
    proc = torchrun(nproc, env, timeout=300,
                    command=(binary, "--gtest_filter=ProcessWorld.*:Process/ProcessAgGemm.*:Process/ProcessGemmRs.*/pull"))
    assert proc.returncode == 0, f"torchrun --nproc-per-node {nproc} tilelink_process_tests exited {proc.returncode}"
    assert proc.stdout.count("[  PASSED  ]") == nproc and "FAILED" not in proc.stdout
