"""The bench's PNG: accepted length per step for each config, and for adaptive policies the tree
depth and width chosen against the target's entropy."""

from __future__ import annotations


def plot_bench(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result["runs"]
    adaptive = [label for label in runs if ":sage" in label]
    ncols = 1 + (1 if adaptive else 0)
    fig, axes = plt.subplots(1, ncols, figsize=(6.5 * ncols, 4.5), squeeze=False)
    ax = axes[0][0]
    for label, rs in runs.items():
        if label == "plain":
            continue
        counts = [a for r in rs for a in r["accepted_per_step"][1:]]
        if counts:
            top = max(counts)
            ax.hist(counts, bins=range(1, top + 2), alpha=0.5, label=label, align="left", density=True)
    ax.set_xlabel("tokens emitted per verify step (bonus included)")
    ax.set_ylabel("fraction of steps")
    ax.set_title(f"{result['dataset']}: accepted length per step")
    ax.legend(fontsize=8)
    if adaptive:
        ax = axes[0][1]
        for label in adaptive:
            ent = [e for r in runs[label] for e in [None] + r["entropies"][:-1]]  # entropy seen when planning
            depth = [d for r in runs[label] for d in r["depths"]]
            width = [w for r in runs[label] for w in r["widths"]]
            pts = [(e, d, w) for e, d, w in zip(ent, depth, width) if e is not None]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=8, alpha=0.4, label=f"{label} depth")
                ax.scatter([p[0] for p in pts], [p[2] for p in pts], s=8, alpha=0.4, marker="x", label=f"{label} width")
        ax.set_xlabel("target entropy at the previous step (nats)")
        ax.set_ylabel("tree depth / width chosen")
        ax.set_title("SAGE: shape against entropy")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
