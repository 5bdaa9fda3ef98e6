"""What a Session does when a run fails: put donated variables back and raise what the
user should see (a run is all or nothing; see :mod:`ipuxl.session`)."""

from __future__ import annotations

import jax

from ipuxl.host_callbacks import take_interrupt
from ipuxl.popart import poplar_application_runtime_error

__all__ = ["SessionFailure"]


class SessionFailure:
    """The failed-run half of :class:`ipuxl.session.Session` (a mixin: it reads the
    Session's ``_donate``, ``_host_in_sync`` and ``_weights_from_host``)."""

    _donate: bool
    _host_in_sync: bool
    _lost_updates: bool

    def _failed_run(self, state: tuple[jax.Array, ...], error: BaseException) -> None:
        """After a run raised ``error``: put donated state back, then raise."""
        if self._donate:
            self._restore_donated_state(state)
        self._raise_failed_run(error)

    def _restore_donated_state(self, state: tuple[jax.Array, ...]) -> None:
        """With ``donate_variables``: after a failed run that consumed the donated state,
        put the host copy back on the device (it may be older than the last run)."""
        if not any(a.is_deleted() for a in state):
            self._lost_updates = False
            return
        self._lost_updates = not self._host_in_sync
        self._weights_from_host()
        self._host_in_sync = True

    def _raise_failed_run(self, error: BaseException) -> None:
        """Raise what a user should see after the run raised ``error``: the device state
        was not replaced, so the variables keep the values of the last finished run
        (with ``donate_variables``, of the last host copy)."""
        lost, self._lost_updates = self._lost_updates, False
        kept = ("The variables keep their values from before the run (the last finished "
                "run)." if not lost else
                "The variables were donated to the run (donate_variables=True) and the host "
                "copy was older than the last run, so they are back at their values of the "
                "last `weights_to_host` (or `get_tensor_data`, or write): the updates of the "
                "runs since then are lost.")
        interrupted = take_interrupt()
        if isinstance(error, KeyboardInterrupt):
            raise error
        if interrupted:
            raise KeyboardInterrupt(
                f"The run was interrupted (Ctrl-C during a host callback). {kept}"
            ) from error
        if not isinstance(error, Exception):
            raise error  # SystemExit, GeneratorExit: not ours to translate
        if isinstance(error, MemoryError):  # the host arrays for the results
            raise MemoryError(
                f"The run's results do not fit in host memory: {error}\n{kept}"
            ) from error
        # XLA puts the failing callback's traceback in the message: its last line says why.
        lines = str(error).strip().splitlines()
        reason = lines[-1] if lines else type(error).__name__
        raise poplar_application_runtime_error(
            f"The program failed while running on the device: {reason}\n{kept}"
        ) from error
