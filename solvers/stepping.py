"""Time stepping, once for every family: a :class:`TimeStepper` assembles its problem on one mesh,
steps its state in place, yields it after every step (``for n, state in stepper.run(steps)``),
records the solver statistics, and releases the PETSc objects it made when the ``with`` block
around it ends, a failed solve included.
"""

from mpi4py import MPI

import contextlib
import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Self

import numpy as np

from pdeladder.errors import SolveError
from pdeladder.solvers.family import SolveStats
from pdeladder.solvers.fem import GridSampler, solver_provenance
from pdeladder.solvers.grid import Grid


class TimeStepper(ABC):
    """One time-dependent problem on one mesh, stepped with the fixed step ``tau``.

    A subclass assembles its forms in ``__init__`` (passing each PETSc object it creates through
    :meth:`own`), sets :attr:`state` (the functions stepped in place), :attr:`dofs` and
    :attr:`solver`, and implements :meth:`step`. Use it as a context manager: leaving the block
    destroys what it owns, on failure too.
    """

    #: degrees of freedom of the discrete problem (all unknowns)
    dofs: int
    #: name of the linear solver (:data:`~pdeladder.solvers.fem.SOLVERS`)
    solver: str
    #: what :meth:`run` yields: the state functions (one, or a tuple)
    state: Any

    def __init__(self, msh: Any, tau: float):
        self.msh, self.tau = msh, tau
        self._owned: list[Any] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Guard each subclass's ``__init__``: when assembling fails part way (a factorization,
        say), what it owned so far is destroyed, since no ``with`` block has started yet."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return

        @functools.wraps(init)
        def guarded(self: "TimeStepper", *args: Any, **kw: Any) -> None:
            try:
                init(self, *args, **kw)
            except BaseException:
                self.close()
                raise

        cls.__init__ = guarded  # type: ignore[method-assign]

    def own[T](self, obj: T) -> T:
        """Register a PETSc object (anything with ``destroy()``) to release on :meth:`close`."""
        self._owned.append(obj)
        return obj

    def close(self) -> None:
        """Destroy every owned PETSc object, last made first."""
        owned = getattr(self, "_owned", [])  # none yet if a subclass failed before super()
        while owned:
            owned.pop().destroy()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def begin(self) -> None:  # noqa: B027  (a hook: most steppers need nothing here)
        """Called by :meth:`run` with the initial state set, before it is yielded."""

    def check_finite(self, n: int, *functions: Any) -> None:
        """Raise :class:`~pdeladder.errors.SolveError` on every rank alike when any rank holds a
        non-finite dof of ``functions`` after step ``n`` (a rank-local check would leave the
        other ranks waiting in the next collective solve)."""
        finite = all(bool(np.all(np.isfinite(f.x.array))) for f in functions)
        comm = self.msh.comm
        if comm.size > 1:
            finite = comm.allreduce(finite, op=MPI.LAND)
        if not finite:
            raise SolveError(f"non-finite values after step {n}")

    @abstractmethod
    def step(self, n: int) -> int:
        """Advance :attr:`state` from ``t = (n - 1) tau`` to ``n tau``; returns the Krylov
        iterations. Raises :class:`~pdeladder.errors.SolveError` when a solve fails."""

    def run(self, steps: int, stats: SolveStats | None = None) -> Iterator[tuple[int, Any]]:
        """Yield ``(n, state)`` for ``n = 0`` (the initial state) and after each of ``steps``
        steps. ``stats`` receives dofs, steps, Krylov iterations and solve time, also when a
        step fails or the caller stops early."""
        self.begin()
        iterations, t0 = 0, time.perf_counter()
        try:
            yield 0, self.state
            for n in range(1, steps + 1):
                iterations += self.step(n)
                yield n, self.state
        finally:
            if stats is not None:
                stats.dofs, stats.steps = self.dofs, steps
                stats.krylov_iterations += iterations
                stats.solve_s += time.perf_counter() - t0

    def advance(self, steps: int) -> None:
        """Take ``steps`` steps from the initial state, yielding nothing."""
        for _ in self.run(steps):
            pass

    def sampled(
        self,
        steps: int,
        every: int,
        sample: Callable[[int, Any], np.ndarray],
        stats: SolveStats | None = None,
    ) -> np.ndarray:
        """The stored trajectory: ``sample(n, state)`` at steps ``n = 0, every, 2 every, ...,
        steps``, stacked as float32 ``(T, C, X, Y, Z)`` (``sample`` returns ``(C, X, Y, Z)`` and
        may raise :class:`~pdeladder.errors.SolveError` to reject a state)."""
        with contextlib.closing(self.run(steps, stats)) as states:
            frames = [sample(n, state) for n, state in states if n % every == 0]
        return np.stack(frames).astype(np.float32)

    def trajectory(
        self,
        grid: Grid,
        initial: Sequence[np.ndarray],
        steps: int,
        every: int,
        stats: SolveStats | None = None,
    ) -> np.ndarray:
        """A sample's stored fields: each function of :attr:`state` (on the mesh of ``grid``)
        set to its grid values in ``initial`` (``(X, Y, Z)``, or ``(bs, X, Y, Z)`` for a vector
        function), stepped ``steps`` times and sampled as by :meth:`sampled`, their channels
        concatenated in order: float32 ``(T, C, X, Y, Z)``."""
        functions = self.state if isinstance(self.state, tuple) else (self.state,)
        samplers = [GridSampler(f.function_space, grid) for f in functions]
        for sampler, f, values in zip(samplers, functions, initial, strict=True):
            sampler.from_grid(f, values)

        def frame(n: int, state: Any) -> np.ndarray:
            return np.concatenate([s.to_grid(f) for s, f in zip(samplers, functions, strict=True)])

        return self.sampled(steps, every, frame, stats)

    def provenance(self, grid: Grid, **described: Any) -> dict[str, Any]:
        """The provenance of a sample on ``grid``: ``described`` (element, time scheme, ...)
        with the time step, mesh and linear solver (``described`` may override them)."""
        return {
            "time_step": self.tau,
            "mesh": f"{self.msh.topology.cell_name()} {grid.cells}^{grid.dim}",
            "linear_solver": solver_provenance(self.msh.comm, self.solver),
            **described,
        }
