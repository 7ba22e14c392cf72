"""The MPI backend: programs run unchanged under ``mpiexec -n 2`` and ``-n 4`` give, on every
process, bitwise the results of the one-process reference simulator (and the default fast
backend's within its float tolerance); faults end the whole job promptly.

Each launch runs many checks (tests/mpi_programs/checks.py) and saves every result; the tests
compare the saved files. Every launch has a timeout and kills its process group on expiry.
"""
import ast
import atexit
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = os.path.join(ROOT, "tests", "mpi_programs")
BIN = os.path.dirname(sys.executable)
MPIEXEC = os.path.join(BIN, "mpiexec")

pytest.importorskip("mpi4py", reason="the mpi extra is not installed (pip install -e '.[mpi]')")
if not os.path.exists(MPIEXEC):
    pytest.skip("no mpiexec beside the interpreter (pip install -e '.[mpi]')",
                allow_module_level=True)


def _env(backend=None, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("SHARDC_BACKEND", "SHARDC_NUM_DEVICES", "XLA_FLAGS", "SHARDC_CHECKS")}
    env["PYTHONPATH"] = ROOT
    env["SHARDC_THREADS"] = "1"
    # several processes share the cores: one BLAS thread each
    env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
    if backend:
        env["SHARDC_BACKEND"] = backend
    env.update(extra)
    return env


@functools.lru_cache(maxsize=None)
def _topology_file():
    """A copy of the machine topology MPICH's launcher writes for its processes, or None.

    The launcher saves the topology to a fresh ``/tmp/hydra_hwloc_xmlfile_*`` at each start
    and removes it at the end, but not when the job ends by MPI_Abort, as the fault tests'
    jobs do. Given one in HWLOC_XMLFILE it writes none, so the tests leave no files behind.
    A one-process job copies the file its launcher wrote (reading it only)."""
    copy = os.path.join(tempfile.mkdtemp(prefix="shardc-topology-"), "topology.xml")
    atexit.register(shutil.rmtree, os.path.dirname(copy), True)
    script = ("import glob, os, shutil, sys; "
              "files = glob.glob('/tmp/hydra_hwloc_xmlfile_*'); "
              "files and shutil.copyfile(max(files, key=os.path.getmtime), sys.argv[1])")
    try:
        subprocess.run([MPIEXEC, "-n", "1", "-hosts", "localhost", sys.executable, "-c", script,
                        copy], timeout=60, capture_output=True, env=_env())
        with open(copy, "rb") as f:
            return copy if f.read(5) == b"<?xml" else None
    except (OSError, subprocess.SubprocessError):
        return None


def launch(args, n=None, timeout=150, env=None):
    """Run ``python args`` (under ``mpiexec -n n`` when n is given) in its own process group;
    kill the group if it outlives ``timeout``. Returns (returncode, output, seconds)."""
    command = [sys.executable] + list(args)
    env = dict(env or _env())
    if n is not None:
        command = [MPIEXEC, "-n", str(n), "-hosts", "localhost"] + command
        if _topology_file() and "HWLOC_XMLFILE" not in env:
            env["HWLOC_XMLFILE"] = _topology_file()
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{' '.join(command)} did not end within {timeout} s:\n{output[-3000:]}")
    finally:
        _no_process_left(proc.pid)
    return proc.returncode, output, time.monotonic() - start


def _no_process_left(group: int) -> None:
    """Every process of the launch's group has ended within 20 s of mpiexec (killing what is
    left, then failing): a loaded machine may take a few seconds to reap them."""
    for _ in range(200):
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.killpg(group, signal.SIGKILL)
    pytest.fail("processes of the job were left behind after it ended")


@pytest.fixture(scope="module")
def single_process(tmp_path_factory):
    """The checks on one process: the reference simulator and the default fast backend."""
    out = tmp_path_factory.mktemp("mpi_single")
    for backend in ("reference", "fast"):
        rc, output, _ = launch([os.path.join(PROGRAMS, "checks.py"), str(out / backend)],
                               env=_env(backend))
        assert rc == 0, output[-3000:]
    return {b: dict(np.load(out / b / "rank0.npz")) for b in ("reference", "fast")}


def _assert_bitwise(expected: dict, got: dict, where: str) -> None:
    assert sorted(got) == sorted(expected), where
    differ = [k for k in expected
              if got[k].shape != expected[k].shape or got[k].dtype != expected[k].dtype
              or got[k].tobytes() != expected[k].tobytes()]
    assert not differ, f"{where}: {len(differ)} results differ, first {differ[:5]}"


def _assert_close(expected: dict, got: dict, where: str) -> None:
    for k in expected:
        assert got[k].shape == expected[k].shape and got[k].dtype == expected[k].dtype, k
        values = np.asarray(expected[k], np.complex128 if np.iscomplexobj(expected[k])
                            else np.float64)
        scale = float(np.max(np.abs(values[np.isfinite(values)]), initial=1.0))
        np.testing.assert_allclose(got[k], expected[k], rtol=0, atol=8 * 2.0 ** -23 * scale,
                                   err_msg=f"{where}: {k}")


@pytest.mark.parametrize("n", [2, 4])
def test_programs_run_unchanged_and_bitwise_on_every_process(n, single_process, tmp_path):
    rc, output, seconds = launch([os.path.join(PROGRAMS, "checks.py"), str(tmp_path)], n=n)
    assert rc == 0, output[-3000:]
    reference, fast = single_process["reference"], single_process["fast"]
    assert len(reference) > 200
    for rank in range(n):
        got = dict(np.load(tmp_path / f"rank{rank}.npz"))
        _assert_bitwise(reference, got, f"process {rank} of {n}")
        _assert_close(fast, got, f"process {rank} of {n} against the fast backend")
    for rank in range(n):
        assert f"process {rank} of {n}: {len(reference)} results" in output
        # most shard_maps ran stacked on every process (the rest: under control flow, prints)
        paths = ast.literal_eval(re.search(rf"process {rank} ran shard_maps (\{{.*\}})", output).group(1))
        assert paths["stacked"] > 2 * sum(v for k, v in paths.items() if k != "stacked"), paths
        # and their all-reduces over processes mostly walked through them (``chain``)
        chained, shared = map(int, re.search(
            rf"process {rank} chained (\d+) all-reduces, (\d+) through shared", output).groups())
        assert chained > 100, chained
        if n == 2:    # two processes of one machine: most pass through shared memory
            assert shared > chained // 2, (shared, chained)


def test_eager_print_shows_each_process_its_own_devices(tmp_path):
    # each process writes to a file of its own: the processes' stdout interleave in the pipe
    script = tmp_path / "printing.py"
    script.write_text(
        "import sys\n"
        "import shardc as jax, shardc.numpy as jnp\n"
        "from shardc.sharding import PartitionSpec as P\n"
        f"sys.stdout = open(f'{tmp_path}/out{{jax.process_index()}}.txt', 'w')\n"
        "mesh = jax.make_mesh((4,), ('i',))\n"
        "def body(b):\n"
        "    print(f'P{jax.process_index()} {b}')\n"
        "    return b\n"
        "y = jax.shard_map(body, mesh=mesh, in_specs=P('i'), out_specs=P('i'))(jnp.arange(4.))\n"
        "print(f'P{jax.process_index()} global {y}')\n"
        "sys.stdout.close()\n")
    rc, output, _ = launch([str(script)], n=2, env=_env(SHARDC_NUM_DEVICES="4"))
    assert rc == 0, output
    for rank, devices in ((0, (0, 1)), (1, (2, 3))):
        text = (tmp_path / f"out{rank}.txt").read_text()
        assert text.startswith(f"P{rank} On"), text
        assert all(f"On TFRT_CPU_{d} " in text for d in devices), text
        assert not any(f"TFRT_CPU_{d} " in text for d in range(4) if d not in devices), text
        assert f"P{rank} global [0. 1. 2. 3.]" in text


def test_uneven_device_split_is_an_error_on_every_process():
    rc, output, seconds = launch(["-c", "import shardc"], n=3)
    assert rc != 0 and seconds < 60
    assert output.count("8 devices cannot be split evenly over 3 processes") == 3, output


def _line(text: str) -> int:
    """The line of tests/mpi_programs/faults.py holding ``text`` (error messages name it)."""
    with open(os.path.join(PROGRAMS, "faults.py")) as source:
        lines = [k for k, line in enumerate(source, 1) if text in line]
    assert len(lines) == 1, (text, lines)
    return lines[0]


PSUM = f"in all_reduce[mesh_axes=('i',)] at faults.py:{_line('return lax.psum(block.sum()')}"
DIFFERENT_VALUES = "pass different values to"

# mode: (exit code, what the output says); {n}: the process count, {d}: process 1's first
# device. Every mode ends the job within 10 s with a non-zero code: none prints a value.
FAULTS = {
    "raise_in_body": (1, ["process 1 of {n} failed; aborting the job",
                          "RuntimeError: a Python error in the body",
                          "process 0 of {n} stops: process 1 failed (RuntimeError: a Python error "
                          f"in the body, on process 1 only at faults.py:"
                          f"{_line('raise RuntimeError(')}) while process 0 waits ",
                          # where process 0 is when the news arrives depends on the machine's
                          # load: in the collective, or not yet in the shard_map
                          (f"while process 0 waits {PSUM}",
                           "while process 0 waits to enter the shard_map called at faults.py:")]),
    "shape_error": (1, ["of {n} failed; aborting the job",
                        "TypeError: dot_general requires contracting dimensions"]),
    "device_error": (1, ["failed; aborting the job", "ValueError: Unknown format code 'd'",
                         "on device ", "of process ", "debug_print[", "(faults.py:"]),
    "impl_error": (1, ["process 1 of {n} failed", "ValueError: an implementation failing",
                       "while running on devices [{d}, ",
                       "stacked): b:f32[2]{{i}} = sin a (faults.py:",
                       "(mesh coordinates ({d},) to (",
                       "stacked) of process 1, at sin (faults.py:"]),
    "divergent": (1, ["CoherenceError", "are about to run a different program",
                      "  program: line ", ": process 0: e:f32[] = psum[mesh_axes=('i',)] d",
                      "process 1: e:f32[] = pmax[mesh_axes=('i',)] d"]),
    "divergent_caught": (1, ["caught the CoherenceError",
                             "an earlier CoherenceError left exchanges in flight"]),
    "divergent_sizes": (1, ["CoherenceError", "are about to run a different program"]),
    "divergent_loop": (1, ["CoherenceError", "are about to run a different program"]),
    "divergent_gather": (1, ["CoherenceError"]),
    "eager_shapes": (1, ["CoherenceError: processes [1", f"{DIFFERENT_VALUES} a shard_map",
                         "argument 0: process 0: f32[16], values ",
                         "process 1: f32[32], values "]),
    "eager_values": (1, ["CoherenceError: processes [1", f"{DIFFERENT_VALUES} device_put",
                         "device_put x: process 0: f32[16], values "]),
    "jit_values": (1, ["CoherenceError: processes [1", f"{DIFFERENT_VALUES} the program",
                       "argument 0: process 0: f32[16], values "]),
    "exit_early": (3, [f"process 0 of {{n}} stops: process 1 left the job (sys.exit(3) at "
                       f"faults.py:{_line('sys.exit(3)          #')}) while process 0 waits {PSUM}"]),
    "exit_between": (3, [f"process 0 of {{n}} stops: process 1 left the job (sys.exit(3) at "
                         f"faults.py:{_line('sys.exit(3)  # between')}) while process 0 waits to "
                         f"run the program called at faults.py:{_line('return f(x)  # sys.exit')}"]),
    "os_exit_between": (3, [f"process 0 of {{n}} stops: process 1 left the job (os._exit(3) at "
                            f"faults.py:{_line('os._exit(3)  # between')}) while process 0 waits "
                            f"to run the program called at faults.py:"
                            f"{_line('return f(x)  # os._exit')}"]),
    # whichever of the other processes is first heard of to have ended is named
    "read_at_end": (1, [tuple(f"process 0 of {{n}} stops: process {k} reached the end of its "
                              "script faults.py while process 0 waits to read a global array "
                              "f32[16@i] laid out P('i',) at "
                              f"faults.py:{_line('print(np.asarray(y))')}" for k in (1, 2, 3))]),
    "raise_between": (1, ["process 1 of {n} failed; aborting the job",
                          "process 0 of {n} stops: process 1 failed (KeyError: 'a host error on "
                          f"process 1' at faults.py:{_line('raise KeyError(')}) while process 0 "
                          "waits ",
                          # at the next program, or (under load) still leaving the first one's
                          # collective, which process 1 has already left
                          (f"waits to run the program called at faults.py:"
                           f"{_line('return f(x)  # raise')}",
                           "waits in all_reduce[mesh_axes=('i',)] (faults.py:")]),
    # MPICH's launcher kills the job the moment a process dies of a signal (others included,
    # before they can say a word): its report names the PID and the signal
    "kill": (9, ["BAD TERMINATION", "signal 9"]),
    "kill_between": (9, ["BAD TERMINATION", "signal 9"]),
}


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("mode", sorted(FAULTS))
def test_a_fault_ends_the_whole_job_promptly(mode, n):
    code, says = FAULTS[mode]
    rc, output, seconds = launch([os.path.join(PROGRAMS, "faults.py"), mode], n=n, timeout=60,
                                 env=_env(SHARDC_MPI_EXIT_TIMEOUT="30"))
    assert rc == code, output
    assert seconds < 10, output
    for text in says:
        alternatives = text if isinstance(text, tuple) else (text,)
        assert any(t.format(n=n, d=8 // n) in output for t in alternatives), output
    assert "process 0 finished" not in output, output
    # the job never reached MPI_Finalize, and still left no shared memory behind
    segments = re.search(r"launch segments:(.*)", output).group(1).split()
    assert segments and not any(os.path.exists(path) for path in segments), output


def test_host_values_are_trusted_when_asked():
    # the check off: each process keeps its own devices' blocks of its own copy
    rc, output, _ = launch([os.path.join(PROGRAMS, "faults.py"), "jit_values"], n=2,
                           timeout=60, env=_env(SHARDC_MPI_HOST_VALUES="trust"))
    assert rc == 0 and "process 0 finished" in output, output


def test_multiprocess_api_and_native_reductions():
    rc, output, _ = launch([os.path.join(PROGRAMS, "api.py")], n=2, timeout=90)
    assert rc == 0, output[-3000:]
    assert "process 0: api ok" in output and "process 1: api ok" in output


CLI = "import sys; from shardc.cli import main; sys.exit(main(sys.argv[1:]))"


def test_cli_run_under_mpiexec_matches_one_process(tmp_path):
    program, a, b = tmp_path / "m.ir", tmp_path / "a.npy", tmp_path / "b.npy"
    rng = np.random.default_rng(0)
    np.save(a, rng.standard_normal((8, 16)).astype(np.float32))
    np.save(b, rng.standard_normal((16, 4)).astype(np.float32))
    rc, output, _ = launch(["-c", CLI, "lower", "examples/seed_tutorial.py:matmul_basic",
                            "--args", "f32[8,16],f32[16,4]", "-o", str(program)])
    assert rc == 0, output
    run = ["-c", CLI, "run", str(program), "--inputs", f"{a},{b}", "-o"]
    rc, output, _ = launch(run + [str(tmp_path / "one.npz")])
    assert rc == 0, output
    rc, output, _ = launch(run + [str(tmp_path / "two.npz")], n=2, timeout=60)
    assert rc == 0, output
    one, two = np.load(tmp_path / "one.npz"), np.load(tmp_path / "two.npz")
    assert one["arr_0"].tobytes() == two["arr_0"].tobytes()
    np.testing.assert_allclose(two["arr_0"], np.load(a) @ np.load(b), rtol=1e-5, atol=1e-5)
    # a text that carries every device's program (parsed, each has variables of its own)
    devices = tmp_path / "devices.ir"
    rc, output, _ = launch(["-c", "import sys; from ir.parser import parse_module; "
                            "from ir.printer import print_module; "
                            "open(sys.argv[2], 'w').write(print_module(parse_module("
                            "open(sys.argv[1]).read()), devices=True))",
                            str(program), str(devices)])
    assert rc == 0 and "device 7" in devices.read_text(), output
    rc, output, _ = launch(["-c", CLI, "run", str(devices), "--inputs", f"{a},{b}", "-o",
                            str(tmp_path / "four.npz")], n=4, timeout=60)
    assert rc == 0, output
    assert np.load(tmp_path / "four.npz")["arr_0"].tobytes() == one["arr_0"].tobytes()


# a jitted psum over 'x' of a (4, 2) mesh, its result y checked against numpy
PSUM_SCRIPT = ("import numpy as np, shardc as jax\n"
               "from shardc import lax\n"
               "from shardc.sharding import PartitionSpec as P\n"
               "from compiler.backend import get_backend\n"
               "mesh = jax.make_mesh((4, 2), ('x', 'y'))\n"
               "f = jax.jit(jax.shard_map(lambda b: lax.psum(b, 'x'), mesh=mesh,\n"
               "                          in_specs=P('x', 'y'), out_specs=P(None, 'y')))\n"
               "y = f(jax.numpy.arange(32.).reshape(8, 4))\n"
               "np.testing.assert_array_equal(np.asarray(y),\n"
               "                              np.arange(32.).reshape(4, 2, 4).sum(0))\n")


def test_mpi_backend_on_one_process_holds_every_device():
    script = PSUM_SCRIPT + (
        "assert get_backend().name == 'mpi' and jax.process_count() == 1\n"
        "assert len(y.addressable_shards) == 8\n"
        "print('ok')\n")
    rc, output, _ = launch(["-c", script], env=_env("mpi"), timeout=60)
    assert rc == 0 and output.strip().endswith("ok"), output


def test_each_process_builds_only_its_own_devices_programs():
    script = PSUM_SCRIPT + (
        "((compiled, _),) = f.array_calls.values()\n"
        "(lowered,) = compiled.module.all_shard_maps()\n"
        "(plan,) = get_backend()._plans.values()\n"
        "me = jax.process_index()\n"
        "assert not lowered.built, 'every device program was built'\n"
        "assert sorted(plan.programs) == [4 * me + k for k in range(4)], plan.programs\n"
        "print(f'process {me} ok')\n")
    rc, output, _ = launch(["-c", script], n=2, timeout=60)
    assert rc == 0, output
    assert "process 0 ok" in output and "process 1 ok" in output, output


def test_processes_on_one_machine_share_its_cores_out_of_the_box():
    """As a user launches it (no thread variable set): each process's BLAS pool and shardc's
    reduction threads get the cores divided by the processes on the machine; a variable the
    user set wins. Each process checks its own; the exit status says."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    script = ("import os, sys, numpy, shardc; from threadpoolctl import threadpool_info; "
              "blas = {i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'}; "
              "want = int(sys.argv[1]); "
              "sys.exit(0 if os.environ['SHARDC_THREADS'] == str(want) and blas <= {want} "
              "else f'threads {os.environ[\"SHARDC_THREADS\"]}, blas {blas}, want {want}')")
    plain = {k: v for k, v in _env().items() if k not in (
        "SHARDC_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    code, output, _ = launch(["-c", script, str(max(1, cores // 2))], n=2, env=plain)
    assert code == 0, output
    code, output, _ = launch(["-c", script, "1"], n=2,
                             env=dict(plain, OMP_NUM_THREADS="1", SHARDC_THREADS="1"))
    assert code == 0, output


def test_a_process_holding_no_device_of_the_mesh_is_told_so():
    script = (
        "import numpy as np, shardc as jax\n"
        "from shardc.sharding import NamedSharding, PartitionSpec as P\n"
        "mesh = jax.make_mesh((2,), ('i',))      # devices 0 and 1: both on process 0\n"
        "try:\n"
        "    jax.make_array_from_process_local_data(NamedSharding(mesh, P('i')), np.ones(4))\n"
        "    print(f'process {jax.process_index()} made it')\n"
        "except ValueError as err:\n"
        "    print(f'process {jax.process_index()}: {err}')\n")
    rc, output, _ = launch(["-c", script], n=2, timeout=60)
    assert "process 1: process 1 holds no device of Mesh(" in output, output
    assert "the mesh must include each process's devices" in output


def test_processes_holding_unequal_runs_of_a_group_agree_on_how_to_reduce():
    """A 5-device mesh over 3 processes of 2 devices: the last holds one member. Every
    process must take the same exchange (it hung when the one holding a single member chose
    the chunked reduction and the others the chain), and the sum is the reference's."""
    script = (
        "import numpy as np, shardc as jax\n"
        "from shardc import lax\n"
        "from shardc.sharding import PartitionSpec as P\n"
        "mesh = jax.make_mesh((5,), ('i',), devices=jax.devices()[:5])\n"
        "x = np.arange(5 * 20000, dtype=np.float32).reshape(5, 20000) / 7\n"
        "for size in (20000, 4):      # blocks above and below the chunked reduction's size\n"
        "    f = jax.jit(jax.shard_map(lambda b: lax.psum(b, 'i'), mesh=mesh,\n"
        "                              in_specs=P('i'), out_specs=P()))\n"
        "    got = np.asarray(f(x[:, :size]))[0]\n"
        "    want = x[0, :size].copy()\n"
        "    for k in range(1, 5):\n"
        "        want = want + x[k, :size]\n"
        "    assert got.tobytes() == want.tobytes(), size\n"
        "print(f'process {jax.process_index()} ok')\n")
    rc, output, _ = launch(["-c", script], n=3, timeout=60, env=_env(SHARDC_NUM_DEVICES="6"))
    assert rc == 0, output
    assert all(f"process {k} ok" in output for k in range(3)), output


def test_replicas_that_differ_under_a_chained_all_reduce_stop_the_job_with_a_reason():
    """A process whose replicated input differs between its devices runs them one at a time,
    which cannot join the all-reduce the other processes complete in turn: it stops the job
    with the reason (and the others say where they waited) rather than leave them waiting."""
    script = (
        "import numpy as np, shardc as jax\n"
        "from shardc import lax\n"
        "from shardc.sharding import NamedSharding, PartitionSpec as P\n"
        "mesh = jax.make_mesh((8,), ('i',))\n"
        "local = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]\n"
        "blocks = [jax.device_put(np.full(4, float(d.id if jax.process_index() == 0 else 1),\n"
        "                                 np.float32), d) for d in local]\n"
        "r = jax.make_array_from_single_device_arrays((4,), NamedSharding(mesh, P()), blocks)\n"
        "x = jax.device_put(np.arange(32., dtype=np.float32), NamedSharding(mesh, P('i')))\n"
        "f = jax.jit(jax.shard_map(lambda a, b: lax.psum(b, 'i') + a, mesh=mesh,\n"
        "                          in_specs=(P(), P('i')), out_specs=P('i'), check_vma=False))\n"
        "np.asarray(f(r, x))\n")
    rc, output, _ = launch(["-c", script], n=2, timeout=60)
    assert rc != 0
    assert ("RuntimeError: process 0: a replicated input of this shard_map holds different "
            "values on this process's devices") in output, output
    assert "process 1 of 2 stops: process 0 failed" in output, output


def test_one_device_on_each_process_gives_the_simulators_bits(tmp_path):
    """As many devices as processes: each process holds one device, and every collective goes
    straight to MPI's own call; the results are bitwise the reference simulator's."""
    checks = os.path.join(PROGRAMS, "checks.py")
    rc, output, _ = launch([checks, str(tmp_path / "one"), "alone"],
                           env=_env("reference", SHARDC_NUM_DEVICES="2"))
    assert rc == 0, output[-3000:]
    rc, output, _ = launch([checks, str(tmp_path / "two"), "alone"], n=2,
                           env=_env(SHARDC_NUM_DEVICES="2"))
    assert rc == 0, output[-3000:]
    reference = dict(np.load(tmp_path / "one" / "rank0.npz"))
    assert len(reference) > 50
    for rank in range(2):
        _assert_bitwise(reference, dict(np.load(tmp_path / "two" / f"rank{rank}.npz")),
                        f"process {rank} of 2, one device each")


def test_each_process_runs_its_devices_stacked():
    """A process's devices make a box of the mesh (a window): it runs the mesh-level program
    once over their blocks stacked, exchanging only across processes. A mesh whose devices
    are not in id order may give a process no box: its devices then run one at a time,
    counted, with the same values."""
    script = PSUM_SCRIPT + (
        "from runtime.mpi import stacked\n"
        "assert stacked.paths['stacked'] == 1 and sum(stacked.paths.values()) == 1, "
        "stacked.paths\n"
        "x = jax.numpy.arange(32.).reshape(8, 4)\n"
        "for order, path in (([0, 4, 1, 5, 2, 6, 3, 7], 'stacked'),\n"
        "                    ([0, 4, 5, 1, 2, 6, 7, 3], 'not_a_box')):\n"
        "    devices = np.array(jax.devices())[order].reshape(4, 2)\n"
        "    m = jax.sharding.Mesh(devices, ('x', 'y'))\n"
        "    before = dict(stacked.paths)\n"
        "    g = jax.jit(jax.shard_map(lambda b: lax.psum(b, 'x') * lax.axis_index('y'),\n"
        "                              mesh=m, in_specs=P('x', 'y'), out_specs=P(None, 'y')))\n"
        "    want = np.arange(32.).reshape(4, 2, 4).sum(0) * np.repeat([0., 1.], 2)\n"
        "    np.testing.assert_array_equal(np.asarray(g(x)), want)\n"
        "    assert stacked.paths[path] == before[path] + 1, (path, stacked.paths)\n"
        "print(f'process {jax.process_index()} ok')\n")
    rc, output, _ = launch(["-c", script], n=2, timeout=60)
    assert rc == 0, output
    assert "process 0 ok" in output and "process 1 ok" in output, output
