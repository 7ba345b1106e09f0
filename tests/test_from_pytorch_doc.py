"""docs/from_pytorch.md stays true: every name its "What is there" lists exists where it says,
and torch has it too (so the page names torch's spellings, not ours)."""
import os
import re

import pytest
import torch

import layers as L
from layers import F, nn

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                   "from_pytorch.md")
# the bold group's title -> (our namespace, torch's)
GROUPS = {
    "Tensors": (L, torch),
    "Tensor methods": (L.Tensor, torch.Tensor),
    "Modules": (nn, torch.nn),
    "Functions": (F, torch.nn.functional),
}


def _groups():
    text = open(DOC).read()
    there = text.split("## What is there", 1)[1].split("\n## ", 1)[0]
    for title, body in re.findall(r"\*\*([^*]+)\*\*(.*?)(?=\n\n|\Z)", there, re.S):
        names = re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", body)
        # the group's namespace itself ("`F.`") is not a name; "nn.utils.x" is nn's utils.x
        yield title, [re.sub(r"^(L|nn|F)\.", "", n) for n in names if not n.endswith(".")]


def test_the_page_lists_every_group():
    titles = [t for t, _ in _groups()]
    assert set(GROUPS) <= set(titles)


@pytest.mark.parametrize("title", list(GROUPS))
def test_every_listed_name_exists_here_and_in_torch(title):
    ours, theirs = GROUPS[title]
    names = dict(_groups())[title]
    assert len(names) > 10
    missing = [n for n in names if not _has(ours, n)]
    assert not missing, f"{title}: listed but not in layers: {missing}"
    not_torch = [n for n in names if not _has(theirs, n)]
    assert not not_torch, f"{title}: not torch's spelling: {not_torch}"


def test_optimizers_schedulers_and_initialisers_exist():
    body = dict(_groups())["Optimizers"]
    for name in body:
        if name.startswith(("optim", "layers")):          # (the namespaces' own names)
            continue
        assert any(_has(ns, name) for ns in (L.optim, L.optim.lr_scheduler, L.init)), name
        assert any(_has(ns, name) for ns in (torch.optim, torch.optim.lr_scheduler, torch.nn.init,
                                             torch.nn.utils)), name


def _has(namespace, dotted):
    obj = namespace
    for part in dotted.split("."):
        if not part:
            continue
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True
