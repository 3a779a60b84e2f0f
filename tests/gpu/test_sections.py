"""cookbook.gpu._sections: notebook 06's GPU section, the recipe derived from a training config,
written, summarised and recorded."""

import json

from cookbook import gpu, train
from cookbook.gpu import _recipe_dir


def test_write_recipe_for_writes_every_file_and_records_the_objective(tmp_path):
    config = train.train_preset("tiny")
    out = tmp_path / "gpu_recipe"
    written = gpu.write_recipe_for(config, out)
    assert set(written.files) == set(_recipe_dir.RECIPE_FILES) and all(p.is_file() for p in written.files.values())
    sft = json.loads((out / "sft_config.json").read_text())
    lora = json.loads((out / "lora_config.json").read_text())
    r = written.results()
    # The tiny recipe has no gradient accumulation: the loss is normalised over the step's tokens.
    assert r["gpu_loss_normalisation"] == "tokens_in_step" == written.recipe.loss_normalisation
    assert sft["gradient_accumulation_steps"] == 1
    s = r["gpu_recipe"]
    assert s["GPUs"] == 2  # the paper's 2 x H100
    assert s["per-device batch x accumulation"] == f"{sft['per_device_train_batch_size']} x 1"
    assert s["LoRA r / alpha / dropout"] == f"{config.lora.rank} / {lora['lora_alpha']} / {lora['lora_dropout']}"
    assert s["lr / warm-up / schedule"].startswith(f"{config.learning_rate} / {config.warmup_steps} / ")
    summary, launch = written.describe().split("\n\n")
    assert len(summary.splitlines()) == len(s) and summary.startswith("GPUs ")
    assert launch.startswith("accelerate launch --config_file fsdp_config.yaml train_gpu.py --model ")
    # The notebook rerun writes into the recipe it wrote before.
    again = gpu.write_recipe_for(config, out)
    assert again.results() == r


def test_the_paper_recipe_keeps_its_accumulation_per_micro_batch(tmp_path):
    written = gpu.write_recipe_for(train.train_preset("gemma4_31b"), tmp_path)
    assert written.results()["gpu_loss_normalisation"] == "per_micro_batch"
    assert written.results()["gpu_recipe"]["per-device batch x accumulation"] == "1 x 4"
    assert "--model google/gemma-4-31B-it" in written.describe()


def test_the_recipe_is_written_into_the_runs_work_directory_unless_told(tmp_path, monkeypatch):
    monkeypatch.setenv("COOKBOOK_RUN_DIR", str(tmp_path / "run"))
    written = gpu.write_recipe_for(train.train_preset("tiny"))
    assert written.out_dir == tmp_path / "run" / "work" / "gpu" / "gpu_recipe"
    assert all(p.parent == written.out_dir for p in written.files.values())
