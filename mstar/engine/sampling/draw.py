"""Top-k, top-p and min-p, then one random draw per row: batched over the rows.

The kept tokens of a row are a prefix of its tokens sorted by logit (top-k, top-p and min-p each
keep a prefix), so a row is drawn by inverse CDF: one uniform number ``u`` per row picks the token
where the running sum of the kept tokens' weights (``exp(logit - max)``, in that order) passes
``u`` times their total. This is exact categorical sampling.

No full-vocabulary sort. Rows fall in three groups:

- top-k (with or without top-p): the ``topk`` of the group's largest k;
- top-p without top-k: the candidates within a floor of the row's best (``nucleus``); a row whose
  nucleus reaches past them takes ``topk`` of ``WIDE`` tokens (then of the whole row);
- neither: the whole row in token order (softmax, min-p mask, cumsum).

A row's token depends only on its own logits, params and ``u``, not on its batch mates
(candidates tied in logit are ordered by id), so a seeded row drawn with its own generator is
reproducible whatever else is in the batch.
"""

from __future__ import annotations

import torch

from mstar.engine.sampling.nucleus import draw_from, nucleus

# With the built-in model at temperature 0.8 and top_p 0.95 the nucleus is a median 12 tokens,
# wider than 64 in a quarter of rows and than 1024 in 1%.
WIDE = 1024  # candidates of a top-p row whose nucleus passed the floor; then the whole row
WIDEN = 16  # a top-k candidate list too short for its nucleus grows this many times


def draw(x: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor,
         uniforms: torch.Tensor) -> torch.Tensor:
    """One token id per row of logits ``x`` ([rows, vocab], already divided by the temperature);
    ``top_k`` is the vocabulary size where a row has none. ``uniforms``: one in [0, 1) per row."""
    vocab = x.shape[1]
    has_k, has_p = (top_k < vocab).tolist(), (top_p < 1.0).tolist()
    group = [_top_k_rows if k else _top_p_rows if p else _whole_rows
             for k, p in zip(has_k, has_p, strict=True)]
    if all(g is group[0] for g in group):
        return group[0](x, top_k, top_p, min_p, uniforms)
    out = torch.empty(x.shape[0], dtype=torch.int64, device=x.device)
    for fn in {*group}:
        rows = torch.tensor([i for i, g in enumerate(group) if g is fn], device=x.device)
        out[rows] = fn(x[rows], top_k[rows], top_p[rows], min_p[rows], uniforms[rows])
    return out


def _top_k_rows(x, top_k, top_p, min_p, uniforms) -> torch.Tensor:
    return _from_candidates(x, top_k, top_p, min_p, uniforms, int(top_k.max()))


def _top_p_rows(x, top_k, top_p, min_p, uniforms) -> torch.Tensor:
    nuc = nucleus(x, top_p, min_p)
    tokens = draw_from(nuc, uniforms)
    if not bool(nuc.fits.all()):
        w = (~nuc.fits).nonzero().squeeze(1)
        tokens[w] = _from_candidates(x[w], top_k[w], top_p[w], min_p[w], uniforms[w],
                                     min(WIDE, x.shape[1]))
    return tokens


def kept_candidates(x: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                    min_p: torch.Tensor, width: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """For rows with top-k or top-p (``x`` divided by the temperature): the row's ``width`` best
    token ids in order, the running sum of their weights, how many of them are kept, and whether
    the row's nucleus may reach past ``width`` (then widen and try again)."""
    vocab = x.shape[1]
    values, ids = _ties_by_id(*x.topk(width))
    weights = torch.exp(values - values[:, :1])  # p / p_max, sorted: [:, 0] == 1
    rank = torch.arange(width, device=x.device)
    weights = weights.masked_fill(rank >= top_k.unsqueeze(1), 0.0)
    cum = weights.cumsum(-1)
    # top-p's mass is of the top-k tokens, or of the whole row when a row has no top-k
    has_k = top_k < vocab
    total = cum[:, -1]
    nucleus = (~has_k) & (top_p < 1.0)
    rows = nucleus.nonzero().squeeze(1)
    if len(rows):  # sum(exp(x - max)) == 1 / p_max: one fused log_softmax, at the best token
        sub = x if len(rows) == len(x) else x[rows]
        logp_best = torch.log_softmax(sub, dim=-1).gather(1, ids[rows, :1]).squeeze(1)
        total = total.index_copy(0, rows, torch.exp(-logp_best))
    limit = (top_p * total).unsqueeze(1)
    keep = ((cum - weights) < limit) | (top_p >= 1.0).unsqueeze(1)
    keep &= (weights >= min_p.unsqueeze(1)) & (weights > 0)
    num_kept = keep.sum(-1)
    wider = nucleus & (num_kept == width) & (cum[:, -1] < limit.squeeze(1)) & (width < vocab)
    return ids, cum, num_kept, wider


def _from_candidates(x: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                     min_p: torch.Tensor, uniforms: torch.Tensor, width: int) -> torch.Tensor:
    ids, cum, num_kept, wider = kept_candidates(x, top_k, top_p, min_p, width)
    last = (num_kept - 1).unsqueeze(1)
    target = uniforms.unsqueeze(1) * cum.gather(1, last)
    pick = torch.minimum(torch.searchsorted(cum, target, right=True), last)
    tokens = ids.gather(1, pick).squeeze(1)
    if bool(wider.any()):
        w = wider.nonzero().squeeze(1)
        vocab = x.shape[1]
        wider_width = width * WIDEN if width * WIDEN * 4 <= vocab else vocab
        tokens[w] = _from_candidates(x[w], top_k[w], top_p[w], min_p[w], uniforms[w],
                                     wider_width)
    return tokens


def _whole_rows(x, top_k, top_p, min_p, uniforms) -> torch.Tensor:
    """Rows without top-k or top-p: the whole row, in token order."""
    probs = torch.softmax(x, dim=-1)
    if bool((min_p > 0).any()):
        floor = min_p.unsqueeze(1) * probs.amax(dim=-1, keepdim=True)
        probs = probs.masked_fill(probs < floor, 0.0)
    cum = probs.cumsum(-1)
    target = uniforms.unsqueeze(1) * cum[:, -1:]
    pick = torch.searchsorted(cum, target, right=True).clamp(max=x.shape[1] - 1)
    return pick.squeeze(1)


def _ties_by_id(values: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``topk``'s candidates with equal logits ordered by token id (topk leaves ties in any
    order, which could depend on how many candidates the batch takes)."""
    ids, by_id = ids.sort(dim=-1)
    values = values.gather(1, by_id)
    values, order = values.sort(dim=-1, descending=True, stable=True)
    return values, ids.gather(1, order)
