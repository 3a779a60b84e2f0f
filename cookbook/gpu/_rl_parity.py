"""Check on CPU that the GPU RL recipe's loss is Tunix's: TRL's GRPO loss and Tunix's policy loss on one batch.

Both stacks start from the same base checkpoint and the same LoRA: Qwix's (with random ``B``, so the
loss goes through every LoRA tensor), exported as the PEFT adapter ``cookbook merge --peft-out``
writes (text layout, vLLM's K = V copies included) and loaded by the generated ``train_grpo_gpu.py``'s
``--adapter`` path. They score one batch: a group of fixed completions per problem (not sampled: the
two samplers draw differently), with the same old log-probabilities (the float64 PEFT policy's, moved
by random noise, so importance ratios vary and clipping acts) and the same advantages (Tunix's; TRL's
own are recorded too: they differ by its std + 1e-4 against Tunix's std + 1e-6):

* Tunix: ``cookbook rl``'s DAPO / GRPO config and Tunix's registered policy loss (``grpo``) on a
  ``TrainExample`` padded as its learner pads one (prompts left-padded to a power of two, completions
  right-padded to the budget); LoRA gradients by ``nnx.value_and_grad``.
* TRL: the written script's ``GRPOTrainer``, through its public training step: ``rollout_func`` (TRL's
  hook for a custom sampler) returns the fixed completions, and ``training_step`` runs TRL's own scoring
  (the script's reward through TRL's reward call, TRL's advantages, padding and token count) and hands
  each micro-batch to ``compute_loss``, which is wrapped to record it (and still runs). The recorded
  micro-batches, given the old log-probabilities and advantages above, go through ``compute_loss`` and
  backward again, as the step runs them; no optimizer step is taken.

The bound is TRL's own float32 error on this batch (the same functions on the same PEFT model in
float64); the controls are TRL's loss with another aggregation (``loss_type="grpo"``, sequence means),
TRL's default ``epsilon_high`` (= ``epsilon``, no clip-higher) and the base without its LoRA. Nothing
is mocked: only the sampler is replaced by fixed tokens. Written by hand: the orchestration, the
padding of Tunix's batch and the per-token floor; both losses are the libraries' own.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cookbook import core, models
from cookbook import lora as lora_lib
from cookbook.gpu._parity_parts import _peft_as_tunix, _randomise_b, _rel_norm, _tunix_lora_numpy, import_train_script
from cookbook.gpu._recipe import GpuCluster
from cookbook.gpu._rl_recipe import derive_gpu_rl_recipe, write_gpu_rl_recipe

# What changes for a CPU run: precision, no launcher, nothing written, the dataset's order.
RL_CPU_OVERRIDES: dict[str, Any] = {
    "bf16": False,
    "use_cpu": True,
    "report_to": "none",
    "save_strategy": "no",
    "gradient_checkpointing": False,
    "dataloader_num_workers": 0,
    "disable_tqdm": True,
    "shuffle_dataset": False,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RLParityResult:
    """Losses, gradients and rewards of the two stacks on one batch."""

    loss_tunix: float
    loss_trl: float
    loss_trl_float64: float
    # TRL's float32 error on this batch: mean |per-token loss float32 - float64| over the completion tokens
    # (one scalar loss is one draw of float32 noise; hundreds of token terms bound the mean's error).
    loss_float32_floor: float
    grad_rel_err: float  # ||grad Tunix - grad TRL|| / ||grad Tunix||
    grad_float32_floor: float  # ||grad TRL float32 - float64|| / ||grad float64||
    control_loss_sequence_mean: float  # TRL loss_type="grpo": the per-sequence aggregation
    control_loss_default_clip: float  # TRL's default epsilon_high (= epsilon): no clip-higher
    control_loss_without_lora: float  # TRL's loss with the adapter disabled (the base alone)
    clipped_fraction: float  # completion tokens whose ratio the clip bounds
    rewards_tunix: tuple[float, ...]
    rewards_trl: tuple[float, ...]
    outcomes_tunix: tuple[str, ...]  # the simulator's verdict per completion (cookbook.evaluate)
    outcomes_trl: tuple[str, ...]  # the script's
    advantages_tunix: tuple[float, ...]
    advantages_trl: tuple[float, ...]
    prompts_equal: bool  # TRL's prompt tokens == the cookbook's (what Tunix's rollout is given)
    completion_tokens: int
    micro_batches: int
    max_lora_copy_diff: float  # max |Tunix LoRA - PEFT LoRA| after --adapter (0: exact)
    kv_lora_a_tied: int

    @property
    def loss_diff(self) -> float:
        return abs(self.loss_tunix - self.loss_trl)

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "loss_diff": self.loss_diff}


def import_grpo_script(recipe_dir: str | Path):
    """Import the ``train_grpo_gpu.py`` written into ``recipe_dir`` (the file a GPU user runs)."""
    return import_train_script(recipe_dir, "train_grpo_gpu.py")


def tunix_rl_algo_config(rl_config: Any):
    """Tunix's algorithm config as ``cookbook rl`` builds it (``cookbook.rl._run._learner``), with the
    sampling temperature its learner copies from the rollout config."""
    from tunix.rl.grpo import dapo_learner, grpo_learner

    if rl_config.algorithm == "dapo":
        algo = dapo_learner.DAPOConfig(
            num_generations=rl_config.group_size,
            epsilon=rl_config.epsilon,
            epsilon_high=rl_config.epsilon_high,
            overlong_buffer=None,
        )
    else:
        algo = grpo_learner.GRPOConfig(
            num_generations=rl_config.group_size,
            beta=rl_config.beta,
            epsilon=rl_config.epsilon,
            loss_agg_mode="token-mean",
        )
        algo.epsilon_high = rl_config.epsilon_high
    algo.temperature = rl_config.temperature
    return algo


def run_rl_parity(**kwargs: Any) -> RLParityResult:
    """:func:`_run_rl_parity` with torch on one thread (``cookbook.core.torch_threads``)."""
    with core.torch_threads(kwargs.pop("torch_threads", core.REFERENCE_TORCH_THREADS)):
        return _run_rl_parity(**kwargs)


def _run_rl_parity(
    *,
    rl_config: Any,
    train_config: Any,
    problems: Sequence[Any],
    completions: Sequence[Sequence[str]],
    prompt_ids: Sequence[Sequence[int]],
    tunix_reward: Callable[..., Sequence[float]],
    reward: Any = None,
    random_b_std: float = 0.05,
    old_logp_noise: float = 0.3,
    seed: int = 0,
    work_dir: str | Path | None = None,
) -> RLParityResult:
    """Score one batch with both stacks.

    Args:
      rl_config / train_config: ``cookbook.rl.RLConfig`` (beta 0) and the SFT ``TrainConfig`` (float32 preset).
      problems: ``cookbook.evaluate.Problem`` objects; completions: ``group_size`` texts per problem.
      prompt_ids: each problem's prompt tokens as the cookbook renders them (``evaluate.prompt_token_ids``).
      tunix_reward: ``cookbook.rl.VerilogReward``, called as Tunix calls it (text decoded with special tokens).
      reward: the ``RewardConfig`` the recipe's reward takes its weights and limits from.
      old_logp_noise: std of the noise on the old log-probabilities (ratios around exp(+-noise)).
    """
    import torch
    from flax import nnx
    from jax import numpy as jnp
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from tunix.rl import common, function_registry

    g = rl_config.group_size
    if len(completions) != len(problems) or any(len(c) != g for c in completions):
        raise ValueError(f"need {g} completions (the group size) for each of the {len(problems)} problems")
    p = models.get_preset(train_config.model_preset)
    base_dir = models.ensure_base(p)
    lora = dataclasses.replace(train_config.lora, dropout=0.0)
    tok = AutoTokenizer.from_pretrained(base_dir)
    tmp = tempfile.TemporaryDirectory(prefix="gpu-rl-parity-") if work_dir is None else None
    work = Path(tmp.name if tmp else work_dir)

    # --- Tunix + Qwix, its LoRA exported as `cookbook merge --peft-out` writes it
    tmodel = lora_lib.apply_lora(models.load_tunix_model(base_dir, p), lora, preset=p, seed=seed)
    state = nnx.state(tmodel, nnx.LoRAParam)
    pure = state.to_pure_dict()
    _randomise_b(pure, np.random.default_rng(seed + 7), random_b_std)
    nnx.replace_by_pure_dict(state, pure)
    nnx.update(tmodel, state)
    tensors = lora_lib.tunix_lora_to_peft(nnx.state(tmodel, nnx.LoRAParam), p, lora, dtype=np.float32)
    lora_lib.write_peft_adapter(work / "adapter", tensors, rank=lora.rank, alpha=lora.alpha)

    # --- TRL + PEFT, through the written train_grpo_gpu.py and its --adapter path
    cluster = GpuCluster(num_gpus=1, bf16=False)
    recipe = derive_gpu_rl_recipe(
        rl_config, train_config, problems=problems, reward=reward, cluster=cluster, base_model=str(base_dir),
        tokenizer=tok,
    )  # fmt: skip
    write_gpu_rl_recipe(work / "recipe", recipe, problems=problems)
    script = import_grpo_script(work / "recipe")
    torch.manual_seed(seed)
    trainer = script.build_trainer(
        model_path=str(base_dir),
        model=AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32),
        output_dir=work / "run",
        recipe_dir=work / "recipe",
        adapter=work / "adapter",
        grpo_overrides=RL_CPU_OVERRIDES,
    )
    model = trainer.model
    mods = dict(model.named_modules())
    tied = sum(
        1
        for n, m in mods.items()
        if n.endswith("v_proj") and hasattr(m, "lora_A")
        and m.lora_A["default"].weight is mods[n[: -len("v_proj")] + "k_proj"].lora_A["default"].weight
    )  # fmt: skip
    t_lora, h_lora = _tunix_lora_numpy(tmodel), _peft_as_tunix(model, p)
    copy_diff = max(float(np.max(np.abs(t_lora[k] - h_lora[k]))) for k in t_lora)

    # --- TRL's own scoring of the fixed completions, through its training step (public API only): a
    # rollout function in place of the sampler (it renders the prompts, as TRL asks of one), and each
    # micro-batch the step hands to compute_loss recorded.
    names = [q.name for q in problems for _ in range(g)]
    comp_ids = [tok(t, add_special_tokens=False)["input_ids"] for group in completions for t in group]
    if len({tuple(c) for c in comp_ids}) != len(comp_ids):
        raise ValueError("the completions must differ: TRL shuffles the batch, and they tell its rows apart")
    rows = {r["problem"]: r for r in trainer.train_dataset}
    batch = [dict(rows[n]) for n in names]
    rendered = trainer.processing_class.apply_chat_template(
        [r["prompt"] for r in batch], add_generation_prompt=True, tokenize=True, return_dict=True,
        **trainer.chat_template_kwargs,
    )  # fmt: skip
    trl_prompt_ids = [list(x) for x in rendered["input_ids"]]
    prompts_equal = all(ids == list(prompt_ids[i // g]) for i, ids in enumerate(trl_prompt_ids))
    trainer.rollout_func = lambda _prompts, _trainer: {
        "prompt_ids": trl_prompt_ids,
        "completion_ids": comp_ids,
        "logprobs": None,
    }
    accum, spg = recipe.grpo["gradient_accumulation_steps"], recipe.grpo["steps_per_generation"]
    trainer.current_gradient_accumulation_steps = accum  # what Trainer's loop sets before its steps
    recorded, step_loss = [], trainer.compute_loss

    def recording(policy, inputs, *args, **kwargs):
        recorded.append(dict(inputs))
        return step_loss(policy, inputs, *args, **kwargs)

    trainer.compute_loss = recording
    try:
        for _ in range(spg):  # one optimizer step's micro-batches (no optimizer step is taken)
            trainer.training_step(model, batch, None)
    finally:
        del trainer.compute_loss
    model.zero_grad()
    script_reward = trainer.reward_funcs[0]
    rewards_trl = tuple(float(r) for r in script_reward.last["rewards"])
    outcomes_trl = tuple(script_reward.last["outcomes"])
    where = {tuple(c): i for i, c in enumerate(comp_ids)}
    places = [
        [where[tuple(c[m.bool()].tolist())] for c, m in zip(mb["completion_ids"], mb["completion_mask"], strict=True)]
        for mb in recorded
    ]
    adv_trl = np.zeros(len(names))
    for mb, idx in zip(recorded, places, strict=True):
        adv_trl[idx] = mb["advantages"].numpy()

    # --- Tunix's rewards (its sampler decodes with special tokens) and advantages
    texts = [tok.decode(ids) for ids in comp_ids]
    rewards = np.asarray(tunix_reward(prompts=["p"] * len(texts), completions=texts, problem=names), np.float64)
    adv = function_registry.get_advantage_estimator("grpo")(rewards=rewards, num_generations=g)
    verdicts = getattr(tunix_reward, "last", None)
    outcomes_tunix = tuple(verdicts.outcomes) if verdicts is not None else ()

    # --- the same old log-probs (the float64 policy's + noise) and advantages on both sides
    model64 = _float64_policy(script, model, base_dir, work / "recipe", rl_config.temperature)
    noise = old_logp_noise * np.random.default_rng(seed + 3).standard_normal((len(names), max(map(len, comp_ids))))
    eps_lo, eps_hi = rl_config.epsilon, rl_config.epsilon_high
    old_rows: list[np.ndarray] = [np.zeros(0)] * len(names)
    diffs, clipped = [], []
    for mb, idx in zip(recorded, places, strict=True):
        cm = mb["completion_mask"].bool()
        with torch.no_grad():
            lp64, lp32 = _completion_logps(model64, mb), _completion_logps(model, mb).double()
        old = torch.zeros_like(lp64)
        for r, i in enumerate(idx):
            n_tok = int(cm[r].sum())
            old[r, :n_tok] = lp64[r, :n_tok] + torch.from_numpy(noise[i, :n_tok])
            old_rows[i] = old[r, :n_tok].numpy()
        a = torch.from_numpy(adv[idx]).double()[:, None]

        def per_token(lp, old=old, a=a):  # the clipped objective per token: for the floor and clip count only
            r = torch.exp(lp - old)
            return -torch.minimum(r * a, torch.clamp(r, 1 - eps_lo, 1 + eps_hi) * a)

        diffs.append((per_token(lp32) - per_token(lp64))[cm].abs())
        r64 = torch.exp(lp64 - old)
        clipped.append((((a > 0) & (r64 > 1 + eps_hi)) | ((a < 0) & (r64 < 1 - eps_lo)))[cm])
        mb.update(advantages=a[:, 0].float(), old_per_token_logps=old)
    floor = float(torch.cat(diffs).mean())
    clipped_fraction = float(torch.cat(clipped).double().mean())
    completion_tokens = sum(int(mb["completion_mask"].sum()) for mb in recorded)

    def trl_loss(policy, dtype, backward: bool) -> float:
        total = 0.0
        for mb in recorded:  # as the step runs them: each micro-batch's loss, gradients accumulated
            part = {
                **mb,
                "advantages": mb["advantages"].to(dtype),
                "old_per_token_logps": mb["old_per_token_logps"].to(dtype),
            }
            loss = trainer.compute_loss(policy, part)
            if backward:
                loss.backward()
            total += float(loss.detach())
        return total

    model.zero_grad()
    loss_trl = trl_loss(model, torch.float32, backward=True)
    grads_trl = _peft_as_tunix(model, p, grads=True)
    loss64 = trl_loss(model64, torch.float64, backward=True)
    grads64 = _peft_as_tunix(model64, p, grads=True, dtype=np.float64)
    with torch.no_grad():
        trainer.loss_type = "grpo"
        control_seq = trl_loss(model, torch.float32, backward=False)
        trainer.loss_type = recipe.grpo["loss_type"]
        trainer.epsilon_high = eps_lo
        control_clip = trl_loss(model, torch.float32, backward=False)
        trainer.epsilon_high = eps_hi
        with model.disable_adapter():
            control_base = trl_loss(model, torch.float32, backward=False)

    # --- Tunix's policy loss on the same batch, padded as its learner pads it
    plen = [len(x) for x in trl_prompt_ids]
    width = 1 << (max(plen) - 1).bit_length()
    budget = recipe.grpo["max_completion_length"]
    if max(map(len, comp_ids)) > budget:
        raise ValueError(f"a completion has {max(map(len, comp_ids))} tokens, over the rollout budget {budget}")
    pad = tok.pad_token_id
    prompt = np.full((len(names), width), pad, np.int32)
    completion = np.full((len(names), budget), pad, np.int32)
    old_t = np.zeros((len(names), budget), np.float32)
    for i, (pi, ci) in enumerate(zip(trl_prompt_ids, comp_ids, strict=True)):
        prompt[i, width - len(pi) :] = pi
        completion[i, : len(ci)] = ci
        old_t[i, : len(ci)] = old_rows[i]
    example = common.TrainExample(
        prompt_ids=jnp.asarray(prompt),
        prompt_mask=jnp.asarray(prompt != pad),
        completion_ids=jnp.asarray(completion),
        completion_mask=jnp.asarray(completion != pad),
        advantages=jnp.asarray(adv.astype(np.float32)),
        ref_per_token_logps=None,
        old_per_token_logps=jnp.asarray(old_t),
    )
    algo = tunix_rl_algo_config(rl_config)
    policy_loss = function_registry.get_policy_loss_fn(algo.policy_loss_fn)

    def tunix_loss(m):
        return policy_loss(m, example, algo_config=algo, pad_id=pad, eos_id=tok.eos_token_id)[0]

    loss_t, grads = nnx.value_and_grad(tunix_loss, argnums=nnx.DiffState(0, nnx.LoRAParam))(tmodel)
    grads_t = {"/".join(map(str, k)): np.asarray(v.get_value()) for k, v in grads.flat_state()}
    if tmp is not None:
        tmp.cleanup()
    return RLParityResult(
        loss_tunix=float(loss_t),
        loss_trl=loss_trl,
        loss_trl_float64=loss64,
        loss_float32_floor=floor,
        grad_rel_err=_rel_norm({k: grads_t[k] - grads_trl[k] for k in grads_t}, grads_t),
        grad_float32_floor=_rel_norm({k: grads_trl[k] - grads64[k] for k in grads64}, grads64),
        control_loss_sequence_mean=control_seq,
        control_loss_default_clip=control_clip,
        control_loss_without_lora=control_base,
        clipped_fraction=clipped_fraction,
        rewards_tunix=tuple(float(r) for r in rewards),
        rewards_trl=rewards_trl,
        outcomes_tunix=outcomes_tunix,
        outcomes_trl=outcomes_trl,
        advantages_tunix=tuple(float(a) for a in adv),
        advantages_trl=tuple(float(a) for a in adv_trl),
        prompts_equal=prompts_equal,
        completion_tokens=completion_tokens,
        micro_batches=len(recorded),
        max_lora_copy_diff=copy_diff,
        kv_lora_a_tied=tied,
    )


def _float64_policy(script, policy, base_dir: Path, recipe_dir: Path, temperature: float):
    """The recipe's PEFT model again in float64 with ``policy``'s LoRA weights and TRL's fused LM head
    (what ``GRPOTrainer`` adds to its model), built from the base checkpoint, not copied."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    cfg = script.load_recipe(recipe_dir)
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float64)
    add_fused_lm_head(base, temperature=temperature, outputs=("log_probs", "entropy"))
    twin = script.sft_script(recipe_dir).apply_lora(base, cfg["lora"], cfg["recipe"], seed=0)
    src = dict(policy.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for name, param in twin.named_parameters(remove_duplicate=False):
            if ".lora_" in name:
                param.copy_(src[name].detach().double())
    return twin.eval()


def _completion_logps(policy, mb):
    """Per-token log-probs of a micro-batch's completion tokens through the fused LM head ``GRPOTrainer``
    adds to its model (``trl.trainer.utils.add_fused_lm_head``: ``labels`` mark the tokens scored)."""
    import torch

    ids = torch.cat([mb["prompt_ids"], mb["completion_ids"]], dim=1)
    attn = torch.cat([mb["prompt_mask"], mb["completion_mask"]], dim=1)
    keep = mb["completion_ids"].size(1)
    labels = ids.masked_fill(attn == 0, -100)
    labels[:, :-keep] = -100
    return policy(input_ids=ids, attention_mask=attn, labels=labels, fused_lm_head=True).log_probs[:, -keep:]
