"""Write a LARGER embedded checkpoint with random weights, to time ``dpmtv demo`` on it (issue 24:
the demo must stay within its time budget "also with a larger model", before one is trained).

The demo answers with one token (``max_new_tokens=1``) and runs every prompt whatever the weights
say, so random weights time it as trained ones would. The folder gets the packaged processor and
the packaged ``dpmtv_defaults.json`` (its heads exist in any model of >= 4 layers and 8 heads);
its accuracy means nothing.

Usage:
    python benchmarks/larger_embedded_model.py --text-width 256 --text-layers 6 --out /tmp/larger
    DPMTV_EMBEDDED_CHECKPOINT=/tmp/larger dpmtv demo --out OUT     # timed side by side with
    dpmtv demo --out OUT2                                           # the packaged model
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from dpmtv.embedded import CHECKPOINT_DIR
from dpmtv.embedded import checkpoint_format as fmt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--text-width", type=int, default=256)
    parser.add_argument("--text-layers", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.text_layers < 4:
        parser.error("the packaged head sets use layers 0-3: --text-layers must be >= 4")
    model = fmt.build_model(args.seed, text_width=args.text_width, text_layers=args.text_layers)
    model.eval()
    model.save_pretrained(args.out)
    fmt.build_processor().save_pretrained(args.out)
    shutil.copy(CHECKPOINT_DIR / "dpmtv_defaults.json", args.out / "dpmtv_defaults.json")
    parameters = sum(p.numel() for p in model.parameters())
    print(f"{args.out}: text {args.text_width} wide x {args.text_layers} layers, {parameters:,} parameters")


if __name__ == "__main__":
    main()
