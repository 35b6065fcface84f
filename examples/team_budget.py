"""A team's budget: a ledger with a dataset budget, a user-level build charged to it, a signed
vector, and a reader who checks the signature.

The tutorial docs/tutorials/team-budget.md as one script. Needs the sign extra
(`pip install -e '.[sign]'`) and `openssl` for the key.

    python examples/team_budget.py MODEL private/records.jsonl --out team-out

Records without a `user_id` are given one per pair of records here, to show user level. Writes
OUT/ledger.sqlite, OUT/key.pem and OUT/key.pub.pem, OUT/team.safetensors with OUT/team.safetensors.sig,
and OUT/budget.txt (what `dpmtv budget show` says after the charge).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import dpmtv


def dpmtv_cli(*args: str) -> str:
    """Run one `dpmtv` command as a user would, echoing it; stop on its error line."""
    print("$ dpmtv", " ".join(args), flush=True)
    result = subprocess.run([sys.executable, "-m", "dpmtv", *args], stdout=subprocess.PIPE, text=True)
    print(result.stdout, end="", flush=True)
    if result.returncode:
        sys.exit(result.returncode)
    return result.stdout


def with_user_ids(records: Path, out: Path) -> Path:
    """A copy of the records with a `user_id` on each (kept if present; else two records per user)."""
    rows = []
    for index, record in enumerate(dpmtv.load_records(records)):
        image = out / "images" / f"{index}.png"
        image.parent.mkdir(parents=True, exist_ok=True)
        record.load_images()[0].save(image)
        user = record.user_id or f"user-{index // 2}"
        rows.append({"id": record.record_id, "user_id": user, "image": f"images/{index}.png",
                     "question": record.question, "answer": record.answer})  # fmt: skip
    path = out / "records.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="checkpoint folder or hub id")
    parser.add_argument("records", type=Path, help="PRIVATE records (.jsonl, .csv or a datasets folder)")
    parser.add_argument("--out", type=Path, default=Path("team-out"))
    parser.add_argument("--heads", default="all", help="head spec, e.g. layers:8-15 or a `dpmtv select` file")
    parser.add_argument("--num-chunks", default="8", help="public number of chunks (users are private)")
    parser.add_argument("--max-records-per-user", default="4")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ledger, key, public_key = args.out / "ledger.sqlite", args.out / "key.pem", args.out / "key.pub.pem"
    vector = args.out / "team.safetensors"
    records = with_user_ids(args.records, args.out / "users")
    for command in (["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key)],
                    ["ec", "-in", str(key), "-pubout", "-out", str(public_key)]):  # fmt: skip
        subprocess.run(["openssl", *command], check=True, capture_output=True)
    ledger.unlink(missing_ok=True)  # a fresh ledger for the example; a team keeps one for good
    dpmtv_cli("budget", "init", "clinic", "--epsilon", "2", "--delta", "1e-5", "--privacy-unit", "user",
              "--ledger", str(ledger))  # fmt: skip
    dpmtv_cli("build", "--model", args.model, "--data", str(records), "--heads", args.heads,
              "--privacy-unit", "user", "--num-chunks", args.num_chunks,
              "--max-records-per-user", args.max_records_per_user, "--epsilon", "1", "--delta", "1e-5",
              "--l2-clip-norm", "5", "--shots-per-chunk", "4", "--dataset", "clinic", "--ledger", str(ledger),
              "--sign-key", str(key), "--force", "--out", str(vector))  # fmt: skip
    budget = dpmtv_cli("budget", "show", "clinic", "--ledger", str(ledger))
    (args.out / "budget.txt").write_text(budget, encoding="utf-8")
    dpmtv_cli("budget", "verify", "--ledger", str(ledger))
    # a reader accepts the vector only if the key they trust signed exactly these bytes
    dpmtv_cli("inspect", str(vector), "--trusted-key", str(public_key))
    checked = dpmtv.load_task_vector(vector, trusted_keys=[public_key])
    print(
        f"verified: {len(checked.heads)} heads, signed; wrote {ledger}, {vector}, {args.out / 'budget.txt'}"
    )


if __name__ == "__main__":
    main()
