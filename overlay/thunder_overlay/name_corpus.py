"""Programs in the shapes users write, for the stock-vs-overlay naming differential (``thunder-overlay names``).

Each program ``NAME`` comes with ``NAME_inputs()``; ``NAME_compiler = "thunderfx"`` compiles it with
ThunderFX. Models are built on first access (module ``__getattr__``), so importing this module is cheap.
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder


def _randn(*shape, requires_grad=False, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).requires_grad_(requires_grad)


# --- modules and helpers whose result the caller binds ----------------------------------------------------

_seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))


def sequential(x):
    y = _seq(x)
    return torch.sigmoid(y)


def sequential_after_loop(x):
    acc = x
    for k in range(3):
        acc = acc * 2 + k
    final = _seq(acc)
    return final


def _helper(p, q):
    return torch.sin(p * q) + q


def helper_rebinds_input(w, c):
    y = w * c
    u = w @ y
    w = u - u
    return _helper(y, w)


def _split_heads(x, n):
    b, t, c = x.shape
    q, k = x.view(b, t, n, c // n).transpose(1, 2).chunk(2, dim=-1)
    return q, k


def helper_returns_tuple(x):
    q, k = _split_heads(x, 2)
    scores = q @ k.transpose(-2, -1)
    probs = torch.softmax(scores, dim=-1)
    return probs


class _Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.blocks = nn.ModuleDict({"up": nn.Linear(8, 16), "act": nn.GELU(), "down": nn.Linear(16, 8)})

    def forward(self, x):
        h = x
        for layer in self.layers:
            h = torch.relu(layer(h)) + h
        for name, block in self.blocks.items():
            h = block(h)
        out = h * 0.5
        return out


class _Norm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        normed = x * torch.rsqrt(variance + 1e-6)
        return normed * self.weight


class _MLP(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc1 = nn.Linear(n, 2 * n)
        self.fc2 = nn.Linear(2 * n, n)

    def forward(self, x):
        hidden = F.silu(self.fc1(x))
        return self.fc2(hidden)


class _Block(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.norm1, self.norm2 = _Norm(n), _Norm(n)
        self.mlp1, self.mlp2 = _MLP(n), _MLP(n)

    def forward(self, x):
        x = x + self.mlp1(self.norm1(x))
        residual = x
        x = self.mlp2(self.norm2(x))
        return x + residual


class _Net(nn.Module):
    def __init__(self, n=8):
        super().__init__()
        self.block1, self.block2 = _Block(n), _Block(n)
        self.head = nn.Linear(n, 2)

    def forward(self, x):
        h1 = self.block1(x)
        h2 = self.block2(h1)
        logits = self.head(h2)
        return logits


def closure(x, w):
    scale = w.sum()

    def apply(v):
        scaled = v * scale
        return torch.tanh(scaled)

    first = apply(x)
    second = apply(first)
    return second


def loop_rebinds(x, w):
    h = x
    for _ in range(4):
        h = torch.tanh(h @ w) + h
    return h


def comprehensions(x, y):
    parts = [torch.sin(t) for t in (x, y, x * y)]
    scaled = {k: v * 2 for k, v in zip("abc", parts)}
    total = scaled["a"] + scaled["b"] + scaled["c"]
    return total


def in_place(x, y):
    z = x * y
    z += 1
    z.mul_(2)
    w = z.clone()
    w -= y
    return w


def keyword_only(x, *, scale, bias=None):
    scaled = x * scale
    shifted = scaled + bias if bias is not None else scaled
    return shifted


def star_args(*tensors, **options):
    stacked = torch.stack(tensors)
    total = stacked.sum(0) * options["factor"]
    return total


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        squared = x * x
        return squared

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def autograd_function(x):
    y = _Square.apply(x)
    out = y + x
    return out


def user_names_like_generated(x):
    t0 = torch.softmax(x, -1)
    x1 = t0 * 2
    fc1 = torch.tanh(x1)
    layer2 = fc1 + t0
    linear_1 = layer2 @ layer2.T
    t_0_1 = linear_1.sum(0)
    return t_0_1


def names_thunder_gives(x, w):
    # Names thunder gives the backward trace's inputs: without gradients there is no backward trace, and the
    # values take them as on stock
    C0 = x @ w
    C1 = torch.tanh(C0)
    saved_for_backward = C1 * w
    cotangents = saved_for_backward + x
    return cotangents


# With gradients the backward trace takes its inputs' names where the program left them free
names_thunder_gives_with_grad = names_thunder_gives


def names_the_prologue_gives(args, w):
    # The prologue names its own proxies args, kwargs and cache_info; the computation trace is named on its own
    cache_info = args @ w
    kwargs = cache_info.tanh()
    return kwargs * args


def no_grad_inference(x):
    # Under no_grad, thunder 0.2.1 and 0.2.2 copy every tensor output, and the copy's generated name is no
    # longer marked weak: the value that holds t1 here must still give way to the program's t1.
    with torch.no_grad():
        t1 = torch.tanh(x)
        t2 = torch.sigmoid(x)
        hidden = _seq(t1 * t2)
    return hidden


# Frozen: thunder 0.2.1's rematerialization fails on this program with gradients, stock and overlay alike
_mixed = nn.Sequential(nn.Linear(2, 3), nn.LayerNorm(3), nn.Linear(3, 4)).requires_grad_(False)


def parameters_in_order(x):
    # A weight-decay term iterates the parameters; here each one's position matters
    penalty = x.sum() * 0
    for position, parameter in enumerate(_mixed.parameters()):
        weighted = parameter.sum() * (position + 1)
        penalty = penalty + weighted
    return torch.tanh(x), penalty


def with_grad(x, w):
    h = torch.tanh(x @ w)
    loss = (h * h).sum()
    return loss


def torch_autocast_region(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        projected = x @ w
        activated = torch.relu(projected)
    result = activated.float() + x
    return result


def thunderfx_program(x, w):
    hidden = torch.relu(x @ w)
    gated = hidden * torch.sigmoid(hidden)
    return gated.sum(-1)


thunderfx_program_compiler = "thunderfx"


# --- one value, one name across the traces of a jit (I9); a name holds the value its variable had (I10) ---


class _Rebinds(nn.Module):
    # `w` names an intermediate value, then the layer's weight: the weight enters the computation through the
    # prologue, which must name it as the computation trace does
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        w = x * 2
        y = w + 1
        w = self.lin.weight
        return F.linear(y, w, self.lin.bias)


class _RebindsBuffer(nn.Module):
    # a buffer and a parameter bound to a name an intermediate value held before
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("scale", torch.full((4,), 0.5))

    def forward(self, x):
        scale = x.abs().amax(-1, keepdim=True)
        normed = x / scale
        scale = self.scale
        weight = normed.mean(0)
        weight = self.proj.weight
        return (normed * scale) @ weight.T


def rebinds_to_an_input(x, w):
    # `h` holds x * 2, then the input w
    h = x * 2
    out = h + 1
    h = w
    return out @ h


def _sub(a, b):
    return a - b


@functools.wraps(_sub)
def wraps_swapped(b, a):
    # a wrapper taking the wrapped function's parameters in the other order: inspect.signature follows
    # __wrapped__ and reports (a, b), but the first input is this function's `b`
    return _sub(a, b)


def _affine(w, x, bias):
    return x @ w + bias


@functools.wraps(_affine)
def wraps_fewer(x, w):
    # fewer parameters than the wrapped function, in another order
    return _affine(w, x, 0.5)


def _activation(x):
    return torch.tanh(x)


@functools.wraps(_activation)
def wraps_more(x, bias):
    # more parameters than the wrapped function
    shifted = x + bias
    return _activation(shifted)


def _logged(fn):
    # a decorator as they are usually written: *args and **kwargs passed through
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


def _checked(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if any(isinstance(a, torch.Tensor) and a.dim() == 0 for a in args):
            raise ValueError("scalars")
        return fn(*args, **kwargs)

    return wrapper


def _reversed_arguments(fn):
    # a decorator that passes its arguments on in another order: the signature it reports is fn's
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args[::-1])

    return wrapper


@_logged
def decorated(x, w):
    hidden = torch.relu(x @ w)
    return hidden.sum(-1)


@_logged
@_checked
def decorator_stack(x, w, bias):
    projected = x @ w
    return torch.sigmoid(projected + bias)


@_reversed_arguments
def decorator_reorders(w, x):
    projected = x @ w
    return projected.tanh()


def _halves_second(fn):
    # a decorator that transforms an argument: fn's `b` is the half, never the caller's second tensor
    @functools.wraps(fn)
    def wrapper(*args):
        half = args[1] * 0.5
        return fn(args[0], half)

    return wrapper


def _injects_scale(fn):
    # a decorator that adds an argument fn's signature names (thunder.jit binds the call by that signature)
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        scale = torch.full_like(args[0], 2.0)
        return fn(*args, **{**kwargs, "scale": scale})

    return wrapper


def _drops_first(fn):
    # a decorator that drops an argument: the caller's first tensor is not fn's first parameter
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args[1:])

    return wrapper


@_halves_second
def decorator_transforms(a, b):
    return a + b


@_injects_scale
def decorator_injects(x, w, *, scale=None):
    projected = x @ w
    return projected * scale


@_drops_first
def decorator_drops(w, x, bias=None):
    return (x @ w).tanh()


def _never_runs(x, y):
    return x - y


@functools.wraps(_never_runs)
def wraps_another_function(y, x):
    # claims _never_runs' signature (x, y), which inspect.signature reports, but binds its own names
    return y * 2 - x


def _matmul_the_other_way(b, a):
    # parameters named like the autocast matmul rule's (a, b), in the other order: stock names the inputs after
    # the rule's locals, so the program's `b` becomes `a`
    return b @ a


def _scaled(x, w, *, scale):
    return (x @ w) * scale


class _WithNoGradMethod(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    @torch.no_grad()
    def project(self, inputs):
        return self.lin(inputs)

    def forward(self, x):
        projected = self.project(x)
        return projected.relu()


def decorated_keywords(x, w):
    # a decorated function called with keywords, in another order than its parameters
    return decorated(w=w, x=x)


def through_a_list(x):
    # the program's `t` is the tanh, reached through a list: thunder's own `a` (of size) must not name it
    l = [torch.tanh(x)]  # noqa: E741 (the program as reported)
    n = l[0].size(-1)
    t = l[0]
    return t * n


def through_a_dict(x, y):
    parts = {"first": x * 2, "second": y.sin()}
    first, second = parts["first"], parts["second"]
    second = parts["first"]
    return first @ second.T


def tuple_input(pair, scale):
    # an input that is a tuple of tensors, unpacked in the program
    x, w = pair
    projected = x @ w
    return projected * scale


def dict_input(batch):
    inputs, target = batch["inputs"], batch["target"]
    error = inputs - target
    return (error * error).mean()


def list_input_rebinds(xs):
    first, *rest = xs
    total = first
    for item in rest:
        total = total + item
    first = rest[0]
    return total * first


def rebinds_to_an_input_with_grad(x, w):
    h = torch.tanh(x @ w)
    saved = h * h
    h = w
    return (saved @ h).sum()


def _reproducer(name):
    # the #283 programs are the reproducers' own, so the corpus checks the very programs `verify` runs
    import importlib

    return importlib.import_module(f"thunder_overlay.reproducers.{name}")


def _seed_946(x, y, device):
    from thunder_overlay.reproducers.seed_946_names import func

    return func(x, y, device)


# --- inputs -----------------------------------------------------------------------------------------------


def sequential_inputs():
    return (_randn(2, 4),)


sequential_after_loop_inputs = sequential_inputs


def helper_rebinds_input_inputs():
    return _randn(4, 4), _randn(4, 4, seed=1)


def helper_returns_tuple_inputs():
    return (_randn(2, 3, 8),)


def module_list_and_dict_inputs():
    return (_randn(2, 8),)


def nested_modules_inputs():
    return (_randn(2, 8),)


closure_inputs = helper_rebinds_input_inputs
loop_rebinds_inputs = helper_rebinds_input_inputs
comprehensions_inputs = helper_rebinds_input_inputs
in_place_inputs = helper_rebinds_input_inputs


def keyword_only_inputs():
    return {"args": (_randn(3, 3),), "kwargs": {"scale": _randn(3, 3, seed=1), "bias": _randn(3, 3, seed=2)}}


def star_args_inputs():
    return {"args": (_randn(3), _randn(3, seed=1), _randn(3, seed=2)), "kwargs": {"factor": 2.0}}


def autograd_function_inputs():
    return (_randn(3, 3, requires_grad=True),)


def user_names_like_generated_inputs():
    return (_randn(3, 4),)


def names_thunder_gives_inputs():
    return _randn(3, 3), _randn(3, 3, seed=1)


def names_thunder_gives_with_grad_inputs():
    return _randn(3, 3, requires_grad=True), _randn(3, 3, requires_grad=True, seed=1)


names_the_prologue_gives_inputs = names_thunder_gives_inputs


no_grad_inference_inputs = sequential_inputs


def parameters_in_order_inputs():
    return (_randn(2, 3),)


def with_grad_inputs():
    return _randn(3, 4, requires_grad=True), _randn(4, 4, requires_grad=True, seed=1)


torch_autocast_region_inputs = helper_rebinds_input_inputs


def autocast_chain_inputs():
    return tuple(_randn(2, 2, seed=k) for k in range(3))


autocast_seed_inputs = autocast_chain_inputs
thunderfx_program_inputs = helper_rebinds_input_inputs


def seed_946_round_trip_inputs():
    return {"args": (_randn(3, 4), _randn(3, 4, seed=1)), "kwargs": {"device": "cpu"}}


def rebinds_weight_inputs():
    return (_randn(2, 4),)


rebinds_weight_with_grad_inputs = rebinds_buffer_inputs = rebinds_weight_inputs
rebinds_to_an_input_inputs = helper_rebinds_input_inputs


def wraps_swapped_inputs():
    return _randn(3), _randn(3, seed=1)


wraps_fewer_inputs = helper_rebinds_input_inputs
wraps_more_inputs = helper_rebinds_input_inputs
decorated_inputs = decorator_reorders_inputs = decorated_keywords_inputs = helper_rebinds_input_inputs


def decorator_stack_inputs():
    return _randn(3, 4), _randn(4, 4, seed=1), _randn(4, seed=2)


decorator_transforms_inputs = decorator_transforms_autocast_inputs = helper_rebinds_input_inputs
decorator_reorders_autocast_inputs = decorator_injects_inputs = partial_program_inputs = helper_rebinds_input_inputs
decorator_transforms_with_grad = decorator_transforms


def decorator_transforms_with_grad_inputs():
    return (_randn(4, 4, requires_grad=True), _randn(4, 4, requires_grad=True, seed=1))


def decorator_drops_inputs():
    return (_randn(4, 4), _randn(4, 4, seed=1), _randn(4, 4, seed=2))


decorator_drops_autocast_inputs = decorator_drops_inputs
wraps_another_function_inputs = autocast_rule_names_inputs = helper_rebinds_input_inputs


def method_no_grad_inputs():
    return (_randn(2, 4),)


def through_a_list_inputs():
    return (_randn(2, 3),)


through_a_dict_inputs = helper_rebinds_input_inputs


def tuple_input_inputs():
    return (_randn(3, 4), _randn(4, 4, seed=1)), _randn(3, 4, seed=2)


def dict_input_inputs():
    return ({"inputs": _randn(3, 4), "target": _randn(3, 4, seed=1)},)


def list_input_rebinds_inputs():
    return ([_randn(3, 3, seed=k) for k in range(3)],)


def rebinds_to_an_input_with_grad_inputs():
    return _randn(3, 4, requires_grad=True), _randn(4, 4, requires_grad=True, seed=1)


def _litgpt_inputs():
    return (torch.randint(0, 320, (1, 16), generator=torch.Generator().manual_seed(0)),)


llama2_like_inputs = gpt_neox_like_inputs = pythia_14m_inputs = nanogpt_inputs = _litgpt_inputs


# --- programs built on first access -----------------------------------------------------------------------


def _litgpt(name):
    from thunder.tests import litgpt_model

    config = litgpt_model.Config.from_name(name, n_layer=2, padded_vocab_size=320)
    torch.manual_seed(0)
    return litgpt_model.GPT(config).eval().requires_grad_(False)


def _nanogpt():
    from thunder.tests import nanogpt_model

    config = nanogpt_model.GPTConfig(block_size=64, vocab_size=320, n_layer=2, n_head=4, n_embd=64, dropout=0.0)
    torch.manual_seed(0)
    return nanogpt_model.GPT(config).eval().requires_grad_(False)


def _autocast(fn):
    from thunder.transforms.autocast import autocast

    return autocast(fn, dtype=thunder.bfloat16)


def _seed_946_round_trip():
    x, y = seed_946_round_trip_inputs()["args"]
    return thunder.trace()(_seed_946, x, y, "cpu").python_callable()


_BUILT = {
    "rebinds_weight": lambda: _Rebinds().requires_grad_(False),
    "rebinds_weight_with_grad": _Rebinds,
    "rebinds_buffer": _RebindsBuffer,
    "module_list_and_dict": _Stack,
    "nested_modules": _Net,
    "autocast_chain": lambda: _autocast(_reproducer("autocast_chain").f),
    "autocast_seed": lambda: _autocast(_reproducer("seed_283_autocast").h),
    "seed_946_round_trip": _seed_946_round_trip,
    "decorator_transforms_autocast": lambda: _autocast(decorator_transforms),
    "decorator_reorders_autocast": lambda: _autocast(decorator_reorders),
    "decorator_drops_autocast": lambda: _autocast(decorator_drops),
    "partial_program": lambda: functools.partial(_scaled, scale=3.0),
    "autocast_rule_names": lambda: _autocast(_matmul_the_other_way),
    "method_no_grad": _WithNoGradMethod,
    "llama2_like": lambda: _litgpt("llama2-like"),
    "gpt_neox_like": lambda: _litgpt("gpt-neox-like"),
    "pythia_14m": lambda: _litgpt("pythia-14m"),
    "nanogpt": _nanogpt,
}


def __getattr__(name):
    if name in _BUILT:
        torch.manual_seed(0)
        return _BUILT[name]()
    raise AttributeError(name)


PROGRAMS = (
    "sequential",
    "sequential_after_loop",
    "helper_rebinds_input",
    "helper_returns_tuple",
    "module_list_and_dict",
    "nested_modules",
    "closure",
    "loop_rebinds",
    "comprehensions",
    "in_place",
    "keyword_only",
    "star_args",
    "autograd_function",
    "user_names_like_generated",
    "names_thunder_gives",
    "names_thunder_gives_with_grad",
    "names_the_prologue_gives",
    "no_grad_inference",
    "parameters_in_order",
    "with_grad",
    "torch_autocast_region",
    "autocast_chain",
    "autocast_seed",
    "thunderfx_program",
    "rebinds_weight",
    "rebinds_weight_with_grad",
    "rebinds_buffer",
    "rebinds_to_an_input",
    "rebinds_to_an_input_with_grad",
    "wraps_swapped",
    "wraps_fewer",
    "wraps_more",
    "decorated",
    "decorator_stack",
    "decorator_reorders",
    "decorated_keywords",
    "decorator_transforms",
    "decorator_transforms_with_grad",
    "decorator_transforms_autocast",
    "decorator_reorders_autocast",
    "decorator_injects",
    "decorator_drops",
    "decorator_drops_autocast",
    "autocast_rule_names",
    "wraps_another_function",
    "partial_program",
    "method_no_grad",
    "through_a_list",
    "through_a_dict",
    "tuple_input",
    "dict_input",
    "list_input_rebinds",
    "seed_946_round_trip",
    "llama2_like",
    "gpt_neox_like",
    "pythia_14m",
    "nanogpt",
)
