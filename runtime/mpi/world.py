"""The MPI world: whether shardc runs on MPI, COMM_WORLD, this process's rank, and one
sub-communicator per set of ranks."""
from __future__ import annotations

import os


# the environment the common launchers give each process: its world size
_LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS")


def launched_size() -> int:
    """The number of processes the launcher started (1 outside ``mpiexec``)."""
    for name in _LAUNCHER_SIZE_VARS:
        text = os.environ.get(name)
        if text and text.isdigit():
            return int(text)
    return 1


def wanted() -> bool:
    """Whether shardc should run on MPI: ``SHARDC_BACKEND=mpi``, or (no backend named) a
    launch of more than one process."""
    name = os.environ.get("SHARDC_BACKEND", "")
    if name:
        return name == "mpi"
    return launched_size() > 1


class World:
    """COMM_WORLD, this rank, and one sub-communicator per set of ranks (made on first use, by
    exactly those ranks, in the one global order of the groups that need them)."""

    def __init__(self):
        try:
            from mpi4py import MPI
        except ImportError as err:
            raise ImportError("the MPI backend needs mpi4py and an MPI library: "
                              "pip install -e '.[mpi]' (mpi4py and mpich)") from err
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._comms = {tuple(range(self.size)): self.comm}
        # the processes meet here at exit; a communicator of its own never meets another call
        self.exit_comm = self.comm.Dup()
        # every operation across processes opens with an agreement here (``Agreement``)
        self.check_comm = self.comm.Dup()
        # a process leaving the job tells the others here (``faults``)
        self.notice_comm = self.comm.Dup()
        local = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
        # the world ranks on this machine (their memory can be shared: ``shared``)
        self.machine_ranks = frozenset(local.allgather(self.rank))
        if local.Get_rank() == 0:
            release_launch_segments()   # every process of this machine has them mapped now
        local.Free()
        self.threads = share_cores(len(self.machine_ranks))
        # more processes here than cores: a waiting process must leave its core to the ones
        # it waits for (``faults.wait_all``)
        self.oversubscribed = len(self.machine_ranks) > usable_cores()

    def existing_comm(self, ranks: tuple):
        """The communicator of ``ranks`` if it was made already, else None."""
        return self._comms.get(ranks)

    def comm_of(self, ranks: tuple):
        """The communicator of ``ranks`` (sorted); its rank k is world rank ``ranks[k]``."""
        comm = self._comms.get(ranks)
        if comm is None:
            group = self.comm.Get_group().Incl(list(ranks))
            comm = self.comm.Create_group(group, tag=_CREATE_TAG)
            group.Free()
            self._comms[ranks] = comm
        return comm

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)


_CREATE_TAG = 7311

# where Linux lists a process's mapped files, and the name MPICH gives the shared memory its
# processes on one machine meet in at MPI_Init
_MAPS = "/proc/self/maps"
_LAUNCH_SEGMENT = "/dev/shm/mpich_shm_"


def release_launch_segments() -> None:
    """Remove the names of MPICH's launch segments this process has mapped.

    MPICH removes a segment's name at MPI_Finalize. A job that aborts, or loses a process to a
    signal, never gets there, and the segment (2-4 MiB) stays in ``/dev/shm`` until the machine
    restarts: every failed job would leak one. Called once every process of the machine has
    mapped it; the memory lives on, unnamed, until the last of them exits."""
    try:
        with open(_MAPS) as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps
                     if _LAUNCH_SEGMENT in line}
    except OSError:
        return                          # not Linux: nothing to do
    for path in sorted(paths):
        if path.startswith(_LAUNCH_SEGMENT) and not path.endswith("(deleted)"):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

# the variables a user sets to size thread pools: any of them set, shardc leaves BLAS alone
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def usable_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def share_cores(here: int) -> int:
    """The ``here`` processes on one machine share its cores: each gets ``cores // here``
    threads, for BLAS (limited at run time with threadpoolctl, whatever loaded it first) and
    for shardc's reduction threads (``SHARDC_THREADS``). A thread variable the user set wins.
    Without this, ``mpiexec -n 2 python script.py`` gives each process a BLAS pool as large as
    the machine, and the pools and MPICH's polling fight for the cores."""
    share = max(1, usable_cores() // here)
    if here > 1:
        if not any(os.environ.get(name) for name in THREAD_VARIABLES):
            from threadpoolctl import threadpool_limits
            threadpool_limits(limits=share)
        os.environ.setdefault("SHARDC_THREADS", str(share))
    return share


_world: list = []


def world() -> World:
    """The MPI world, joined on first use."""
    if not _world:
        _world.append(World())
    return _world[0]


def set_world(stand_in) -> None:
    """Use ``stand_in`` as the world (a benchmark's loopback stand-in for several processes)."""
    _world[:] = [stand_in]
