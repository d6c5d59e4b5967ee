"""The import boundaries of the architecture, checked on the source."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def sources(folder: str):
    return sorted((ROOT / folder).rglob("*.py"))


def test_runtime_never_imports_qt_or_app():
    for p in sources("runtime"):
        assert not imports(p) & {"PySide6", "qasync", "app"}, p


def test_only_backends_import_llama_cpp():
    for p in sources("runtime") + sources("app"):
        if "backends" not in p.parts:
            assert "llama_cpp" not in imports(p), p


def test_only_backends_import_onnxruntime():
    for p in sources("runtime") + sources("app"):
        if "backends" not in p.parts:
            assert "onnxruntime" not in imports(p), p


def test_kernels_import_only_numpy_and_stdlib():
    import sys

    allowed = {"numpy", "runtime", "__future__"} | set(sys.stdlib_module_names)
    for p in sources("runtime/kernels"):
        assert imports(p) <= allowed, p


def _full_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_engine_protocol_imports_nothing_of_an_engine():
    """The engine interface is a contract: the service's residency code uses it alone."""
    for name in ("runtime/engine/protocol.py", "runtime/server/router.py", "runtime/server/residency.py"):
        found = {m for m in _full_imports(ROOT / name) if m.startswith("runtime.")}
        allowed = {"runtime.engine.protocol", "runtime.server.residency", "runtime.hardware.fit",
                   "runtime.hardware.memory"}
        assert found <= allowed, (name, found - allowed)


def test_backends_import_nothing_of_the_engine():
    """The lower layer does not reach up: what both need (SamplingParams) lives in runtime/."""
    for p in sources("runtime/backends"):
        found = {m for m in _full_imports(p) if m.startswith("runtime.engine")}
        assert not found, (p, found)


def test_the_app_reaches_the_service_only_over_http():
    """The app may share runtime/'s plain modules (data directory, identity proof, key file), never
    the service's code or its command line; and it reads no process of the service directly."""
    for p in sources("app"):
        found = _service_imports(p)
        assert not found, (p, found)
        assert "psutil" not in imports(p), p


def _service_imports(path: Path) -> set[str]:
    """Modules of the service (runtime.server, runtime.cli) that a file imports, in any spelling."""
    names = set(_full_imports(path))
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "runtime" and node.level == 0:
            names |= {f"runtime.{a.name}" for a in node.names}
    return {m for m in names if m in ("runtime.server", "runtime.cli")
            or m.startswith(("runtime.server.", "runtime.cli."))}


def test_the_layout_check_sees_every_spelling(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from runtime.server.api import x\n    import runtime.cli\n"
                   "    from runtime import server, identity\n")
    assert _service_imports(bad) == {"runtime.server.api", "runtime.cli", "runtime.server"}


def test_only_the_kv_cache_manager_touches_kv_memory():
    """The engine reaches a model's cells only through ``KVCacheManager``: the memory operations
    of ``KVMemory`` are called in the manager, its checkpoints and the draft mirror alone."""
    from runtime.engine.kv_memory import KVMemory

    ops = {n for n in vars(KVMemory) if not n.startswith("_")}
    assert {"seq_rm", "seq_cp", "state_seq_save"} <= ops
    owners = {"kv_cache_manager.py", "checkpoints.py", "draft_mirror.py"}
    for p in sources("runtime/engine"):
        if p.name in owners:
            continue
        calls = {n.func.attr for n in ast.walk(ast.parse(p.read_text()))
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
        assert not calls & ops, (p, calls & ops)
