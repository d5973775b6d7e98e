#!/usr/bin/env python3
"""Draws a sample's training curves (the curves.csv that train_fashion_mnist,
train_sequence_classifier and train_gpt write) with matplotlib: loss and accuracy per epoch, training
and test set, titled, labelled, with legends. For live curves use TensorBoard on the
sample's --logdir instead.

    scripts/plot_curves.py out/curves.csv                  # writes out/curves.png
    scripts/plot_curves.py out/curves.csv -o curves.svg --title "CNN, Adam 1e-3"

Needs matplotlib: Debian's python3-matplotlib, or `pip install matplotlib`.
"""
import argparse
import csv
import os
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", help="curves.csv of a sample run")
    p.add_argument("-o", "--output", help="image to write (default: curves.png beside the CSV); "
                   "the extension picks the format (png, svg, pdf)")
    p.add_argument("--title", help="figure title (default: the run's folder, e.g. out/cnn, and its last figures)")
    a = p.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_curves.py: matplotlib is missing: apt-get install python3-matplotlib (or pip install matplotlib)")
    with open(a.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot_curves.py: {a.csv} has no epochs yet")
    col = lambda name: [float(r[name]) for r in rows]  # noqa: E731
    if "step" in rows[0]:  # train_gpt: losses per evaluation step, the unigram baseline, the schedule
        plot_steps(plt, col, a)
        return
    epochs = col("epoch")
    fig, (loss, acc) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for ax, key, label, scale in ((loss, "loss", "cross-entropy loss", 1), (acc, "accuracy", "accuracy (%)", 100)):
        ax.plot(epochs, [scale * v for v in col(f"train_{key}")], "o-", label="training set")
        ax.plot(epochs, [scale * v for v in col(f"test_{key}")], "s-", label="test set")
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.set_title(label.split(" (")[0].capitalize() + " per epoch")
        ax.grid(True, alpha=0.3)
        ax.legend()
        ax.xaxis.get_major_locator().set_params(integer=True)
    last = rows[-1]
    fig.suptitle(a.title or f"{run_name(a.csv)}: {len(rows)} epochs, test accuracy {100 * float(last['test_accuracy']):.2f}%"
                 f" (best {100 * max(col('test_accuracy')):.2f}%), test loss {float(last['test_loss']):.4f}")
    save(fig, a)


def run_name(csv_path):
    """The run's folder as the user named it (out/cnn), or its last two parts."""
    folder = os.path.dirname(os.path.normpath(csv_path)) or "."
    if os.path.isabs(folder):
        folder = os.path.join(*folder.split(os.sep)[-2:])
    return folder


def save(fig, a):
    out = a.output or os.path.join(os.path.dirname(a.csv) or ".", "curves.png")
    fig.savefig(out, dpi=110)
    print(f"{out}: {fig._suptitle.get_text()}")


def plot_steps(plt, col, a):
    steps = col("step")
    fig, (loss, lr) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    loss.plot(steps, col("train_loss"), "o-", label="training set")
    loss.plot(steps, col("val_loss"), "s-", label="validation set")
    loss.plot(steps, col("unigram_baseline"), "k--", label="unigram baseline")
    loss.set_ylabel("cross-entropy (nats per character)")
    loss.set_title("Loss")
    lr.plot(steps, col("lr"), "-")
    lr.set_ylabel("learning rate")
    lr.set_title("Learning-rate schedule")
    for ax in (loss, lr):
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    loss.legend()
    vals = col("val_loss")
    fig.suptitle(a.title or f"{run_name(a.csv)}: {int(steps[-1])} steps, validation loss {vals[-1]:.3f} nats/char "
                 f"(best {min(vals):.3f}, unigram baseline {col('unigram_baseline')[-1]:.3f})")
    save(fig, a)


if __name__ == "__main__":
    main()
