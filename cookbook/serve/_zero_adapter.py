"""Base traffic on a LoRA server: a PEFT adapter with every ``lora_B`` zeroed, the base model as an adapter."""

from __future__ import annotations

from pathlib import Path


def zero_adapter(adapter_dir: str | Path, out_dir: str | Path | None = None) -> Path:
    """A copy of a PEFT adapter with every ``lora_B`` zeroed: the base model, as an adapter.

    On a LoRA-enabled vLLM-CPU server, base-model requests batched with adapter requests can
    come back with the adapter applied (upstream bug); routing "base" traffic to this
    all-zero adapter keeps both kinds of traffic on one server correctly.
    """
    import os

    from safetensors.torch import load_file, save_file

    src = Path(adapter_dir)
    out = Path(out_dir) if out_dir else src.parent / (src.name + "-zero")
    if (out / "adapter_model.safetensors").is_file():  # written last, by a rename: the copy is whole
        return out
    out.mkdir(parents=True, exist_ok=True)
    tensors = load_file(str(src / "adapter_model.safetensors"))
    tensors = {k: (v * 0 if "lora_B" in k else v) for k, v in tensors.items()}
    # Each file goes to a temporary name and is renamed into place, the weights last, so a
    # process killed part-way (or two writing at once) never leaves a torn adapter that looks done.
    tag = f".tmp-{os.getpid()}"
    (out / f"adapter_config.json{tag}").write_bytes((src / "adapter_config.json").read_bytes())
    os.replace(out / f"adapter_config.json{tag}", out / "adapter_config.json")
    try:
        save_file(tensors, str(out / f"adapter_model.safetensors{tag}"), metadata={"format": "pt"})
        os.replace(out / f"adapter_model.safetensors{tag}", out / "adapter_model.safetensors")
    finally:
        (out / f"adapter_model.safetensors{tag}").unlink(missing_ok=True)
    return out
