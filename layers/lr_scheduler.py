"""Learning-rate schedules, as torch.optim.lr_scheduler's (also reachable as
layers.optim.lr_scheduler). Call `scheduler.step()` after `optimizer.step()`, once an epoch (or a
step). As torch's, each step sets a group's 'lr' from the lr the group has now (the recursive
form: StepLR multiplies it by gamma every step_size steps), so schedulers chain (two on one
optimizer multiply), an lr set by hand in param_groups is the one the schedule goes on from, and
a resumed run -- optimizer and scheduler made and loaded, in either order -- goes on with the lr
it stopped at. The group's starting lr is kept in it as 'initial_lr' (`base_lrs`); LambdaLR,
CosineAnnealingWarmRestarts and `step(epoch)` work from it (the closed form; where a
constructor's step changes the lr -- LambdaLR's base_lr * f(0), LinearLR's start factor -- a
load puts the lr the run stopped at back, where torch's leaves the constructor's for an epoch).
A captured step (layers.graph.CapturedStep) keys on the lr, so a new lr is a new capture: a
schedule changing it every step recaptures every step.

state_dict / load_state_dict carry the count and the settings -- torch's names, so a state saved
by torch loads (its MultiStepLR milestones are a Counter, as here) -- but not LambdaLR's
functions, which the scheduler loaded into keeps."""
import bisect
import collections
import math
import types
import warnings


class LRScheduler:
    """The common part: `last_epoch` counts the steps (-1 before the first, which the
    constructor takes, as torch's), `base_lrs` are the groups' starting lrs ('initial_lr')."""

    def __init__(self, optimizer, last_epoch=-1):
        if not hasattr(optimizer, "param_groups"):
            raise TypeError(f"{type(self).__name__}: {type(optimizer).__name__} is not an "
                            f"optimizer (it has no param_groups)")
        self.optimizer = optimizer
        for i, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise KeyError(f"{type(self).__name__}: param 'initial_lr' is not specified in "
                               f"param_groups[{i}] when resuming an optimizer (last_epoch="
                               f"{last_epoch}), as torch requires")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()
        self._made_after = getattr(optimizer, "loads", None)     # (not state: see load)

    def _initial_step(self):
        """The constructor's step (SequentialLR's too, for the schedule it starts with)."""
        self._step_count = 0
        self._is_initial = True           # the constructor's step keeps the groups' lrs
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self):
        """Each group's lr for step `last_epoch`, from the groups' current lrs."""
        raise NotImplementedError

    def _lrs(self):
        return [group["lr"] for group in self.optimizer.param_groups]

    def step(self, epoch=None):
        """One step on; `step(epoch)` (deprecated in torch, as here) jumps to `epoch` by the
        closed form where the schedule has one."""
        self._step_count += 1
        if epoch is not None:
            warnings.warn(f"{type(self).__name__}.step(epoch) is deprecated, as in torch: call "
                          f"step() once an epoch", UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch=None):
        """The groups' lrs one step on, or at `epoch` (SequentialLR restarts a schedule at 0)."""
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed = getattr(self, "_get_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        # (strict, as torch's: a group added since a closed form's base_lrs is refused)
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = self._lrs()

    def get_last_lr(self):
        return list(self._last_lr)

    # the group settings the constructor's step changes (LambdaLR's lr, base_lr * f(0);
    # LinearLR's, by its start factor; OneCycleLR's lr and momentum): a load puts back the ones
    # the run stopped at (load_state_dict)
    moved = ()

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_made_after")}

    def load_state_dict(self, state_dict):
        """Restore the count and settings. For a schedule whose constructor's step changes the
        lrs, that step wrote over the lrs a resumed run goes on from (torch's leaves its own for
        an epoch); unless the optimizer has been loaded since this scheduler was made (its lrs
        then stand), they are put back: the optimizer's as loaded before (the same for every
        scheduler of a chain), or -- an optimizer never loaded -- this schedule's saved lrs."""
        self.__dict__.update({k: v for k, v in state_dict.items() if k != "_made_after"})
        loads = getattr(self.optimizer, "loads", None)
        if not self.moved or loads is None or loads != self._made_after:
            return
        groups = self.optimizer.param_groups
        if loads:
            for group, loaded in zip(groups, self.optimizer.loaded_settings):
                group.update({k: loaded[k] for k in self.moved if k in loaded})
            return
        lrs = state_dict.get("_last_lr")
        if lrs is not None and len(lrs) == len(groups):
            for group, lr in zip(groups, lrs):
                group["lr"] = lr


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch) (one function, or one per group)."""
    moved = ("lr",)

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        n = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) \
            else [lr_lambda] * n
        kind = type(self).__name__
        if len(self.lr_lambdas) != n:
            raise ValueError(f"{kind}: {len(self.lr_lambdas)} lr_lambdas for {n} parameter "
                             f"groups")
        for f in self.lr_lambdas:
            if not callable(f):
                raise TypeError(f"lr_lambda should be a function, but got {type(f).__name__}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * f(self.last_epoch)
                for f, base in zip(self.lr_lambdas, self.base_lrs, strict=True)]

    def state_dict(self):
        """torch's: the functions as None (a callable object's attributes, where it has them)."""
        state = {k: v for k, v in super().state_dict().items() if k != "lr_lambdas"}
        state["lr_lambdas"] = [None if isinstance(f, types.FunctionType) or
                               not hasattr(f, "__dict__") else dict(vars(f))
                               for f in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        saved = state.pop("lr_lambdas", None) or []
        super().load_state_dict(state)
        for f, attrs in zip(self.lr_lambdas, saved):
            if attrs is not None:
                vars(f).update(attrs)


class MultiplicativeLR(LambdaLR):
    """lr *= lr_lambda(epoch) at each step after the constructor's (one function, or one per
    group); no closed form, as torch's: step(epoch) multiplies by lr_lambda(epoch) once."""
    moved = ()

    def get_lr(self):
        if self._is_initial:
            return self._lrs()
        return [lr * f(self.last_epoch)
                for f, lr in zip(self.lr_lambdas, self._lrs(), strict=True)]


class StepLR(LRScheduler):
    """lr *= gamma every step_size steps (base_lr * gamma ** (epoch // step_size) alone)."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [base * self.gamma ** (self.last_epoch // self.step_size)
                for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """lr *= gamma at each milestone (gamma ** 2 at one given twice)."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones, self.gamma = collections.Counter(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return self._lrs()
        return [lr * self.gamma ** self.milestones[self.last_epoch] for lr in self._lrs()]

    def _get_closed_form_lr(self):
        milestones = sorted(self.milestones.elements())
        return [base * self.gamma ** bisect.bisect_right(milestones, self.last_epoch)
                for base in self.base_lrs]

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self.milestones = collections.Counter(self.milestones)   # (a list, from a plain file)


class ExponentialLR(LRScheduler):
    """lr *= gamma every step."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2, stepped as torch's
    recursive form (SGDR without restarts: past T_max the cosine goes on)."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        e, T, lo = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return self._lrs()
        if (e - 1 - T) % (2 * T) == 0:
            return [lr + (base - lo) * (1 - math.cos(math.pi / T)) / 2
                    for base, lr in zip(self.base_lrs, self._lrs(), strict=True)]
        return [(1 + math.cos(math.pi * e / T)) / (1 + math.cos(math.pi * (e - 1) / T)) *
                (lr - lo) + lo for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [self.eta_min + (base - self.eta_min) *
                (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """SGDR: eta_min + (base_lr - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2, T_cur the epochs
    since the last restart and T_i the period (T_0, times T_mult at each restart), as torch's.
    step(epoch) jumps to `epoch`, which may be fractional (epoch + i / iters, once a batch),
    without a warning."""
    moved = ("lr",)

    def __init__(self, optimizer, T_0, T_mult=1, eta_min=0.0, last_epoch=-1):
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        if not isinstance(eta_min, (float, int)):
            raise ValueError(f"Expected float or int eta_min, but got {eta_min} of type "
                             f"{type(eta_min)}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [self.eta_min + (base - self.eta_min) *
                (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2 for base in self.base_lrs]

    def step(self, epoch=None):
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur, self.T_i = self.T_cur % self.T_i, self.T_i * self.T_mult
        elif epoch < 0:
            raise ValueError(f"Expected non-negative epoch, but got {epoch}")
        elif epoch >= self.T_0:
            if self.T_mult == 1:
                self.T_cur = epoch % self.T_0
            else:               # (the restart epoch is in: T_0 (T_mult^n - 1) / (T_mult - 1))
                n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                self.T_i = self.T_0 * self.T_mult ** n
        else:
            self.T_i, self.T_cur = self.T_0, epoch
        self.last_epoch = math.floor(epoch)
        for group, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            group["lr"] = lr
        self._last_lr = self._lrs()


class ConstantLR(LRScheduler):
    """lr = base_lr * factor for the first total_iters steps, base_lr after (a warm-up),
    stepped as torch's recursive form."""
    moved = ("lr",)

    def __init__(self, optimizer, factor=1.0 / 3, total_iters=5, last_epoch=-1):
        if factor > 1.0 or factor < 0:
            raise ValueError(f"ConstantLR: Constant multiplicative factor expected to be between "
                             f"0 and 1, got {factor} (as torch)")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [lr * self.factor for lr in self._lrs()]
        if self.last_epoch != self.total_iters:
            return self._lrs()
        return [lr * (1.0 / self.factor) for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [base * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor))
                for base in self.base_lrs]


class LinearLR(LRScheduler):
    """lr = base_lr * factor, the factor going linearly from start_factor to end_factor over
    total_iters steps and staying there (a warm-up), stepped as torch's recursive form."""
    moved = ("lr",)

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR: start_factor must be in (0, 1] and end_factor in "
                             f"[0, 1], got {start_factor} and {end_factor} (as torch)")
        self.start_factor, self.end_factor = start_factor, end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        e, a, b, n = self.last_epoch, self.start_factor, self.end_factor, self.total_iters
        if e == 0:
            return [lr * a for lr in self._lrs()]
        if self._is_initial or e > n:        # (made at last_epoch >= 0: the lrs kept, torch's)
            return self._lrs()
        return [lr * (1 + (b - a) / (n * a + (e - 1) * (b - a))) for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [base * (self.start_factor + (self.end_factor - self.start_factor) *
                        min(self.total_iters, self.last_epoch) / self.total_iters)
                for base in self.base_lrs]


class PolynomialLR(LRScheduler):
    """lr = base_lr * (1 - min(epoch, total_iters) / total_iters) ** power, stepped as torch's
    recursive form (the lr from total_iters on: unchanged, 0 unless set by hand)."""

    def __init__(self, optimizer, total_iters=5, power=1.0, last_epoch=-1):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        e, n = self.last_epoch, self.total_iters
        if self._is_initial or e > n:
            return self._lrs()
        decay = ((1.0 - e / n) / (1.0 - (e - 1) / n)) ** self.power
        return [lr * decay for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [base * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) **
                self.power for base in self.base_lrs]


class _CyclesMomentum(LRScheduler):
    """The momentum (SGD's, RMSprop's) or Adam's beta1 moved against the lr, between each
    group's max_momentum and base_momentum (OneCycleLR, CyclicLR)."""
    moved = ("lr", "momentum", "betas")

    def _cycle_momentum(self, optimizer, cycle_momentum, base_momentum, max_momentum,
                        last_epoch):
        """torch's setup: the groups' momenta at max_momentum (a new run), each group's two
        bounds written into it; (lows, highs) per group, or None without cycle_momentum."""
        self.cycle_momentum = cycle_momentum
        if not cycle_momentum:
            return None
        defaults = getattr(optimizer, "defaults", {})
        if "momentum" not in defaults and "betas" not in defaults:
            raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` "
                             "option enabled")
        self.use_beta1 = "betas" in defaults
        groups = optimizer.param_groups
        lows = _per_group("base_momentum", groups, base_momentum)
        highs = _per_group("max_momentum", groups, max_momentum)
        if last_epoch == -1:
            for group, low, high in zip(groups, lows, highs, strict=True):
                self._set_momentum(group, high)
                group["max_momentum"], group["base_momentum"] = high, low
        return lows, highs

    def _set_momentum(self, group, value):
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value


class OneCycleLR(_CyclesMomentum):
    """torch's 1cycle policy: the lr from max_lr / div_factor up to max_lr over pct_start of
    total_steps, then down to initial_lr / final_div_factor (three_phase: back to the initial
    lr first), cosine or linear; with cycle_momentum the momentum (SGD's, RMSprop's) or Adam's
    beta1 the other way, between max_momentum and base_momentum. Stepped once a batch; a step
    past total_steps is refused, as torch's."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False,
                 last_epoch=-1):
        # torch's checks, in its order and words (an int pct_start, 0 or 1, is refused too)
        if total_steps is not None:
            if total_steps <= 0 or not isinstance(total_steps, int):
                raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
        elif epochs is not None and steps_per_epoch is not None:
            if not isinstance(epochs, int) or epochs <= 0:
                raise ValueError(f"Expected positive integer epochs, but got {epochs}")
            if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
                raise ValueError(f"Expected positive integer steps_per_epoch, but got "
                                 f"{steps_per_epoch}")
            total_steps = epochs * steps_per_epoch
        else:
            raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
        if pct_start < 0 or pct_start > 1 or not isinstance(pct_start, float):
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self.total_steps, self._anneal_func_type = total_steps, anneal_strategy
        up = float(pct_start * total_steps) - 1
        self._schedule_phases = [
            dict(end_step=up, start_lr="initial_lr", end_lr="max_lr",
                 start_momentum="max_momentum", end_momentum="base_momentum"),
            dict(end_step=float(2 * pct_start * total_steps) - 2, start_lr="max_lr",
                 end_lr="initial_lr", start_momentum="base_momentum",
                 end_momentum="max_momentum"),
            dict(end_step=total_steps - 1, start_lr="initial_lr", end_lr="min_lr",
                 start_momentum="max_momentum", end_momentum="max_momentum"),
        ] if three_phase else [
            dict(end_step=up, start_lr="initial_lr", end_lr="max_lr",
                 start_momentum="max_momentum", end_momentum="base_momentum"),
            dict(end_step=total_steps - 1, start_lr="max_lr", end_lr="min_lr",
                 start_momentum="base_momentum", end_momentum="max_momentum"),
        ]
        groups = optimizer.param_groups
        max_lrs = _per_group("max_lr", groups, max_lr)
        if last_epoch == -1:
            for group, top in zip(groups, max_lrs):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self._cycle_momentum(optimizer, cycle_momentum, base_momentum, max_momentum, last_epoch)
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total steps "
                             f"is {self.total_steps} (as torch)")
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end = phase["end_step"]
                if step <= end or i == len(self._schedule_phases) - 1:
                    pct = (step - start) / (end - start)
                    lrs.append(self._anneal(group[phase["start_lr"]], group[phase["end_lr"]],
                                            pct))
                    if self.cycle_momentum:
                        self._set_momentum(group, self._anneal(
                            group[phase["start_momentum"]], group[phase["end_momentum"]], pct))
                    break
                start = end
        return lrs


class CyclicLR(_CyclesMomentum):
    """torch's cyclical learning rate (Smith, 2017): each group's lr rises from base_lr to
    max_lr over step_size_up steps and falls back over step_size_down (default: the same), the
    rise scaled by the mode's function -- triangular 1, triangular2 halved each cycle, exp_range
    gamma ** step -- or by scale_fn of the cycle or the step (scale_mode); with cycle_momentum
    the momentum (or Adam's beta1) the other way, from max_momentum down to base_momentum.
    Stepped once a batch. A scale_fn that is a function is not saved in state_dict (a callable
    object's attributes are), as torch's."""

    def __init__(self, optimizer, base_lr, max_lr, step_size_up=2000, step_size_down=None,
                 mode="triangular", gamma=1.0, scale_fn=None, scale_mode="cycle",
                 cycle_momentum=True, base_momentum=0.8, max_momentum=0.9, last_epoch=-1):
        if not hasattr(optimizer, "param_groups"):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        groups = optimizer.param_groups
        base_lrs = _per_group("base_lr", groups, base_lr)
        if last_epoch == -1:
            for group, lr in zip(groups, base_lrs, strict=True):
                group["lr"] = lr
        self.max_lrs = _per_group("max_lr", groups, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom, self.scale_mode = scale_fn, scale_mode
        self._init_scale_fn()
        bounds = self._cycle_momentum(optimizer, cycle_momentum, base_momentum, max_momentum,
                                      last_epoch)
        if bounds is not None:
            self.base_momentums, self.max_momentums = bounds
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _init_scale_fn(self):
        """A mode's own scale_mode (torch's: triangular ones by cycle, exp_range by step)."""
        if self._scale_fn_custom is None:
            self.scale_mode = "iterations" if self.mode == "exp_range" else "cycle"

    def scale_fn(self, x):
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self):
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        scale_factor = x / self.step_ratio if x <= self.step_ratio else \
            (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [base + (top - base) * scale_factor * scale
               for base, top in zip(self.base_lrs, self.max_lrs, strict=True)]
        if self.cycle_momentum:
            for group, low, high in zip(self.optimizer.param_groups, self.base_momentums,
                                        self.max_momentums, strict=True):
                self._set_momentum(group, high - (high - low) * scale_factor * scale)
        return lrs

    def state_dict(self):
        state = super().state_dict()
        fn = state.pop("_scale_fn_custom")
        state["_scale_fn_custom"] = None if fn is None or isinstance(fn, types.FunctionType) \
            else dict(fn.__dict__)
        return state

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        fn = state_dict.pop("_scale_fn_custom", None)
        super().load_state_dict(state_dict)
        if fn is not None:
            self._scale_fn_custom.__dict__.update(fn)
        self._init_scale_fn()


def _per_group(name, groups, value):
    """A setting given once or per group (a list or tuple), as one value a group (torch's
    _format_param)."""
    if not isinstance(value, (list, tuple)):
        return [value] * len(groups)
    if len(value) != len(groups):
        raise ValueError(f"{name} must have the same length as optimizer.param_groups. {name} "
                         f"has {len(value)} values, param_groups has {len(groups)}.")
    return list(value)


class ReduceLROnPlateau:
    """torch's: step(metric) once an epoch; after more than `patience` epochs without an
    improvement (by `threshold`, relative or absolute, in `mode` 'min' or 'max') each group's lr
    is multiplied by `factor` (not below min_lr; a change smaller than eps is not made), then
    `cooldown` epochs pass before bad epochs count again. A group added to the optimizer since
    gets min_lr given as one number; given as a list, a reduction then is refused."""

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8):
        if factor >= 1.0:
            raise ValueError("ReduceLROnPlateau: factor should be < 1.0 (as torch)")
        if mode not in ("min", "max"):
            raise ValueError(f"ReduceLROnPlateau: mode {mode!r} is unknown (as torch: 'min' or "
                             f"'max')")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"ReduceLROnPlateau: threshold mode {threshold_mode!r} is unknown "
                             f"(as torch: 'rel' or 'abs')")
        if not hasattr(optimizer, "param_groups"):
            raise TypeError(f"ReduceLROnPlateau: {type(optimizer).__name__} is not an optimizer")
        n = len(optimizer.param_groups)
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != n:
                raise ValueError(f"ReduceLROnPlateau: expected {n} min_lrs, got {len(min_lr)}")
            self.default_min_lr, self.min_lrs = None, list(min_lr)
        else:           # (the min_lr of a group added later too, as torch's)
            self.default_min_lr, self.min_lrs = min_lr, [min_lr] * n
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown, self.eps = \
            threshold, threshold_mode, cooldown, eps
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs, self.cooldown_counter, self.last_epoch = 0, 0, 0
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    def _is_better(self, a):
        if self.mode == "min":
            return a < (self.best * (1 - self.threshold) if self.threshold_mode == "rel"
                        else self.best - self.threshold)
        return a > (self.best * (1 + self.threshold) if self.threshold_mode == "rel"
                    else self.best + self.threshold)

    def step(self, metrics, epoch=None):
        """One epoch on, whose metric is `metrics`; `epoch` (deprecated in torch, as here) sets
        the epoch count."""
        current = float(metrics)
        if epoch is None:
            self.last_epoch += 1
        else:
            warnings.warn("ReduceLROnPlateau.step(metrics, epoch): epoch is deprecated, as in "
                          "torch: call step(metrics) once an epoch", UserWarning, stacklevel=2)
            self.last_epoch = epoch
        if self._is_better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            groups = self.optimizer.param_groups
            if len(groups) != len(self.min_lrs):
                if self.default_min_lr is None:
                    raise RuntimeError(
                        f"The number of param groups in the `optimizer` ({len(groups)}) differs "
                        f"from when `ReduceLROnPlateau` was initialized ({len(self.min_lrs)}), "
                        f"usually due to a new param group being added to the optimizer. Please "
                        f"modify the `min_lrs` field to match the length of the `optimizer` "
                        f"param groups.")
                self.min_lrs = [self.default_min_lr] * len(groups)
            for group, low in zip(groups, self.min_lrs):
                old = float(group["lr"])
                new = max(old * self.factor, low)
                if old - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self):
        return list(self._last_lr)

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update({k: v for k, v in state_dict.items()
                              if k in self.__dict__ or k == "_last_lr"})


__all__ = ["LRScheduler", "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR",
           "ExponentialLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "LinearLR",
           "PolynomialLR", "OneCycleLR", "CyclicLR", "ReduceLROnPlateau", "SequentialLR",
           "ChainedScheduler"]


class _Schedules(LRScheduler):
    """What SequentialLR and ChainedScheduler share: schedulers of one optimizer, whose states
    their state_dict holds as '_schedulers' (torch's layout)."""

    def _take(self, schedulers, optimizer):
        kind = type(self).__name__
        schedulers = list(schedulers)
        if not schedulers:
            raise ValueError(f"{kind} expects at least one scheduler, but got no scheduler.")
        for i, s in enumerate(schedulers):
            if isinstance(s, ReduceLROnPlateau):
                raise ValueError(f"{kind} does not support `ReduceLROnPlateau` scheduler as it "
                                 f"requires additional kwargs to be specified when calling "
                                 f"`step`, but got one at index {i} in the given schedulers "
                                 f"sequence.")
            if not hasattr(s, "optimizer"):
                raise TypeError(f"{kind} at index {i} should have `optimizer` as its attribute.")
            if s.optimizer is not optimizer:
                raise ValueError(f"{kind} expects all schedulers to belong to the same "
                                 f"optimizer, but got scheduler {type(s).__name__} at index {i} "
                                 f"with another one")
        self._schedulers, self.optimizer = schedulers, optimizer
        self._made_after = getattr(optimizer, "loads", None)

    def state_dict(self):
        state = {k: v for k, v in super().state_dict().items() if k != "_schedulers"}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict):
        """The schedulers' states loaded into them, each as it loads alone; then this one's."""
        state = dict(state_dict)
        for s, saved in zip(self._schedulers, state.pop("_schedulers")):
            s.load_state_dict(saved)
        super().load_state_dict(state)


class SequentialLR(_Schedules):
    """One schedule after another: schedulers[i] runs from milestones[i - 1] (restarted there at
    its epoch 0, by its closed form where it has one) to milestones[i], as torch's."""
    moved = ("lr",)           # (its constructor puts the lrs back to 'initial_lr' and steps)

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        self._take(schedulers, optimizer)
        milestones = list(milestones)
        if len(milestones) != len(self._schedulers) - 1:
            raise ValueError(f"Sequential Schedulers expects number of schedulers provided to be "
                             f"one more than the number of milestone points, but got number of "
                             f"schedulers {len(self._schedulers)} and the number of milestones "
                             f"to be equal to {len(milestones)}")
        self._milestones = milestones
        self.last_epoch = last_epoch + 1
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self._undo(self)                   # the schedulers' own constructor steps, undone
        first = self._schedulers[bisect.bisect_right(milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    @staticmethod
    def _undo(scheduler):
        for s in scheduler._schedulers:
            if hasattr(s, "_schedulers"):
                SequentialLR._undo(s)
            else:
                s.last_epoch -= 1

    def step(self):
        self.last_epoch += 1
        i = bisect.bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[i]
        if i > 0 and self._milestones[i - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ChainedScheduler(_Schedules):
    """Every scheduler's step at each step, in order (their factors multiply), as torch's. A
    load puts back the lrs the chain stopped at (a child that moves the lr at construction puts
    back its own, before the later children's factors)."""
    moved = ("lr",)

    def __init__(self, schedulers, optimizer=None):
        schedulers = list(schedulers)
        if optimizer is None and schedulers:
            optimizer = schedulers[0].optimizer
        self._take(schedulers, optimizer)
        self._last_lr = self._lrs()

    def step(self):
        for s in self._schedulers:
            s.step()
        self._last_lr = self._lrs()
