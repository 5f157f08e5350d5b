"""The loader that decides: imported at the first import of a module of thunder, never at interpreter start."""


class DecidingLoader:
    """Wraps the loader another finder gave for a module of thunder: decides (``ThunderFinder.decide``), then
    executes the module, patched if the series changes it. From then on the module's ``__loader__`` and spec
    name the loader that really executed it; anything else a loader is asked is the wrapped loader's answer."""

    def __init__(self, finder, loader):
        self.finder, self.loader = finder, loader

    def create_module(self, spec):
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module) -> None:
        patched = self.finder.decide(module.__name__)
        loader = patched.loader if patched is not None else self.loader
        module.__loader__ = loader
        if module.__spec__ is not None:
            module.__spec__.loader = loader
        loader.exec_module(module)

    def __getattr__(self, name):
        return getattr(self.loader, name)
