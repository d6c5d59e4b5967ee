"""Where the CPU advertises AMX, every model this process loads gets llama.cpp's extra buffer
types switched off (their AMX kernels trap on some such machines and end the process)."""

from __future__ import annotations

import threading

import llama_cpp as lc
import llama_cpp.llama_cpp as bindings

from runtime.backends import amx


def test_default_model_parameters_follow_the_cpu(monkeypatch):
    original = bindings.llama_model_default_params
    monkeypatch.setattr(bindings, "llama_model_default_params", original)
    monkeypatch.setattr(lc, "llama_model_default_params", original)
    if getattr(original, "_extra_buffers_off", False):  # already applied on this machine
        monkeypatch.setattr(bindings, "llama_model_default_params", original.__closure__[0].cell_contents)
        monkeypatch.setattr(lc, "llama_model_default_params", bindings.llama_model_default_params)
    assert bindings.llama_model_default_params().use_extra_bufts  # llama.cpp's own default: on

    monkeypatch.setattr(amx, "amx_advertised", lambda: False)
    assert not amx.keep_extra_buffers_off()
    assert bindings.llama_model_default_params().use_extra_bufts

    monkeypatch.setattr(amx, "amx_advertised", lambda: True)
    threads = [threading.Thread(target=amx.keep_extra_buffers_off) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for defaults in (bindings.llama_model_default_params, lc.llama_model_default_params):
        assert not defaults().use_extra_bufts
    # applied once: the wrapper wraps llama.cpp's function, not itself
    inner = bindings.llama_model_default_params.__closure__[0].cell_contents
    assert not getattr(inner, "_extra_buffers_off", False)


def test_amx_is_read_from_the_cpu_flags():
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        flags = f.read()
    assert amx.amx_advertised() == (" amx_tile" in flags)
