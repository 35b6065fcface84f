import dpmtv

PINNED = [
    "BuildResult",
    "BuildSettings",
    "Example",
    "HeadSet",
    "LoadedModel",
    "PatchMode",
    "Prompt",
    "Record",
    "TaskVector",
    "__version__",
    "answer_queries",
    "apply",
    "build_task_vector",
    "capture_last_token",
    "errors",
    "load_model",
    "load_records",
    "load_task_vector",
    "overwrite_heads",
    "parse_head_spec",
    "save_task_vector",
    "supported_families",
]


def test_public_api_is_pinned():
    assert sorted(dpmtv.__all__) == sorted(PINNED)


def test_every_public_name_resolves():
    for name in dpmtv.__all__:
        assert getattr(dpmtv, name) is not None


def test_exports_are_derived_from_the_modules_and_are_not_shadowed():
    """Every exported name is the object its module defines — also after importing every
    submodule, which rebinds package attributes named like a submodule (``dpmtv.apply`` was a
    function or a module depending on import order)."""
    import importlib
    import pkgutil

    for module in pkgutil.walk_packages(dpmtv.__path__, "dpmtv."):
        if ".cli" not in module.name and ".serve" not in module.name:
            importlib.import_module(module.name)
    for name, module_name in dpmtv._EXPORTS.items():
        assert getattr(dpmtv, name) is getattr(importlib.import_module(module_name), name), name
