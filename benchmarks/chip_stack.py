"""Spreading resistance of an eccentric heat source on a compound flux channel (Muzychka,
Culham & Yovanovich, J. Electronic Packaging 125 (2003) 178-185), solved by
``solvers/chip_stack``'s P2 FEM on meshes that each halve the last one's spacing, beside the
Fourier-series solution; then a chip_stack sample's hot spot and sink heat at rising resolution.

Table 1, per dimension (the strip ``BENCHMARK_STRIP`` in 2D, the rectangular channel
``BENCHMARK_CHANNEL`` in 3D): per mesh its cells, dofs, the patch's mean temperature rise from
the FEM and from the series (``reference_source_temperature``), their relative error, the
spreading resistance ``R_s = θ̄/Q - R_1D`` of both and its relative error, the observed order
between successive meshes, and the solve's seconds. Table 2: one 2D sample (seed 7, default
parameters) at 17, 33, 65, 129 points: the hot-spot temperature and its change from the last
resolution, and the heat through the sink against the die's power.

Run: ``.venv/bin/python benchmarks/chip_stack.py [--levels-2d 5] [--levels-3d 3]``.
"""

import argparse
import math
import time

from pdeladder.solvers.chip_stack import ChipStack
from pdeladder.solvers.chip_stack.fem import (
    BENCHMARK_CHANNEL,
    BENCHMARK_STRIP,
    FluxChannel,
    fem_source_temperature,
    reference_source_temperature,
)

#: The coarsest mesh per dimension (cells per axis, the stack last); each level doubles them.
COARSEST = {2: (20, 8), 3: (20, 20, 4)}


def table(channel: FluxChannel, levels: int) -> None:
    exact = reference_source_temperature(channel)
    one_d = channel.one_dimensional_resistance()
    r_exact = exact / channel.power - one_d
    unit = "K m/W" if channel.dim == 2 else "K/W"
    print(
        f"{channel.dim}D: patch {channel.patch} m, layers {channel.layers} (m, W/m/K), "
        f"q = {channel.flux:g} W/m², h = {channel.sink:g} W/m²/K; series θ̄ = {exact:.9f} K, "
        f"R_s = {r_exact:.6e} {unit}"
    )
    print(
        f"{'cells':>14} {'dofs':>8} {'θ̄ FEM (K)':>13} {'θ̄ series':>13} {'rel err':>9} "
        f"{'R_s FEM':>12} {'R_s series':>12} {'rel err':>9} {'order':>6} {'s':>6}"
    )
    last = None
    for k in range(levels):
        cells = tuple(c * 2**k for c in COARSEST[channel.dim])
        t0 = time.perf_counter()
        value, dofs = fem_source_temperature(channel, cells)
        seconds = time.perf_counter() - t0
        error = (value - exact) / exact
        r_fem = value / channel.power - one_d
        order = "" if last is None else f"{math.log2(abs(last / error)):.2f}"
        print(
            f"{'x'.join(map(str, cells)):>14} {dofs:>8} {value:>13.9f} {exact:>13.9f} "
            f"{error:>9.2e} {r_fem:>12.6e} {r_exact:>12.6e} {(r_fem - r_exact) / r_exact:>9.2e} "
            f"{order:>6} {seconds:>6.1f}"
        )
        last = error
    print()


def sample_table() -> None:
    fam = ChipStack()
    print("2D sample, seed 7, default parameters:")
    print(f"{'points':>7} {'hot spot (K)':>13} {'change':>9} {'at (mm)':>16} {'sink/power':>12}")
    last = None
    for resolution in (17, 33, 65, 129):
        s = fam.run(fam.Params(), fam.grid(2, resolution, 1), seed=7)
        p = s.provenance
        hot = p["hot_spot_temperature"]
        change = "" if last is None else f"{(hot - last) / hot:.1e}"
        where = ", ".join(f"{1e3 * c:.3f}" for c in p["hot_spot_location"])
        balance = p["sink_heat_flow"] / p["power"]
        print(f"{resolution:>7} {hot:>13.6f} {change:>9} {where:>16} {balance:>12.10f}")
        last = hot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels-2d", type=int, default=5, help="2D meshes, from 20 x 8 cells")
    parser.add_argument("--levels-3d", type=int, default=3, help="3D meshes, from 20² x 4 cells")
    args = parser.parse_args()
    table(BENCHMARK_STRIP, args.levels_2d)
    table(BENCHMARK_CHANNEL, args.levels_3d)
    sample_table()


if __name__ == "__main__":
    main()
