"""Small programs that upstream thunder gets wrong, one per module.

Each module's ``run()`` compiles its program with thunder.jit, checks what it computes (against a float64
eager reference) or how its trace is named, checks every trace thunder kept, and raises on any failure. ``thunder-overlay verify`` runs
each in a fresh process under stock thunder and under the overlay; the tests import them directly.
"""

import importlib

PROGRAMS = (
    "seed_283_autocast",
    "autocast_chain",
    "autocast_chain_grad",
    "seed_946_names",
    "autocast_user_names",
)


def load(name: str):
    return importlib.import_module(f"{__name__}.{name}")


def main(name: str) -> None:
    """Run one program and print its outcome with the overlay state of this process (used by verify)."""
    import thunder_overlay

    detail = load(name).run()
    print(f"[{thunder_overlay.status()['state']}] {detail}")
