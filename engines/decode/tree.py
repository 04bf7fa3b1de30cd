"""Tree verification for parallel block drafters (recipe ``tree_branches`` / ``tree_positions``).

A block drafter proposes every draft position at once. At the ``tree_positions`` positions where it
is least sure of its own draft (smallest probability of the drafted token), its next most likely
tokens become alternatives, so a step verifies a tree of candidate paths: node 0 is the anchor, a
node's children are the alternatives at the next position, and positions that do not branch keep the
drafter's own token (a parallel drafter has nothing else to offer there). Every root-to-leaf path
therefore has the full depth D = block - 1. Paths are ranked by the drafter's probability of their
alternatives (the first-choice path always first) and added while the node budget
``tree_max_nodes`` holds them, so the tree has at most that many nodes (= verify rows).

One target forward verifies the whole tree (:class:`TreeLayout` carries it as index tensors):

- attention: node n writes its K/V at position ``start + n`` (tree order) and attends to the
  context and to its own ancestors; its rotary position is ``start + depth(n)``; windows are
  measured on those depth positions (``visible``).
- Gated DeltaNet: the node inputs are gathered into one sequence per path, the recurrence and the
  short conv run batched over the paths from the committed state (no state mixes between
  branches), and each node takes its output from one path through it (identical on every such path).
  Snapshot rollback keeps every path's per-token states (paths x block states per layer); replay
  keeps every path's inputs. Either way the commit picks the accepted path's. The recurrence thus
  runs paths x block rows where the rest of the target runs N.

Acceptance (``accept.tree_greedy_accept``) takes the path whose drafts match the target's greedy
tokens longest (ties: the earlier path, so a tree never does worse than its first-choice chain) plus
the bonus token. ``ModelCache.keep_path`` then moves the accepted path's K/V to consecutive
positions and keeps its recurrent state pending, after which the ordinary commit applies: a forcer
may still shorten what the step keeps.

Greedy only: at temperature > 0 the engine refuses tree recipes (exact rejection sampling over a
tree needs per-node residual distributions; not built). The tree is built on the host from one small
read of the drafter's candidates ([D, k]) and padded to ``tree_max_nodes`` nodes and
:func:`num_tree_paths` paths (:func:`tree_arrays`), so every step's verify, acceptance and commit
are index-tensor ops of one shape: the engine captures them as CUDA graphs. The host read splits
the step in two: the draft graph, then the build, then the verify graph.
"""

import dataclasses
import itertools
import math

import torch


@dataclasses.dataclass(frozen=True)
class TreeLayout:
    """One step's tree of N nodes and P root-to-leaf paths of D + 1 nodes, as device tensors.

    Nodes are in tree order (each after its ancestors): 0 is the anchor, 1..D the first-choice path.
    """

    tokens: torch.Tensor  # [N] token of each node (node 0: the anchor)
    depth: torch.Tensor  # [N] 0..D
    ancestors: torch.Tensor  # [N, N] bool: ancestors[i, j] = j is i or an ancestor of i
    paths: torch.Tensor  # [P, D + 1] node ids from the root; path 0 = the drafter's first choices
    node_path: torch.Tensor  # [N] the first path through each node
    start: torch.Tensor  # [1] committed tokens before the anchor

    @property
    def num_nodes(self) -> int:
        return self.tokens.shape[0]

    @property
    def positions(self) -> torch.Tensor:
        """[1, N] rotary positions: the anchor's plus each node's depth."""
        return (self.start + self.depth)[None]

    @property
    def slot_positions(self) -> torch.Tensor:
        """[1, N] positions the nodes' K/V are stored at: one each, in tree order."""
        return (self.start + torch.arange(self.num_nodes, device=self.tokens.device))[None]

    def visible(self, kv, q_positions: torch.Tensor) -> torch.Tensor:
        """[1, N, capacity] mask of ``kv`` (a KVCache holding this tree's nodes) for the nodes at
        ``q_positions`` [1, N]: context slots (stored before ``start``, windowed) and ancestors."""
        key = kv.pos[:, None, :]  # [1, 1, capacity]
        offset = key - self.start  # node id for this tree's slots
        in_tree = (offset >= 0) & (offset < self.num_nodes)
        node = offset.clamp(0, self.num_nodes - 1)[0, 0]  # [capacity]
        mask = ((key >= 0) & (offset < 0)) | (in_tree & self.ancestors[:, node][None])
        if kv.window is not None:
            key_pos = torch.where(in_tree, self.start + self.depth[node], key)
            mask &= (q_positions[:, :, None] - key_pos) < kv.window
        return mask

    def to_paths(self, x: torch.Tensor) -> torch.Tensor:
        """Per-node rows x [1, N, ...] -> one sequence per path [P, D + 1, ...]."""
        return x[0][self.paths]

    def to_nodes(self, x: torch.Tensor) -> torch.Tensor:
        """Per-path rows x [P, D + 1, ...] -> per-node rows [1, N, ...]."""
        return x[self.node_path, self.depth][None]


def draft_candidates(tokens: torch.Tensor, logits: torch.Tensor, num_candidates: int):
    """The drafter's own drafts and its next most likely tokens at every position.

    Args:
        tokens: [B, D] drafts; logits: [B, D, V] the logits each draft was chosen from.
    Returns:
        candidates [B, D, k] (column 0 = ``tokens``, then the other tokens by probability) and the
        drafter's probabilities of them [B, D, k] fp32.
    """
    probs = torch.softmax(logits.float(), dim=-1)
    own = probs.gather(-1, tokens[..., None])
    others, alternatives = probs.scatter(-1, tokens[..., None], -1.0).topk(num_candidates - 1, -1)
    return torch.cat([tokens[..., None], alternatives], -1), torch.cat([own, others], -1)


def num_tree_paths(num_branches: int, num_positions: int, num_drafts: int, max_nodes: int) -> int:
    """Paths of a padded tree (:func:`tree_arrays`): every combination of choices at the branching
    positions, but no more than the node budget can hold (each path past the first adds a node)."""
    return max(1, min(num_branches ** num_positions, max_nodes - num_drafts))


def tree_arrays(anchor: int, candidates: list[list[int]], probs: list[list[float]],
                num_positions: int, max_nodes: int, pad: bool = True) -> dict[str, torch.Tensor]:
    """One step's tree (see the module docstring) as host tensors, the fields of :class:`TreeLayout`
    but ``start``.

    Args:
        anchor: the anchor token (node 0).
        candidates, probs: [D][k] from :func:`draft_candidates` (host lists, one request).
        num_positions: branching positions (the least confident); max_nodes: node budget (>= D + 1).
        pad: pad to exactly ``max_nodes`` nodes and :func:`num_tree_paths` paths, so that every step
            has the same shapes (a CUDA graph replays them). A padding node is its own only ancestor
            (no other node sees it) with the anchor's token; a padding path repeats the first-choice
            path, which acceptance prefers on ties, so padding changes no result.
    """
    num_drafts, num_branches = len(candidates), len(candidates[0])
    branch = sorted(sorted(range(num_drafts), key=lambda j: (probs[j][0], j))[:num_positions])

    def rank(choice):  # the first-choice path, then by the drafter's probability of the choices
        return any(choice), -sum(math.log(max(probs[j][c], 1e-30)) for j, c in zip(branch, choice))

    # stable sort: equal ranks keep product order
    choices = sorted(itertools.product(range(num_branches), repeat=len(branch)), key=rank)
    node_of = {}  # a node's key: its depth and the path's choices at branch positions above it
    tokens, depth, parent, paths = [anchor], [0], [-1], []
    for choice in choices:
        keys = [(d, *(c for j, c in zip(branch, choice) if j < d))
                for d in range(1, num_drafts + 1)]
        new = sum(key not in node_of for key in keys)
        if len(tokens) + new > max_nodes:
            continue
        path = [0]
        for d, key in enumerate(keys, start=1):
            if key not in node_of:
                column = choice[branch.index(d - 1)] if d - 1 in branch else 0
                node_of[key] = len(tokens)
                tokens.append(candidates[d - 1][column])
                depth.append(d)
                parent.append(path[-1])
            path.append(node_of[key])
        paths.append(path)
        if len(tokens) == max_nodes:
            break
    real_nodes = len(tokens)
    if pad:
        num_paths = num_tree_paths(num_branches, num_positions, num_drafts, max_nodes)
        paths += [paths[0]] * (num_paths - len(paths))
        tokens += [anchor] * (max_nodes - real_nodes)
        depth += [num_drafts] * (max_nodes - real_nodes)
        parent += [None] * (max_nodes - real_nodes)
    num_nodes = len(tokens)
    ancestors = [[False] * num_nodes for _ in range(num_nodes)]  # host lists: a step builds one
    for n in range(num_nodes):
        if parent[n] is not None and parent[n] >= 0:
            ancestors[n] = list(ancestors[parent[n]])
        ancestors[n][n] = True
    node_path = [0] * num_nodes
    for p in reversed(range(len(paths))):
        for n in paths[p]:
            node_path[n] = p
    return {"tokens": torch.tensor(tokens), "depth": torch.tensor(depth),
            "ancestors": torch.tensor(ancestors),
            "paths": torch.tensor(paths), "node_path": torch.tensor(node_path)}


def build_tree(anchor: int, start: torch.Tensor, candidates: list[list[int]],
               probs: list[list[float]], num_positions: int, max_nodes: int,
               pad: bool = False) -> TreeLayout:
    """The tree of :func:`tree_arrays` on ``start``'s device; ``start`` [1] = committed tokens."""
    arrays = tree_arrays(anchor, candidates, probs, num_positions, max_nodes, pad)
    return TreeLayout(**{k: v.to(start.device) for k, v in arrays.items()}, start=start.reshape(1))
