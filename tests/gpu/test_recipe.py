"""The derived GPU recipe (cookbook.gpu) and the train_gpu.py it writes (cookbook.gpu.train_gpu)."""

import json
import re
import subprocess
import sys

import pytest

from cookbook import gpu, lora, models, train
from cookbook.data import _examples as data_examples
from cookbook.gpu import _recipe, _recipe_dir
from cookbook.lora import _config, _targets
from cookbook.train import _run

PROJECTIONS = lora.HF_PROJECTIONS


def test_paper_recipe_on_two_gpus_keeps_the_tpu_objective():
    cfg = train.train_preset("gemma4_31b")
    r = gpu.derive_gpu_recipe(cfg)
    s = r.sft
    # micro-batch 1 x 8 accumulation on TPU = 2 GPUs x 1 x 4, each GPU micro-batch one TPU
    # micro-batch, losses averaged per micro-batch (optax.MultiSteps).
    assert (s["per_device_train_batch_size"], s["gradient_accumulation_steps"]) == (1, 4)
    assert r.loss_normalisation == "per_micro_batch"
    assert s["completion_only_loss"] is True and s["assistant_only_loss"] is False
    assert s["learning_rate"] == 1e-4 and s["warmup_steps"] == 100 and s["max_steps"] == 1244
    assert s["lr_scheduler_type"] == "cosine" and s["weight_decay"] == 0.001
    assert s["max_grad_norm"] == 0.0  # paper: no clipping; transformers' default would clip at 1
    assert s["max_length"] == cfg.data.seq_len and s["packing"] is cfg.data.packing
    assert s["bf16"] is True and r.model_dtype == "bfloat16" and s["gradient_checkpointing"] is True
    assert (r.lora["r"], r.lora["lora_alpha"], r.lora["lora_dropout"]) == (64, 64.0, 0.05)
    assert r.base_model == "google/gemma-4-31B-it"
    fsdp = r.accelerate["fsdp_config"]
    assert r.accelerate["num_processes"] == 2 and r.accelerate["distributed_type"] == "FSDP"
    assert fsdp["fsdp_transformer_layer_cls_to_wrap"] == "Gemma4TextDecoderLayer"
    assert fsdp["fsdp_reshard_after_forward"] is True  # FSDP2's FULL_SHARD
    # The configs are what TRL and PEFT accept (use_cpu: bf16 is refused on a CPU host).
    sft = r.sft_config(use_cpu=True)
    assert sft.completion_only_loss is True and sft.max_grad_norm == 0.0
    assert r.peft_config().r == 64


def test_batch_layout_without_accumulation_splits_the_batch_and_weighs_tokens():
    cfg = train.train_preset("tiny")  # 8 packed rows, no accumulation
    per_device, accum, norm = _recipe.gpu_batch_layout(cfg, 2)
    assert (per_device, accum, norm) == (4, 1, "tokens_in_step")
    r = gpu.derive_gpu_recipe(cfg, cluster=gpu.GpuCluster(num_gpus=2))
    assert r.sft["bf16"] is False and r.model_dtype == "float32"  # tiny is float32


def test_batch_layout_refuses_a_gpu_count_that_changes_the_objective():
    cfg = train.train_preset("gemma4_31b")
    with pytest.raises(ValueError, match="does not divide over 3 GPUs"):
        _recipe.gpu_batch_layout(cfg, 3)
    with pytest.raises(ValueError, match="does not split over 3 GPUs"):
        _recipe.gpu_batch_layout(train.train_preset("tiny"), 3)


def test_end_lr_maps_to_cosine_with_min_lr():
    cfg = train.train_preset("tiny").replace(end_lr_fraction=0.1)
    s = gpu.derive_gpu_recipe(cfg, cluster=gpu.GpuCluster(num_gpus=1)).sft
    assert s["lr_scheduler_type"] == "cosine_with_min_lr"
    assert s["lr_scheduler_kwargs"] == {"min_lr": pytest.approx(cfg.learning_rate * 0.1)}


def test_target_regex_adapts_the_text_decoder_only_on_the_released_layout():
    """The released checkpoint's vision and audio towers also have q_proj..., which a plain
    list of names would adapt. Built on the meta device with both towers."""
    import torch
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration
    from transformers.models.gemma4.configuration_gemma4 import (
        Gemma4AudioConfig,
        Gemma4VisionConfig,
    )

    p = models.get_preset("tiny")
    cfg = Gemma4Config(text_config=p.hf_text_config(), vision_config=Gemma4VisionConfig(),
                       audio_config=Gemma4AudioConfig())  # fmt: skip
    with torch.device("meta"):
        names = [n for n, _ in Gemma4ForConditionalGeneration(cfg).named_modules()]
    rx = _recipe.peft_target_regex(lora.LoraConfig(), p)
    hit = {n for n in names if re.fullmatch(rx, n)}
    assert hit == set(_targets.hf_module_names(p, prefix="model.language_model."))
    assert len(hit) == 6 * 7 - 1  # no v_proj on the K = V global layer
    towers = [n for n in names if n.endswith(PROJECTIONS) and "language_model" not in n]
    assert towers, "expected the vision/audio towers to have projections named like the decoder's"
    # The text-only layout (Gemma4ForCausalLM, served by vLLM on CPU) matches too.
    assert {n for n in _targets.hf_module_names(p, prefix="model.") if re.fullmatch(rx, n)} == set(
        _targets.hf_module_names(p, prefix="model.")
    )


def test_12b_unified_layout_gets_its_own_wrap_unit_and_targets_the_decoder_only():
    """12B's released layout (Gemma4UnifiedForConditionalGeneration, with its vision and audio
    embedders, built on the meta device): FSDP wraps the class its decoder layers really are, and
    the PEFT regex adapts exactly the text decoder's projections."""
    import torch
    from transformers import Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration
    from transformers.models.gemma4_unified.configuration_gemma4_unified import (
        Gemma4UnifiedAudioConfig,
        Gemma4UnifiedVisionConfig,
    )

    p = models.get_preset("tiny_12b")
    text = p.hf_config().text_config
    cfg = Gemma4UnifiedConfig(text_config=text, vision_config=Gemma4UnifiedVisionConfig(),
                              audio_config=Gemma4UnifiedAudioConfig())  # fmt: skip
    with torch.device("meta"):
        model = Gemma4UnifiedForConditionalGeneration(cfg)
    names = [n for n, _ in model.named_modules()]
    assert model.model.embed_vision is not None and model.model.embed_audio is not None
    layer_cls = {type(layer).__name__ for layer in model.model.language_model.layers}
    cluster = gpu.GpuCluster(num_gpus=2)
    wrap = _recipe.accelerate_fsdp_config(cluster, bf16=True, preset=p)["fsdp_config"]
    assert layer_cls == {wrap["fsdp_transformer_layer_cls_to_wrap"]} == {"Gemma4UnifiedTextDecoderLayer"}
    assert (
        _recipe.accelerate_fsdp_config(cluster, bf16=True, preset="tiny")["fsdp_config"][
            "fsdp_transformer_layer_cls_to_wrap"
        ]
        == "Gemma4TextDecoderLayer"
    )
    rx = _recipe.peft_target_regex(lora.LoraConfig(targets="all-linear"), p)
    hit = {n for n in names if re.fullmatch(rx, n)}
    assert hit == set(_targets.hf_module_names(p, prefix="model.language_model."))
    assert len(hit) == 6 * 7 - 1  # no v_proj on the K = V global layer
    assert any("embed_vision" in n for n in names) and not any("embed_" in n for n in hit)


def test_partial_targets_and_kv_split_are_translated_or_refused():
    p = models.get_preset("tiny")
    rx = _recipe.peft_target_regex(lora.LoraConfig(targets=("q_proj", "o_proj")), p)
    assert re.fullmatch(rx, "model.layers.3.self_attn.q_proj")
    assert not re.fullmatch(rx, "model.layers.3.mlp.up_proj")
    with pytest.raises(_config.LoraCoverageError, match="k_proj and v_proj together"):
        _recipe.peft_target_regex(lora.LoraConfig(targets=("k_proj",)), p)


@pytest.mark.parametrize("name", ["tiny_e2b", "tiny_26b_a4b", "gemma4_e4b", "gemma4_26b_a4b"])
def test_target_regex_covers_the_per_layer_inputs_and_the_router(name):
    """'all-linear' on E2B/E4B and 26B-A4B: the regex takes exactly the modules cookbook.lora adapts,
    in both layouts (per-layer-input projections, the model-level one, the router), never the experts."""
    for prefix in ("model.", "model.language_model."):
        names = _targets.hf_module_names(name, prefix=prefix)
        rx = _recipe.peft_target_regex(lora.LoraConfig(targets="all-linear"), name)
        assert all(re.fullmatch(rx, n) for n in names)
        assert not re.fullmatch(rx, f"{prefix}layers.0.experts")
        extras = {n for n in names if not n.endswith(PROJECTIONS)}
        assert extras and not {n for n in extras if re.fullmatch(_recipe.peft_target_regex(lora.LoraConfig(), name), n)}


def test_write_gpu_recipe_files_load_and_script_is_standalone(tmp_path):
    import yaml
    from peft import LoraConfig as PeftLoraConfig
    from trl import SFTConfig

    paths = gpu.write_gpu_recipe(tmp_path, config=train.train_preset("gemma4_31b"))
    assert {p.name for p in tmp_path.iterdir()} >= {
        "sft_config.json",
        "lora_config.json",
        "recipe.json",
        "fsdp_config.yaml",
        "train_gpu.py",
    }
    sft = SFTConfig(**{**json.loads(paths["sft_config.json"].read_text()), "use_cpu": True,
                       "output_dir": str(tmp_path / "out")})  # fmt: skip
    assert sft.gradient_accumulation_steps == 4
    assert PeftLoraConfig(**json.loads(paths["lora_config.json"].read_text())).lora_alpha == 64.0
    acc = yaml.safe_load(paths["fsdp_config.yaml"].read_text())
    assert acc["fsdp_config"]["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    recipe = json.loads(paths["recipe.json"].read_text())
    assert recipe["loss_normalisation"] == "per_micro_batch" and recipe["tie_kv_lora_a"] is True
    script = paths["train_gpu.py"].read_text()
    assert not re.search(r"^\s*(from|import) cookbook", script, re.M), "train_gpu.py must not need the cookbook"
    out = subprocess.run([sys.executable, "-I", str(paths["train_gpu.py"]), "--help"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "--data" in out.stdout


def test_cli_refuses_a_foreign_or_earlier_out_unless_it_wrote_it(tmp_path, capsys):
    """`cookbook gpu-recipe --out .` overwrote the project's README.md: a non-empty --out that it
    did not write is refused, --overwrite or not; its own earlier recipe needs --overwrite, which
    rewrites the recipe's files and keeps the rest (the run/ trained there)."""
    from cookbook import harness

    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# my project\n")
    for extra in ([], ["--overwrite"]):
        assert harness.main(["gpu-recipe", "--preset", "tiny", "--out", str(project), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "holds no recipe written by gpu-recipe" in err[0] and "empty --out" in err[0], err
    assert sorted(p.name for p in project.iterdir()) == ["README.md"]
    assert (project / "README.md").read_text() == "# my project\n"

    out = tmp_path / "recipe"
    assert harness.main(["gpu-recipe", "--preset", "tiny", "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} >= set(_recipe_dir.RECIPE_FILES)
    capsys.readouterr()
    assert harness.main(["gpu-recipe", "--preset", "tiny", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    (out / "README.md").write_text("edited\n")
    (out / "run").mkdir()
    (out / "run" / "adapter.safetensors").write_text("trained")
    assert harness.main(["gpu-recipe", "--preset", "tiny", "--out", str(out), "--overwrite"]) == 0
    assert (out / "README.md").read_text().startswith("# GPU baseline") and (
        out / "run" / "adapter.safetensors"
    ).is_file()


_WEATHER = data_examples._WEATHER_TOOL  # the tool notebook 05 shows (test data, one copy)
THINKING_AND_TOOL_ROWS = [
    {
        "messages": [
            {"role": "system", "content": "Think first."},
            {"role": "user", "content": "An inverter?"},
            {"role": "assistant", "reasoning_content": "One NOT gate.", "content": "module inv; endmodule"},
        ]
    },
    {
        "tools": [_WEATHER],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "reasoning": "Ask the tool.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    },
                    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "18 C"},
            {"role": "tool", "content": {"temp": 21}},
            {"role": "assistant", "content": "Paris 18 C, Rome 21 C."},
        ],
    },
    {
        "tools": json.dumps([_WEATHER["function"]]),
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "model", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
        ],
    },
    {
        "system": "You write Verilog.",
        "prompt": "A buffer.",
        "response": "<think>\nWire it.\n</think>\n\nmodule b; endmodule",
    },
    {"prompt": "A buffer.", "response": "Wire it.</think>module b; endmodule"},
    {"instruction": "A buffer", "input": "of 1 bit.", "output": "<think>Wire.</think>module b; endmodule"},
    {
        "conversations": [
            {"from": "human", "value": "hi"},
            {"from": "gpt", "value": "<think>greet</think>hello"},
            {"from": "human", "value": "again"},
            {"from": "gpt", "value": "hello again"},
        ]
    },
]


def test_train_script_tokenises_like_the_tpu_pipeline(tiny_base):
    """Same ids and the same mask as cookbook.data.tokenize_chat on plain, multi-turn, thinking,
    tool-calling and tool-response rows in every layout (the mask also leaves out the newline
    after <turn|>, unlike TRL's own prompt-completion path)."""
    from transformers import AutoTokenizer

    from cookbook import data
    from cookbook.data import _rows
    from cookbook.gpu import train_gpu

    tok = AutoTokenizer.from_pretrained(tiny_base)
    rows = data.generate_rows("train", n=20)
    rows.append({"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a gate."},
        {"role": "assistant", "content": "xor"},
        {"role": "user", "content": "Another?"},
        {"role": "assistant", "content": "nand"},
    ]})  # fmt: skip
    rows.append({"prompt": "Say hi.", "completion": "hi"})
    rows += THINKING_AND_TOOL_ROWS
    refused = 0
    for n, row in enumerate(rows, 1):
        try:
            ids, mask = data.tokenize_chat(tok, row)
        except _rows.RowError as e:  # the template would drop part of it: refused on both sides
            assert "thought" in str(e)
            with pytest.raises(ValueError, match=r"renders no message \d+ \(assistant\) thought"):
                train_gpu.tokenize_row(tok, train_gpu.row_conversation(row, n))
            refused += 1
            continue
        got = train_gpu.tokenize_row(tok, train_gpu.row_conversation(row, n))
        assert got["input_ids"] == ids.tolist()
        assert got["completion_mask"] == mask.tolist()
    assert refused == 1  # the ShareGPT row whose first answer thinks: the template drops that thought
    # Trained tokens end on <turn|>, never on the newline the template writes after it.
    last = max(i for i, m in enumerate(got["completion_mask"]) if m)
    assert got["input_ids"][last] == tok.convert_tokens_to_ids("<turn|>")
    assert got["completion_mask"][last + 1 :] == [0] * (len(got["input_ids"]) - last - 1)


def test_train_script_drops_or_truncates_long_rows_like_the_pipeline(tiny_base):
    from transformers import AutoTokenizer

    from cookbook import data
    from cookbook.gpu import train_gpu

    tok = AutoTokenizer.from_pretrained(tiny_base)
    rows = data.generate_rows("train", n=3)
    n = len(train_gpu.tokenize_row(tok, {"messages": rows[0]["messages"]})["input_ids"])
    with pytest.raises(ValueError, match="no usable rows"):
        train_gpu.build_dataset(tok, rows, 8, "drop")
    cut = train_gpu.build_dataset(tok, rows, 8, "truncate")
    assert [len(x) for x in cut["input_ids"]] == [8, 8, 8]
    assert len(train_gpu.build_dataset(tok, rows, n + 100, "drop")) == 3


def test_train_script_lora_matches_qwix_init_and_kv_sharing(tiny_base):
    """lora_A drawn He-uniform over its fan-in (Qwix's initialiser, not PEFT's a=sqrt(5)
    Kaiming), B zero, and v_proj's lora_A the very parameter of k_proj's."""
    import math

    import torch
    from transformers import AutoModelForCausalLM

    from cookbook.gpu import train_gpu

    cfg = train.train_preset("tiny")
    r = gpu.derive_gpu_recipe(cfg, cluster=gpu.GpuCluster(num_gpus=1))
    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32)
    peft_model = train_gpu.apply_lora(model, r.lora, r.recipe_json(), seed=0)
    mods = {n: m for n, m in peft_model.named_modules() if hasattr(m, "lora_A") and "default" in m.lora_A}
    assert len(mods) == 41
    for name, m in mods.items():
        a, b = m.lora_A["default"].weight.detach(), m.lora_B["default"].weight.detach()
        fan_in = a.shape[1]
        assert float(a.abs().max()) <= math.sqrt(6 / fan_in) + 1e-6, name
        assert float(a.std()) == pytest.approx(math.sqrt(2 / fan_in), rel=0.15), name
        assert not b.any(), name
    sliding_k = [n for n in mods if n.endswith("k_proj") and not n.split(".layers.")[1].startswith("5.")]
    assert len(sliding_k) == 5
    for n in sliding_k:
        v = mods[n[: -len("k_proj")] + "v_proj"]
        assert v.lora_A["default"].weight is mods[n].lora_A["default"].weight
    trainable = {id(p) for p in peft_model.parameters() if p.requires_grad}
    assert len(trainable) == 2 * 41 - 5  # five shared A's counted once
    assert sum(p.numel() for p in peft_model.parameters() if p.requires_grad) == lora.expected_lora_params(
        "tiny", cfg.lora
    )


def test_packed_rows_keep_examples_apart_in_transformers(tiny_base):
    """With packing, TRL flattens a batch into one row with positions restarting per example;
    transformers then masks attention per example (as the TPU pipeline's segment ids do)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cookbook import core, data
    from cookbook.core import _numerics

    tok = AutoTokenizer.from_pretrained(tiny_base)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32).eval()
    model64 = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float64).eval()
    ex = [data.tokenize_chat(tok, r)[0].tolist() for r in data.generate_rows("train", n=3)]
    flat = torch.tensor([sum(ex, [])])
    pos = torch.tensor([sum((list(range(len(e))) for e in ex), [])])
    with torch.no_grad():
        packed = model(input_ids=flat, position_ids=pos).logits[0]
        offset = 0
        for e in ex:
            alone = model(input_ids=torch.tensor([e])).logits[0]
            # Same function, another layout: 4x the float32 floor measured on this example.
            floor = core.float32_floor(alone, model64(input_ids=torch.tensor([e])).logits[0])
            check = core.compare(packed[offset : offset + len(e)], alone, floor)
            assert check["ok"], check
            # Control: the same slice of a plain causal row (examples see each other) is far off.
            if offset:
                leaky = model(input_ids=flat).logits[0][offset : offset + len(e)]
                _numerics.check_separated(core.compare(leaky, alone, floor), "causal row")
            offset += len(e)


def test_cli_writes_the_recipe_of_a_preset_or_a_run(tmp_path, capsys, tiny_base):
    from cookbook import harness

    assert harness.main(["gpu-recipe", "--preset", "gemma4_31b", "--out", str(tmp_path / "p")]) == 0
    assert "accelerate launch --config_file fsdp_config.yaml train_gpu.py" in capsys.readouterr().out
    assert (tmp_path / "p" / "train_gpu.py").is_file()
    # A run directory's recipe.json (as `cookbook train` writes it) gives that run's exact config.
    run = tmp_path / "run"
    run.mkdir()
    cfg = train.train_preset("tiny").replace(max_steps=123, grad_accum_steps=2)
    (run / "recipe.json").write_text(json.dumps(_run.recipe(cfg, tiny_base)))
    assert harness.main(["gpu-recipe", "--run", str(run), "--num-gpus", "1", "--out", str(tmp_path / "r")]) == 0
    sft = json.loads((tmp_path / "r" / "sft_config.json").read_text())
    assert sft["max_steps"] == 123 and sft["gradient_accumulation_steps"] == 2
    assert sft["per_device_train_batch_size"] == cfg.data.batch_size
    assert harness.main(["gpu-recipe", "--preset", "gemma4_31b", "--num-gpus", "3", "--out", str(tmp_path / "x")]) == 2
    assert "does not divide over 3 GPUs" in capsys.readouterr().err


@pytest.mark.parametrize("preset,num_gpus", [("tiny", 1), ("gemma4_31b", 2)])
def test_learning_rate_schedules_agree_step_by_step(preset, num_gpus):
    """transformers' scheduler from the derived SFTConfig vs cookbook.train.make_optimizer's
    optax schedule, at every optimizer step (warm-up from 0, cosine, min lr if any)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    import transformers

    cfg = train.train_preset(preset)
    s = gpu.derive_gpu_recipe(cfg, cluster=gpu.GpuCluster(num_gpus=num_gpus)).sft
    opt = train.make_optimizer(cfg)
    params = {"w": jnp.zeros(2)}
    state, update = opt.init(params), jax.jit(opt.update)
    tpu = []
    for _ in range(cfg.max_steps):
        _, state = update({"w": jnp.ones(2)}, state, params)
        tpu.append(float(state.hyperparams["learning_rate"]))  # the lr this update used
    p = torch.nn.Parameter(torch.zeros(1))
    torch_opt = torch.optim.AdamW([p], lr=s["learning_rate"])
    sched = transformers.get_scheduler(
        s["lr_scheduler_type"], torch_opt, num_warmup_steps=s["warmup_steps"],
        num_training_steps=s["max_steps"], scheduler_specific_kwargs=s.get("lr_scheduler_kwargs") or {},
    )  # fmt: skip
    hf_lrs = []
    for _ in range(cfg.max_steps):
        hf_lrs.append(torch_opt.param_groups[0]["lr"])
        torch_opt.step()
        sched.step()
    assert tpu[0] == hf_lrs[0] == 0.0
    np.testing.assert_allclose(tpu, hf_lrs, rtol=1e-5, atol=1e-6 * cfg.learning_rate)


def test_a_qlora_run_gets_bitsandbytes_nf4_and_fp8_is_refused():
    import torch
    from transformers import BitsAndBytesConfig

    from cookbook import gpu, train

    base = train.train_preset("gemma4_31b")
    recipe = gpu.derive_gpu_recipe(base.replace(quantize="nf4", quant_tile=128))
    q = recipe.quantization
    assert q["load_in_4bit"] and q["bnb_4bit_quant_type"] == "nf4" and q["bnb_4bit_quant_storage"] == "bfloat16"
    bnb = BitsAndBytesConfig(
        **{k: getattr(torch, v) if k.endswith(("_dtype", "_storage")) else v for k, v in q.items()}
    )
    assert bnb.load_in_4bit and bnb.bnb_4bit_compute_dtype == torch.bfloat16
    assert recipe.recipe_json()["quantization"] == q and any("blocks of 64" in n for n in recipe.notes)
    assert gpu.derive_gpu_recipe(base).quantization is None
    assert gpu.derive_gpu_recipe(base.replace(quantize="int8", quant_tile=128)).quantization == {"load_in_8bit": True}
    with pytest.raises(ValueError, match="fp8.*no bitsandbytes equivalent"):
        gpu.derive_gpu_recipe(base.replace(quantize="fp8", quant_tile=128))
