"""The report of finished settings: markdown tables per model and the accuracy-vs-position plot.

Reads the ``*.summary.json`` files `run_setting` writes (one directory per model). The plot needs
matplotlib (the ``dev`` extra); without it `plot_positions` raises `PlotUnavailable`, a one-line
ImportError, after which the tables are still usable.

>>> cell = {"n": 2, "accuracy": 0.5, "ci95": [0.0945, 0.9055]}
>>> print(results_markdown([{"model_dir": "m", "kind": "closedbook", "curves": {"closed-book": cell}}]))
#### m
<BLANKLINE>
| setting | n | accuracy (%) | 95% CI | s / prompt | prompt tokens (mean) |
|---|---|---|---|---|---|
| closed-book | 2 | 50.0 | 9.4–90.5 | – | – |
<BLANKLINE>
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = ["load_summaries", "results_markdown", "plot_positions", "PlotUnavailable"]


class PlotUnavailable(ImportError):
    """The plot's library (matplotlib) is not installed; the message says how to install it.

    >>> str(PlotUnavailable())
    'the plot needs matplotlib: pip install matplotlib'
    """

    def __init__(self, message: str = "the plot needs matplotlib: pip install matplotlib") -> None:
        super().__init__(message)


def load_summaries(out_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Every ``*.summary.json`` under `out_dir` (one directory per model), each tagged with its model
    directory name as ``model_dir``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     for model, setting in (("gemma", "oracle"), ("gemma", "closedbook"), ("smollm2", "oracle")):
    ...         (Path(tmp) / model).mkdir(exist_ok=True)
    ...         _ = (Path(tmp) / model / f"{setting}.summary.json").write_text(json.dumps({"setting": setting}))
    ...     [(s["model_dir"], s["setting"]) for s in load_summaries(tmp)]
    [('gemma', 'closedbook'), ('gemma', 'oracle'), ('smollm2', 'oracle')]

    On a finished run directory, ``[s["setting"] for s in load_summaries("runs/litm")]`` is
    ``['closedbook', 'kv-75keys', 'oracle', 'qa-10docs', 'qa-20docs', ...]``.
    """
    root = Path(out_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"no run directory {root}")
    summaries = []
    for path in sorted(root.rglob("*.summary.json")):
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as error:
            raise ValueError(f"{path}: not valid JSON ({error})") from None
        summary["model_dir"] = path.parent.name
        summaries.append(summary)
    return summaries


def _pct(cell: Mapping[str, Any]) -> str:
    return f"{100 * cell['accuracy']:.1f}"


def _paired_markdown(pairs: Sequence[Mapping[str, Any]], name: Any) -> list[str]:
    if not pairs:
        return []
    lines = ["Paired on the same questions (exact McNemar test):", "",
             "| A | B | questions | right under A only | right under B only | p |", "|---|---|---|---|---|---|"]
    for pair in pairs:
        p = pair["p"]
        shown = f"{p:.2g}" if p < 0.001 else f"{p:.3f}"
        lines.append(f"| {name(pair['a'])} | {name(pair['b'])} | {pair['n']} | {pair['a_only']} | {pair['b_only']} "
                     f"| {shown} |")
    return lines + [""]


def results_markdown(summaries: Sequence[Mapping[str, Any]]) -> str:
    """Markdown tables: reference settings, accuracy per gold position for each curve, the reordering
    experiment, and timings. Accuracies are percentages; brackets are Wilson 95% intervals.

    For example, ``print(results_markdown(load_summaries("runs/litm")))`` after a run (on real summaries,
    so not run as a doctest); a closed-book setting of two questions shows as::

        | setting | n | accuracy (%) | 95% CI | s / prompt | prompt tokens (mean) |
        |---|---|---|---|---|---|
        | closed-book | 2 | 50.0 | 9.4–90.5 | 0.0 | – |
    """
    lines: list[str] = []
    for model in sorted({s["model_dir"] for s in summaries}):
        mine = [s for s in summaries if s["model_dir"] == model]
        lines += [f"#### {model}", ""]
        refs = [s for s in mine if s["kind"] in ("closedbook", "oracle")]
        if refs:
            lines += ["| setting | n | accuracy (%) | 95% CI | s / prompt | prompt tokens (mean) |", "|---|---|---|---|---|---|"]
            for s in refs:
                for curve, cell in s["curves"].items():
                    lines.append(f"| {curve} | {cell['n']} | {_pct(cell)} | {100 * cell['ci95'][0]:.1f}–"
                                 f"{100 * cell['ci95'][1]:.1f} | {cell.get('seconds_per_prompt', '–')} | "
                                 f"{cell.get('prompt_tokens_mean', '–')} |")
            lines.append("")
        for s in (s for s in mine if s["kind"] in ("positions", "kv")):
            for curve, cell in s["curves"].items():
                positions = cell["positions"]
                header = " | ".join(f"gold at {int(p) + 1}" for p in positions)
                lines += [f"{curve} (`{s['setting']}`, {s['questions']} questions per position):", "",
                          f"| {header} | mean | s / prompt | prompt tokens (mean) |",
                          "|" + "---|" * (len(positions) + 3)]
                values = " | ".join(f"{_pct(c)} [{100 * c['ci95'][0]:.0f}–{100 * c['ci95'][1]:.0f}]"
                                    for c in positions.values())
                lines += [(f"| {values} | {_pct(cell)} | {cell.get('seconds_per_prompt', '–')} | "
                           f"{cell.get('prompt_tokens_mean', '–')} |"), ""]
                lines += _paired_markdown(s.get("paired", {}).get(curve, []), lambda p: f"gold at {int(p) + 1}")
        for s in (s for s in mine if s["kind"] == "reorder"):
            lines += [f"Passage order on retrieval-ranked contexts (`{s['setting']}`, {s['questions']} questions):", "",
                      ("| order | accuracy (%) | 95% CI | gold ranked 1st: acc. (n) | gold ranked lower: acc. (n) | "
                       "mean gold index | gold first or last |"), "|---|---|---|---|---|---|---|"]
            for curve, cell in s["curves"].items():
                extra = s.get("gold_at", {}).get(curve, {})
                r1, r2 = extra.get("rank1", {"accuracy": 0, "n": 0}), extra.get("rank2+", {"accuracy": 0, "n": 0})
                lines.append(f"| {curve} | {_pct(cell)} | {100 * cell['ci95'][0]:.1f}–{100 * cell['ci95'][1]:.1f} | "
                             f"{_pct(r1) if r1['n'] else '–'} ({r1['n']}) | {_pct(r2) if r2['n'] else '–'} ({r2['n']}) | "
                             f"{extra.get('gold_at_mean', '–')} | {extra.get('gold_at_first_or_last', '–')} |")
            lines.append("")
            lines += _paired_markdown(s.get("paired", {}).get("orders", []), str)
    return "\n".join(lines).rstrip() + "\n"


def plot_positions(summaries: Sequence[Mapping[str, Any]], path: str | os.PathLike, title: str | None = None) -> Path:
    """Accuracy (%) vs. gold position (1-based), one line per model and curve; closed-book and oracle
    as horizontal reference lines. QA and KV get one panel each when both are present. Writes a PNG.
    Raises `PlotUnavailable` without matplotlib, ValueError when no summary has per-position results.

    For example (matplotlib and real summaries, so not run as a doctest)::

        plot_positions(load_summaries("runs/litm"), "runs/litm/litm-positions.png")
    """
    try:
        from matplotlib.figure import Figure  # no pyplot: no global backend or figure state is touched
    except ImportError:
        raise PlotUnavailable() from None  # optional (the dev extra): say how to get it, not a traceback

    models = sorted({s.get("model_dir", "") for s in summaries})
    label_model = len(models) > 1
    panels = [(task, [s for s in summaries if s["task"] == task and s["kind"] in ("positions", "kv")])
              for task in ("qa", "kv")]
    panels = [(task, group) for task, group in panels if group]
    if not panels:
        raise ValueError("nothing to plot: no summary has per-position results")
    fig = Figure(figsize=(6.5 * len(panels), 4.6), dpi=120)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (task, group) in zip(axes, panels):
        xs_all: list[int] = []
        ys_all: list[float] = [0.0]
        for s in group:
            for curve, cell in s["curves"].items():
                xs = [int(p) + 1 for p in cell["positions"]]
                ys = [100 * c["accuracy"] for c in cell["positions"].values()]
                xs_all += xs
                ys_all += ys
                label = f"{s['model_dir']}: {curve}" if label_model else curve
                ax.plot(xs, ys, marker="o", label=label)
        if task == "qa":
            styles = {"closedbook": ("dashed", "tab:gray"), "oracle": ("dotted", "black")}
            for s in summaries:
                if s["kind"] in styles:
                    for curve, cell in s["curves"].items():
                        style, color = styles[s["kind"]]
                        label = f"{s['model_dir']}: {curve}" if label_model else curve
                        ys_all.append(100 * cell["accuracy"])
                        ax.axhline(100 * cell["accuracy"], linestyle=style, color=color,
                                   label=f"{label} ({100 * cell['accuracy']:.1f})")
            ax.set_title("Multi-document QA (NQ-open)")
            ax.set_xlabel("Position of the document with the answer (1 = first)")
            ax.set_ylabel("Accuracy (best subspan EM, %)")
        else:
            ax.set_title("Key-value retrieval")
            ax.set_xlabel("Position of the key to retrieve (1 = first)")
            ax.set_ylabel("Accuracy (%)")
        if xs_all:
            ax.set_xticks(sorted(set(xs_all)))
        # Room above the highest point; at least 0-10 so an all-zero panel still reads as percentages.
        ax.set_ylim(0, min(100.0, max(10.0, 1.15 * max(ys_all))))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
