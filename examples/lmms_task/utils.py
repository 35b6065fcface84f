"""The local lmms-eval task's document functions: each record's image and question, scored by
`dpmtv eval`'s own answer cleaning and exact match, so the two agree."""

from pathlib import Path

from PIL import Image

from dpmtv.eval.generation import clean_prediction
from dpmtv.eval.scorers import open_exact_match

HERE = Path(__file__).parent


def doc_to_visual(doc):
    return [Image.open(HERE / doc["image"]).convert("RGB")]


def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    return doc["question"]


def process_results(doc, results):
    return {"accuracy": open_exact_match(clean_prediction(results[0]), doc["answer"])}
