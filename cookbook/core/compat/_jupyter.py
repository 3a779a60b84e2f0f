"""jupyter_client: a kernel manager that does not interrupt a kernel it is shutting down.

Checked against jupyter_client 8.10.0. ``KernelManager._async_shutdown_kernel`` sets
``shutting_down``, then calls ``_async_interrupt_kernel`` (a SIGINT, for ipykernel's kernel spec)
before it sends the shutdown request. When a notebook has finished there is nothing to interrupt;
and a SIGINT that lands while ipykernel handles a message is logged as "[IPKernelApp] ERROR |
KeyboardInterrupt caught in kernel.", which reached ``make demo``'s console from a kernel on a busy
core inside ``make test`` (2026-12-06).
"""

from __future__ import annotations


def without_shutdown_interrupt(manager_cls: type) -> type:
    """``manager_cls`` (a jupyter_client ``KernelManager``) whose shutdown sends no interrupt first;
    an interrupt asked for while no shutdown is under way is sent as before."""

    class NoInterruptAtShutdown(manager_cls):
        async def _async_interrupt_kernel(self) -> None:
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

    NoInterruptAtShutdown.__name__ = NoInterruptAtShutdown.__qualname__ = manager_cls.__name__
    return NoInterruptAtShutdown


def checks() -> dict[str, bool]:
    import inspect

    from jupyter_client.manager import KernelManager

    shutdown = inspect.getsource(KernelManager._async_shutdown_kernel)
    return {
        "jupyter_client KernelManager sets shutting_down, then interrupts, before a shutdown": (
            "self.shutting_down = True" in shutdown
            and shutdown.index("self.shutting_down = True") < shutdown.index("self._async_interrupt_kernel()")
        ),
    }
