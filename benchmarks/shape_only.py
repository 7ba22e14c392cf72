"""Shape-only lowering: trace, partition, check and lower the mesh-scaling program for a mesh of
N devices from ``ShapeDtypeStruct`` arguments, allocating no device buffer, and build every
device's program (``jit`` alone builds them only when something reads them).

    python -m benchmarks.shape_only --devices 4096

prints one JSON line: {"devices", "seconds"}. Run in a child process (the harness kills it
past its time limit), with SHARDC_NUM_DEVICES set to N before shardc is imported.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

# the mesh sizes ``make bench`` lowers shape-only, and the seconds each should take at most
SHAPE_ONLY_TARGETS = {4096: 1.0, 16384: 2.0, 65536: 10.0}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.shape_only")
    parser.add_argument("--devices", type=int, default=4096)
    args = parser.parse_args(argv)
    os.environ["SHARDC_NUM_DEVICES"] = str(max(args.devices, 8))

    import numpy as np
    import shardc
    import shardc.numpy as jnp
    from shardc import lax
    from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P
    from benchmarks.scenarios import SCALING_BLOCK

    n = args.devices
    mesh = Mesh(np.array(shardc.devices()[:n], dtype=object), ("i",))
    f = shardc.shard_map(lambda x, w: lax.psum(jnp.dot(x, w), "i"), mesh=mesh,
                         in_specs=(P("i"), P()), out_specs=P())
    rows, cols = SCALING_BLOCK
    x = shardc.ShapeDtypeStruct((rows * n, cols), np.float32, NamedSharding(mesh, P("i")))
    w = shardc.ShapeDtypeStruct((cols, cols), np.float32)
    start = time.perf_counter()
    compiled = shardc.jit(f).lower(x, w)
    # per-device programs are built when first read: read every one of them
    programs = sum(len(lowered.device_programs) for lowered in compiled.module.all_shard_maps())
    seconds = time.perf_counter() - start
    assert programs == n, programs
    print(json.dumps({"devices": n, "seconds": seconds}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
