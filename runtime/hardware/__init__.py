"""The hardware probe and the memory-fit planner.

- ``probe.probe() -> HardwareInfo``: CPU, RAM, GPUs, the llama.cpp build's backends, RAM
  bandwidth (measured once per machine, cached in the data directory);
  ``probe.probe_in_subprocess()`` does it in a child process (no llama.cpp, no CUDA context
  in the caller).
- ``shape.shape_from_gguf(path)`` / ``catalog_shape.shape_from_catalog(entry)`` /
  ``catalog_shape.shape_from_numbers(...) -> ModelShape``: what sizes a model, from its GGUF
  header or from catalog numbers.
  A mixture-of-experts model's experts (``experts.Experts``) come with its shape.
- ``fit.plan_fit(shape, hardware, ctx=None, kv_type="f16", draft=None) -> FitPlan``: GPU
  layers (and the layers whose experts stay in RAM), context, memory, predicted speed
  (``speed.predict_decode``), and a message.
- ``calibrate.calibrate_decode()``: one measured decode that calibrates speed predictions.
- ``report.format_probe_report(info)`` / ``report.format_fit_report(plan)``: terminal text.

Only ``probe`` (through ``runtime.backends.ggml_devices``) and ``calibrate`` / ``measure``
load llama.cpp; planning from a ``HardwareInfo`` does not.
"""
