"""Issue 49.8: every public function of the library (and of atlas_engine.formats, which
AtlasClient reads maps with) has a docstring, which says what it returns."""

import importlib
import inspect
import pkgutil

import attention_atlas

MODULES = [
    *(f"attention_atlas.{info.name}" for info in pkgutil.iter_modules(attention_atlas.__path__)),
    "atlas_engine.formats",
]


def public_callables():
    """(dotted name, object) of each public function, class, method and property defined in
    MODULES (the names without a leading underscore, defined there, not imported)."""
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            function = inspect.unwrap(value) if callable(value) else value
            if name.startswith("_") or getattr(value, "__module__", None) != module_name:
                continue
            if inspect.isfunction(function):
                yield f"{module_name}.{name}", function
            elif inspect.isclass(value):
                yield f"{module_name}.{name}", value
                for member, attribute in vars(value).items():
                    method = attribute.fget if isinstance(attribute, property) else attribute
                    if not member.startswith("_") and inspect.isfunction(method):
                        yield f"{module_name}.{name}.{member}", method


def test_every_public_function_says_what_it_returns():
    found = dict(public_callables())
    assert {"atlas_engine.formats.decode_maps", "attention_atlas.run.run_model"} <= set(found)
    assert "attention_atlas.client.AtlasClient.attention" in found
    assert "attention_atlas.bundle.widget_esm" in found  # behind lru_cache
    missing = sorted(name for name, value in found.items() if not inspect.getdoc(value))
    assert missing == [], f"public functions without a docstring: {missing}"
