"""What a diffusion model is trained by, one class each, chosen from ``OBJECTIVES`` by name (``rose train
diffusion --objective``) or by the scheduler class a config names (``objective_of``): DDPM's ε-prediction
on its forward process x_t = √ᾱ_t x + √(1 − ᾱ_t) ε, or flow matching (rectified flow) on x_σ = (1 − σ) x + σ ε
with σ = shift·s / (1 + (shift − 1)·s) of s = t / T, the denoiser predicting the velocity ε − x. Each knows
the schedulers that train by it, how it noises an image at a timestep and what the prediction is compared
with there, how the per-image loss's terms may be weighted, how it samples, and whether DDPM's baselines
(which follow ᾱ_t) can read its model."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from roseood.errors import RoseError, first_line, shown
from roseood.models.diffusion.bounds import float_in
from roseood.models.diffusion.library import diffusers_module, quiet_diffusers


def _scheduler(name: str, config: Any, **options: Any) -> Any:
    """diffusers' scheduler class ``name`` built from a checked ``config`` and ``options`` (one-line
    ``RoseError`` if not)."""
    kind = getattr(diffusers_module(), name)
    with quiet_diffusers():
        try:
            return kind.from_config(config, **options)
        except (TypeError, ValueError, KeyError, AttributeError, RuntimeError) as exc:
            raise RoseError(f"cannot build a {name} from its config ({first_line(exc)})") from None


class Objective:
    """An objective: its ``name``, the statistic ``train_loss`` reports (``statistic``), the scheduler
    classes whose models train by it (``schedulers``), the one roseood builds (``builds``) and samples with
    (``samples``), and whether it follows DDPM's forward process (``forward_process``: ᾱ_t, DDIM steps)."""

    name: ClassVar[str]
    statistic: ClassVar[str]
    schedulers: ClassVar[frozenset[str]]
    builds: ClassVar[str]
    samples: ClassVar[str]
    forward_process: ClassVar[bool]

    def check(self, cfg: dict[str, Any], where: str, error: type[RoseError]) -> dict[str, Any]:
        """A scheduler config of this objective, its fields already checked, refused in one line where it
        sets what roseood does not model."""
        raise NotImplementedError

    def schedule(self, config: dict[str, Any]) -> tuple[Any, Tensor]:
        """The scheduler of a checked ``config`` and its ᾱ_t (empty where the objective has none)."""
        return _scheduler(self.builds, config), torch.zeros(0)

    def scheduler_config(self, timesteps: int, shift: float) -> dict[str, Any] | None:
        """The scheduler config ``rose train diffusion`` gives a fresh model (None: the model's default)."""
        return None

    def timesteps_of(self, s: Tensor, scheduler: Any) -> Tensor:
        """The denoiser's timesteps of fractions s in [0, 1) of the train timesteps."""
        raise NotImplementedError

    def draw_timesteps(self, n: int, scheduler: Any, device: torch.device) -> Tensor:
        """``n`` random training timesteps (s uniform in [0, 1))."""
        return self.timesteps_of(torch.rand(n, device=device), scheduler)

    def noised(self, x0: Tensor, t: Tensor, noise: Tensor, alphas: Tensor, scheduler: Any) -> Tensor:
        """The image ``x0`` noised by ``noise`` at timesteps ``t``."""
        raise NotImplementedError

    def prediction(
        self, out: Tensor, xt: Tensor, t: Tensor, scheduler: Any, alphas: Tensor, a_bar: Tensor | None = None
    ) -> Tensor:
        """The denoiser's output ``out`` at (x_t, t) as what the loss compares with ``target``."""
        return out

    def target(self, x0: Tensor, noise: Tensor) -> Tensor:
        """What the prediction is trained towards at the image ``x0`` noised by ``noise``."""
        raise NotImplementedError

    def check_weighting(self, weighting: str) -> None:
        """Refuse in one line a weighting of the per-image loss's terms this objective has no meaning for."""

    def weights(self, weighting: str, t: Tensor, alphas: Tensor) -> Tensor:
        """The weight of the squared error at each timestep of ``t`` ("simple": 1)."""
        return torch.ones(t.shape, dtype=torch.float32, device=t.device)

    def describe(self, cfg: Any) -> tuple[str, str]:
        """The objective in words and the schedule's steps, for the line ``rose check-model`` prints."""
        raise NotImplementedError

    def sampler(self, scheduler: Any) -> Any:
        """The scheduler that samples from a model trained with ``scheduler`` (``samples``: its class)."""
        return _scheduler(self.samples, scheduler.config)

    def sampling(self, t: Tensor) -> tuple[int | float, Any]:
        """A sampler's timestep ``t`` as the denoiser's rows take it, and as the sampler's step takes it."""
        raise NotImplementedError

    def require_forward_process(self, what: str) -> None:
        """A one-line ``RoseError`` where ``what`` needs DDPM's forward process and this objective has
        none (the baselines that follow ᾱ_t: DiffPath, MSMA, DDPM-OOD)."""
        if not self.forward_process:
            raise RoseError(
                f"{what} needs a model of DDPM's forward process (ᾱ_t); this one is trained by flow "
                "matching: use ROSE (rose-*) or the denoising loss"
            )


class DDPM(Objective):
    """DDPM's ε-prediction on its forward process (a discrete β schedule; the schedulers differ only in how
    they sample), whatever the denoiser predicts (ε, v or x₀: read as ε)."""

    name = "ddpm"
    statistic = "eps_mse"
    schedulers = frozenset(
        {
            "DDPMScheduler", "DDIMScheduler", "PNDMScheduler", "DPMSolverMultistepScheduler",
            "DPMSolverSinglestepScheduler", "EulerDiscreteScheduler", "EulerAncestralDiscreteScheduler",
            "HeunDiscreteScheduler", "LMSDiscreteScheduler", "UniPCMultistepScheduler",
            "DEISMultistepScheduler", "KDPM2DiscreteScheduler", "KDPM2AncestralDiscreteScheduler",
        }
    )  # fmt: skip
    builds = "DDPMScheduler"
    samples = "DDIMScheduler"
    forward_process = True

    def check(self, cfg: dict[str, Any], where: str, error: type[RoseError]) -> dict[str, Any]:
        """β_start ≤ β_end, trained betas in (0, 1), one per timestep."""
        if cfg.get("beta_start", 1e-4) > cfg.get("beta_end", 0.02):
            end = cfg.get("beta_end", 0.02)
            raise error(f"{where}: beta_start {cfg['beta_start']} exceeds beta_end {end}")
        betas = cfg.get("trained_betas")
        if betas is not None:
            steps = cfg.get("num_train_timesteps", 1000)
            if not isinstance(betas, list) or len(betas) != steps:
                raise error(f"{where}: trained_betas must be a list of num_train_timesteps = {steps} numbers")
            for i, b in enumerate(betas):
                float_in(0.0, 1.0, low_open=True, high_open=True)(b, f"{where}: trained_betas[{i}]", error)
        return cfg

    def schedule(self, config: dict[str, Any]) -> tuple[Any, Tensor]:
        sched = _scheduler(self.builds, config)
        alphas = sched.alphas_cumprod.float()
        if len(alphas) != sched.config.num_train_timesteps or not bool(((alphas >= 0) & (alphas <= 1)).all()):
            raise RoseError("the scheduler config gives no valid noise schedule (ᾱ_t outside [0, 1])")
        return sched, alphas

    def timesteps_of(self, s: Tensor, scheduler: Any) -> Tensor:
        """⌊s·T⌋."""
        total = int(scheduler.config.num_train_timesteps)
        return (s * total).floor().clamp(0, total - 1).long()

    def draw_timesteps(self, n: int, scheduler: Any, device: torch.device) -> Tensor:
        """Uniform over the T steps by randint, not ⌊u·T⌋: the draws of checkpoints trained before stay."""
        return torch.randint(0, int(scheduler.config.num_train_timesteps), (n,), device=device)

    def noised(self, x0: Tensor, t: Tensor, noise: Tensor, alphas: Tensor, scheduler: Any) -> Tensor:
        """x_t = √ᾱ_t x0 + √(1 − ᾱ_t) ε."""
        a = alphas[t].view(-1, 1, 1, 1)
        return a.sqrt() * x0 + (1 - a).sqrt() * noise

    def prediction(
        self, out: Tensor, xt: Tensor, t: Tensor, scheduler: Any, alphas: Tensor, a_bar: Tensor | None = None
    ) -> Tensor:
        """The predicted noise ε̂ of the output (ε, v or x0); ``a_bar``: ᾱ of each row where ``t`` is
        fractional (default: the schedule's ᾱ_t)."""
        kind = scheduler.config.prediction_type
        if kind == "epsilon":
            return out
        a = (alphas[t] if a_bar is None else a_bar).view(-1, 1, 1, 1)
        if kind == "v_prediction":
            return a.sqrt() * out + (1 - a).sqrt() * xt
        if kind == "sample":
            return (xt - a.sqrt() * out) / (1 - a).sqrt()
        raise RoseError(f"unsupported prediction_type {kind!r}")

    def target(self, x0: Tensor, noise: Tensor) -> Tensor:
        """ε."""
        return noise

    def weights(self, weighting: str, t: Tensor, alphas: Tensor) -> Tensor:
        """ "elbo": each term weighted as in DDPM's variational bound."""
        if weighting == "simple":
            return super().weights(weighting, t, alphas)
        # DDPM's bound: L_t = β_t² / (2 σ_t² α_t (1 − ᾱ_t)) ‖ε − ε̂‖², σ_t² = β_t (1 − ᾱ_{t-1}) / (1 − ᾱ_t)
        a = alphas
        prev = torch.cat([a.new_ones(1), a[:-1]])
        beta = 1 - a / prev
        sigma2 = (beta * (1 - prev) / (1 - a)).clamp_min(1e-20)
        w = beta**2 / (2 * sigma2 * (1 - beta) * (1 - a))
        w[0] = 1.0 / (2 * (1 - beta[0]))  # t = 0: the decoder term, an ε-MSE at σ_1
        return w[t].float()

    def describe(self, cfg: Any) -> tuple[str, str]:
        kind = {"epsilon": "ε", "v_prediction": "v", "sample": "x₀"}[cfg.prediction_type]
        return f"{kind} prediction", f" {cfg.beta_schedule}-β steps"

    def sampler(self, scheduler: Any) -> Any:
        """DDIM (η = 0), stepping by the predicted noise (what ``prediction`` reads any output as)."""
        return _scheduler(self.samples, scheduler.config, prediction_type="epsilon")

    def sampling(self, t: Tensor) -> tuple[int | float, Any]:
        return int(t), int(t)


# a flow scheduler's settings that make the training σ depend on more than t (the image size, a stretched end)
FLOW_REFUSED = {
    "use_dynamic_shifting": "a shift that depends on the image size",
    "invert_sigmas": "σ running backwards",
    "shift_terminal": "σ stretched to end elsewhere than 0",
}


class FlowMatching(Objective):
    """Flow matching: the velocity's squared error at σ of s = t / T (a fixed shift of σ)."""

    name = "flow"
    statistic = "v_mse"
    schedulers = frozenset({"FlowMatchEulerDiscreteScheduler", "FlowMatchHeunDiscreteScheduler"})
    builds = "FlowMatchEulerDiscreteScheduler"
    samples = "FlowMatchEulerDiscreteScheduler"
    forward_process = False

    def check(self, cfg: dict[str, Any], where: str, error: type[RoseError]) -> dict[str, Any]:
        """A fixed shift of σ; not one that changes with the image size."""
        for flag, what in FLOW_REFUSED.items():
            if cfg.get(flag, False) not in (False, None):
                raise error(f"{where}: {flag} ({what}) is not modelled; roseood reads a fixed shift of σ")
        return cfg

    def scheduler_config(self, timesteps: int, shift: float) -> dict[str, Any] | None:
        """The scheduler's class is what makes the model a flow-matching one."""
        return {"_class_name": self.builds, "num_train_timesteps": timesteps, "shift": shift}

    def timesteps_of(self, s: Tensor, scheduler: Any) -> Tensor:
        """σ(s)·T, as diffusers' training forms them: σ = shift·s / (1 + (shift − 1)·s)."""
        shift = float(scheduler.config.shift)
        return (shift * s / (1 + (shift - 1) * s) * int(scheduler.config.num_train_timesteps)).float()

    def noised(self, x0: Tensor, t: Tensor, noise: Tensor, alphas: Tensor, scheduler: Any) -> Tensor:
        """x_σ = (1 − σ) x0 + σ ε with σ = t / T."""
        sigma = (t.float() / int(scheduler.config.num_train_timesteps)).view(-1, 1, 1, 1)
        return (1 - sigma) * x0 + sigma * noise

    def target(self, x0: Tensor, noise: Tensor) -> Tensor:
        """The velocity ε − x0."""
        return noise - x0

    def check_weighting(self, weighting: str) -> None:
        if weighting != "simple":
            raise RoseError(
                f"weighting {weighting!r} is DDPM's variational bound; a flow-matching model's loss "
                "is the velocity's squared error (weighting 'simple')"
            )

    def describe(self, cfg: Any) -> tuple[str, str]:
        return "flow matching (velocity ε − x prediction)", f" steps, shift {cfg.shift:g}"

    def sampling(self, t: Tensor) -> tuple[int | float, Any]:
        return float(t), t


OBJECTIVES: dict[str, Objective] = {o.name: o for o in (DDPM(), FlowMatching())}


def objective_of(
    config: dict[str, Any], where: str = "scheduler config", error: type[RoseError] = RoseError
) -> Objective:
    """The objective a scheduler config's class trains by (DDPM's where it names none); a class of another
    objective is a one-line ``error``: roseood would score its model with the wrong loss."""
    kind = config.get("_class_name", DDPM.builds)
    for objective in OBJECTIVES.values():
        if kind in objective.schedulers:
            return objective
    raise error(
        f"{where} holds a {shown(kind)}, whose model is trained by another objective; roseood reads "
        "models of DDPM's forward process (DDPMScheduler, DDIMScheduler and the other discrete-β "
        "schedulers) and flow-matching models (FlowMatchEulerDiscreteScheduler) and would score this "
        "one with the wrong loss"
    )
