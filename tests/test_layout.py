"""The import boundaries of the architecture, checked on the source."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse(path: Path) -> ast.Module:
    """The module's tree. CPython 3.11 can raise ``SystemError: AST constructor recursion depth
    mismatch`` when a finalizer of an earlier test's objects runs inside the parse (seen once in
    a full run); parsing again gives the tree."""
    text = path.read_text()
    try:
        return ast.parse(text)
    except SystemError:
        return ast.parse(text)


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(parse(path)):
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
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_engine_protocol_imports_nothing_of_an_engine():
    """The engine interface is a contract: the service's residency code uses it alone."""
    for name in ("runtime/engine/protocol.py", "runtime/server/models/router.py", "runtime/server/models/residency.py"):
        found = {m for m in _full_imports(ROOT / name) if m.startswith("runtime.")}
        # the output contract and the tool choice are plain values the protocol carries (no engine behind them)
        allowed = {"runtime.engine.protocol", "runtime.server.models.residency", "runtime.hardware.fit",
                   "runtime.hardware.memory", "runtime.chat.contract", "runtime.tool_choice"}
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
    for node in ast.walk(parse(path)):
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
        calls = {n.func.attr for n in ast.walk(parse(p))
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
        assert not calls & ops, (p, calls & ops)


def package_edges(root: Path) -> dict[str, set[str]]:
    """Which packages of ``root`` (runtime/) import which others, lazy imports included."""
    pkgs = {p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    edges: dict[str, set[str]] = {p: set() for p in pkgs}
    for f in root.rglob("*.py"):
        parts = f.relative_to(root).parts
        if len(parts) < 2 or parts[0] not in pkgs:
            continue
        for node in ast.walk(parse(f)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            for name in names:
                bits = name.split(".")
                if bits[0] == root.name and len(bits) > 1 and bits[1] in pkgs and bits[1] != parts[0]:
                    edges[parts[0]].add(bits[1])
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every package that can reach itself through imports, with one path that does."""
    found = []
    for start in sorted(edges):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(edges[node]):
                if nxt == start:
                    found.append(path + [start])
                    stack.clear()
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return found


def test_no_import_cycle_between_packages():
    assert cycles(package_edges(ROOT / "runtime")) == []


def test_the_cycle_check_sees_a_lazy_import(tmp_path):
    root = tmp_path / "runtime"
    for pkg, body in {"a": "from runtime.b import x\n", "b": "def f():\n    import runtime.a.y\n"}.items():
        (root / pkg).mkdir(parents=True)
        (root / pkg / "m.py").write_text(body)
    assert cycles(package_edges(root)) == [["a", "b", "a"], ["b", "a", "b"]]


def test_the_service_side_of_the_pipe_loads_no_step_loop():
    """The boundary types (outputs, messages, constraint specs) live apart from the step loop: the
    service's engine client imports neither the engine, its scheduler, nor a native library."""
    import subprocess
    import sys

    code = ("import sys, runtime.engine.client, runtime.server.generate.reply\n"
            "print(sorted(m for m in sys.modules if m in ('runtime.engine.engine', 'runtime.engine.scheduler',"
            " 'llguidance', 'llama_cpp', 'onnxruntime')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_service_loads_no_numpy_until_it_needs_it():
    """The service process reads headers, routes requests and relays tokens: numpy (and the gguf
    package, which loads it) come only with an embedding request, a logprob's computation in a
    worker, or the one-time bandwidth measure (about 12 MiB of the service's memory)."""
    import subprocess
    import sys

    code = ("import sys, runtime.cli, runtime.server.app\n"
            "runtime.cli.build_parser()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'gguf', 'PIL')"
            " and '.' not in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


#: runtime/server's layers, lowest first: a module imports its own layer and the ones below it.
#: The shell's base (errors, validation, app keys, security, SSE...) is every module at the
#: package's root except the top ones, which put the application and the command line together.
SERVER_LAYERS = ("<base>", "models", "generate", "routes", "wire", "<top>")
SERVER_TOP = {"app", "openapi", "serve_options", "shutdown"}


def _server_layer(parts: list[str]) -> str:
    if len(parts) > 1:
        return parts[0]
    return "<top>" if parts[0].removesuffix(".py") in SERVER_TOP else "<base>"


def server_upward_imports(root: Path) -> list[str]:
    """Imports in ``root`` (runtime/server) of a higher layer than the importer's own (a type-only
    import under ``if TYPE_CHECKING:`` runs nothing and is allowed)."""
    found = []
    for f in sorted(root.rglob("*.py")):
        here = _server_layer(list(f.relative_to(root).parts))
        tree = parse(f)
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                       for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                bits = name.split(".")
                if bits[:2] != ["runtime", root.name] or len(bits) < 3:
                    continue
                there = _server_layer(bits[2:3] + (["x"] if len(bits) > 3 and (root / bits[2]).is_dir() else []))
                if SERVER_LAYERS.index(there) > SERVER_LAYERS.index(here):
                    found.append(f"{f.relative_to(root)} ({here}) imports {name} ({there})")
    return found


def test_the_service_packages_import_downward():
    assert server_upward_imports(ROOT / "runtime" / "server") == []


def test_the_layer_check_sees_an_upward_import(tmp_path):
    root = tmp_path / "server"
    (root / "models").mkdir(parents=True)
    (root / "wire").mkdir()
    (root / "models" / "m.py").write_text("def f():\n    from runtime.server.wire.x import y\n")
    (root / "wire" / "x.py").write_text("from runtime.server.models.m import f\ny = 1\n")
    assert server_upward_imports(root) == ["models/m.py (models) imports runtime.server.wire.x.y (wire)"]
