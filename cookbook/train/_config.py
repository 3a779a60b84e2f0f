"""A training run as data: ``TrainConfig``, the recipes per preset, the optimizer they imply."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from cookbook import data as data_lib
from cookbook import fit, models
from cookbook import lora as lora_lib


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """A whole LoRA fine-tuning run. Every field enters the run cache key.

    Attributes:
      model_preset: name of a ``cookbook.models`` preset.
      base_dir: Hugging Face base checkpoint; None: ``cookbook.models.ensure_base(model_preset)``.
      lora: rank, alpha, dropout, targets (PEFT names).
      data: sequence length, batch size, packing, shuffling seed (``cookbook.data``).
      train_data: a .jsonl/.parquet path; None: the built-in sample task
        (``cookbook.data``, ``num_train_rows`` rows).
      eval_data: held-out rows for eval loss and accuracy; None: the sample task's eval split.
      sample_task: which sample task rows train and evaluate where no data file is given
        (:data:`SAMPLE_TASKS`): ``"plain"`` (the module alone) or ``"thinking"`` (a thought in
        Gemma 4's thought channel, then the module). Left out of :meth:`to_dict` when
        ``"plain"``, so the plain run's recipe and cache key are what they were before it existed.
      max_steps: optimizer steps (each of ``grad_accum_steps`` micro-batches).
      learning_rate: peak learning rate, reached after ``warmup_steps`` (linear from 0),
        then cosine decay to ``learning_rate * end_lr_fraction`` at ``max_steps``.
      weight_decay: AdamW decoupled weight decay (on LoRA parameters only).
      max_grad_norm: clip the global gradient norm; None: no clipping.
      eval_every_steps / eval_batches: eval loss every N steps over this many batches.
      checkpoint_every_steps / max_checkpoints: Orbax save interval and how many to keep.
      mesh_fsdp, mesh_tp: device mesh; 1 x 1 runs on one device (fastest on CPU).
      remat: a ``cookbook.models.REMAT_CHOICES`` name, set after LoRA is applied.
      flash_attention / flash_block: splash attention (a TPU kernel) with this block size,
        switched on after LoRA is applied.
      param_dtype: model dtype (None: the preset's).
      quantize: QLoRA: store the frozen base's decoder projections quantized (``"nf4"``,
        ``"int8"``, ``"fp8"``; ``cookbook.lora.QUANT_TYPES``) while the adapters train in
        ``param_dtype``; None: LoRA on the unquantized base.
      quant_tile: Qwix's quantization tile along each weight's contracting axis (must divide
        them all: ``cookbook.lora.check_quant_tile`` refuses one that does not and lists those
        that do, ``cookbook.lora._quant.working_tiles``; ``cookbook train`` without
        ``--quant-tile`` takes ``cookbook.lora.default_quant_tile``).
      seed: LoRA initialisation seed (data order has its own, ``data.seed``).
    """

    model_preset: str = "tiny"
    base_dir: str | None = None
    lora: lora_lib.LoraConfig = lora_lib.LoraConfig()
    data: data_lib.DataConfig = data_lib.DataConfig()
    train_data: str | None = None
    eval_data: str | None = None
    sample_task: str = "plain"
    num_train_rows: int = 3000
    num_eval_rows: int = 200
    max_steps: int = 100
    learning_rate: float = 1e-4
    warmup_steps: int = 10
    end_lr_fraction: float = 0.0
    weight_decay: float = 0.001
    adam_b1: float = 0.9
    adam_b2: float = 0.999
    grad_accum_steps: int = 1
    max_grad_norm: float | None = None
    eval_every_steps: int = 50
    eval_batches: int = 4
    checkpoint_every_steps: int = 50
    max_checkpoints: int = 3
    mesh_fsdp: int = 1
    mesh_tp: int = 1
    remat: str = "none"
    flash_attention: bool = False
    flash_block: int = 512
    param_dtype: str | None = None
    quantize: str | None = None
    quant_tile: int | None = lora_lib.DEFAULT_QUANT_TILE
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("max_steps", "grad_accum_steps", "eval_every_steps", "checkpoint_every_steps",
                     "max_checkpoints", "mesh_fsdp", "mesh_tp", "eval_batches"):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name}={value!r}: use a positive integer")
        if not 0 <= self.warmup_steps < self.max_steps:
            raise ValueError(f"TrainConfig.warmup_steps={self.warmup_steps} must be in [0, max_steps={self.max_steps})")
        if not self.learning_rate > 0:
            raise ValueError(f"TrainConfig.learning_rate={self.learning_rate!r} must be > 0")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ValueError(f"TrainConfig.max_grad_norm={self.max_grad_norm!r}: use > 0 or None")
        if self.sample_task not in SAMPLE_TASKS:
            raise ValueError(f"TrainConfig.sample_task={self.sample_task!r}: use one of {', '.join(SAMPLE_TASKS)}")
        if self.sample_task != "plain" and self.train_data is not None:
            raise ValueError(
                f"sample_task={self.sample_task!r} picks the built-in rows, but train_data="
                f"{self.train_data!r} is given: a data file's rows carry their own thoughts"
            )
        models.get_preset(self.model_preset)  # unknown names fail here, not after loading
        models.get_remat_choice(self.remat)
        lora_lib.check_quant_tile(self.model_preset, self.quantize, self.quant_tile)  # before any model is built

    @functools.cached_property
    def preset(self) -> models.ModelPreset:
        """The model preset, resolved once; what the loader, LoRA and data stages are given."""
        return models.get_preset(self.model_preset)

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with some fields changed; ``lora``/``data`` take dicts of their fields."""
        for key in ("lora", "data"):
            if isinstance(changes.get(key), dict):
                changes[key] = dataclasses.replace(getattr(self, key), **changes[key])
        return dataclasses.replace(self, **changes)

    def with_overrides(self, *, max_steps: int = 0, learning_rate: float = 0.0, lora_rank: int = 0) -> TrainConfig:
        """A notebook's parameters on this recipe: each given as 0 keeps the recipe's; a LoRA rank
        keeps the recipe's alpha / rank (so the update's scale stays the same)."""
        changes: dict[str, Any] = {k: v for k, v in (("max_steps", max_steps), ("learning_rate", learning_rate)) if v}
        if lora_rank:
            changes["lora"] = {"rank": lora_rank, "alpha": self.lora.scale * lora_rank}
        return self.replace(**changes) if changes else self

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out["sample_task"] == "plain":  # the field came later: plain runs keep their recipe and key
            del out["sample_task"]
        if isinstance(out["lora"]["targets"], tuple):
            out["lora"]["targets"] = list(out["lora"]["targets"])
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        d = dict(d)
        lora = dict(d.pop("lora"))
        if isinstance(lora.get("targets"), list):
            lora["targets"] = tuple(lora["targets"])
        return cls(lora=lora_lib.LoraConfig(**lora), data=data_lib.DataConfig(**d.pop("data")), **d)


def train_preset(name: str, *, sample_task: str = "plain") -> TrainConfig:
    """The recipe for a model preset (on the sample task's ``sample_task`` variant: :func:`for_sample_task`).

    ``tiny``: the CPU recipe that takes the random tiny base from ~0% to >= 80% exact
    match on the sample task in a few CPU minutes (one device; see notebook 06).
    The other random CPU twins (``tiny_e2b``, ``tiny_26b_a4b``: ``ModelPreset.twin_of``) train
    with the same recipe on their own structure.
    ``gemma4_31b``: the paper's hyperparameters (rank 64, alpha 64, dropout 0.05, lr 1e-4,
    100 warm-up steps then cosine, weight decay 0.001, no clipping, 8 sequences per optimizer
    step) on the layout the layout search recommends for its training slice (mesh, micro-batch,
    remat, attention; gradient accumulation makes up the 8 sequences; see ``cookbook plan
    --preset gemma4_31b --recommended``).
    ``gemma4_26b_a4b``, ``gemma4_e4b``, ``gemma4_e2b``: the same hyperparameters on their own
    recommended layout (``benchmarks/results/plan_search_<size>.json``), on the slice
    ``cookbook.fit.recommended_training`` defaults to for them.
    """
    if sample_task != "plain":
        return for_sample_task(train_preset(name), sample_task)
    if recipe_of(name) == "tiny" and name != "tiny":  # a random CPU twin: the CPU recipe on its structure
        return train_preset("tiny").replace(model_preset=name)
    if name == "tiny":
        # Tuned on the sample task. A high learning rate suits a LoRA that learns the task
        # from nothing on a random base. Measured with this pipeline (400-step schedule,
        # warm-up 30): held-out exact match 66% at step 100, 100% at steps 200-400. Shorter
        # schedules, annealed (cosine to 0.1 x), 2026-12-02, 8 fake CPU devices: greedy exact
        # match on 200 held-out prompts, eval loss, and Tunix's sampled pass@1 (n = 5 at T = 0.8,
        # 100 problems, `cookbook eval --run`), which separates them where exact match cannot:
        #   240 steps at 3e-3: 100%, 0.109, 99.6%      200 at 4e-3: 100%, 0.110, 99.4%
        #   180 at 4e-3: 100%, 0.120, 98.0%            160 at 4e-3: 100%, 0.160, 90.6%
        #   160 at 5e-3: 100%, 0.125, 91.0%            160 at 3e-3: 99%, 0.216, 58.6%
        #   120 at 4e-3 / 5e-3: 83% / 85%
        # So 200 steps at 4e-3: the 240-step schedule's quality in 40 fewer steps (~90 CPU-seconds
        # of training on a quiet 2-core host). Dropout 0: with dropout the RNG stream would also
        # have to be checkpointed for a resumed run to match an uninterrupted one.
        return TrainConfig(
            model_preset="tiny",
            lora=lora_lib.LoraConfig(rank=16, alpha=32.0, dropout=0.0),
            data=data_lib.DataConfig(seq_len=128, batch_size=8, packing=True, seed=0),
            max_steps=200,
            learning_rate=4e-3,
            warmup_steps=20,
            end_lr_fraction=0.1,
            weight_decay=0.0,
            eval_every_steps=50,
            eval_batches=2,
            checkpoint_every_steps=50,
        )
    if name in PAPER_RECIPE_PRESETS:
        # The layout the planner compiled and fit-checked for this preset's training slice
        # (benchmarks/results/plan_search_<size>.json via cookbook.fit.recommended_training): mesh,
        # micro-batch, sequence length, remat, splash attention and its block.
        layout = fit.recommended_training(name)
        # The paper's 8 sequences per optimizer step, whatever micro-batch the layout runs.
        if PAPER_SEQUENCES_PER_STEP % layout["batch_size"]:
            raise ValueError(
                f"the recommended micro-batch {layout['batch_size']} does not divide the paper's "
                f"{PAPER_SEQUENCES_PER_STEP} sequences per optimizer step; regenerate the layout search"
            )
        # The paper's hyperparameters (arXiv 2605.25645, chosen for 31B on the same task and data).
        # No size-specific values are published for this task, so the smaller sizes start from the
        # same ones: the same objective, data and schedule, and a plan compiled at this rank.
        return TrainConfig(
            model_preset=name,
            lora=lora_lib.LoraConfig(rank=64, alpha=64.0, dropout=0.05),
            data=data_lib.DataConfig(seq_len=layout["seq_len"], batch_size=layout["batch_size"], packing=True, seed=0),
            num_train_rows=10_000,
            max_steps=1244,
            learning_rate=1e-4,
            warmup_steps=100,
            weight_decay=0.001,
            grad_accum_steps=PAPER_SEQUENCES_PER_STEP // layout["batch_size"],
            max_grad_norm=None,
            eval_every_steps=200,
            eval_batches=8,
            checkpoint_every_steps=100,
            mesh_fsdp=layout["mesh_fsdp"],
            mesh_tp=layout["mesh_tp"],
            remat=layout["remat"],
            flash_attention=layout["flash_attention"],
            flash_block=layout["flash_block"],
            param_dtype="bfloat16",
        )
    raise ValueError(f"No training preset {name!r}; choose one of {', '.join(TRAIN_PRESETS)}.")


# The built-in sample task's variants (cookbook.data.generate_rows): "thinking" adds a thought.
SAMPLE_TASKS = ("plain", "thinking")


THINKING_CPU_STEPS = 300  # the CPU recipe's thinking variant (for_sample_task)


def for_sample_task(config: TrainConfig, sample_task: str) -> TrainConfig:
    """``config`` trained on the sample task's ``sample_task`` variant (:data:`SAMPLE_TASKS`).

    The CPU recipe (``tiny`` and its twins) packs 200-token rows for the thinking variant, not 128:
    a thinking example is ~95 tokens (the system turn with ``<|think|>``, the thought channel, the
    module), a plain one ~60, so 200 holds two of them as 128 holds two plain ones, and a step sees
    as many examples. Measured 2026-12-03 (8 fake CPU devices, greedy, 48 held-out problems,
    Tunix): 200 steps at 128 tokens: pass@1 14.6%, 19 of 48 thoughts right (the module name is
    miscopied); at 200 tokens: pass@1 93.8%, every thought right, for ~1.7x the CPU time of the
    plain run. Other recipes' rows are long enough already.

    It trains 300 steps, not the plain recipe's 200: over seeds (``benchmarks/outcome_spread.py``,
    2026-12-04, one CPU device, greedy on 200 held-out rows) 200 steps ended anywhere from 74.5% to
    98.5% pass@1 (7 runs; 3 of them under 78%), too wide a spread for a bound that tells a working
    run from a broken one on the next machine. The two worst seeds (74.5%, 77%) reached 100% at 300
    steps; 200 steps at 6e-3 instead of 4e-3 lifted one of them to 96.5% only.
    """
    if sample_task == "thinking" and recipe_of(config.model_preset) == "tiny":
        return config.replace(sample_task=sample_task, data={"seq_len": 200}, max_steps=THINKING_CPU_STEPS)
    return config.replace(sample_task=sample_task)


# The released sizes: the paper's recipe on each size's committed recommended layout.
PAPER_RECIPE_PRESETS = ("gemma4_31b", "gemma4_26b_a4b", "gemma4_e4b", "gemma4_e2b")
TRAIN_PRESETS = ("tiny", *PAPER_RECIPE_PRESETS)


def recipe_of(model_preset: str) -> str | None:
    """The training recipe a model preset trains with by default: its own (``TRAIN_PRESETS``),
    the CPU recipe ``tiny`` for a random CPU twin (``ModelPreset.twin_of``), else None."""
    if model_preset in TRAIN_PRESETS:
        return model_preset
    if model_preset in models.PRESETS and models.get_preset(model_preset).twin_of:
        return "tiny"
    return None


PAPER_SEQUENCES_PER_STEP = 8  # the paper: micro-batch 1 x gradient accumulation 8


def make_optimizer(config: TrainConfig):
    """AdamW with linear warm-up then cosine decay (optional global-norm clipping).

    The learning rate is injected as a hyperparameter so Tunix logs it. Gradient
    accumulation is Tunix's job (``optax.MultiSteps``), so schedules count optimizer steps.
    """
    import optax

    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=config.learning_rate,
        warmup_steps=config.warmup_steps,
        decay_steps=config.max_steps,
        end_value=config.learning_rate * config.end_lr_fraction,
    )

    def adamw(learning_rate):
        tx = optax.adamw(learning_rate, b1=config.adam_b1, b2=config.adam_b2,
                         weight_decay=config.weight_decay)  # fmt: skip
        if config.max_grad_norm is not None:
            tx = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), tx)
        return tx

    return optax.inject_hyperparams(adamw)(learning_rate=schedule)


def describe_configs(configs: list[TrainConfig]) -> str:
    """A plain-text table of the main settings of several configs, side by side."""
    rows = {
        "model preset": lambda c: c.model_preset,
        "LoRA rank / alpha / dropout": lambda c: f"{c.lora.rank} / {c.lora.alpha:g} / {c.lora.dropout:g}",
        "LoRA targets": lambda c: (
            c.lora.targets
            if isinstance(c.lora.targets, str)
            else ",".join(t.removesuffix("_proj") for t in c.lora.targets)
        ),
        "peak lr, warm-up -> cosine": lambda c: f"{c.learning_rate:g}, {c.warmup_steps} -> {c.max_steps}",
        "weight decay / clip": lambda c: f"{c.weight_decay:g} / {c.max_grad_norm or 'none'}",
        "batch x accum x seq": lambda c: f"{c.data.batch_size} x {c.grad_accum_steps} x {c.data.seq_len}",
        "packing": lambda c: str(c.data.packing),
        "optimizer steps": lambda c: str(c.max_steps),
        "mesh fsdp x tp": lambda c: f"{c.mesh_fsdp} x {c.mesh_tp}",
        "remat / dtype": lambda c: f"{c.remat} / {c.param_dtype or models.get_preset(c.model_preset).dtype}",
        "eval / checkpoint every": lambda c: f"{c.eval_every_steps} / {c.checkpoint_every_steps}",
    }
    table = [["", *[c.model_preset for c in configs]]] + [[k, *[str(f(c)) for c in configs]] for k, f in rows.items()]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in table)


# The overridable settings: (TrainConfig field path, flag, type, help). One table builds the
# parser, reads the parsed flags back into a config, and writes a config as a command line.
CLI_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("max_steps", "--max-steps", int, "optimizer steps"),
    ("learning_rate", "--lr", float, "peak learning rate"),
    ("warmup_steps", "--warmup-steps", int, "linear warm-up steps from 0"),
    ("weight_decay", "--weight-decay", float, "AdamW weight decay"),
    ("grad_accum_steps", "--grad-accum", int, "micro-batches per optimizer step"),
    ("max_grad_norm", "--clip", float, "global-norm gradient clipping"),
    ("eval_every_steps", "--eval-every", int, "eval loss every N steps"),
    ("checkpoint_every_steps", "--checkpoint-every", int, "Orbax checkpoint every N steps"),
    ("seed", "--seed", int, "LoRA initialisation and data-order seed"),
    ("remat", "--remat", str, "remat choice: " + ", ".join(models.REMAT_CHOICES)),
    ("lora.rank", "--rank", int, "LoRA rank"),
    ("lora.alpha", "--alpha", float, "LoRA alpha"),
    ("lora.dropout", "--dropout", float, "LoRA dropout"),
    ("quantize", "--quantize", str, "QLoRA: quantize the frozen base (" + ", ".join(lora_lib.QUANT_TYPES) + ")"),
    ("quant_tile", "--quant-tile", int, "QLoRA quantization tile (divides every quantized weight's contracting axis)"),
    ("data.seq_len", "--seq-len", int, "tokens per row"),
    ("data.batch_size", "--batch-size", int, "rows per micro-batch (global)"),
)


def _get(d: dict[str, Any], path: str) -> Any:
    for k in path.split("."):
        d = d[k]
    return d


def cli_command(config: TrainConfig, *, out: str, data: str | None = None) -> str:
    """The ``cookbook train`` command line that runs ``config`` (flags only where it differs
    from its preset's recipe)."""
    recipe_cfg = train_preset(config.model_preset, sample_task=config.sample_task).to_dict()
    mine = config.to_dict()
    parts = ["cookbook", "train", "--preset", config.model_preset]
    for path, flag, _, _ in CLI_FLAGS:
        a, b = _get(mine, path), _get(recipe_cfg, path)
        if a != b and a is not None:
            parts += [flag, str(a)]
    if not config.data.packing:
        parts.append("--no-packing")
    if recipe_cfg["flash_attention"] and not config.flash_attention:
        parts.append("--no-flash")
    if (config.mesh_fsdp, config.mesh_tp) != (recipe_cfg["mesh_fsdp"], recipe_cfg["mesh_tp"]):
        parts += ["--mesh", f"{config.mesh_fsdp}x{config.mesh_tp}"]
    if config.data.data_format != "auto":
        parts += ["--format", config.data.data_format]
    if config.data.columns:
        parts += ["--columns", ",".join(f"{k}={v}" for k, v in config.data.columns.items())]
    if data or config.train_data:
        parts += ["--data", data or str(config.train_data)]
    if config.sample_task != "plain":
        parts += ["--sample-task", config.sample_task]
    return " ".join([*parts, "--out", out])
