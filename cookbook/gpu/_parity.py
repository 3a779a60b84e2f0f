"""Check on CPU that the GPU recipe optimises the TPU run's objective: same loss, same AdamW steps.

Both stacks start from the same base checkpoint (``cookbook.models.ensure_base``) and the
same LoRA weights (Qwix's, copied into PEFT with ``cookbook.lora``), see the same
micro-batches in the same order, and take the same AdamW steps:

* Tunix + Qwix: ``cookbook.lora.apply_lora``, Tunix's ``PeftTrainer`` loss
  (``cookbook.core.compat.tunix_loss_fn()``) on ``cookbook.data`` batches, and its
  update (``nnx.Optimizer`` over ``nnx.LoRAParam`` with ``optax.MultiSteps`` accumulation).
* transformers + PEFT + TRL: the generated ``train_gpu.py`` itself (imported from the
  recipe directory ``cookbook.gpu.write_gpu_recipe`` wrote), its ``SFTTrainer``,
  ``compute_loss`` and ``train()``, with only CPU switches overridden (no bf16, no FSDP,
  sequential sampling so the order is known).

Nothing is mocked; what is compared is what each stack would run.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from cookbook import core, fit, models
from cookbook import lora as lora_lib
from cookbook.gpu import _recipe as gpu_baseline
from cookbook.gpu._parity_parts import (
    CPU_OVERRIDES,
    _answer_token_nll,
    _as_jax,
    _float64_twin,
    _peft_as_tunix,
    _randomise_b,
    _rel_norm,
    _set_lora,
    _sibling,
    _tunix_lora_numpy,
    copy_tunix_lora_into_peft,
    import_train_script,
    pad_batch,
    parity_train_config,
    tunix_optimizer,
    uneven_rows,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParityResult:
    """Losses and weights of the two stacks after the same steps."""

    initial_loss_tunix: float
    initial_loss_hf: float
    step_losses_tunix: tuple[float, ...]
    step_losses_hf: tuple[float, ...]
    # Step 1's loss had every answer token of the step weighed equally (transformers'
    # default) instead of each micro-batch: how far apart the two objectives are here.
    first_step_loss_token_weighted: float
    max_lora_weight_diff: float  # max |Tunix - PEFT| over every LoRA tensor after training
    max_lora_weight_change: float  # max |after - before| (so the diff above is meaningful)
    # ||Tunix - PEFT|| / ||Tunix update||: Adam's first steps move every weight by about
    # +-lr whatever its gradient's size, so weights whose gradient is at float32 noise
    # level may step apart; this norm says how much of the update that is.
    rel_lora_update_diff: float
    grad_rel_err: float  # ||grad Tunix - grad PEFT|| / ||grad Tunix|| at the start
    # transformers' own float32 error on the first micro-batch (against the same PEFT model
    # in float64): the floors the two comparisons above are bounded by.
    loss_float32_floor: float  # mean |per-token loss float32 - float64| over answer tokens
    grad_float32_floor: float  # ||grad float32 - grad float64|| / ||grad float64||
    # Tunix against itself from weights perturbed by this relative noise: the same two
    # measures, for scale.
    control_rel_noise: float
    control_max_step_loss_diff: float
    control_rel_lora_update_diff: float
    tokens_equal: bool  # train_gpu.py tokenised rows == cookbook.data.tokenize_chat
    masks_equal: bool
    num_answer_tokens: int
    kv_lora_a_tied: int
    loss_normalisation: str

    @property
    def initial_loss_diff(self) -> float:
        return abs(self.initial_loss_tunix - self.initial_loss_hf)

    @property
    def max_step_loss_diff(self) -> float:
        return max(abs(a - b) for a, b in zip(self.step_losses_tunix, self.step_losses_hf, strict=True))

    @property
    def token_weighting_effect(self) -> float:
        return abs(self.first_step_loss_token_weighted - self.step_losses_tunix[0])

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(
            initial_loss_diff=self.initial_loss_diff,
            max_step_loss_diff=self.max_step_loss_diff,
            token_weighting_effect=self.token_weighting_effect,
        )
        return d


def run_parity(**kwargs: Any) -> ParityResult:
    """:func:`_run_parity` with torch on one thread (see ``torch_threads``)."""
    with core.torch_threads(kwargs.pop("torch_threads", core.REFERENCE_TORCH_THREADS)):
        return _run_parity(**kwargs)


def _run_parity(
    *,
    config: Any = None,
    rows: list[dict] | None = None,
    random_b_std: float = 0.05,
    control_rel_noise: float = 1e-4,
    seed: int = 0,
    work_dir: str | Path | None = None,
) -> ParityResult:
    """Train both stacks for ``config.max_steps`` optimizer steps from the same state.

    Args:
      config: a ``cookbook.train.TrainConfig`` on a float32 CPU preset, without packing
        and without LoRA dropout (the stacks draw different masks); default
        :func:`parity_train_config`.
      rows: chat rows (default: :func:`uneven_rows`), ``batch_size x grad_accum_steps``
        of them, each no longer than ``data.seq_len`` tokens.
      random_b_std: LoRA ``B`` starts at N(0, std) instead of 0, so the initial loss
        already goes through every mapped LoRA tensor.
      control_rel_noise: relative noise on the LoRA weights of the Tunix-vs-Tunix control.
      work_dir: where the recipe is written (default: a temporary directory).
      torch_threads: (``run_parity`` only) torch intra-op threads. One, by default: with two,
        transformers' float32 results differ between processes (:func:`cookbook.core.torch_threads`),
        and on a busy 2-core machine two spinning OpenMP threads made its steps ~10x slower.
    """

    import jax
    import torch
    from flax import nnx
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cookbook import data

    config = config if config is not None else parity_train_config(seed=seed)
    p = models.get_preset(config.model_preset)
    lora = config.lora
    if lora.dropout:
        raise ValueError("run_parity needs lora.dropout == 0: the two stacks draw different dropout masks")
    if config.data.packing:
        raise ValueError("run_parity compares padded batches: set data.packing=False")
    micro_batch, seq_len = config.data.batch_size, config.data.seq_len
    base_dir = models.ensure_base(p)
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    n_rows = micro_batch * config.grad_accum_steps
    if rows is None:
        rows = uneven_rows(n_rows, seed=seed)
    if len(rows) != n_rows:
        raise ValueError(f"need exactly {n_rows} rows (micro-batch x accumulation), got {len(rows)}")

    # --- Tunix + Qwix
    tmodel = models.load_tunix_model(base_dir, p)
    tmodel = lora_lib.apply_lora(tmodel, lora, preset=p, seed=config.seed)
    if random_b_std:
        rng = np.random.default_rng(seed + 7)
        state = nnx.state(tmodel, nnx.LoRAParam)
        pure = state.to_pure_dict()
        _randomise_b(pure, rng, random_b_std)
        nnx.replace_by_pure_dict(state, pure)
        nnx.update(tmodel, state)
    before = _tunix_lora_numpy(tmodel)

    # --- transformers + PEFT + TRL, through the written train_gpu.py
    tmp = None
    if work_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="gpu-parity-")
        work_dir = tmp.name
    work_dir = Path(work_dir)
    recipe = gpu_baseline.derive_gpu_recipe(
        config, cluster=gpu_baseline.GpuCluster(num_gpus=1, bf16=False), base_model=str(base_dir)
    )
    gpu_baseline.write_gpu_recipe(work_dir / "recipe", recipe)
    script = import_train_script(work_dir / "recipe")
    torch.manual_seed(seed)
    hf_model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    trainer = script.build_trainer(
        model_path=str(base_dir),
        model=hf_model,
        train_rows=rows,
        output_dir=work_dir / "run",
        recipe_dir=work_dir / "recipe",
        sft_overrides=CPU_OVERRIDES,
    )
    tied = sum(
        1
        for n, m in trainer.model.named_modules()
        if n.endswith("v_proj")
        and hasattr(m, "lora_A")
        and m.lora_A["default"].weight is _sibling(trainer.model, n, "k_proj").lora_A["default"].weight
    )
    copy_tunix_lora_into_peft(tmodel, trainer.model, p, lora)

    # --- the same tokens and answer masks on both sides
    ours = [data.tokenize_chat(tokenizer, r) for r in rows]
    theirs = list(trainer.train_dataset)
    tokens_equal = all(list(a[0]) == list(t["input_ids"]) for a, t in zip(ours, theirs, strict=True))
    labels_mask = [[int(x != -100) for x in t["labels"]] for t in theirs]
    masks_equal = all(list(a[1]) == m for a, m in zip(ours, labels_mask, strict=True))
    micro = [pad_batch(ours[i : i + micro_batch], seq_len) for i in range(0, n_rows, micro_batch)]

    # --- the same loss and gradients on the first micro-batch (the tied K/V lora_A
    # collects both contributions, as Tunix's shared A does)
    first = trainer.data_collator([dict(r) for r in theirs[:micro_batch]])
    trainer.model.zero_grad()
    trainer.model.eval()
    first_loss_h = trainer.compute_loss(trainer.model, first)
    first_loss_h.backward()
    grads_h = _peft_as_tunix(trainer.model, p, grads=True)
    trainer.model.zero_grad()
    # The reference's own float32 error on this batch: the same PEFT model in float64.
    model64 = _float64_twin(script, trainer.model, base_dir, work_dir / "recipe", seed)
    nll64 = _answer_token_nll(model64, first)
    nll64.mean().backward()  # the recipe's loss: the micro-batch's mean over answer tokens
    grads64 = _peft_as_tunix(model64, p, grads=True, dtype=np.float64)
    # A scalar loss is one sample of float32 noise (it can round the same way by luck); the
    # per-token losses are hundreds: their mean float32 error bounds the mean loss's.
    with torch.no_grad():
        nll32 = _answer_token_nll(trainer.model, first)
    loss_floor = float((nll32.double() - nll64.detach()).abs().mean())
    grad_floor = _rel_norm({k: grads_h[k] - grads64[k] for k in grads64}, grads64)
    del model64

    # --- the same AdamW steps (the one compiled step: PeftTrainer's _train_step)
    micro_step = fit.nnx_train_step()

    start = nnx.state(tmodel, nnx.LoRAParam).to_pure_dict()

    opt = nnx.Optimizer(tmodel, tunix_optimizer(config), wrt=nnx.LoRAParam)
    one_device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    fresh_opt = jax.tree.map(lambda x: x, nnx.state(opt, nnx.OptState).to_pure_dict())

    def train_tunix():
        opt_state = nnx.state(opt, nnx.OptState)
        nnx.replace_by_pure_dict(opt_state, fresh_opt)  # same compiled step, state from zero
        nnx.update(opt, opt_state)
        # Committed like the base, as the step's outputs are: one compile for every step and call.
        nnx.update(opt, core.commit_arrays(nnx.state(opt), one_device))
        nnx.update(tmodel, core.commit_arrays(nnx.state(tmodel, nnx.LoRAParam), one_device))
        losses, first = [], None
        for _ in range(config.max_steps):
            step = []
            for b in micro:
                loss, grads = micro_step(tmodel, opt, data.model_inputs(_as_jax(b)))
                if first is None:
                    first = (float(loss), {"/".join(map(str, k)): np.asarray(v.get_value())
                                           for k, v in grads.flat_state()})  # fmt: skip
                step.append(float(loss))
            losses.append(step)
        return losses, first

    # Control: Tunix against itself, from LoRA weights perturbed by `control_rel_noise`
    # (about the size of the two stacks' gradient disagreement): how far float-noise-sized
    # differences carry through these Adam steps in one and the same stack.
    _set_lora(tmodel, start, rng=np.random.default_rng(seed + 11), rel_noise=control_rel_noise)
    control_losses, _ = train_tunix()
    after_control = _tunix_lora_numpy(tmodel)
    _set_lora(tmodel, start)
    steps, (first_loss_t, grads_t) = train_tunix()
    t_losses = [float(np.mean(x)) for x in steps]
    counts = [int(b["input_mask"][:, 1:].sum()) for b in micro]
    token_weighted = float(np.dot(steps[0], counts) / sum(counts))
    control_t = [float(np.mean(x)) for x in control_losses]
    grad_err = _rel_norm({k: grads_t[k] - grads_h[k] for k in grads_t}, grads_t)
    trainer.model.train()
    trainer.train()
    h_losses = [h["loss"] for h in trainer.state.log_history if "loss" in h][: config.max_steps]

    after_t = _tunix_lora_numpy(tmodel)
    after_h = _peft_as_tunix(trainer.model, p)
    diff = max(float(np.max(np.abs(after_t[k] - after_h[k]))) for k in after_t)
    change = max(float(np.max(np.abs(after_t[k] - before[k]))) for k in after_t)
    rel_diff = _rel_norm({k: after_t[k] - after_h[k] for k in after_t}, {k: after_t[k] - before[k] for k in after_t})
    control_rel = _rel_norm(
        {k: after_t[k] - after_control[k] for k in after_t}, {k: after_t[k] - before[k] for k in after_t}
    )
    if tmp is not None:
        tmp.cleanup()
    return ParityResult(
        initial_loss_tunix=first_loss_t,
        initial_loss_hf=float(first_loss_h.detach()),
        step_losses_tunix=tuple(t_losses),
        step_losses_hf=tuple(float(x) for x in h_losses),
        first_step_loss_token_weighted=token_weighted,
        max_lora_weight_diff=diff,
        max_lora_weight_change=change,
        rel_lora_update_diff=rel_diff,
        grad_rel_err=grad_err,
        loss_float32_floor=loss_floor,
        grad_float32_floor=grad_floor,
        control_rel_noise=control_rel_noise,
        control_max_step_loss_diff=max(abs(a - b) for a, b in zip(t_losses, control_t, strict=True)),
        control_rel_lora_update_diff=control_rel,
        tokens_equal=tokens_equal,
        masks_equal=masks_equal,
        num_answer_tokens=int(sum(int(m.sum()) for _, m in ours)),
        kv_lora_a_tied=tied,
        loss_normalisation=recipe.loss_normalisation,
    )


def describe(result: ParityResult) -> dict[str, Any]:
    """A small table for notebooks: each check, its value and the floor its bound is derived from."""
    return {
        "loss, first micro-batch (Tunix / transformers)": f"{result.initial_loss_tunix:.6f} / {result.initial_loss_hf:.6f}",
        "|loss diff|": f"{result.initial_loss_diff:.2e}",
        "step losses Tunix": " ".join(f"{x:.5f}" for x in result.step_losses_tunix),
        "step losses transformers": " ".join(f"{x:.5f}" for x in result.step_losses_hf),
        "max |step loss diff|": f"{result.max_step_loss_diff:.2e}",
        "step 1 loss if tokens were weighted over the step": f"{result.first_step_loss_token_weighted:.6f}",
        "max |LoRA weight diff| after steps": f"{result.max_lora_weight_diff:.2e}",
        "max |LoRA weight change|": f"{result.max_lora_weight_change:.2e}",
        "||update diff|| / ||update||": f"{result.rel_lora_update_diff:.2e}",
        "||grad diff|| / ||grad||": f"{result.grad_rel_err:.2e}",
        "transformers' float32 floor: per-token loss, gradient (vs float64)": f"{result.loss_float32_floor:.2e}, {result.grad_float32_floor:.2e} (bounds: 4x these)",
        f"control: Tunix vs Tunix from weights x (1 + {result.control_rel_noise:g} noise)": f"max |step loss diff| {result.control_max_step_loss_diff:.2e}, "
        f"||update diff|| / ||update|| {result.control_rel_lora_update_diff:.2e}",
        "same tokens / same answer mask": f"{result.tokens_equal} / {result.masks_equal}",
        "loss normalisation": result.loss_normalisation,
    }
