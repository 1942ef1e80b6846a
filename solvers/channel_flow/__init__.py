r"""Steady incompressible flow through a channel around obstacles (not yet a registered family).

Strong form, on a :class:`~pdeladder.solvers.geometry.Domain` :math:`\Omega`, the box
:math:`(0, L) \times (0, H)` less its obstacles, in kinematic units (:math:`p` is the pressure
over the density):

.. math::
    (u \cdot \nabla) u - \nu \Delta u + \nabla p = 0, \qquad \nabla \cdot u = 0 \quad
    \text{in } \Omega,

with the parabolic inflow :math:`u = (4 U y (H - y) / H^2, 0)` at :math:`x = 0` (maximum
:math:`U`, mean :math:`\bar U = 2U/3`), no slip :math:`u = 0` on the walls :math:`y = 0, H`
and on the obstacles, and the do-nothing outflow :math:`\nu \partial_n u - p n = 0` at
:math:`x = L`. The Reynolds number of an obstacle of diameter :math:`D` is :math:`\bar U D /
\nu`.

The DFG benchmark 2D-1 (Schäfer & Turek 1996, "Benchmark computations of laminar flow around a
cylinder", Notes Numer. Fluid Mech. 52) is this problem in the channel 2.2 m x 0.41 m around the
cylinder of centre (0.2, 0.2) m and radius 0.05 m, with :math:`\nu = 10^{-3}` m²/s,
:math:`U = 0.3` m/s (Re = 20): :data:`DFG_2D1`, its published bounds :data:`DFG_2D1_BOUNDS` and
reference values :data:`DFG_2D1_REFERENCE`.

The weak form, Newton solve and the benchmark's quantities are in
:mod:`pdeladder.solvers.channel_flow.fem`.
"""

from pdeladder.solvers.family import Parameters, parameter
from pdeladder.solvers.geometry.domain import Circle, Domain


class ChannelFlowParams(Parameters):
    """Kinematic viscosity and inflow. The ranges keep the Reynolds number ``Ū D / ν`` at most
    40 for obstacles up to ``D = 0.1`` m: the steady regime (flow past a cylinder sheds vortices
    from Re ≈ 47; Newton from rest, as :meth:`ChannelFlow.solve` runs it, converges at Re = 50
    on the DFG channel and diverges at Re = 100)."""

    viscosity: float = parameter(1e-3, 5e-4, 1e-1, "m2 s-1", "kinematic viscosity ν")
    inflow_speed: float = parameter(
        0.3, 0.01, 0.3, "m s-1", "maximum U of the parabolic inflow (its mean Ū is 2U/3)"
    )


#: The DFG 2D-1 channel and cylinder (metres) and its parameters (Re = 20).
DFG_2D1 = Domain((2.2, 0.41), (Circle((0.2, 0.2), 0.05),))
DFG_2D1_PARAMS = ChannelFlowParams(viscosity=1e-3, inflow_speed=0.3)

#: The points in front of and behind the cylinder whose pressure difference is Δp (metres).
DFG_2D1_PRESSURE_POINTS = ((0.15, 0.2), (0.25, 0.2))

#: Bounds on c_D, c_L and Δp (m²/s², ρ = 1) published by Schäfer & Turek (1996) for 2D-1.
DFG_2D1_BOUNDS = {"c_D": (5.57, 5.59), "c_L": (0.0104, 0.0110), "delta_p": (0.1172, 0.1176)}

#: Reference values computed on fine meshes by the FeatFlow group (TU Dortmund), listed on
#: https://wwwold.mathematik.tu-dortmund.de/~featflow/en/benchmarks/cfdbenchmarking/flow/dfg_benchmark1_re20.html
DFG_2D1_REFERENCE = {"c_D": 5.57953523384, "c_L": 0.010618948146, "delta_p": 0.11752016697}
